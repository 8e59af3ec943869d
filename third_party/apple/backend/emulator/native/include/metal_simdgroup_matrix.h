/* simdgroup_matrix<T, 8, 8> for the Metal-on-CPU emulator (included by metal_compat.h).
 *
 * Fragment layout (the one MLX and metal-flash-attention rely on; the MSL spec leaves it unspecified, and
 * the apple backend's AppleMmaEncoding depends on it): lane l holds row 4*(l>>4) + ((l>>1)&3) and columns
 * 4*((l>>3)&1) + 2*(l&1) + j, where j in {0, 1} indexes thread_elements().
 *
 * Every operation is a SIMD-group operation: all 32 lanes must take part, at the same call site, or the
 * launch fails (strict). The lanes do not wait for each other at each operation (see tt_sgm_state in
 * emulator_runtime.h): each lane issues its operations in order, the first lane at an operation records its
 * call site and the others are checked against it, and the runtime checks at barriers, SIMD-group functions
 * and returns that no lane skipped one.
 *
 * Values shared by the simdgroup live in records: a simdgroup_load with the same arguments in every lane reads
 * the whole tile once (the first lane, naming each lane's elements if an access faults) and the lanes'
 * fragments refer to it; a lane whose arguments differ loads its own two elements. A multiply is deferred: each
 * lane adds its operands to the op's record (a reference when its operand is a record the lanes share, else
 * its two elements), its destination refers to the record, and the lane whose issue completes the op computes
 * D = A * B + C in float (each element: C, then the products added in k order, every operation rounded to
 * float), rounded once to the destination type. A lane reading a fragment whose multiply is not computed yet
 * (thread_elements(), simdgroup_store) waits until the other lanes have issued it.
 *
 * A reference returned by thread_elements() is to the fragment's own elements as they were when it was taken:
 * a later multiply, load or assignment into the fragment is seen through a new call of thread_elements().
 * The header's own code is exempt from the array-bounds sanitizer (its indices are in range by construction);
 * user code is not.
 */
#ifndef TT_METAL_SIMDGROUP_MATRIX_H
#define TT_METAL_SIMDGROUP_MATRIX_H

#define __TT_SGM_INLINE __attribute__((always_inline, no_sanitize("array-bounds"))) inline

namespace __sgm {
inline uint row(uint lane) { return 4u * (lane >> 4) + ((lane >> 1) & 3u); }
inline uint col(uint lane, uint j) { return 4u * ((lane >> 3) & 1u) + 2u * (lane & 1u) + j; }
/* Where element j of `lane` lives in the memory that simdgroup_load/store read or write. */
inline ulong offset(uint lane, uint j, ulong elements_per_row, ulong2 origin, bool transpose) {
  ulong r = row(lane), c = col(lane, j);
  return transpose ? (origin.y + c) * elements_per_row + origin.x + r
                   : (origin.y + r) * elements_per_row + origin.x + c;
}
template <class T> struct is_elem { static constexpr bool value = false; };
template <> struct is_elem<float> { static constexpr bool value = true; };
template <> struct is_elem<half> { static constexpr bool value = true; };
template <> struct is_elem<bfloat> { static constexpr bool value = true; };

/* Lane l's element j lives at offset 8 * row(l) + col(l, j) of a dense row-major 8x8 matrix (j = 1 follows
   j = 0). */
__TT_SGM_INLINE uint dense(uint l) { return 8u * row(l) + col(l, 0); }

__TT_SGM_INLINE void free_rec(tt_sgm_rec *r) {
  r->next_free = r->st->free;
  r->st->free = r;
}
__TT_SGM_INLINE void release(tt_sgm_rec *r) {
  if (--r->refs == 0 && r->done)
    free_rec(r);
}
__TT_SGM_INLINE tt_sgm_rec *new_rec(tt_sgm_state *st) {
  tt_sgm_rec *r = st->free;
  if (__builtin_expect(r != nullptr, 1))
    st->free = r->next_free;
  else
    r = __tt_sgm_grow(st);
  r->refs = 0;
  r->done = 0;
  return r;
}

/* What an op is, for the lanes' check that they are at the same op: one object per kind of op (and, for a
   multiply, per instantiation: lanes at one call site must agree on the element types). */
inline const char load_tag = 0, store_tag = 0, diagonal_tag = 0;
template <class TD, class TA, class TB, class TC> struct mma_tag { static const char object; };
template <class TD, class TA, class TB, class TC> const char mma_tag<TD, TA, TB, TC>::object = 0;

__TT_SGM_INLINE uint64_t site_of(uint line, uint col) { return (uint64_t)line << 32 | col; }

/* issue() when the lane is the first at its op, or is not where the lanes before it were. */
__attribute__((noinline, cold, no_sanitize("array-bounds"))) inline tt_sgm_op *
issue_slow(tt_sgm_state *st, uint lane, const char *what, const void *tag, uint line, uint col, bool *first) {
  const uint n = st->n[lane];
  tt_sgm_op *op = &st->ring[n % TT_SGM_WINDOW];
  for (;;) {
    if (n < st->issued) {
      if (op->site != site_of(line, col) || (op->tag != tag && __builtin_strcmp(op->what, what) != 0))
        __tt_sgm_fail(st, TT_SGM_OTHER_SITE, lane, what, line, col);
      if (op->tag != tag)
        __tt_sgm_fail(st, TT_SGM_OTHER_TYPES, lane, what, line, col);
      break;
    }
    if (st->full != 0xffffffffu || st->done != 0) /* a partial simdgroup, or a lane returned before this op */
      __tt_sgm_fail(st, TT_SGM_NOT_ALL_LANES, lane, what, line, col);
    if (n - st->completed < TT_SGM_WINDOW) {
      op->site = site_of(line, col);
      op->tag = tag;
      op->what = what;
      op->lanes = 0;
      op->rec = nullptr;
      st->issued = n + 1;
      *first = true;
      break;
    }
    __tt_sgm_wait(st, what, line, col);
  }
  st->n[lane] = n + 1;
  op->lanes |= 1u << lane;
  return op;
}

/* Issues the calling lane's next op (see tt_sgm_state in emulator_runtime.h) and returns its entry; *first says
   whether the lane is the first at it. The first lane checks that the simdgroup is whole and that no lane
   returned, and waits while it is a window ahead of the op that completes next; the others check that they are
   at its call site and operation (`tag`). */
__TT_SGM_INLINE tt_sgm_op *issue(tt_sgm_state *st, uint lane, const char *what, const void *tag, uint line,
                                 uint col, bool *first) {
  const uint n = st->n[lane];
  tt_sgm_op *op = &st->ring[n % TT_SGM_WINDOW];
  *first = false;
  if (__builtin_expect(n >= st->issued || op->site != site_of(line, col) || op->tag != tag, 0))
    return issue_slow(st, lane, what, tag, line, col, first);
  st->n[lane] = n + 1;
  op->lanes |= 1u << lane;
  return op;
}

/* After the lane's part of `op`: the lane that completed it (the last of the 32) counts it and wakes waiters. */
__TT_SGM_INLINE void issued(tt_sgm_state *st, const tt_sgm_op *op) {
  if (op->lanes == 0xffffffffu) {
    st->completed++;
    if (st->waiting)
      __tt_sgm_wake(st);
  }
}
} // namespace __sgm

template <class T, int Rows, int Cols> struct simdgroup_matrix {
  static_assert(Rows == 8 && Cols == 8, "the emulator provides 8x8 simdgroup matrices only");
  static_assert(__sgm::is_elem<T>::value, "simdgroup_matrix element type must be float, half or bfloat");
  typedef T thread_elements_t __attribute__((ext_vector_type(2)));
  /* The lane's two elements when __r is 0; otherwise the value is the lane's part of record __r's (a shared
     tile or a multiply's result, computed or not yet) and __e is stale. __lane: the lane that owns the
     fragment, set with __r. */
  mutable thread_elements_t __e;
  mutable tt_sgm_rec *__r;
  mutable unsigned __lane;

  simdgroup_matrix() : __e(thread_elements_t{T(0), T(0)}), __r(nullptr), __lane(0) {}
  simdgroup_matrix(const simdgroup_matrix &o) : __e(o.__e), __r(o.__r), __lane(o.__lane) {
    if (__r)
      ++__r->refs;
  }
  simdgroup_matrix &operator=(const simdgroup_matrix &o) {
    if (o.__r)
      ++o.__r->refs;
    if (__r)
      __sgm::release(__r);
    __e = o.__e;
    __r = o.__r;
    __lane = o.__lane;
    return *this;
  }
  ~simdgroup_matrix() {
    if (__r)
      __sgm::release(__r);
  }
  /* simdgroup_matrix<T, 8, 8>(dval): the diagonal matrix dval * I (MSL Table 6.9). A SIMD-group operation
     here (each lane needs its position in the fragment), so all 32 lanes must construct it, at one call site. */
  explicit simdgroup_matrix(T dval, __TT_SITE_PARAMS) : __r(nullptr), __lane(0) {
    uint lane;
    bool first;
    tt_sgm_state *st = __tt_sgm_enter(&lane);
    const tt_sgm_op *op = __sgm::issue(st, lane, "simdgroup_matrix(T)", &__sgm::diagonal_tag, __TT_SITE_ARGS, &first);
    for (uint j = 0; j < 2; ++j)
      __e[j] = __sgm::col(lane, j) == __sgm::row(lane) ? dval : T(0);
    __sgm::issued(st, op);
  }
  /* Replaces the reference to a record by the lane's two elements of its value, waiting for a multiply that
     the other lanes have not all issued yet. */
  __attribute__((noinline, no_sanitize("array-bounds"))) void __resolve(uint line, uint col) const {
    tt_sgm_rec *r = __r;
    while (!r->done)
      __tt_sgm_wait(r->st, "the result of a simdgroup_multiply_accumulate", line, col);
    const uint o = __sgm::dense(__lane);
    __e[0] = T(r->d[o]);
    __e[1] = T(r->d[o + 1]);
    __r = nullptr;
    __sgm::release(r);
  }
  thread_elements_t &thread_elements(__TT_SITE_PARAMS) {
    if (__r)
      __resolve(__TT_SITE_ARGS);
    return __e;
  }
  const thread_elements_t &thread_elements(__TT_SITE_PARAMS) const {
    if (__r)
      __resolve(__TT_SITE_ARGS);
    return __e;
  }
};

typedef simdgroup_matrix<float, 8, 8> simdgroup_float8x8;
typedef simdgroup_matrix<half, 8, 8> simdgroup_half8x8;
typedef simdgroup_matrix<bfloat, 8, 8> simdgroup_bfloat8x8;

template <class T, int R, int C> inline simdgroup_matrix<T, R, C> make_filled_simdgroup_matrix(T value) {
  simdgroup_matrix<T, R, C> m;
  m.__e[0] = value;
  m.__e[1] = value;
  return m;
}

namespace __sgm {
/* The first lane of a load reads the whole tile into a record, in lane order; a fault names the lane whose
   element it is (op_lane). */
template <class T, class P>
__attribute__((noinline, no_sanitize("array-bounds"))) tt_sgm_rec *
load_tile(tt_sgm_state *st, P src, ulong ld, ulong2 origin, bool transpose, uint site_line, uint site_col) {
  tt_sgm_rec *r = new_rec(st);
  st->op_line = site_line;
  st->op_col = site_col;
  volatile uint32_t *op_lane = st->op_lane;
  /* lane l's elements j = 0, 1: row row(l), columns col(l, 0) and col(l, 0) + 1 */
  const ulong step = transpose ? ld : 1, stride = transpose ? 1 : ld;
  const P base = src + (transpose ? origin.y * ld + origin.x : origin.y * ld + origin.x);
  for (uint l = 0; l < TT_EMU_SIMD_WIDTH; ++l) {
    *op_lane = l;
    const uint row_ = row(l), col_ = col(l, 0);
    const P p = base + row_ * stride + col_ * step;
    r->d[8 * row_ + col_] = float(p[0]);
    r->d[8 * row_ + col_ + 1] = float(p[step]);
  }
  *op_lane = TT_EMU_NO_LANE;
  st->op_line = 0;
  r->done = 1;
  return r;
}

template <class T, class P>
__TT_SGM_INLINE void load(simdgroup_matrix<T, 8, 8> &d, P src, ulong ld, ulong2 origin, bool transpose, uint line,
                          uint col) {
  uint lane;
  bool first;
  tt_sgm_state *st;
  if (d.__r) {
    st = d.__r->st;
    lane = d.__lane;
  } else {
    st = __tt_sgm_enter(&lane);
  }
  tt_sgm_op *op = issue(st, lane, "simdgroup_load", &load_tag, line, col, &first);
  if (first) {
    op->ptr = (const void *)src;
    op->ld = ld;
    op->ox = origin.x;
    op->oy = origin.y;
    op->transpose = transpose;
    op->rec = load_tile<T>(st, src, ld, origin, transpose, line, col);
    op->rec->refs = 1; /* the op's own reference, until every lane has issued it */
  }
  tt_sgm_rec *r = op->rec;
  if (__builtin_expect(op->ptr == (const void *)src && op->ld == ld && op->ox == origin.x && op->oy == origin.y &&
                           op->transpose == (uint)transpose, 1)) {
    ++r->refs;
    if (d.__r)
      release(d.__r);
    d.__r = r;
    d.__lane = lane;
  } else { /* arguments of its own: the lane reads its two elements */
    if (d.__r) {
      release(d.__r);
      d.__r = nullptr;
    }
    for (uint j = 0; j < 2; ++j)
      d.__e[j] = src[offset(lane, j, ld, origin, transpose)];
  }
  if (op->lanes == 0xffffffffu)
    release(r);
  issued(st, op);
}
} // namespace __sgm

#define __TT_SGM_LOAD(SPACE)                                                                           \
  template <class T>                                                                                   \
  __attribute__((always_inline)) inline void simdgroup_load(simdgroup_matrix<T, 8, 8> &d,              \
                                                             const SPACE T *src,                       \
                             ulong elements_per_row = 8, ulong2 matrix_origin = ulong2{0, 0},          \
                             bool transpose_matrix = false, __TT_SITE_PARAMS) {                        \
    __sgm::load(d, src, elements_per_row, matrix_origin, transpose_matrix, __TT_SITE_ARGS);            \
  }
__TT_SGM_LOAD(__TT_TG)
__TT_SGM_LOAD(__TT_DEV)
__TT_SGM_LOAD(__TT_CONSTANT)
#undef __TT_SGM_LOAD

#define __TT_SGM_STORE(SPACE)                                                                          \
  template <class T>                                                                                   \
  __attribute__((always_inline)) inline void simdgroup_store(const simdgroup_matrix<T, 8, 8> &a,       \
                                                              SPACE T *dst,                            \
                              ulong elements_per_row = 8, ulong2 matrix_origin = ulong2{0, 0},         \
                              bool transpose_matrix = false, __TT_SITE_PARAMS) {                       \
    uint lane;                                                                                         \
    bool first;                                                                                        \
    tt_sgm_state *st = __tt_sgm_enter(&lane);                                                          \
    const tt_sgm_op *op = __sgm::issue(st, lane, "simdgroup_store", &__sgm::store_tag, __TT_SITE_ARGS, &first);  \
    __sgm::issued(st, op);                                                                             \
    if (a.__r)                                                                                         \
      a.__resolve(__TT_SITE_ARGS);                                                                     \
    for (uint j = 0; j < 2; ++j)                                                                       \
      dst[__sgm::offset(lane, j, elements_per_row, matrix_origin, transpose_matrix)] = a.__e[j];       \
  }
__TT_SGM_STORE(__TT_TG)
__TT_SGM_STORE(__TT_DEV)
#undef __TT_SGM_STORE

namespace __sgm {

__attribute__((noinline)) inline tt_sgm_rec *new_mma_rec(tt_sgm_state *st, tt_sgm_op *op) {
  tt_sgm_rec *R = new_rec(st);
  for (uint k = 0; k < 3; ++k) {
    op->shared[k] = nullptr;
    R->own[k] = R->refd[k] = 0;
  }
  op->drefs = op->cdrops = 0;
  return R;
}

/* put() when the lane's operand is not the record the lanes before it share. */
template <class T>
__attribute__((noinline, no_sanitize("array-bounds"))) void put_slow(tt_sgm_op *op, uint k, uint lane,
                                                                     const simdgroup_matrix<T, 8, 8> &m) {
  tt_sgm_rec *s = m.__r, *R = op->rec;
  if (s) {
    ++s->refs;
    if (!op->shared[k]) {
      op->shared[k] = s;
    } else {
      R->src[k][lane] = s;
      R->refd[k] |= 1u << lane;
    }
    return;
  }
  const uint o = dense(lane);
  R->in[k][o] = float(m.__e[0]);
  R->in[k][o + 1] = float(m.__e[1]);
  R->own[k] |= 1u << lane;
}

/* The lane's part of operand k of a deferred multiply: nothing when its operand is the record the lanes before
   it share, a reference when it is another record, else its two elements. */
template <class T>
__TT_SGM_INLINE void put(tt_sgm_op *op, uint k, uint lane, const simdgroup_matrix<T, 8, 8> &m) {
  if (__builtin_expect(m.__r == op->shared[k] && m.__r != nullptr, 1))
    return;
  put_slow(op, k, lane, m);
}

/* Operand k of a complete multiply as a dense float matrix (in `tmp` when the lanes' parts come from several
   places). */
__TT_SGM_INLINE const float *operand(const tt_sgm_op *op, tt_sgm_rec *R, uint k, float *tmp) {
  const uint own = R->own[k], refd = R->refd[k];
  tt_sgm_rec *sh = op->shared[k];
  if (!own && !refd)
    return sh->d;
  if (own == 0xffffffffu)
    return R->in[k];
  for (uint l = 0; l < TT_EMU_SIMD_WIDTH; ++l) {
    const uint o = dense(l);
    const float *from = own >> l & 1 ? R->in[k] : refd >> l & 1 ? R->src[k][l]->d : sh->d;
    tmp[o] = from[o];
    tmp[o + 1] = from[o + 1];
  }
  return tmp;
}

/* The whole simdgroup's multiply, by the lane whose issue completed the op: D = A * B + C in float (each
   element: C, then the products added in k order, every operation rounded to float), rounded once to TD. Then
   the references the lanes counted in the op are settled and the multiply's own ones dropped. */
template <class TD> __attribute__((noinline, no_sanitize("array-bounds"))) void multiply_all(tt_sgm_op *op) {
  tt_sgm_rec *R = op->rec;
  float ta[64], tb[64], tc[64], D[64];
  const float *__restrict A = operand(op, R, 0, ta);
  const float *__restrict B = operand(op, R, 1, tb);
  const float *__restrict C = operand(op, R, 2, tc);
  for (uint o = 0; o < 64; ++o)
    D[o] = C[o];
  for (uint i = 0; i < 8; ++i)   /* D[i][:] = C[i][:] + A[i][0] * B[0][:] + A[i][1] * B[1][:] + ... */
    for (uint k = 0; k < 8; ++k) /* (k increasing, float products and sums, no contraction) */
      for (uint j = 0; j < 8; ++j)
        D[8 * i + j] += A[8 * i + k] * B[8 * k + j];
  for (uint o = 0; o < 64; ++o)
    R->d[o] = float(TD(D[o]));
  R->done = 1;
  R->refs += op->drefs;
  if (op->cdrops)
    op->shared[2]->refs -= op->cdrops; /* never the last: the multiply still holds its own reference */
  for (uint k = 0; k < 3; ++k) {
    if (op->shared[k])
      release(op->shared[k]);
    for (uint m = R->refd[k]; m; m &= m - 1)
      release(R->src[k][__builtin_ctz(m)]);
  }
  if (R->refs == 0)
    free_rec(R);
}
} // namespace __sgm

/* A multiply is deferred (see above): the lane adds its operands to the op and its D refers to the op's record;
   the lane that completes the op computes D for the whole simdgroup. */
template <class TD, class TA, class TB, class TC>
__attribute__((always_inline, no_sanitize("array-bounds"))) inline void
simdgroup_multiply_accumulate(simdgroup_matrix<TD, 8, 8> &d, const simdgroup_matrix<TA, 8, 8> &a,
                              const simdgroup_matrix<TB, 8, 8> &b, const simdgroup_matrix<TC, 8, 8> &c,
                              __TT_SITE_PARAMS) {
  uint lane;
  bool first;
  tt_sgm_state *st;
  if (__builtin_expect(a.__r != nullptr, 1)) { /* the lane and its simdgroup from a fragment it owns */
    st = a.__r->st;
    lane = a.__lane;
  } else {
    st = __tt_sgm_enter(&lane);
  }
  tt_sgm_op *op = __sgm::issue(st, lane, "simdgroup_multiply_accumulate", &__sgm::mma_tag<TD, TA, TB, TC>::object,
                               __TT_SITE_ARGS, &first);
  if (__builtin_expect(first, 0))
    op->rec = __sgm::new_mma_rec(st, op);
  __sgm::put(op, 0, lane, a);
  __sgm::put(op, 1, lane, b);
  __sgm::put(op, 2, lane, c);
  /* d refers to the op's record from now on (after reading c: d may be c); the reference is counted in the op,
     and so is dropping the old one when it is the shared C (the multiply holds that record until it is done) */
  ++op->drefs;
  if (tt_sgm_rec *old = d.__r) {
    if (old == op->shared[2])
      ++op->cdrops;
    else
      __sgm::release(old);
  }
  d.__r = op->rec;
  d.__lane = lane;
  if (op->lanes == 0xffffffffu) {
    __tt_tools::count_mma();
    __sgm::multiply_all<TD>(op);
  }
  __sgm::issued(st, op);
}

template <class TD, class TA, class TB>
inline void simdgroup_multiply(simdgroup_matrix<TD, 8, 8> &d, const simdgroup_matrix<TA, 8, 8> &a,
                               const simdgroup_matrix<TB, 8, 8> &b, __TT_SITE_PARAMS) {
  simdgroup_multiply_accumulate(d, a, b, make_filled_simdgroup_matrix<TD, 8, 8>(TD(0)), __TT_SITE_ARGS);
}

#undef __TT_SGM_INLINE
#endif /* TT_METAL_SIMDGROUP_MATRIX_H */

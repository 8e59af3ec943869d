/* simdgroup_matrix<T, 8, 8> for the Metal-on-CPU emulator (included by metal_compat.h).
 *
 * Fragment layout (the one MLX and metal-flash-attention rely on; the MSL spec leaves it unspecified, and
 * the apple backend's AppleMmaEncoding depends on it): lane l holds row 4*(l>>4) + ((l>>1)&3) and columns
 * 4*((l>>3)&1) + 2*(l&1) + j, where j in {0, 1} indexes thread_elements().
 *
 * Every operation is a SIMD-group operation: all 32 lanes must take part, at the same call site, or the
 * launch fails (strict). simdgroup_load/store touch only the calling lane's two elements. A multiply runs
 * once for the whole simdgroup: each lane deposits a pointer to its operands at the rendezvous, and the lane
 * that runs first afterwards (tt_simd_xchg.first) gathers the four 8x8 matrices from all lanes, computes
 * D = A * B + C in float (each element: C, then the products added in k order, every operation rounded to
 * float) and writes every lane's two elements of D, rounded once to the destination type, before any other
 * lane resumes. The header's own code is exempt from the array-bounds sanitizer (its indices are in range by
 * construction); user code is not.
 */
#ifndef TT_METAL_SIMDGROUP_MATRIX_H
#define TT_METAL_SIMDGROUP_MATRIX_H

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

/* Rendezvous of the whole simdgroup; returns the exchange area and this lane's index. */
inline tt_simd_xchg *all_lanes(const char *op, const void *val, uint size, uint site_line, uint site_col,
                               uint *lane) {
  tt_simd_xchg *x = __tt_simd(op, val, size, 0, site_line, site_col, lane);
  if (x->active != 0xffffffffu) {
    char msg[200];
    __builtin_snprintf(msg, sizeof(msg),
                       "%s needs all 32 lanes of the simdgroup, but only the lanes in mask 0x%08x take part", op,
                       x->active);
    __tt_fail(TT_ERR_SIMD, msg, site_line, site_col);
  }
  return x;
}
} // namespace __sgm

template <class T, int Rows, int Cols> struct simdgroup_matrix {
  static_assert(Rows == 8 && Cols == 8, "the emulator provides 8x8 simdgroup matrices only");
  static_assert(__sgm::is_elem<T>::value, "simdgroup_matrix element type must be float, half or bfloat");
  typedef T thread_elements_t __attribute__((ext_vector_type(2)));
  thread_elements_t __e;

  simdgroup_matrix() : __e(thread_elements_t{T(0), T(0)}) {}
  /* simdgroup_matrix<T, 8, 8>(dval): the diagonal matrix dval * I (MSL Table 6.9). A SIMD-group operation
     here (each lane needs its position in the fragment), so all 32 lanes must construct it together. */
  explicit simdgroup_matrix(T dval, __TT_SITE_PARAMS) {
    uint lane;
    __sgm::all_lanes("simdgroup_matrix(T)", nullptr, 0, __TT_SITE_ARGS, &lane);
    for (uint j = 0; j < 2; ++j)
      __e[j] = __sgm::col(lane, j) == __sgm::row(lane) ? dval : T(0);
  }
  thread_elements_t &thread_elements() { return __e; }
  const thread_elements_t &thread_elements() const { return __e; }
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

#define __TT_SGM_LOAD(SPACE)                                                                           \
  template <class T>                                                                                   \
  inline void simdgroup_load(simdgroup_matrix<T, 8, 8> &d, const SPACE T *src,                  \
                             ulong elements_per_row = 8, ulong2 matrix_origin = ulong2{0, 0},          \
                             bool transpose_matrix = false, __TT_SITE_PARAMS) {                        \
    uint lane;                                                                                         \
    __sgm::all_lanes("simdgroup_load", nullptr, 0, __TT_SITE_ARGS, &lane);                             \
    for (uint j = 0; j < 2; ++j)                                                                       \
      d.__e[j] = src[__sgm::offset(lane, j, elements_per_row, matrix_origin, transpose_matrix)];       \
  }
__TT_SGM_LOAD(__TT_TG)
__TT_SGM_LOAD(__TT_DEV)
__TT_SGM_LOAD(__TT_CONSTANT)
#undef __TT_SGM_LOAD

#define __TT_SGM_STORE(SPACE)                                                                          \
  template <class T>                                                                                   \
  inline void simdgroup_store(const simdgroup_matrix<T, 8, 8> &a, SPACE T *dst,                 \
                              ulong elements_per_row = 8, ulong2 matrix_origin = ulong2{0, 0},         \
                              bool transpose_matrix = false, __TT_SITE_PARAMS) {                       \
    uint lane;                                                                                         \
    __sgm::all_lanes("simdgroup_store", nullptr, 0, __TT_SITE_ARGS, &lane);                            \
    for (uint j = 0; j < 2; ++j)                                                                       \
      dst[__sgm::offset(lane, j, elements_per_row, matrix_origin, transpose_matrix)] = a.__e[j];       \
  }
__TT_SGM_STORE(__TT_TG)
__TT_SGM_STORE(__TT_DEV)
#undef __TT_SGM_STORE

namespace __sgm {
/* One lane's operands of a multiply, deposited (by address) at the rendezvous. `tag` is the same for every
   lane only if all lanes run the same instantiation (element types) of the call site. */
template <class TD, class TA, class TB, class TC> struct mma_operands {
  typedef TD dest_t;
  simdgroup_matrix<TD, 8, 8> *d;
  const simdgroup_matrix<TA, 8, 8> *a;
  const simdgroup_matrix<TB, 8, 8> *b;
  const simdgroup_matrix<TC, 8, 8> *c;
  const void *tag;
  static const char tag_object;
};
template <class TD, class TA, class TB, class TC> const char mma_operands<TD, TA, TB, TC>::tag_object = 0;

/* Lane l's element j lives at offset 8 * row(l) + col(l, j) of a dense row-major 8x8 matrix. */
__attribute__((no_sanitize("array-bounds"))) inline uint dense(uint l, uint j) { return 8u * row(l) + col(l, j); }

/* The whole simdgroup's multiply, on the lane that runs first after the rendezvous. */
template <class R>
__attribute__((no_sanitize("array-bounds"))) inline void multiply_all(const tt_simd_xchg *x, uint site_line,
                                                                      uint site_col) {
  const R *ops[TT_EMU_SIMD_WIDTH];
  for (uint l = 0; l < TT_EMU_SIMD_WIDTH; ++l) {
    __builtin_memcpy(&ops[l], x->val[l], sizeof(ops[l]));
    if (ops[l]->tag != ops[0]->tag)
      __tt_fail(TT_ERR_DIVERGENCE,
                "divergent simdgroup_multiply_accumulate: lanes of the simdgroup run different instantiations "
                "(element types) of the same call site",
                site_line, site_col);
  }
  float A[64], B[64], D[64];
  for (uint l = 0; l < TT_EMU_SIMD_WIDTH; ++l)
    for (uint j = 0; j < 2; ++j) {
      const uint o = dense(l, j);
      A[o] = float(ops[l]->a->__e[j]);
      B[o] = float(ops[l]->b->__e[j]);
      D[o] = float(ops[l]->c->__e[j]);
    }
  for (uint i = 0; i < 8; ++i)   /* D[i][:] = C[i][:] + A[i][0] * B[0][:] + A[i][1] * B[1][:] + ... */
    for (uint k = 0; k < 8; ++k) /* (k increasing, float products and sums, no contraction) */
      for (uint j = 0; j < 8; ++j)
        D[8 * i + j] += A[8 * i + k] * B[8 * k + j];
  for (uint l = 0; l < TT_EMU_SIMD_WIDTH; ++l)
    for (uint j = 0; j < 2; ++j)
      ops[l]->d->__e[j] = typename R::dest_t(D[dense(l, j)]);
}
} // namespace __sgm

template <class TD, class TA, class TB, class TC>
inline void simdgroup_multiply_accumulate(simdgroup_matrix<TD, 8, 8> &d, const simdgroup_matrix<TA, 8, 8> &a,
                                          const simdgroup_matrix<TB, 8, 8> &b, const simdgroup_matrix<TC, 8, 8> &c,
                                          __TT_SITE_PARAMS) {
  using R = __sgm::mma_operands<TD, TA, TB, TC>;
  const R mine = {&d, &a, &b, &c, &R::tag_object};
  const R *p = &mine;
  uint lane;
  const tt_simd_xchg *x = __sgm::all_lanes("simdgroup_multiply_accumulate", &p, sizeof(p), __TT_SITE_ARGS, &lane);
  if (lane == x->first)
    __sgm::multiply_all<R>(x, __TT_SITE_ARGS);
}

template <class TD, class TA, class TB>
inline void simdgroup_multiply(simdgroup_matrix<TD, 8, 8> &d, const simdgroup_matrix<TA, 8, 8> &a,
                               const simdgroup_matrix<TB, 8, 8> &b, __TT_SITE_PARAMS) {
  simdgroup_multiply_accumulate(d, a, b, make_filled_simdgroup_matrix<TD, 8, 8>(TD(0)), __TT_SITE_ARGS);
}

#endif /* TT_METAL_SIMDGROUP_MATRIX_H */

// Software IEEE-754 binary64 for Metal, which has no `double`: the type `tt_double` and everything except
// the math functions (soft_f64_math.metal) and the bfloat conversions (soft_f64_bfloat.metal).
//
// A `tt_double` is a struct holding the 64 bits of an IEEE binary64 in a `ulong` (`.bits`). Every operation
// is done on Metal's 64-bit integers (`mulhi` gives the high half of 64x64-bit products); the text uses no
// `double`, `long double`, `__int128`, pointers to functions, recursion or static locals, so it is valid MSL
// and runs unchanged on the emulator. Internal helpers are named tt_f64x_* (not API).
//
// Semantics (checked bit for bit against the host's doubles by test/lowering/test_soft_f64.py; a long fuzz of
// every core operation, 10^6 random cases each (fma 2*10^5) plus the edge-case grid, found no difference):
// - `+ - * /`, `tt_f64_fma`, `tt_f64_sqrt`, every conversion to a narrower float (float, half, bfloat) or
//   from an integer: correctly rounded, round to nearest even, subnormals kept (no flush to zero), signed
//   zeros as IEEE (x + -x == +0, -0 + -0 == -0).
// - NaN results are quiet. An operand NaN propagates with its payload (the first NaN operand, quieted, as
//   x86 SSE does); an invalid operation (inf - inf, 0 * inf, 0 / 0, sqrt(-1), ...) gives x86's default NaN
//   0xFFF8000000000000 (sign bit set). Negation, fabs and copysign touch only the sign bit.
// - float -> double keeps the NaN payload (x86 cvtss2sd); double -> float/half/bfloat keeps its top bits.
// - to integer: Triton's semantics, as the float helpers of float_convert.metal: truncation toward zero,
//   saturating at the type's limits, NaN -> 0 (unsigned: negative -> 0).
// - comparisons: IEEE (any comparison with NaN is false except !=; -0 == +0).
// - floor/ceil/trunc/round (half away from zero)/rint (half to even), fmod (exact, as C's fmod),
//   minimum/maximum (NaN-propagating, -0 < +0) and minnum/maxnum (a NaN operand is ignored).
//
// Speed: this is emulation. An add or multiply is a few dozen 32/64-bit integer instructions, division and
// square root one loop iteration per result bit (56), fmod one per 11 bits of exponent difference. Use it for
// correctness; `allow_fp64_demotion=True` remains the fast path.
//
// Names the lowering calls (a, b, c: tt_double):
//   construct      tt_f64_from_bits(ulong)  tt_double(x) for x float/half/int/uint/long/ulong/bool (explicit)
//                  tt_f64_from_float(float) tt_f64_from_half(half) tt_f64_from_i32(int) tt_f64_from_u32(uint)
//                  tt_f64_from_i64(long) tt_f64_from_u64(ulong) tt_f64_from_bool(bool)
//                  tt_f64_from_bfloat(bfloat) (soft_f64_bfloat.metal)
//   bits           a.bits (a ulong; loads/stores move f64 as ulong)
//   to narrower    tt_f64_to_float(a) tt_f64_to_half(a) tt_f64_to_bfloat(a) (soft_f64_bfloat.metal)
//   to integer     tt_f64_to_i64(a) tt_f64_to_u64(a) tt_f64_to_i32(a) tt_f64_to_u32(a)
//                  tt_f64_to_sint(a, long lo, long hi) tt_f64_to_uint(a, ulong hi)  (any width: give its limits)
//                  tt_f64_to_bool(a)  (a != 0; NaN -> true)
//   arithmetic     a + b, a - b, a * b, a / b, -a, tt_f64_fma(a, b, c), tt_f64_sqrt(a)
//                  (also tt_f64_add/sub/mul/div/neg as functions)
//   compare        a == b, a != b, a < b, a <= b, a > b, a >= b  (ordered IEEE; != is unordered-or-not-equal)
//                  tt_f64_isnan, tt_f64_isinf, tt_f64_isfinite, tt_f64_signbit (bool)
//   sign           tt_f64_fabs(a) tt_f64_copysign(a, b)
//   rounding       tt_f64_floor, tt_f64_ceil, tt_f64_trunc, tt_f64_round, tt_f64_rint; tt_f64_fmod(a, b)
//                  tt_f64_ldexp(a, int n)
//   min/max        tt_f64_minimum(a, b) tt_f64_maximum(a, b) (NaN-propagating)
//                  tt_f64_minnum(a, b) tt_f64_maxnum(a, b) (NaN-ignoring)
// The lowering's tables over these names (arith/math op -> call, cmpf predicates, casts) are soft_f64.py's.

// @helper tt_f64_core
/// The type, arithmetic, conversions, comparisons, rounding, fmod, min/max.
// ---- tt_double: software IEEE-754 binary64 (bits in a ulong) ----
struct tt_double {
    ulong bits;
    tt_double() = default;
    explicit tt_double(float x);
    explicit tt_double(half x);
    explicit tt_double(int x);
    explicit tt_double(uint x);
    explicit tt_double(long x);
    explicit tt_double(ulong x);
    explicit tt_double(bool x);
};

static inline tt_double tt_f64_from_bits(ulong b) {
    tt_double r;
    r.bits = b;
    return r;
}

#define TT_F64_SIGN 0x8000000000000000ul
#define TT_F64_ABS 0x7FFFFFFFFFFFFFFFul
#define TT_F64_INF 0x7FF0000000000000ul
#define TT_F64_QUIET 0x0008000000000000ul
#define TT_F64_DEFAULT_NAN 0xFFF8000000000000ul
#define TT_F64_FRAC 0x000FFFFFFFFFFFFFul
#define TT_F64_HIDDEN 0x0010000000000000ul

static inline bool tt_f64x_isnan(ulong a) { return (a & TT_F64_ABS) > TT_F64_INF; }
static inline int tt_f64x_exp(ulong a) { return int((a >> 52) & 0x7FFul); }
// significand with the hidden bit of normal numbers; subnormals count as exponent 1
static inline ulong tt_f64x_sig(ulong a) { return (a & TT_F64_FRAC) | (tt_f64x_exp(a) != 0 ? TT_F64_HIDDEN : 0ul); }
static inline int tt_f64x_exp1(ulong a) { return max(tt_f64x_exp(a), 1); }
static inline ulong tt_f64x_nan2(ulong a, ulong b) { return (tt_f64x_isnan(a) ? a : b) | TT_F64_QUIET; }

// x >> n, with a 1 ORed into bit 0 when a nonzero bit is shifted out (sticky)
static inline ulong tt_f64x_shr_jam(ulong x, uint n) {
    if (n == 0u) {
        return x;
    }
    if (n >= 64u) {
        return x != 0ul ? 1ul : 0ul;
    }
    return (x >> n) | ((x << (64u - n)) != 0ul ? 1ul : 0ul);
}

// Rounds sig * 2^(e - 1085) (sig has its leading one at bit 62, bit 0 may be sticky) to nearest even.
static inline ulong tt_f64x_round_pack(ulong sign, int e, ulong sig) {
    if (e >= 0x7FF) {
        return sign | TT_F64_INF;
    }
    if (e <= 0) {
        sig = tt_f64x_shr_jam(sig, uint(1 - e));
        e = 1;
    }
    const ulong rest = sig & 0x3FFul;
    ulong m = (sig + 0x200ul) >> 10;
    if (rest == 0x200ul) {
        m &= ~1ul;
    }
    // a carry out of the significand lands in the exponent field, as it should (up to infinity)
    return sign | ((ulong(e - 1) << 52) + m);
}

// Rounds sig * 2^lsb_exp (any sig, bit 0 may be sticky) to a double with the given sign bit.
static inline ulong tt_f64x_pack(ulong sign, int lsb_exp, ulong sig) {
    if (sig == 0ul) {
        return sign;
    }
    int e = lsb_exp + 1085;
    if ((sig >> 63) != 0ul) {
        sig = (sig >> 1) | (sig & 1ul);
        e += 1;
    } else {
        const uint s = uint(clz(sig)) - 1u;
        sig <<= s;
        e -= int(s);
    }
    return tt_f64x_round_pack(sign, e, sig);
}

// ---- add, sub, mul, div, sqrt, fma on bits ----
static inline ulong tt_f64x_add_bits(ulong a, ulong b) {
    const ulong aa = a & TT_F64_ABS;
    const ulong ab = b & TT_F64_ABS;
    if (aa == TT_F64_INF) {
        return (ab == TT_F64_INF && ((a ^ b) >> 63) != 0ul) ? TT_F64_DEFAULT_NAN : a;
    }
    if (ab == TT_F64_INF) {
        return b;
    }
    if (ab == 0ul) {
        return aa == 0ul ? (a & b) : a;
    }
    if (aa == 0ul) {
        return b;
    }
    ulong x = a, y = b;
    if (ab > aa) {
        x = b;
        y = a;
    }
    const int ex = tt_f64x_exp1(x);
    const int ey = tt_f64x_exp1(y);
    const ulong mx = tt_f64x_sig(x) << 9;
    const ulong my = tt_f64x_shr_jam(tt_f64x_sig(y) << 9, uint(ex - ey));
    ulong sig;
    if (((x ^ y) >> 63) != 0ul) {
        sig = mx - my;
        if (sig == 0ul) {
            return 0ul;
        }
    } else {
        sig = mx + my;
    }
    return tt_f64x_pack(x & TT_F64_SIGN, ex - 1084, sig);
}

static inline ulong tt_f64x_sub_bits(ulong a, ulong b) {
    if (tt_f64x_isnan(a) || tt_f64x_isnan(b)) {
        return tt_f64x_nan2(a, b);
    }
    return tt_f64x_add_bits(a, b ^ TT_F64_SIGN);
}

static inline ulong tt_f64x_addn_bits(ulong a, ulong b) {
    if (tt_f64x_isnan(a) || tt_f64x_isnan(b)) {
        return tt_f64x_nan2(a, b);
    }
    return tt_f64x_add_bits(a, b);
}

static inline ulong tt_f64x_mul_bits(ulong a, ulong b) {
    if (tt_f64x_isnan(a) || tt_f64x_isnan(b)) {
        return tt_f64x_nan2(a, b);
    }
    const ulong sign = (a ^ b) & TT_F64_SIGN;
    const ulong aa = a & TT_F64_ABS;
    const ulong ab = b & TT_F64_ABS;
    if (aa == TT_F64_INF || ab == TT_F64_INF) {
        return (aa == 0ul || ab == 0ul) ? TT_F64_DEFAULT_NAN : (sign | TT_F64_INF);
    }
    if (aa == 0ul || ab == 0ul) {
        return sign;
    }
    const ulong ma = tt_f64x_sig(a);
    const ulong mb = tt_f64x_sig(b);
    const int lsb = tt_f64x_exp1(a) + tt_f64x_exp1(b) - 2150;
    const ulong hi = mulhi(ma, mb);
    const ulong lo = ma * mb;
    if (hi == 0ul) {
        return tt_f64x_pack(sign, lsb, lo);
    }
    const uint s = uint(clz(hi));  // >= 22: the product has at most 106 bits
    const ulong top = (hi << s) | (lo >> (64u - s));
    const ulong sticky = (lo << s) != 0ul ? 1ul : 0ul;
    return tt_f64x_pack(sign, lsb + 64 - int(s), top | sticky);
}

// significand with its leading one at bit 52 and the matching exponent (value = m * 2^(e - 1075))
static inline ulong tt_f64x_norm_sig(ulong a, thread int& e) {
    ulong m = tt_f64x_sig(a);
    e = tt_f64x_exp1(a);
    if (m < TT_F64_HIDDEN) {
        const uint s = uint(clz(m)) - 11u;
        m <<= s;
        e -= int(s);
    }
    return m;
}

static inline ulong tt_f64x_div_bits(ulong a, ulong b) {
    if (tt_f64x_isnan(a) || tt_f64x_isnan(b)) {
        return tt_f64x_nan2(a, b);
    }
    const ulong sign = (a ^ b) & TT_F64_SIGN;
    const ulong aa = a & TT_F64_ABS;
    const ulong ab = b & TT_F64_ABS;
    if (aa == TT_F64_INF) {
        return ab == TT_F64_INF ? TT_F64_DEFAULT_NAN : (sign | TT_F64_INF);
    }
    if (ab == TT_F64_INF) {
        return sign;
    }
    if (ab == 0ul) {
        return aa == 0ul ? TT_F64_DEFAULT_NAN : (sign | TT_F64_INF);
    }
    if (aa == 0ul) {
        return sign;
    }
    int ea, eb;
    ulong r = tt_f64x_norm_sig(a, ea);
    const ulong mb = tt_f64x_norm_sig(b, eb);
    if (r < mb) {
        r <<= 1;
        ea -= 1;
    }
    // restoring division: 56 quotient bits (the first is 1), remainder r < mb
    ulong q = 0ul;
    for (int i = 0; i < 56; ++i) {
        q <<= 1;
        if (r >= mb) {
            r -= mb;
            q |= 1ul;
        }
        r <<= 1;
    }
    return tt_f64x_pack(sign, ea - eb - 55, q | (r != 0ul ? 1ul : 0ul));
}

static inline ulong tt_f64x_sqrt_bits(ulong a) {
    if (tt_f64x_isnan(a)) {
        return a | TT_F64_QUIET;
    }
    if ((a & TT_F64_ABS) == 0ul) {
        return a;
    }
    if ((a >> 63) != 0ul) {
        return TT_F64_DEFAULT_NAN;
    }
    if (a == TT_F64_INF) {
        return a;
    }
    int e;
    ulong m = tt_f64x_norm_sig(a, e);
    int p = e - 1075;  // a = m * 2^p
    if ((p & 1) != 0) {
        m <<= 1;
        p -= 1;
    }
    // digit-by-digit square root of m * 2^56 (110 bits, read two at a time from the top): 55 root bits
    ulong rad = m << 10;
    ulong q = 0ul;
    ulong r = 0ul;
    for (int i = 0; i < 55; ++i) {
        r = (r << 2) | (rad >> 62);
        rad <<= 2;
        const ulong t = (q << 2) | 1ul;
        if (r >= t) {
            r -= t;
            q = (q << 1) | 1ul;
        } else {
            q <<= 1;
        }
    }
    return tt_f64x_pack(0ul, (p - 56) / 2 - 1, (q << 1) | (r != 0ul ? 1ul : 0ul));
}

// 128-bit helpers for fma: (hi, lo) pairs
static inline void tt_f64x_shl128(thread ulong& hi, thread ulong& lo, uint n) {
    if (n == 0u) {
        return;
    }
    if (n >= 64u) {
        hi = lo << (n - 64u);
        lo = 0ul;
        return;
    }
    hi = (hi << n) | (lo >> (64u - n));
    lo <<= n;
}

static inline void tt_f64x_shr128_jam(thread ulong& hi, thread ulong& lo, uint n) {
    if (n == 0u) {
        return;
    }
    if (n >= 128u) {
        lo = (hi | lo) != 0ul ? 1ul : 0ul;
        hi = 0ul;
        return;
    }
    if (n >= 64u) {
        const uint k = n - 64u;
        const ulong lost = lo | (k != 0u ? (hi << (64u - k)) : 0ul);
        lo = (k != 0u ? (hi >> k) : hi) | (lost != 0ul ? 1ul : 0ul);
        hi = 0ul;
        return;
    }
    const ulong lost = lo << (64u - n);
    lo = (lo >> n) | (hi << (64u - n)) | (lost != 0ul ? 1ul : 0ul);
    hi >>= n;
}

static inline uint tt_f64x_clz128(ulong hi, ulong lo) {
    return hi != 0ul ? uint(clz(hi)) : 64u + uint(clz(lo));
}

static inline ulong tt_f64x_fma_bits(ulong a, ulong b, ulong c) {
    if (tt_f64x_isnan(a) || tt_f64x_isnan(b) || tt_f64x_isnan(c)) {
        return (tt_f64x_isnan(a) ? a : (tt_f64x_isnan(b) ? b : c)) | TT_F64_QUIET;
    }
    const ulong sp = (a ^ b) & TT_F64_SIGN;
    const ulong aa = a & TT_F64_ABS;
    const ulong ab = b & TT_F64_ABS;
    const ulong ac = c & TT_F64_ABS;
    if (aa == TT_F64_INF || ab == TT_F64_INF) {
        if (aa == 0ul || ab == 0ul) {
            return TT_F64_DEFAULT_NAN;
        }
        if (ac == TT_F64_INF && (c & TT_F64_SIGN) != sp) {
            return TT_F64_DEFAULT_NAN;
        }
        return sp | TT_F64_INF;
    }
    if (ac == TT_F64_INF) {
        return c;
    }
    if (aa == 0ul || ab == 0ul) {
        return ac == 0ul ? (sp & c) : c;
    }
    if (ac == 0ul) {
        return tt_f64x_mul_bits(a, b);
    }
    // product, exactly: (ph, pl) * 2^ep
    const ulong ma = tt_f64x_sig(a);
    const ulong mb = tt_f64x_sig(b);
    ulong ph = mulhi(ma, mb);
    ulong pl = ma * mb;
    int ep = tt_f64x_exp1(a) + tt_f64x_exp1(b) - 2150;
    uint s = tt_f64x_clz128(ph, pl) - 2u;  // leading one to bit 125
    tt_f64x_shl128(ph, pl, s);
    ep -= int(s);
    ulong ch = 0ul;
    ulong cl = tt_f64x_sig(c);
    int ec = tt_f64x_exp1(c) - 1075;
    s = tt_f64x_clz128(ch, cl) - 2u;
    tt_f64x_shl128(ch, cl, s);
    ec -= int(s);
    int e;
    if (ep >= ec) {
        tt_f64x_shr128_jam(ch, cl, uint(min(ep - ec, 200)));
        e = ep;
    } else {
        tt_f64x_shr128_jam(ph, pl, uint(min(ec - ep, 200)));
        e = ec;
    }
    ulong rh, rl, sign;
    if (sp == (c & TT_F64_SIGN)) {
        rl = pl + cl;
        rh = ph + ch + (rl < pl ? 1ul : 0ul);
        sign = sp;
    } else if (ph > ch || (ph == ch && pl >= cl)) {
        rl = pl - cl;
        rh = ph - ch - (pl < cl ? 1ul : 0ul);
        sign = sp;
    } else {
        rl = cl - pl;
        rh = ch - ph - (cl < pl ? 1ul : 0ul);
        sign = c & TT_F64_SIGN;
    }
    if (rh == 0ul) {
        return rl == 0ul ? 0ul : tt_f64x_pack(sign, e, rl);
    }
    const uint z = uint(clz(rh));
    const ulong top = z != 0u ? ((rh << z) | (rl >> (64u - z))) : rh;
    const ulong sticky = (rl << z) != 0ul ? 1ul : 0ul;
    return tt_f64x_pack(sign, e + 64 - int(z), top | sticky);
}

// ---- the API on tt_double ----
static inline tt_double tt_f64_add(tt_double a, tt_double b) { return tt_f64_from_bits(tt_f64x_addn_bits(a.bits, b.bits)); }
static inline tt_double tt_f64_sub(tt_double a, tt_double b) { return tt_f64_from_bits(tt_f64x_sub_bits(a.bits, b.bits)); }
static inline tt_double tt_f64_mul(tt_double a, tt_double b) { return tt_f64_from_bits(tt_f64x_mul_bits(a.bits, b.bits)); }
static inline tt_double tt_f64_div(tt_double a, tt_double b) { return tt_f64_from_bits(tt_f64x_div_bits(a.bits, b.bits)); }
static inline tt_double tt_f64_neg(tt_double a) { return tt_f64_from_bits(a.bits ^ TT_F64_SIGN); }
static inline tt_double tt_f64_fma(tt_double a, tt_double b, tt_double c) { return tt_f64_from_bits(tt_f64x_fma_bits(a.bits, b.bits, c.bits)); }
static inline tt_double tt_f64_sqrt(tt_double a) { return tt_f64_from_bits(tt_f64x_sqrt_bits(a.bits)); }
static inline tt_double operator+(tt_double a, tt_double b) { return tt_f64_add(a, b); }
static inline tt_double operator-(tt_double a, tt_double b) { return tt_f64_sub(a, b); }
static inline tt_double operator*(tt_double a, tt_double b) { return tt_f64_mul(a, b); }
static inline tt_double operator/(tt_double a, tt_double b) { return tt_f64_div(a, b); }
static inline tt_double operator-(tt_double a) { return tt_f64_neg(a); }

static inline bool tt_f64_isnan(tt_double a) { return tt_f64x_isnan(a.bits); }
static inline bool tt_f64_isinf(tt_double a) { return (a.bits & TT_F64_ABS) == TT_F64_INF; }
static inline bool tt_f64_isfinite(tt_double a) { return (a.bits & TT_F64_ABS) < TT_F64_INF; }
static inline bool tt_f64_signbit(tt_double a) { return (a.bits >> 63) != 0ul; }
static inline tt_double tt_f64_fabs(tt_double a) { return tt_f64_from_bits(a.bits & TT_F64_ABS); }
static inline tt_double tt_f64_copysign(tt_double a, tt_double b) {
    return tt_f64_from_bits((a.bits & TT_F64_ABS) | (b.bits & TT_F64_SIGN));
}

static inline bool tt_f64x_eq(ulong a, ulong b) {
    return !tt_f64x_isnan(a) && !tt_f64x_isnan(b) && (a == b || ((a | b) & TT_F64_ABS) == 0ul);
}
static inline bool tt_f64x_lt(ulong a, ulong b) {
    if (tt_f64x_isnan(a) || tt_f64x_isnan(b) || ((a | b) & TT_F64_ABS) == 0ul) {
        return false;
    }
    const bool na = (a >> 63) != 0ul;
    const bool nb = (b >> 63) != 0ul;
    if (na != nb) {
        return na;
    }
    return na ? a > b : a < b;
}
static inline bool operator==(tt_double a, tt_double b) { return tt_f64x_eq(a.bits, b.bits); }
static inline bool operator!=(tt_double a, tt_double b) { return !tt_f64x_eq(a.bits, b.bits); }
static inline bool operator<(tt_double a, tt_double b) { return tt_f64x_lt(a.bits, b.bits); }
static inline bool operator>(tt_double a, tt_double b) { return tt_f64x_lt(b.bits, a.bits); }
static inline bool operator<=(tt_double a, tt_double b) { return tt_f64x_lt(a.bits, b.bits) || tt_f64x_eq(a.bits, b.bits); }
static inline bool operator>=(tt_double a, tt_double b) { return tt_f64x_lt(b.bits, a.bits) || tt_f64x_eq(a.bits, b.bits); }

// ---- conversions ----
static inline tt_double tt_f64_from_float(float x) {
    const uint u = as_type<uint>(x);
    const ulong sign = ulong(u >> 31) << 63;
    const uint e = (u >> 23) & 0xFFu;
    const uint f = u & 0x7FFFFFu;
    if (e == 0xFFu) {
        return tt_f64_from_bits(sign | TT_F64_INF | (ulong(f) << 29) | (f != 0u ? TT_F64_QUIET : 0ul));
    }
    const ulong m = ulong(f) | (e != 0u ? 0x800000ul : 0ul);
    return tt_f64_from_bits(tt_f64x_pack(sign, int(max(e, 1u)) - 150, m));
}
static inline tt_double tt_f64_from_half(half x) { return tt_f64_from_float(float(x)); }
static inline tt_double tt_f64_from_i64(long x) {
    const ulong mag = x < 0l ? ulong(0) - ulong(x) : ulong(x);
    return tt_f64_from_bits(tt_f64x_pack(x < 0l ? TT_F64_SIGN : 0ul, 0, mag));
}
static inline tt_double tt_f64_from_u64(ulong x) { return tt_f64_from_bits(tt_f64x_pack(0ul, 0, x)); }
static inline tt_double tt_f64_from_i32(int x) { return tt_f64_from_i64(long(x)); }
static inline tt_double tt_f64_from_u32(uint x) { return tt_f64_from_u64(ulong(x)); }
static inline tt_double tt_f64_from_bool(bool x) { return tt_f64_from_bits(x ? 0x3FF0000000000000ul : 0ul); }
inline tt_double::tt_double(float x) : bits(tt_f64_from_float(x).bits) {}
inline tt_double::tt_double(half x) : bits(tt_f64_from_half(x).bits) {}
inline tt_double::tt_double(int x) : bits(tt_f64_from_i32(x).bits) {}
inline tt_double::tt_double(uint x) : bits(tt_f64_from_u32(x).bits) {}
inline tt_double::tt_double(long x) : bits(tt_f64_from_i64(x).bits) {}
inline tt_double::tt_double(ulong x) : bits(tt_f64_from_u64(x).bits) {}
inline tt_double::tt_double(bool x) : bits(tt_f64_from_bool(x).bits) {}

// Bits of a narrower binary float with `mbits` fraction bits and `ebits` exponent bits, rounded to nearest even.
static inline uint tt_f64x_narrow(ulong a, uint mbits, uint ebits) {
    const uint sign = uint(a >> 63) << (mbits + ebits);
    const uint emax = (1u << ebits) - 1u;
    const ulong aa = a & TT_F64_ABS;
    if (aa >= TT_F64_INF) {
        const uint payload = aa > TT_F64_INF ? (uint((aa & TT_F64_FRAC) >> (52u - mbits)) | (1u << (mbits - 1u))) : 0u;
        return sign | (emax << mbits) | payload;
    }
    if (aa == 0ul) {
        return sign;
    }
    int e;
    const ulong m = tt_f64x_norm_sig(aa, e);
    // value = 1.f * 2^(e - 1023); target biased exponent:
    int te = e - 1023 + int(emax >> 1);
    if (te >= int(emax)) {
        return sign | (emax << mbits);
    }
    uint shift = 52u - mbits;
    if (te <= 0) {
        shift += uint(1 - te);
        te = 1;
    }
    const ulong t = tt_f64x_shr_jam(m, shift - 2u);  // two extra bits: round and sticky
    ulong q = t >> 2;
    const ulong rs = t & 3ul;
    if (rs > 2ul || (rs == 2ul && (q & 1ul) != 0ul)) {
        q += 1ul;
    }
    return sign | ((uint(te - 1) << mbits) + uint(q));
}
static inline float tt_f64_to_float(tt_double a) { return as_type<float>(tt_f64x_narrow(a.bits, 23u, 8u)); }
static inline half tt_f64_to_half(tt_double a) { return as_type<half>(ushort(tt_f64x_narrow(a.bits, 10u, 5u))); }

// |a| truncated toward zero, saturated to 2^64 - 1 (a finite)
static inline ulong tt_f64x_trunc_mag(ulong a) {
    const int e = tt_f64x_exp(a) - 1075;  // |a| = sig * 2^e
    const ulong m = tt_f64x_sig(a);
    if (e >= 12) {
        return ~0ul;
    }
    if (e >= 0) {
        return m << uint(e);
    }
    return e <= -64 ? 0ul : (m >> uint(-e));
}
static inline long tt_f64_to_i64(tt_double a) {
    if (tt_f64x_isnan(a.bits)) {
        return 0l;
    }
    const ulong mag = tt_f64x_trunc_mag(a.bits & TT_F64_ABS);
    if ((a.bits >> 63) != 0ul) {
        return mag >= 0x8000000000000000ul ? long(0x8000000000000000ul) : -long(mag);
    }
    return mag >= 0x8000000000000000ul ? long(0x7FFFFFFFFFFFFFFFul) : long(mag);
}
static inline ulong tt_f64_to_u64(tt_double a) {
    if (tt_f64x_isnan(a.bits) || (a.bits >> 63) != 0ul) {
        return 0ul;
    }
    return tt_f64x_trunc_mag(a.bits);
}
static inline long tt_f64_to_sint(tt_double a, long lo, long hi) { return clamp(tt_f64_to_i64(a), lo, hi); }
static inline ulong tt_f64_to_uint(tt_double a, ulong hi) { return min(tt_f64_to_u64(a), hi); }
static inline int tt_f64_to_i32(tt_double a) { return int(tt_f64_to_sint(a, -2147483648l, 2147483647l)); }
static inline uint tt_f64_to_u32(tt_double a) { return uint(tt_f64_to_uint(a, 4294967295ul)); }
static inline bool tt_f64_to_bool(tt_double a) { return (a.bits & TT_F64_ABS) != 0ul; }

// ---- rounding to integers, fmod, ldexp ----
static inline tt_double tt_f64_trunc(tt_double a) {
    const int e = tt_f64x_exp(a.bits) - 1023;
    if (tt_f64x_isnan(a.bits)) {
        return tt_f64_from_bits(a.bits | TT_F64_QUIET);
    }
    if (e >= 52) {
        return a;
    }
    if (e < 0) {
        return tt_f64_from_bits(a.bits & TT_F64_SIGN);
    }
    return tt_f64_from_bits(a.bits & ~(TT_F64_FRAC >> uint(e)));
}
// rounds |a| (finite) to an integer: mode 0 toward zero, 1 away from zero, 2 half away, 3 half even
static inline ulong tt_f64x_round_mag(ulong a, int mode) {
    const ulong sign = a & TT_F64_SIGN;
    const ulong aa = a & TT_F64_ABS;
    const int e = tt_f64x_exp(aa) - 1023;
    if (e >= 52) {
        return a;
    }
    if (aa == 0ul) {
        return a;
    }
    if (e < 0) {
        bool up;
        if (mode == 0) {
            up = false;
        } else if (mode == 1) {
            up = true;
        } else if (mode == 2) {
            up = e == -1;
        } else {
            up = e == -1 && aa > 0x3FE0000000000000ul;
        }
        return sign | (up ? 0x3FF0000000000000ul : 0ul);
    }
    const ulong mask = TT_F64_FRAC >> uint(e);
    const ulong rest = aa & mask;
    const ulong base = aa & ~mask;
    const ulong unit = mask + 1ul;
    const ulong half_unit = unit >> 1;
    bool up;
    if (mode == 0) {
        up = false;
    } else if (mode == 1) {
        up = rest != 0ul;
    } else if (mode == 2) {
        up = rest >= half_unit;
    } else {
        const bool odd = e == 0 || (base & unit) != 0ul;
        up = rest > half_unit || (rest == half_unit && odd);
    }
    return sign | (up ? base + unit : base);
}
static inline tt_double tt_f64x_round_with(tt_double a, int mode) {
    if (tt_f64x_isnan(a.bits)) {
        return tt_f64_from_bits(a.bits | TT_F64_QUIET);
    }
    return tt_f64_from_bits(tt_f64x_round_mag(a.bits, mode));
}
static inline tt_double tt_f64_floor(tt_double a) { return tt_f64x_round_with(a, (a.bits >> 63) != 0ul ? 1 : 0); }
static inline tt_double tt_f64_ceil(tt_double a) { return tt_f64x_round_with(a, (a.bits >> 63) != 0ul ? 0 : 1); }
static inline tt_double tt_f64_round(tt_double a) { return tt_f64x_round_with(a, 2); }
static inline tt_double tt_f64_rint(tt_double a) { return tt_f64x_round_with(a, 3); }

static inline tt_double tt_f64_fmod(tt_double x, tt_double y) {
    const ulong a = x.bits;
    const ulong b = y.bits;
    if (tt_f64x_isnan(a) || tt_f64x_isnan(b)) {
        return tt_f64_from_bits(tt_f64x_nan2(a, b));
    }
    const ulong aa = a & TT_F64_ABS;
    const ulong ab = b & TT_F64_ABS;
    if (aa == TT_F64_INF || ab == 0ul) {
        return tt_f64_from_bits(TT_F64_DEFAULT_NAN);
    }
    if (aa < ab) {
        return x;
    }
    int ea, eb;
    const ulong ma = tt_f64x_norm_sig(aa, ea);
    const ulong mb = tt_f64x_norm_sig(ab, eb);
    // |x| = ma * 2^(ea - 1075), |y| = mb * 2^(eb - 1075), ea >= eb: remainder of ma * 2^(ea - eb) by mb
    ulong r = ma % mb;
    int d = ea - eb;
    while (d > 0 && r != 0ul) {
        const int s = min(d, 11);
        r = (r << uint(s)) % mb;
        d -= s;
    }
    return tt_f64_from_bits(tt_f64x_pack(a & TT_F64_SIGN, eb - 1075, r));
}

static inline tt_double tt_f64_ldexp(tt_double a, int n) {
    const ulong aa = a.bits & TT_F64_ABS;
    if (aa >= TT_F64_INF || aa == 0ul) {
        return tt_f64x_isnan(a.bits) ? tt_f64_from_bits(a.bits | TT_F64_QUIET) : a;
    }
    n = clamp(n, -4000, 4000);
    return tt_f64_from_bits(tt_f64x_pack(a.bits & TT_F64_SIGN, tt_f64x_exp1(aa) - 1075 + n, tt_f64x_sig(aa)));
}

// ---- min / max ----
static inline tt_double tt_f64_minimum(tt_double a, tt_double b) {
    if (tt_f64x_isnan(a.bits) || tt_f64x_isnan(b.bits)) {
        return tt_f64_from_bits(tt_f64x_nan2(a.bits, b.bits));
    }
    if (tt_f64x_eq(a.bits, b.bits)) {
        return tt_f64_from_bits(a.bits | b.bits);
    }
    return tt_f64x_lt(a.bits, b.bits) ? a : b;
}
static inline tt_double tt_f64_maximum(tt_double a, tt_double b) {
    if (tt_f64x_isnan(a.bits) || tt_f64x_isnan(b.bits)) {
        return tt_f64_from_bits(tt_f64x_nan2(a.bits, b.bits));
    }
    if (tt_f64x_eq(a.bits, b.bits)) {
        return tt_f64_from_bits(a.bits & b.bits);
    }
    return tt_f64x_lt(a.bits, b.bits) ? b : a;
}
static inline tt_double tt_f64_minnum(tt_double a, tt_double b) {
    if (tt_f64x_isnan(a.bits)) {
        return tt_f64x_isnan(b.bits) ? tt_f64_from_bits(a.bits | TT_F64_QUIET) : b;
    }
    return tt_f64x_isnan(b.bits) ? a : tt_f64_minimum(a, b);
}
static inline tt_double tt_f64_maxnum(tt_double a, tt_double b) {
    if (tt_f64x_isnan(a.bits)) {
        return tt_f64x_isnan(b.bits) ? tt_f64_from_bits(a.bits | TT_F64_QUIET) : b;
    }
    return tt_f64x_isnan(b.bits) ? a : tt_f64_maximum(a, b);
}

"""Software IEEE-754 binary64 for Metal, which has no `double`: the MSL text of `tt_double`.

A `tt_double` is a struct holding the 64 bits of an IEEE binary64 in a `ulong` (`.bits`). Every operation
is done on Metal's 64-bit integers (`mulhi` gives the high half of 64x64-bit products); the text uses no
`double`, `long double`, `__int128`, pointers to functions, recursion or static locals, so it is valid MSL
and runs unchanged on the emulator.

Semantics (checked bit for bit against the host's doubles by test/lowering/test_soft_f64.py; a long fuzz of
every core operation, 10^6 random cases each (fma 2*10^5) plus the edge-case grid, found no difference):
- `+ - * /`, `tt_f64_fma`, `tt_f64_sqrt`, every conversion to a narrower float (float, half, bfloat) or
  from an integer: correctly rounded, round to nearest even, subnormals kept (no flush to zero), signed
  zeros as IEEE (x + -x == +0, -0 + -0 == -0).
- NaN results are quiet. An operand NaN propagates with its payload (the first NaN operand, quieted, as
  x86 SSE does); an invalid operation (inf - inf, 0 * inf, 0 / 0, sqrt(-1), ...) gives x86's default NaN
  0xFFF8000000000000 (sign bit set). Negation, fabs and copysign touch only the sign bit.
- float -> double keeps the NaN payload (x86 cvtss2sd); double -> float/half/bfloat keeps its top bits.
- to integer: Triton's semantics, as the float helpers in msl_helpers.py: truncation toward zero, saturating
  at the type's limits, NaN -> 0 (unsigned: negative -> 0).
- comparisons: IEEE (any comparison with NaN is false except !=; -0 == +0).
- floor/ceil/trunc/round (half away from zero)/rint (half to even), fmod (exact, as C's fmod),
  minimum/maximum (NaN-propagating, -0 < +0) and minnum/maxnum (a NaN operand is ignored).
- math functions (`SOFT_F64_MATH`): exp, exp2, log, log2, pow, sin, cos, tanh, erf, evaluated in double-double
  arithmetic on top of the exact operations above; faithful (< 1 ulp). Max error measured against an exact
  reference (Python `decimal` at 60 digits; sin/cos reduced with a 1400-bit pi) in units in the last place of
  the exact value, 2*10^5 cases each (1.75*10^5 for sin/cos; uniform over the whole range, around 1, tiny
  and huge magnitudes, subnormal results, |x| up to 1e300 for sin/cos):
      exp 0.536   exp2 0.542   log 0.500   log2 0.500   pow 0.541
      sin 0.560   cos 0.555    tanh 0.576  erf 0.558
  (0.5 is correct rounding.) Special values follow C99 Annex F (pow's special cases, log(-x) = NaN,
  log(0) = -inf, sin(inf) = NaN, ...). sin/cos reduce their argument exactly for every finite double:
  Cody-Waite with pi/2 in four parts below 2^20, Payne-Hanek with 1216 bits of 2/pi above.

Speed: this is emulation. An add or multiply is a few dozen 32/64-bit integer instructions, division and
square root one loop iteration per result bit (56), fmod one per 11 bits of exponent difference; a math
function is 50 to 150 of these soft operations (erf: up to 240 series terms for |x| near 6). Use it for
correctness; `allow_fp64_demotion=True` remains the fast path.

Internal helpers are named tt_f64x_* (not API). Helper strings (emit in this order; each needs the first):
- SOFT_F64_CORE: the type and everything except the math functions;
- SOFT_F64_BFLOAT: tt_f64_to_bfloat / tt_f64_from_bfloat (only where the target has bfloat);
- SOFT_F64_MATH: tt_f64_exp, exp2, log, log2, pow, sin, cos, tanh, erf.
`helper_texts(*keys)` returns the texts of the given keys and their dependencies, in order.

Names the lowering calls (a, b, c: tt_double):
  construct      tt_f64_from_bits(ulong)  tt_double(x) for x float/half/int/uint/long/ulong/bool (explicit)
                 tt_f64_from_float(float) tt_f64_from_half(half) tt_f64_from_i32(int) tt_f64_from_u32(uint)
                 tt_f64_from_i64(long) tt_f64_from_u64(ulong) tt_f64_from_bool(bool) tt_f64_from_bfloat(bfloat)
  bits           a.bits (a ulong; loads/stores move f64 as ulong)
  to narrower    tt_f64_to_float(a) tt_f64_to_half(a) tt_f64_to_bfloat(a)
  to integer     tt_f64_to_i64(a) tt_f64_to_u64(a) tt_f64_to_i32(a) tt_f64_to_u32(a)
                 tt_f64_to_sint(a, long lo, long hi) tt_f64_to_uint(a, ulong hi)  (any width: give its limits)
                 tt_f64_to_bool(a)  (a != 0; NaN -> true)
  arithmetic     a + b, a - b, a * b, a / b, -a, tt_f64_fma(a, b, c), tt_f64_sqrt(a)
                 (also tt_f64_add/sub/mul/div/neg as functions)
  compare        a == b, a != b, a < b, a <= b, a > b, a >= b  (ordered IEEE; != is unordered-or-not-equal)
                 tt_f64_isnan, tt_f64_isinf, tt_f64_isfinite, tt_f64_signbit (bool)
  sign           tt_f64_fabs(a) tt_f64_copysign(a, b)
  rounding       tt_f64_floor, tt_f64_ceil, tt_f64_trunc, tt_f64_round, tt_f64_rint; tt_f64_fmod(a, b)
                 tt_f64_ldexp(a, int n)
  min/max        tt_f64_minimum(a, b) tt_f64_maximum(a, b) (NaN-propagating)
                 tt_f64_minnum(a, b) tt_f64_maxnum(a, b) (NaN-ignoring)
  math           tt_f64_exp, tt_f64_exp2, tt_f64_log, tt_f64_log2, tt_f64_sin, tt_f64_cos, tt_f64_tanh,
                 tt_f64_erf, tt_f64_pow(a, b)   (SOFT_F64_MATH)
  tables         OPS (arith/math op -> template, helper key), CMPF (every arith.cmpf predicate),
                 CASTS_TO_F64 / CASTS_FROM_F64 (MSL scalar type -> template), constant(value) -> MSL expression
"""
from __future__ import annotations

from fractions import Fraction
import struct

# --------------------------------------------------------------------------------------------------------
# Constants, derived here with exact integer arithmetic (no table copied from elsewhere).
# --------------------------------------------------------------------------------------------------------
_PREC = 1400  # bits after the binary point of the fixed-point constants below
_ONE = 1 << _PREC


def _atan_inv(n: int) -> int:
    """atan(1/n) * 2^_PREC (truncated series; error far below 2^-1300)."""
    term = _ONE // n
    total = term
    k = 1
    sign = -1
    n2 = n * n
    while term:
        term //= n2
        k += 2
        total += sign * (term // k)
        sign = -sign
    return total


_PI_FIX = 4 * (4 * _atan_inv(5) - _atan_inv(239))  # Machin
_LN2_FIX = sum(_ONE // (k << k) for k in range(1, _PREC + 16))  # ln 2 = sum 1 / (k 2^k)


def _bits(x: float) -> str:
    return "0x%016Xul" % struct.unpack("<Q", struct.pack("<d", x))[0]


def _split(value: Fraction, parts: int, head_bits: int = 53) -> list:
    """value as a sum of `parts` doubles; every part but the last keeps only `head_bits` significant bits."""
    out = []
    for i in range(parts):
        if i == parts - 1 or head_bits >= 53:
            d = float(value)
        else:
            num, den = value.numerator, value.denominator
            e = (abs(num).bit_length() - den.bit_length())
            scale = Fraction(2)**(head_bits - 1 - e)
            while abs(value) * scale >= 2**head_bits:
                scale /= 2
            while abs(value) * scale < 2**(head_bits - 1):
                scale *= 2
            d = float(Fraction(int(value * scale)) / scale)
        out.append(d)
        value -= Fraction(d)
    return out


_LN2 = Fraction(_LN2_FIX, _ONE)
_PI = Fraction(_PI_FIX, _ONE)
import math as _math
_TWO_OVER_SQRTPI = Fraction(2 << _PREC, _math.isqrt(_PI_FIX << _PREC))
_C = {
    "MSIXTH_HI": _split(Fraction(-1, 6), 2)[0], "MSIXTH_LO": _split(Fraction(-1, 6), 2)[1],
    "TSP_HI": _split(_TWO_OVER_SQRTPI, 2)[0], "TSP_LO": _split(_TWO_OVER_SQRTPI, 2)[1],
    "LN2_HI": _split(_LN2, 2)[0], "LN2_LO": _split(_LN2, 2)[1],
    "INVLN2_HI": _split(1 / _LN2, 2)[0], "INVLN2_LO": _split(1 / _LN2, 2)[1],
    "PIO2_HI": _split(_PI / 2, 2)[0], "PIO2_LO": _split(_PI / 2, 2)[1],
    "TWOOPI": float(2 / _PI), "THIRD_HI": _split(Fraction(1, 3), 2)[0], "THIRD_LO": _split(Fraction(1, 3), 2)[1],
}
_LN2_3 = _split(_LN2, 3, head_bits=42)  # k * part0 is exact for |k| < 2^11
_PIO2_4 = _split(_PI / 2, 4, head_bits=33)  # k * part0..2 exact for |k| < 2^20
for _i, _v in enumerate(_LN2_3):
    _C[f"LN2_C{_i}"] = _v
for _i, _v in enumerate(_PIO2_4):
    _C[f"PIO2_C{_i}"] = _v


def _fact(n: int) -> int:
    r = 1
    for i in range(2, n + 1):
        r *= i
    return r


def _coef_list(values) -> str:
    return ", ".join(_bits(float(v)) for v in values)


# exp(r) - 1 - r - r^2/2 = r^3 * (1/3! + r/4! + ... + r^10/13!) on |r| <= ln2/2 (truncation < 2^-63 relative)
_EXP_COEFS = _coef_list(Fraction(1, _fact(n)) for n in range(13, 2, -1))
# log(1+f) = 2s + 2 s^3 (1/3 + z Q(z)), z = s^2, Q(z) = 1/5 + z/7 + ... + z^11/27 (Horner from the top)
_LOG_COEFS = _coef_list(Fraction(1, 2 * n + 1) for n in range(13, 1, -1))
# sin(r) = r - r^3/6 + r^5 S(z), S = 1/5! - z/7! + ... (to z^7/19!); cos(r) = 1 - z/2 + z^2 C(z), C = 1/4! - ... (to z^8/20!)
_SIN_COEFS = _coef_list(Fraction((-1)**n, _fact(2 * n + 1)) for n in range(9, 1, -1))
_COS_COEFS = _coef_list(Fraction((-1)**n, _fact(2 * n)) for n in range(10, 1, -1))
# 2/pi: bits b_1 b_2 ... (2/pi = sum b_i 2^-i), 64 per word, after a zero word (reads before b_1 give 0)
_TWOOPI_WORDS = [0] + [((2 * _ONE * _ONE // _PI_FIX) >> (_PREC - 64 * (k + 1))) & (2**64 - 1) for k in range(20)]
_TWOOPI_TABLE = ", ".join("0x%016Xul" % w for w in _TWOOPI_WORDS)


def _k(name: str) -> str:
    return f"tt_f64_from_bits({_bits(_C[name])})"


# --------------------------------------------------------------------------------------------------------
# Core: the type, arithmetic, conversions, comparisons, rounding, fmod, min/max
# --------------------------------------------------------------------------------------------------------
SOFT_F64_CORE = r"""// ---- tt_double: software IEEE-754 binary64 (bits in a ulong) ----
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
"""

SOFT_F64_BFLOAT = r"""// ---- tt_double <-> bfloat ----
static inline bfloat tt_f64_to_bfloat(tt_double a) { return as_type<bfloat>(ushort(tt_f64x_narrow(a.bits, 7u, 8u))); }
static inline tt_double tt_f64_from_bfloat(bfloat x) { return tt_f64_from_float(float(x)); }
"""

# --------------------------------------------------------------------------------------------------------
# Math functions: double-double (hi + lo) evaluation on the exact operations of the core
# --------------------------------------------------------------------------------------------------------
_MATH_TEMPLATE = r"""// ---- tt_double math functions (double-double evaluation) ----
struct tt_f64dd {
    tt_double hi;
    tt_double lo;
};
static inline tt_f64dd tt_f64x_dd(tt_double hi, tt_double lo) {
    tt_f64dd r;
    r.hi = hi;
    r.lo = lo;
    return r;
}
static inline tt_double tt_f64x_k(ulong b) { return tt_f64_from_bits(b); }
static inline tt_f64dd tt_f64x_two_sum(tt_double a, tt_double b) {
    const tt_double s = a + b;
    const tt_double bb = s - a;
    return tt_f64x_dd(s, (a - (s - bb)) + (b - bb));
}
static inline tt_f64dd tt_f64x_fast_two_sum(tt_double a, tt_double b) {
    const tt_double s = a + b;
    return tt_f64x_dd(s, b - (s - a));
}
static inline tt_f64dd tt_f64x_two_prod(tt_double a, tt_double b) {
    const tt_double p = a * b;
    return tt_f64x_dd(p, tt_f64_fma(a, b, -p));
}
static inline tt_f64dd tt_f64x_dd_add(tt_f64dd x, tt_f64dd y) {
    tt_f64dd s = tt_f64x_two_sum(x.hi, y.hi);
    const tt_f64dd t = tt_f64x_two_sum(x.lo, y.lo);
    s = tt_f64x_fast_two_sum(s.hi, s.lo + t.hi);
    return tt_f64x_fast_two_sum(s.hi, s.lo + t.lo);
}
static inline tt_f64dd tt_f64x_dd_add_d(tt_f64dd x, tt_double d) {
    const tt_f64dd s = tt_f64x_two_sum(x.hi, d);
    return tt_f64x_fast_two_sum(s.hi, s.lo + x.lo);
}
static inline tt_f64dd tt_f64x_dd_mul(tt_f64dd x, tt_f64dd y) {
    const tt_f64dd p = tt_f64x_two_prod(x.hi, y.hi);
    return tt_f64x_fast_two_sum(p.hi, p.lo + (x.hi * y.lo + x.lo * y.hi));
}
static inline tt_f64dd tt_f64x_dd_mul_d(tt_f64dd x, tt_double d) {
    const tt_f64dd p = tt_f64x_two_prod(x.hi, d);
    return tt_f64x_fast_two_sum(p.hi, p.lo + x.lo * d);
}
static inline tt_f64dd tt_f64x_dd_div(tt_f64dd x, tt_f64dd y) {
    const tt_double q1 = x.hi / y.hi;
    const tt_f64dd r = tt_f64x_dd_add(x, tt_f64x_dd_mul_d(y, -q1));
    const tt_double q2 = r.hi / y.hi;
    return tt_f64x_fast_two_sum(q1, q2);
}

// round(2^n * (v.hi + v.lo)) with a single rounding (also into the subnormal range)
static inline tt_double tt_f64x_dd_ldexp(tt_f64dd v, int n) {
    const ulong h = v.hi.bits;
    const ulong ah = h & TT_F64_ABS;
    const ulong al = v.lo.bits & TT_F64_ABS;
    if (ah == 0ul || ah >= TT_F64_INF || al >= TT_F64_INF) {
        return tt_f64_ldexp(v.hi + v.lo, n);
    }
    ulong sig = tt_f64x_sig(ah) << 10;
    const int lsb = tt_f64x_exp1(ah) - 1085;
    if (al != 0ul) {
        const int sh = (tt_f64x_exp1(al) - 1075) - lsb;
        if (sh > 0) {
            return tt_f64_ldexp(v.hi + v.lo, n);
        }
        const ulong li = tt_f64x_shr_jam(tt_f64x_sig(al), uint(-sh));
        sig = ((v.lo.bits ^ h) >> 63) != 0ul ? sig - li : sig + li;
    }
    n = clamp(n, -4000, 4000);
    return tt_f64_from_bits(tt_f64x_pack(h & TT_F64_SIGN, lsb + n, sig));
}

// exp(r) as a double-double, |r| <= ~0.36: 1 + r + r^2/2 (exact) + r^3 P(r), P = 1/3! + r/4! + ... + r^10/13!
static inline tt_f64dd tt_f64x_exp_dd(tt_f64dd r) {
    const ulong c[11] = {@EXP_COEFS@};
    tt_double p = tt_f64x_k(c[0]);
    for (int i = 1; i < 11; ++i) {
        p = tt_f64_fma(p, r.hi, tt_f64x_k(c[i]));
    }
    const tt_f64dd rr = tt_f64x_two_prod(r.hi, r.hi);
    const tt_double half_ = tt_f64x_k(0x3FE0000000000000ul);
    const tt_double h = rr.hi * half_;  // exact: r^2/2 = h + rr.lo/2
    const tt_double cube = rr.hi * r.hi * p;  // ~r^3/6: its rounding errors are far below 1 ulp of the sum
    const tt_f64dd s1 = tt_f64x_two_sum(h, cube);
    const tt_f64dd s2 = tt_f64x_two_sum(r.hi, s1.hi);
    const tt_double lo = ((s1.lo + s2.lo) + rr.lo * half_) + (r.lo + r.lo * r.hi);
    const tt_f64dd u = tt_f64x_two_sum(tt_f64x_k(0x3FF0000000000000ul), s2.hi);
    return tt_f64x_fast_two_sum(u.hi, u.lo + lo);
}

// x = k ln2 + r, |r| <= ~0.35 as a double-double (|x| < 2^11 ln2)
static inline tt_f64dd tt_f64x_exp_reduce(tt_double x, thread int& k) {
    const tt_double kd = tt_f64_rint(x * @INVLN2_HI@);
    k = int(tt_f64_to_i64(kd));
    const tt_double nk = -kd;
    tt_f64dd r = tt_f64x_dd(tt_f64_fma(nk, @LN2_C0@, x), tt_f64x_k(0ul));
    r = tt_f64x_dd_add(r, tt_f64x_two_prod(nk, @LN2_C1@));
    return tt_f64x_dd_add_d(r, nk * @LN2_C2@);
}

static inline tt_double tt_f64_exp(tt_double x) {
    const ulong ax = x.bits & TT_F64_ABS;
    if (ax >= TT_F64_INF) {
        return ax > TT_F64_INF ? tt_f64_from_bits(x.bits | TT_F64_QUIET) : tt_f64_from_bits((x.bits >> 63) != 0ul ? 0ul : TT_F64_INF);
    }
    if ((x.bits >> 63) == 0ul ? ax > 0x4086300000000000ul : ax > 0x4087500000000000ul) {  // x > 710 or x < -746
        return tt_f64_from_bits((x.bits >> 63) != 0ul ? 0ul : TT_F64_INF);
    }
    int k;
    const tt_f64dd r = tt_f64x_exp_reduce(x, k);
    return tt_f64x_dd_ldexp(tt_f64x_exp_dd(r), k);
}

static inline tt_double tt_f64_exp2(tt_double x) {
    const ulong ax = x.bits & TT_F64_ABS;
    if (ax >= TT_F64_INF) {
        return ax > TT_F64_INF ? tt_f64_from_bits(x.bits | TT_F64_QUIET) : tt_f64_from_bits((x.bits >> 63) != 0ul ? 0ul : TT_F64_INF);
    }
    if (ax > 0x4091000000000000ul) {  // |x| > 1088
        return tt_f64_from_bits((x.bits >> 63) != 0ul ? 0ul : TT_F64_INF);
    }
    const tt_double kd = tt_f64_rint(x);
    const tt_double f = x - kd;
    const tt_f64dd r = tt_f64x_dd_mul_d(tt_f64x_dd(@LN2_HI@, @LN2_LO@), f);
    return tt_f64x_dd_ldexp(tt_f64x_exp_dd(r), int(tt_f64_to_i64(kd)));
}

// log(x) = k ln2 + L for finite x > 0; L = log(m), m in [sqrt(1/2), sqrt(2)), as a double-double
static inline tt_f64dd tt_f64x_log_dd(tt_double x, thread int& k) {
    int e;
    const ulong m = tt_f64x_norm_sig(x.bits & TT_F64_ABS, e);
    k = e - 1023;
    ulong mb = (m & TT_F64_FRAC) | 0x3FF0000000000000ul;
    if ((m & TT_F64_FRAC) > 0x6A09E667F3BCCul) {
        mb = (m & TT_F64_FRAC) | 0x3FE0000000000000ul;
        k += 1;
    }
    const tt_double two = tt_f64x_k(0x4000000000000000ul);
    const tt_double f = tt_f64x_k(mb) - tt_f64x_k(0x3FF0000000000000ul);
    // s = f / (2 + f), 2 + f = u + ue exactly
    const tt_double u = two + f;
    const tt_double ue = f - (u - two);
    const tt_double sh = f / u;
    const tt_double sl = (tt_f64_fma(-sh, u, f) - sh * ue) / u;
    const tt_f64dd s = tt_f64x_dd(sh, sl);
    const tt_f64dd z = tt_f64x_dd_mul(s, s);
    const ulong c[12] = {@LOG_COEFS@};
    tt_double q = tt_f64x_k(c[0]);
    for (int i = 1; i < 12; ++i) {
        q = tt_f64_fma(q, z.hi, tt_f64x_k(c[i]));
    }
    const tt_f64dd a = tt_f64x_dd_add_d(tt_f64x_dd(@THIRD_HI@, @THIRD_LO@), z.hi * q);
    const tt_f64dd l = tt_f64x_dd_add(s, tt_f64x_dd_mul(tt_f64x_dd_mul(s, z), a));
    const tt_double two_ = two;
    return tt_f64x_dd(l.hi * two_, l.lo * two_);
}

// NaN, negative, zero and infinite arguments of log/log2; returns true when handled
static inline bool tt_f64x_log_special(tt_double x, thread tt_double& out) {
    if (tt_f64x_isnan(x.bits)) {
        out = tt_f64_from_bits(x.bits | TT_F64_QUIET);
        return true;
    }
    if ((x.bits & TT_F64_ABS) == 0ul) {
        out = tt_f64_from_bits(TT_F64_SIGN | TT_F64_INF);
        return true;
    }
    if ((x.bits >> 63) != 0ul) {
        out = tt_f64_from_bits(TT_F64_DEFAULT_NAN);
        return true;
    }
    if (x.bits == TT_F64_INF) {
        out = x;
        return true;
    }
    return false;
}

static inline tt_double tt_f64_log(tt_double x) {
    tt_double out;
    if (tt_f64x_log_special(x, out)) {
        return out;
    }
    int k;
    const tt_f64dd l = tt_f64x_log_dd(x, k);
    const tt_double kd = tt_f64_from_i32(k);
    tt_f64dd kl = tt_f64x_dd(kd * @LN2_C0@, tt_f64x_k(0ul));
    kl = tt_f64x_dd_add(kl, tt_f64x_two_prod(kd, @LN2_C1@));
    kl = tt_f64x_dd_add_d(kl, kd * @LN2_C2@);
    return tt_f64x_dd_add(kl, l).hi;
}

static inline tt_f64dd tt_f64x_log2_dd(tt_double x) {
    int k;
    const tt_f64dd l = tt_f64x_log_dd(x, k);
    return tt_f64x_dd_add_d(tt_f64x_dd_mul(l, tt_f64x_dd(@INVLN2_HI@, @INVLN2_LO@)), tt_f64_from_i32(k));
}

static inline tt_double tt_f64_log2(tt_double x) {
    tt_double out;
    if (tt_f64x_log_special(x, out)) {
        return out;
    }
    return tt_f64x_log2_dd(x).hi;
}

static inline tt_double tt_f64_pow(tt_double x, tt_double y) {
    const ulong one = 0x3FF0000000000000ul;
    const ulong ax = x.bits & TT_F64_ABS;
    const ulong ay = y.bits & TT_F64_ABS;
    if (ay == 0ul || x.bits == one) {
        return tt_f64x_k(one);
    }
    if (tt_f64x_isnan(x.bits) || tt_f64x_isnan(y.bits)) {
        return tt_f64_from_bits(tt_f64x_nan2(x.bits, y.bits));
    }
    const bool yneg = (y.bits >> 63) != 0ul;
    if (ay == TT_F64_INF) {
        if (ax == one) {
            return tt_f64x_k(one);
        }
        return tt_f64x_k((ax > one) != yneg ? TT_F64_INF : 0ul);
    }
    const bool yint = tt_f64_trunc(y) == y;
    const bool yodd = yint && ay < 0x4340000000000000ul && (tt_f64_to_u64(tt_f64_fabs(y)) & 1ul) != 0ul;
    const ulong rsign = ((x.bits >> 63) != 0ul && yodd) ? TT_F64_SIGN : 0ul;
    if (ax == 0ul) {
        return tt_f64x_k(yneg ? (rsign | TT_F64_INF) : rsign);
    }
    if (ax == TT_F64_INF) {
        return tt_f64x_k(yneg ? rsign : (rsign | TT_F64_INF));
    }
    if ((x.bits >> 63) != 0ul && !yint) {
        return tt_f64x_k(TT_F64_DEFAULT_NAN);
    }
    const tt_f64dd l2 = tt_f64x_log2_dd(tt_f64x_k(ax));
    const tt_double th = l2.hi * y;  // y log2|x|: beyond +-1120 the result overflows or underflows
    if (th > tt_f64x_k(0x4091800000000000ul)) {
        return tt_f64x_k(rsign | TT_F64_INF);
    }
    if (th < tt_f64x_k(0xC091800000000000ul)) {
        return tt_f64x_k(rsign);
    }
    const tt_f64dd t = tt_f64x_dd_mul_d(l2, y);
    const tt_double kd = tt_f64_rint(t.hi);
    const tt_f64dd f = tt_f64x_dd_add_d(t, -kd);
    const tt_f64dd r = tt_f64x_dd_mul(f, tt_f64x_dd(@LN2_HI@, @LN2_LO@));
    const tt_double v = tt_f64x_dd_ldexp(tt_f64x_exp_dd(r), int(tt_f64_to_i64(kd)));
    return tt_f64_from_bits(v.bits | rsign);
}

// x = n (pi/2) + r for finite x, |r| <= ~pi/4 as a double-double; returns n mod 4
static inline int tt_f64x_rem_pio2(tt_double x, thread tt_f64dd& r) {
    const ulong ax = x.bits & TT_F64_ABS;
    if (ax < 0x4130000000000000ul) {  // |x| < 2^20: Cody-Waite with pi/2 in four parts
        const tt_double kd = tt_f64_rint(x * @TWOOPI@);
        const tt_double nk = -kd;
        r = tt_f64x_dd(tt_f64_fma(nk, @PIO2_C0@, x), tt_f64x_k(0ul));
        r = tt_f64x_dd_add(r, tt_f64x_two_prod(nk, @PIO2_C1@));
        r = tt_f64x_dd_add(r, tt_f64x_two_prod(nk, @PIO2_C2@));
        r = tt_f64x_dd_add(r, tt_f64x_two_prod(nk, @PIO2_C3@));
        return int(tt_f64_to_i64(kd) & 3l);
    }
    // Payne-Hanek: |x| = m 2^E; x (2/pi) mod 4 from the 192 bits b_{E-1} .. b_{E+190} of 2/pi
    const ulong tbl[21] = {@TWOOPI_TABLE@};
    int e;
    const ulong m = tt_f64x_norm_sig(ax, e);
    const int q0 = (e - 1075) - 1 + 63;
    const int w = q0 >> 6;
    const uint o = uint(q0 & 63);
    ulong win[3];
    for (int i = 0; i < 3; ++i) {
        win[i] = o != 0u ? ((tbl[w + i] << o) | (tbl[w + i + 1] >> (64u - o))) : tbl[w + i];
    }
    const ulong h2 = mulhi(m, win[2]), l2 = m * win[2];
    const ulong h1 = mulhi(m, win[1]), l1 = m * win[1];
    const ulong l0 = m * win[0];
    const ulong r0 = l2;
    const ulong r1 = h2 + l1;
    const ulong c1 = r1 < h2 ? 1ul : 0ul;
    const ulong r2 = h1 + l0 + c1;
    int n = int(r2 >> 62);
    // fraction: 190 bits (x2:x1:x0), value * 2^-190
    ulong x2 = r2 & 0x3FFFFFFFFFFFFFFFul, x1 = r1, x0 = r0;
    bool neg = false;
    if ((x2 >> 61) != 0ul) {  // >= 1/2: take 1 - fraction, next quadrant
        n += 1;
        neg = true;
        x0 = ~x0 + 1ul;
        const ulong b0 = x0 != 0ul ? 1ul : 0ul;
        x1 = ~x1 + (1ul - b0);
        const ulong b1 = (x1 != 0ul || b0 != 0ul) ? 1ul : 0ul;
        x2 = ((~x2) + (1ul - b1)) & 0x3FFFFFFFFFFFFFFFul;
    }
    int lsb = -190;
    // normalise to a leading one at bit 63 of x2
    if (x2 == 0ul) {
        x2 = x1;
        x1 = x0;
        x0 = 0ul;
        lsb -= 64;
    }
    const uint s = uint(clz(x2));
    if (s != 0u) {
        x2 = (x2 << s) | (x1 >> (64u - s));
        x1 = (x1 << s) | (x0 >> (64u - s));
        x0 <<= s;
        lsb -= int(s);
    }
    const tt_double fh = tt_f64_from_bits(tt_f64x_pack(0ul, lsb + 128 + 11, x2 >> 11));
    const ulong rest = ((x2 & 0x7FFul) << 53) | (x1 >> 11) | (((x1 & 0x7FFul) | x0) != 0ul ? 1ul : 0ul);
    const tt_double fl = tt_f64_from_bits(tt_f64x_pack(0ul, lsb + 64 + 11, rest));
    r = tt_f64x_dd_mul(tt_f64x_dd(fh, fl), tt_f64x_dd(@PIO2_HI@, @PIO2_LO@));
    if (neg != ((x.bits >> 63) != 0ul)) {
        r = tt_f64x_dd(-r.hi, -r.lo);
    }
    if ((x.bits >> 63) != 0ul) {
        n = -n;
    }
    return n & 3;
}

// sin(r) = r - r^3/6 (double-double) + r^5 S(z), S = 1/5! - z/7! + ... + z^7/19!, z = r^2
static inline tt_double tt_f64x_sin_kernel(tt_f64dd r) {
    const ulong c[8] = {@SIN_COEFS@};
    const tt_f64dd zz = tt_f64x_two_prod(r.hi, r.hi);
    const tt_double z = zz.hi;
    tt_double p = tt_f64x_k(c[0]);
    for (int i = 1; i < 8; ++i) {
        p = tt_f64_fma(p, z, tt_f64x_k(c[i]));
    }
    const tt_f64dd r3 = tt_f64x_dd_mul_d(zz, r.hi);
    const tt_f64dd t3 = tt_f64x_dd_mul(r3, tt_f64x_dd(@MSIXTH_HI@, @MSIXTH_LO@));
    const tt_double c5 = r3.hi * z * p;
    const tt_f64dd s1 = tt_f64x_two_sum(t3.hi, c5);
    const tt_f64dd s2 = tt_f64x_two_sum(r.hi, s1.hi);
    const tt_double lo = ((s1.lo + s2.lo) + t3.lo) + r.lo * (tt_f64x_k(0x3FF0000000000000ul) - tt_f64x_k(0x3FE0000000000000ul) * z);
    return s2.hi + lo;
}

static inline tt_double tt_f64x_cos_kernel(tt_f64dd r) {
    const ulong c[9] = {@COS_COEFS@};
    const tt_f64dd zz = tt_f64x_two_prod(r.hi, r.hi);
    const tt_double z = zz.hi;
    tt_double p = tt_f64x_k(c[0]);
    for (int i = 1; i < 9; ++i) {
        p = tt_f64_fma(p, z, tt_f64x_k(c[i]));
    }
    const tt_double one = tt_f64x_k(0x3FF0000000000000ul);
    const tt_double half_ = tt_f64x_k(0x3FE0000000000000ul);
    const tt_double hz = half_ * z;
    const tt_double w = one - hz;
    const tt_double err = (one - w) - hz;
    return w + (((err - half_ * zz.lo) + z * z * p) - r.hi * r.lo);
}

static inline tt_double tt_f64_sin(tt_double x) {
    const ulong ax = x.bits & TT_F64_ABS;
    if (ax >= TT_F64_INF) {
        return tt_f64_from_bits(ax > TT_F64_INF ? (x.bits | TT_F64_QUIET) : TT_F64_DEFAULT_NAN);
    }
    if (ax < 0x3E50000000000000ul) {  // |x| < 2^-26: sin x rounds to x
        return x;
    }
    tt_f64dd r;
    const int n = tt_f64x_rem_pio2(x, r);
    const tt_double v = (n & 1) != 0 ? tt_f64x_cos_kernel(r) : tt_f64x_sin_kernel(r);
    return (n & 2) != 0 ? -v : v;
}

static inline tt_double tt_f64_cos(tt_double x) {
    const ulong ax = x.bits & TT_F64_ABS;
    if (ax >= TT_F64_INF) {
        return tt_f64_from_bits(ax > TT_F64_INF ? (x.bits | TT_F64_QUIET) : TT_F64_DEFAULT_NAN);
    }
    if (ax < 0x3E40000000000000ul) {  // |x| < 2^-27: cos x rounds to 1
        return tt_f64x_k(0x3FF0000000000000ul);
    }
    tt_f64dd r;
    const int n = tt_f64x_rem_pio2(x, r);
    const tt_double v = (n & 1) != 0 ? tt_f64x_sin_kernel(r) : tt_f64x_cos_kernel(r);
    return ((n + 1) & 2) != 0 ? -v : v;
}

static inline tt_double tt_f64_tanh(tt_double x) {
    const ulong ax = x.bits & TT_F64_ABS;
    if (ax > TT_F64_INF) {
        return tt_f64_from_bits(x.bits | TT_F64_QUIET);
    }
    if (ax < 0x3E30000000000000ul) {  // |x| < 2^-28: tanh x rounds to x
        return x;
    }
    if (ax > 0x4036000000000000ul) {  // |x| > 22: +-1
        return tt_f64_from_bits((x.bits & TT_F64_SIGN) | 0x3FF0000000000000ul);
    }
    int k;
    const tt_f64dd r = tt_f64x_exp_reduce(tt_f64_from_bits(ax + 0x0010000000000000ul), k);  // 2|x|
    tt_f64dd e = tt_f64x_exp_dd(r);
    e = tt_f64x_dd(tt_f64_ldexp(e.hi, k), tt_f64_ldexp(e.lo, k));
    const tt_double one = tt_f64x_k(0x3FF0000000000000ul);
    const tt_f64dd q = tt_f64x_dd_div(tt_f64x_dd_add_d(e, -one), tt_f64x_dd_add_d(e, one));
    return tt_f64_from_bits(q.hi.bits | (x.bits & TT_F64_SIGN));
}

static inline tt_f64dd tt_f64x_dd_div_d(tt_f64dd x, tt_double d) {
    const tt_double q1 = x.hi / d;
    const tt_f64dd p = tt_f64x_two_prod(q1, d);
    const tt_double r = ((x.hi - p.hi) - p.lo) + x.lo;
    return tt_f64x_fast_two_sum(q1, r / d);
}

// erf(x) = 2/sqrt(pi) exp(-x^2) sum_n (2x^2)^n x / (2n+1)!!  (positive terms: no cancellation), in double-double
static inline tt_double tt_f64_erf(tt_double x) {
    const ulong ax = x.bits & TT_F64_ABS;
    if (ax > TT_F64_INF) {
        return tt_f64_from_bits(x.bits | TT_F64_QUIET);
    }
    if (ax == 0ul) {
        return x;
    }
    if (ax >= 0x4018000000000000ul) {  // |x| >= 6: erfc(6) < 2^-54, erf rounds to +-1
        return tt_f64_from_bits((x.bits & TT_F64_SIGN) | 0x3FF0000000000000ul);
    }
    const tt_double a = tt_f64_from_bits(ax);
    const tt_f64dd xx = tt_f64x_two_prod(a, a);
    const tt_double two = tt_f64x_k(0x4000000000000000ul);
    const tt_f64dd w = tt_f64x_dd(xx.hi * two, xx.lo * two);
    tt_f64dd t = tt_f64x_dd(a, tt_f64x_k(0ul));
    tt_f64dd sum = t;
    tt_double odd = tt_f64x_k(0x3FF0000000000000ul);
    for (int n = 1; n < 240; ++n) {
        odd = odd + two;
        t = tt_f64x_dd_div_d(tt_f64x_dd_mul(t, w), odd);
        sum = tt_f64x_dd_add(sum, t);
        if (tt_f64x_exp(t.hi.bits) + 110 < tt_f64x_exp(sum.hi.bits)) {
            break;
        }
    }
    // exp(-x^2) = 2^k exp(r)
    int k;
    tt_f64dd r = tt_f64x_exp_reduce(-xx.hi, k);
    r = tt_f64x_dd_add_d(r, -xx.lo);
    const tt_f64dd e = tt_f64x_exp_dd(r);
    const tt_f64dd v = tt_f64x_dd_mul(tt_f64x_dd_mul(e, sum), tt_f64x_dd(@TSP_HI@, @TSP_LO@));
    const tt_double res = tt_f64x_dd_ldexp(v, k);
    return tt_f64_from_bits(res.bits | (x.bits & TT_F64_SIGN));
}
"""


def _math_text() -> str:
    text = _MATH_TEMPLATE
    subs = {"EXP_COEFS": _EXP_COEFS, "LOG_COEFS": _LOG_COEFS, "SIN_COEFS": _SIN_COEFS, "COS_COEFS": _COS_COEFS,
            "TWOOPI_TABLE": _TWOOPI_TABLE}
    for name in _C:
        subs[name] = _k(name)
    for name, value in subs.items():
        text = text.replace(f"@{name}@", value)
    assert "@" not in text, "unfilled constant in the math template"
    return text


SOFT_F64_MATH = _math_text()

HELPERS = {"tt_f64_core": SOFT_F64_CORE, "tt_f64_bfloat": SOFT_F64_BFLOAT, "tt_f64_math": SOFT_F64_MATH}
REQUIRES = {"tt_f64_core": (), "tt_f64_bfloat": ("tt_f64_core", ), "tt_f64_math": ("tt_f64_core", )}


def helper_texts(*keys: str) -> list:
    """The helper texts of `keys` and everything they need, each once, in emission order."""
    order = []

    def add(key):
        for dep in REQUIRES[key]:
            add(dep)
        if key not in order:
            order.append(key)

    for key in keys:
        add(key)
    return [HELPERS[k] for k in order]


# --------------------------------------------------------------------------------------------------------
# How each float64 op maps onto the API: MSL templates over operands {0}, {1}, {2} (tt_double values)
# --------------------------------------------------------------------------------------------------------
# arith/math ops -> (template, helper key it needs besides tt_f64_core, or None)
OPS = {
    "arith.addf": ("({0} + {1})", None), "arith.subf": ("({0} - {1})", None), "arith.mulf": ("({0} * {1})", None),
    "arith.divf": ("({0} / {1})", None), "arith.negf": ("(-{0})", None), "arith.remf": ("tt_f64_fmod({0}, {1})", None),
    "arith.minimumf": ("tt_f64_minimum({0}, {1})", None), "arith.maximumf": ("tt_f64_maximum({0}, {1})", None),
    "arith.minnumf": ("tt_f64_minnum({0}, {1})", None), "arith.maxnumf": ("tt_f64_maxnum({0}, {1})", None),
    "math.fma": ("tt_f64_fma({0}, {1}, {2})", None), "math.sqrt": ("tt_f64_sqrt({0})", None),
    "tt.precise_sqrt": ("tt_f64_sqrt({0})", None), "tt.precise_divf": ("({0} / {1})", None),
    "math.absf": ("tt_f64_fabs({0})", None), "math.copysign": ("tt_f64_copysign({0}, {1})", None),
    "math.floor": ("tt_f64_floor({0})", None), "math.ceil": ("tt_f64_ceil({0})", None),
    "math.trunc": ("tt_f64_trunc({0})", None), "math.round": ("tt_f64_round({0})", None),
    "math.roundeven": ("tt_f64_rint({0})", None),
    "math.exp": ("tt_f64_exp({0})", "tt_f64_math"), "math.exp2": ("tt_f64_exp2({0})", "tt_f64_math"),
    "math.log": ("tt_f64_log({0})", "tt_f64_math"), "math.log2": ("tt_f64_log2({0})", "tt_f64_math"),
    "math.sin": ("tt_f64_sin({0})", "tt_f64_math"), "math.cos": ("tt_f64_cos({0})", "tt_f64_math"),
    "math.tanh": ("tt_f64_tanh({0})", "tt_f64_math"), "math.erf": ("tt_f64_erf({0})", "tt_f64_math"), "math.powf": ("tt_f64_pow({0}, {1})", "tt_f64_math"),
}

# arith.cmpf predicates -> bool-valued templates (ordered predicates are the operators; u* = not the opposite)
CMPF = {
    "false": "false", "true": "true",
    "oeq": "({0} == {1})", "ogt": "({0} > {1})", "oge": "({0} >= {1})", "olt": "({0} < {1})", "ole": "({0} <= {1})",
    "one": "({0} < {1} || {0} > {1})", "ord": "!(tt_f64_isnan({0}) || tt_f64_isnan({1}))",
    "ueq": "!({0} < {1} || {0} > {1})", "ugt": "!({0} <= {1})", "uge": "!({0} < {1})", "ult": "!({0} >= {1})",
    "ule": "!({0} > {1})", "une": "({0} != {1})", "uno": "(tt_f64_isnan({0}) || tt_f64_isnan({1}))",
}

# casts: (from, to) MSL scalar types -> template over the operand {0}
CASTS_TO_F64 = {"float": "tt_f64_from_float({0})", "half": "tt_f64_from_half({0})",
                "bfloat": "tt_f64_from_bfloat({0})", "bool": "tt_f64_from_bool({0})",
                "char": "tt_f64_from_i32(int({0}))", "short": "tt_f64_from_i32(int({0}))", "int": "tt_f64_from_i32({0})",
                "long": "tt_f64_from_i64({0})", "uchar": "tt_f64_from_u32(uint({0}))",
                "ushort": "tt_f64_from_u32(uint({0}))", "uint": "tt_f64_from_u32({0})", "ulong": "tt_f64_from_u64({0})"}
CASTS_FROM_F64 = {"float": "tt_f64_to_float({0})", "half": "tt_f64_to_half({0})", "bfloat": "tt_f64_to_bfloat({0})",
                  "bool": "tt_f64_to_bool({0})", "char": "char(tt_f64_to_sint({0}, -128l, 127l))",
                  "short": "short(tt_f64_to_sint({0}, -32768l, 32767l))", "int": "tt_f64_to_i32({0})",
                  "long": "tt_f64_to_i64({0})", "uchar": "uchar(tt_f64_to_uint({0}, 255ul))",
                  "ushort": "ushort(tt_f64_to_uint({0}, 65535ul))", "uint": "tt_f64_to_u32({0})",
                  "ulong": "tt_f64_to_u64({0})"}


def constant(value: float) -> str:
    """MSL expression of the float64 constant `value` (exact, any value including NaN payloads, -0.0, inf)."""
    return f"tt_f64_from_bits({_bits(value)})"

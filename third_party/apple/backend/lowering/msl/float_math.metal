// Float functions Metal lacks or gets wrong for Triton: NaN-propagating minimum/maximum and NaN-ignoring
// minnum/maxnum (-0 < +0 in both), the order keys their simdgroup reductions run on, log1p, expm1, hypot,
// cbrt, sinpi/cospi, norm4d and its reciprocal, ilogb/logb. They use `precise::` so they keep full float
// accuracy whatever math mode the kernel compiles in.
//
// Sign tests read the sign bit (`as_type<uint>(x) >> 31`) rather than calling `signbit`: clang 22 at -O1 and
// above miscompiles `signbit` of a float widened from bfloat16 on x86-64 (the emulator's host compiler).

// @helper tt_maximum
template <typename T> static inline T tt_maximum(T a, T b) {
    if (isnan(a) || isnan(b)) {
        return T(NAN);
    }
    if (a == b) {
        return (as_type<uint>(float(a)) >> 31) ? b : a;
    }
    return a > b ? a : b;
}

// @helper tt_minimum
template <typename T> static inline T tt_minimum(T a, T b) {
    if (isnan(a) || isnan(b)) {
        return T(NAN);
    }
    if (a == b) {
        return (as_type<uint>(float(a)) >> 31) ? a : b;
    }
    return a < b ? a : b;
}

// @helper tt_maxnum
template <typename T> static inline T tt_maxnum(T a, T b) {
    if (isnan(a)) {
        return b;
    }
    if (isnan(b)) {
        return a;
    }
    if (a == b) {
        return (as_type<uint>(float(a)) >> 31) ? b : a;
    }
    return a > b ? a : b;
}

// @helper tt_minnum
template <typename T> static inline T tt_minnum(T a, T b) {
    if (isnan(a)) {
        return b;
    }
    if (isnan(b)) {
        return a;
    }
    if (a == b) {
        return (as_type<uint>(float(a)) >> 31) ? a : b;
    }
    return a < b ? a : b;
}

// @helper tt_float_order_key
/// An unsigned key per float (and per half) whose unsigned order is the float order with -0 < +0 (NaN has no
/// key), and the float back from its key. Simdgroup max/min reductions of floats run on these keys: Metal
/// documents neither how `simd_max`/`simd_min` treat a NaN nor which zero they return for -0 and +0, and the
/// integer forms of both are exact.
static inline uint tt_float_order_key(float x) {
    const uint u = as_type<uint>(x);
    return (u >> 31) ? ~u : (u | 0x80000000u);
}
static inline ushort tt_float_order_key(half x) {
    const ushort u = as_type<ushort>(x);
    return (u >> 15) ? ushort(~u) : ushort(u | 0x8000u);
}
static inline float tt_float_from_order_key(uint k) {
    return as_type<float>((k >> 31) ? (k & 0x7FFFFFFFu) : ~k);
}
static inline half tt_float_from_order_key(ushort k) {
    return as_type<half>((k >> 15) ? ushort(k & 0x7FFFu) : ushort(~k));
}

// @helper tt_log1p
/// log1p and expm1 from one log or exp and the value's own rounding error: u = 1 + x (or exp(x)) is rounded,
/// and dividing by the u - 1 actually represented cancels that rounding (Goldberg's and Kahan's forms).
static inline float tt_log1p(float x) {
    const float u = 1.0f + x;
    if (u == 1.0f) {
        return x;
    }
    if (isinf(u)) {  // x is infinite: +inf, or NaN for -inf
        return precise::log(u);
    }
    return precise::log(u) * (x / (u - 1.0f));
}

// @helper tt_expm1
static inline float tt_expm1(float x) {
    const float u = precise::exp(x);
    if (u == 1.0f || isinf(u)) {
        return u == 1.0f ? x : u;
    }
    const float um1 = u - 1.0f;
    if (um1 == -1.0f) {
        return -1.0f;
    }
    return um1 * (x / precise::log(u));
}

// @helper tt_hypot
/// hypot without overflow or underflow: the larger magnitude times sqrt(1 + r^2), r = smaller / larger;
/// an infinite argument wins over a NaN (IEEE 754)
static inline float tt_hypot(float x, float y) {
    const float a = fmax(fabs(x), fabs(y));
    const float b = fmin(fabs(x), fabs(y));
    if (isinf(x) || isinf(y)) {
        return INFINITY;
    }
    if (isnan(x) || isnan(y)) {
        return NAN;
    }
    if (a == 0.0f) {
        return 0.0f;
    }
    const float r = b / a;
    return a * precise::sqrt(fma(r, r, 1.0f));
}

// @helper tt_cbrt
/// cbrt: exp2(log2|x| / 3) refined by two Newton steps written so that no intermediate overflows
static inline float tt_cbrt(float x) {
    const float a = fabs(x);
    if (a == 0.0f || isinf(a) || isnan(a)) {
        return x;
    }
    float y = precise::exp2(precise::log2(a) / 3.0f);
    y = y - (y - a / (y * y)) / 3.0f;
    y = y - (y - a / (y * y)) / 3.0f;
    return copysign(y, x);
}

// @helper tt_sinpi
/// sin(pi x) and cos(pi x): x reduced exactly to r in [-1, 1] (x - 2 rint(x / 2)), then to [-1/2, 1/2] by
/// sin(pi (1 - r)) = sin(pi r), so integers give exact zeros and pi * r loses nothing that matters
static inline float tt_sinpi(float x) {
    if (isinf(x) || isnan(x)) {
        return NAN;
    }
    float r = x - 2.0f * rint(0.5f * x);
    if (fabs(r) > 0.5f) {
        r = copysign(1.0f, r) - r;
    }
    return r == 0.0f ? copysign(0.0f, x) * 0.0f : precise::sin(M_PI_F * r);
}
static inline float tt_cospi(float x) {
    if (isinf(x) || isnan(x)) {
        return NAN;
    }
    const float r = fabs(x - 2.0f * rint(0.5f * x));
    return tt_sinpi(0.5f - r);
}

// @helper tt_norm
/// sqrt(a^2 + b^2 + c^2 + d^2) and its reciprocal without overflow or underflow on the way: m (the largest
/// magnitude) times s = sqrt(sum (x / m)^2), s in [1, 2]; an infinite argument wins over a NaN (as for hypot)
static inline float tt_norm4_scaled(float a, float b, float c, float d, thread float& m) {
    a = fabs(a);
    b = fabs(b);
    c = fabs(c);
    d = fabs(d);
    m = fmax(fmax(a, b), fmax(c, d));
    if (isinf(a) || isinf(b) || isinf(c) || isinf(d)) {
        m = INFINITY;
        return 1.0f;
    }
    if (isnan(a) || isnan(b) || isnan(c) || isnan(d)) {
        m = NAN;
        return 1.0f;
    }
    if (m == 0.0f) {
        return 1.0f;
    }
    a /= m;
    b /= m;
    c /= m;
    d /= m;
    return precise::sqrt(fma(a, a, fma(b, b, fma(c, c, d * d))));
}
static inline float tt_norm4(float a, float b, float c, float d) {
    float m = 0.0f;
    const float s = tt_norm4_scaled(a, b, c, d, m);
    return m * s;
}
static inline float tt_rnorm4(float a, float b, float c, float d) {
    float m = 0.0f;
    const float s = tt_norm4_scaled(a, b, c, d, m);
    return precise::divide(precise::divide(1.0f, s), m);
}

// @helper tt_ilogb
/// libdevice's ilogb / logb: the unbiased exponent (subnormals included); ilogb(0) and ilogb(NaN) are
/// INT_MIN, ilogb(inf) INT_MAX, as CUDA's
static inline int tt_ilogb(float x) {
    if (x == 0.0f || isnan(x)) {
        return INT_MIN;
    }
    if (isinf(x)) {
        return INT_MAX;
    }
    int e = 0;
    frexp(x, e);
    return e - 1;
}
static inline float tt_logb(float x) {
    if (x == 0.0f) {
        return -INFINITY;
    }
    if (isinf(x) || isnan(x)) {
        return fabs(x);
    }
    return float(tt_ilogb(x));
}

// @helper tt_pown
/// x to the integer power n, as CUDA's powif (libdevice __nv_powif; MSL has no pown): pown(x, 0) is 1 for every x,
/// NaN included; pown(+-0, n) is +-inf for odd n < 0, +inf for even n < 0, +-0 for odd n > 0, +0 for even n > 0;
/// pown(+-inf, n) the reciprocals of those; a negative x gives a negative result for odd n only.
/// The power is taken by repeated squaring of |x| = m * 2^e (m in [0.5, 1)) in double-float (a float pair hi + lo,
/// products exact through fma), with the power of two counted apart in a long, so no step over- or underflows.
/// Each product keeps about 2^-47 of relative error, and squaring doubles what the base carries: the power's
/// relative error stays below about |n| * 2^-47, so results are rounded once to nearest (hi + lo rounds) for
/// |n| up to a few thousand and within one float step for every n (ldexp of a subnormal result rounds it a
/// second time). Negative n take the pair's reciprocal, corrected through fma.
static inline float2 tt_pown_mul(float2 a, float2 b, thread long& e) {
    const float p = a.x * b.x;
    const float err = fma(a.x, b.x, -p) + (a.x * b.y + a.y * b.x);
    const float hi = p + err;
    const float lo = err - (hi - p);
    int s;
    const float m = frexp(hi, s);  // keep hi in [0.5, 1)
    e += s;
    return float2{m, ldexp(lo, -s)};
}
static inline float tt_pown(float x, int n) {
    if (n == 0) {
        return 1.0f;
    }
    if (isnan(x)) {
        return x;
    }
    const bool negative = (n & 1) != 0 && (as_type<uint>(x) >> 31) != 0;
    const float ax = fabs(x);
    float magnitude;
    if (ax == 0.0f) {
        magnitude = n < 0 ? INFINITY : 0.0f;
    } else if (isinf(ax)) {
        magnitude = n < 0 ? 0.0f : INFINITY;
    } else {
        uint k = n < 0 ? uint(-(n + 1)) + 1u : uint(n);  // |n|, INT_MIN included
        int e0;
        float2 base = float2{frexp(ax, e0), 0.0f};
        long base_e = e0;  // |x| = base * 2^base_e
        float2 r = float2{1.0f, 0.0f};
        long r_e = 0;  // the power so far: r * 2^r_e
        while (true) {
            if ((k & 1u) != 0u) {
                r_e += base_e;
                r = tt_pown_mul(r, base, r_e);
            }
            k >>= 1;
            if (k == 0u) {
                break;
            }
            base_e *= 2;
            base = tt_pown_mul(base, base, base_e);
        }
        if (n < 0) {  // 1 / (r * 2^r_e): q = 1 / r.x corrected by the exact residual 1 - r * q
            const float q = precise::divide(1.0f, r.x);
            const float residual = fma(-r.x, q, 1.0f) - r.y * q;
            r = float2{q, q * residual};
            r_e = -r_e;
        }
        const int scale = int(clamp(r_e, -400l, 400l));  // beyond these every float result is 0 or inf
        magnitude = ldexp(r.x + r.y, scale);  // the pair rounded to float, then scaled: exact unless subnormal
    }
    return negative ? -magnitude : magnitude;
}

"""MSL helper functions that give Triton's semantics where Metal's (or C++'s) defaults differ.

Each helper is emitted once, before the kernel, only when a lowering asks for it. They are plain MSL,
so the same text runs on the GPU and on the emulator; none relies on behaviour C++ leaves undefined.

Integer semantics follow Triton's interpreter: division truncates, division or remainder by zero gives 0,
`INT_MIN / -1` wraps to `INT_MIN`, shifts take the amount as unsigned and shifting by the bit width or
more gives 0 (arithmetic right shift: the sign). Float -> int conversion saturates and maps NaN to 0
(what Metal and NVIDIA GPUs do; the interpreter inherits numpy's host-specific value instead).

Sign tests read the sign bit (`as_type<uint>(x) >> 31`) rather than calling `signbit`: clang 22 at -O1 and
above miscompiles `signbit` of a float widened from bfloat16 on x86-64 (the emulator's host compiler).
"""
from __future__ import annotations

from ..atomic_locks import LOCK_WORDS
from ..target import SIMD_WIDTH

HELPERS = {
    "tt_sdiv":
    """template <typename T> static inline T tt_sdiv(T a, T b) {
    if (b == T(0)) {
        return T(0);
    }
    if (b == T(-1)) {
        return T(T(0) - a);
    }
    return T(a / b);
}""",
    "tt_srem":
    """template <typename T> static inline T tt_srem(T a, T b) {
    if (b == T(0) || b == T(-1)) {
        return T(0);
    }
    return T(a % b);
}""",
    "tt_udiv":
    """template <typename T> static inline T tt_udiv(T a, T b) {
    return b == T(0) ? T(0) : T(a / b);
}""",
    "tt_urem":
    """template <typename T> static inline T tt_urem(T a, T b) {
    return b == T(0) ? T(0) : T(a % b);
}""",
    # MLIR's rounding divisions (arith.ceildivsi, arith.floordivsi, arith.ceildivui), e.g. trip counts of loops
    # fused by upstream's fuse_nested_loops; division by zero gives 0 as tt_sdiv does
    "tt_ceildivsi":
    """template <typename T> static inline T tt_ceildivsi(T a, T b) {
    if (b == T(0)) {
        return T(0);
    }
    if (b == T(-1)) {
        return T(T(0) - a);
    }
    const bool inexact = a % b != T(0);
    return T(a / b + T(inexact && (a < T(0)) == (b < T(0)) ? 1 : 0));
}""",
    "tt_floordivsi":
    """template <typename T> static inline T tt_floordivsi(T a, T b) {
    if (b == T(0)) {
        return T(0);
    }
    if (b == T(-1)) {
        return T(T(0) - a);
    }
    const bool inexact = a % b != T(0);
    return T(a / b - T(inexact && (a < T(0)) != (b < T(0)) ? 1 : 0));
}""",
    "tt_ceildivui":
    """template <typename T> static inline T tt_ceildivui(T a, T b) {
    return b == T(0) ? T(0) : T(a / b + T(a % b != T(0) ? 1 : 0));
}""",
    "tt_shl":
    """template <typename T, typename U> static inline T tt_shl(T a, U amount) {
    return amount >= U(sizeof(T) * 8) ? T(0) : T(U(a) << amount);
}""",
    "tt_lshr":
    """template <typename T, typename U> static inline T tt_lshr(T a, U amount) {
    return amount >= U(sizeof(T) * 8) ? T(0) : T(U(a) >> amount);
}""",
    "tt_ashr":
    """template <typename T, typename U> static inline T tt_ashr(T a, U amount) {
    if (amount >= U(sizeof(T) * 8)) {
        return a < T(0) ? T(-1) : T(0);
    }
    return T(a >> amount);
}""",
    "tt_fptosi":
    """template <typename I> static inline I tt_fptosi(float x, float lo, float hi, I imin, I imax) {
    if (isnan(x)) {
        return I(0);
    }
    if (x <= lo) {
        return imin;
    }
    if (x >= hi) {
        return imax;
    }
    return I(x);
}""",
    "tt_fptoui":
    """template <typename I> static inline I tt_fptoui(float x, float hi, I imax) {
    if (isnan(x) || x <= 0.0f) {
        return I(0);
    }
    if (x >= hi) {
        return imax;
    }
    return I(x);
}""",
    "tt_maximum":
    """template <typename T> static inline T tt_maximum(T a, T b) {
    if (isnan(a) || isnan(b)) {
        return T(NAN);
    }
    if (a == b) {
        return (as_type<uint>(float(a)) >> 31) ? b : a;
    }
    return a > b ? a : b;
}""",
    "tt_minimum":
    """template <typename T> static inline T tt_minimum(T a, T b) {
    if (isnan(a) || isnan(b)) {
        return T(NAN);
    }
    if (a == b) {
        return (as_type<uint>(float(a)) >> 31) ? a : b;
    }
    return a < b ? a : b;
}""",
    "tt_maxnum":
    """template <typename T> static inline T tt_maxnum(T a, T b) {
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
}""",
    "tt_minnum":
    """template <typename T> static inline T tt_minnum(T a, T b) {
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
}""",
    "tt_to_fp8":
    """static inline uchar tt_to_fp8(float x, uint mbits, int bias, float max_finite, uchar nan_code, bool toward_zero) {
    if (isnan(x)) {
        return nan_code;
    }
    const uchar sign = uchar((as_type<uint>(x) >> 24) & 0x80u);
    const float a = fmin(fabs(x), max_finite);
    const float min_normal = as_type<float>(uint(1 - bias + 127) << 23);
    const float scale = float(1u << mbits);
    if (a < min_normal) {
        const float step = as_type<float>(uint(1 - bias - int(mbits) + 127) << 23);
        return sign | uchar(toward_zero ? trunc(a / step) : rint(a / step));
    }
    const uint bits = as_type<uint>(a);
    int e = int((bits >> 23) & 0xFFu) - 127;
    const float m = as_type<float>((bits & 0x7FFFFFu) | 0x3F800000u);
    uint q = uint(toward_zero ? trunc((m - 1.0f) * scale) : rint((m - 1.0f) * scale));
    if (q == (1u << mbits)) {
        q = 0u;
        e += 1;
    }
    return sign | uchar((uint(e + bias) << mbits) | q);
}""",
    # float -> half / bfloat rounded toward zero (Triton's fp_downcast_rounding="rtz"): the nearest value, one
    # step toward zero where it rounded away from zero; a finite value never becomes infinite
    "tt_to_half_rtz":
    """static inline half tt_to_half_rtz(float x) {
    const half h = half(x);
    if (isnan(x) || isinf(x)) {
        return h;
    }
    if (isinf(h) || fabs(float(h)) > fabs(x)) {
        return as_type<half>(ushort(as_type<ushort>(h) - 1));
    }
    return h;
}""",
    "tt_to_bfloat_rtz":
    """static inline bfloat tt_to_bfloat_rtz(float x) {
    if (isnan(x)) {
        return bfloat(x);
    }
    return as_type<bfloat>(ushort(as_type<uint>(x) >> 16));
}""",
    "tt_from_fp8":
    """static inline float tt_from_fp8(uchar c, uint mbits, int bias, bool has_inf) {
    const uint ebits = 7u - mbits;
    const uint emax = (1u << ebits) - 1u;
    const uint e = (uint(c) >> mbits) & emax;
    const uint q = uint(c) & ((1u << mbits) - 1u);
    const float sign = (c & 0x80) ? -1.0f : 1.0f;
    if (has_inf && e == emax) {
        return q == 0u ? sign * INFINITY : NAN;
    }
    if (!has_inf && e == emax && q == (1u << mbits) - 1u) {
        return NAN;
    }
    if (e == 0u) {
        return sign * float(q) * as_type<float>(uint(1 - bias - int(mbits) + 127) << 23);
    }
    const float frac = 1.0f + float(q) / float(1u << mbits);
    return sign * frac * as_type<float>(uint(int(e) - bias + 127) << 23);
}""",
    # 16-bit atomics: Metal's atomics are 32-bit, so these update the 16-bit half of the containing 32-bit
    # word with a compare-and-swap loop (relaxed, like every Metal atomic; callers add fences for sem).
    "tt_atomic_add16":
    """template <typename T> static inline T tt_atomic_add16(device T* p, T v) {
    const ulong addr = reinterpret_cast<ulong>(p);
    device atomic_uint* word = reinterpret_cast<device atomic_uint*>(addr & ~ulong(3));
    const uint shift = uint(addr & 2ul) * 8u;
    uint old = atomic_load_explicit(word, memory_order_relaxed);
    while (true) {
        const T cur = as_type<T>(ushort(old >> shift));
        const T sum = T(float(cur) + float(v));
        const uint repl = (old & ~(0xFFFFu << shift)) | (uint(as_type<ushort>(sum)) << shift);
        if (atomic_compare_exchange_weak_explicit(word, &old, repl, memory_order_relaxed, memory_order_relaxed)) {
            return cur;
        }
    }
}""",
    "tt_atomic_cas16":
    """template <typename T> static inline T tt_atomic_cas16(device T* p, T cmp, T v) {
    const ulong addr = reinterpret_cast<ulong>(p);
    device atomic_uint* word = reinterpret_cast<device atomic_uint*>(addr & ~ulong(3));
    const uint shift = uint(addr & 2ul) * 8u;
    uint old = atomic_load_explicit(word, memory_order_relaxed);
    while (true) {
        const ushort cur = ushort(old >> shift);
        if (cur != as_type<ushort>(cmp)) {
            return as_type<T>(cur);
        }
        const uint repl = (old & ~(0xFFFFu << shift)) | (uint(as_type<ushort>(v)) << shift);
        if (atomic_compare_exchange_weak_explicit(word, &old, repl, memory_order_relaxed, memory_order_relaxed)) {
            return as_type<T>(cur);
        }
    }
}""",
    # 64-bit add/and/or/xor on two 32-bit words (little-endian: word 0 is the low half). The final value is
    # exact under any contention (the carry out of the low word is added to the high word), but the two
    # halves are updated separately, so these return nothing: there is no atomic 64-bit old value.
    "tt_atomic_add64":
    """static inline void tt_atomic_add64(device long* p, long v) {
    device atomic_uint* w = (device atomic_uint*)p;
    const ulong u = as_type<ulong>(v);
    const uint lo = uint(u);
    const uint hi = uint(u >> 32);
    const uint old_lo = atomic_fetch_add_explicit(&w[0], lo, memory_order_relaxed);
    const uint carry = uint(old_lo + lo < old_lo);
    if (hi + carry != 0u) {
        atomic_fetch_add_explicit(&w[1], hi + carry, memory_order_relaxed);
    }
}""",
    "tt_atomic_bits64":
    """static inline void tt_atomic_and64(device long* p, long v) {
    device atomic_uint* w = (device atomic_uint*)p;
    const ulong u = as_type<ulong>(v);
    atomic_fetch_and_explicit(&w[0], uint(u), memory_order_relaxed);
    atomic_fetch_and_explicit(&w[1], uint(u >> 32), memory_order_relaxed);
}
static inline void tt_atomic_or64(device long* p, long v) {
    device atomic_uint* w = (device atomic_uint*)p;
    const ulong u = as_type<ulong>(v);
    atomic_fetch_or_explicit(&w[0], uint(u), memory_order_relaxed);
    atomic_fetch_or_explicit(&w[1], uint(u >> 32), memory_order_relaxed);
}
static inline void tt_atomic_xor64(device long* p, long v) {
    device atomic_uint* w = (device atomic_uint*)p;
    const ulong u = as_type<ulong>(v);
    atomic_fetch_xor_explicit(&w[0], uint(u), memory_order_relaxed);
    atomic_fetch_xor_explicit(&w[1], uint(u >> 32), memory_order_relaxed);
}""",
    # The lock of a 64-bit element and the read and write of its halves under it (backend/atomic_locks.py,
    # lowering/wide_atomics.py). Each lock is a word of the kernel's lock table: 0 free, 1 taken. The fences
    # order the element's accesses after taking the lock and before releasing it.
    "tt_lock64":
    f"""static inline device atomic_uint* tt_lock64_for(device atomic_uint* locks, device ulong* p) {{
    return &locks[(reinterpret_cast<ulong>(p) >> 3) & {LOCK_WORDS - 1}u];
}}
static inline bool tt_lock64_try(device atomic_uint* lock) {{
    uint unlocked = 0u;
    if (!atomic_compare_exchange_weak_explicit(lock, &unlocked, 1u, memory_order_relaxed, memory_order_relaxed)) {{
        return false;
    }}
    atomic_thread_fence(mem_flags::mem_device, memory_order_seq_cst, thread_scope_device);
    return true;
}}
static inline void tt_lock64_release(device atomic_uint* lock) {{
    atomic_thread_fence(mem_flags::mem_device, memory_order_seq_cst, thread_scope_device);
    atomic_store_explicit(lock, 0u, memory_order_relaxed);
}}
static inline ulong tt_lock64_load(device ulong* p) {{
    device atomic_uint* w = (device atomic_uint*)p;
    const uint lo = atomic_load_explicit(&w[0], memory_order_relaxed);
    return ulong(atomic_load_explicit(&w[1], memory_order_relaxed)) << 32 | lo;
}}
static inline void tt_lock64_store(device ulong* p, ulong v) {{
    device atomic_uint* w = (device atomic_uint*)p;
    atomic_store_explicit(&w[0], uint(v), memory_order_relaxed);
    atomic_store_explicit(&w[1], uint(v >> 32), memory_order_relaxed);
}}""",
    # log1p and expm1 from one log or exp and the value's own rounding error: u = 1 + x (or exp(x)) is rounded,
    # and dividing by the u - 1 actually represented cancels that rounding (Goldberg's and Kahan's forms).
    "tt_log1p":
    """static inline float tt_log1p(float x) {
    const float u = 1.0f + x;
    if (u == 1.0f) {
        return x;
    }
    if (isinf(u)) {  // x is infinite: +inf, or NaN for -inf
        return precise::log(u);
    }
    return precise::log(u) * (x / (u - 1.0f));
}""",
    "tt_expm1":
    """static inline float tt_expm1(float x) {
    const float u = precise::exp(x);
    if (u == 1.0f || isinf(u)) {
        return u == 1.0f ? x : u;
    }
    const float um1 = u - 1.0f;
    if (um1 == -1.0f) {
        return -1.0f;
    }
    return um1 * (x / precise::log(u));
}""",
    # hypot without overflow or underflow: the larger magnitude times sqrt(1 + r^2), r = smaller / larger;
    # an infinite argument wins over a NaN (IEEE 754)
    "tt_hypot":
    """static inline float tt_hypot(float x, float y) {
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
}""",
    # cbrt: exp2(log2|x| / 3) refined by two Newton steps written so that no intermediate overflows
    "tt_cbrt":
    """static inline float tt_cbrt(float x) {
    const float a = fabs(x);
    if (a == 0.0f || isinf(a) || isnan(a)) {
        return x;
    }
    float y = precise::exp2(precise::log2(a) / 3.0f);
    y = y - (y - a / (y * y)) / 3.0f;
    y = y - (y - a / (y * y)) / 3.0f;
    return copysign(y, x);
}""",
    # sin(pi x) and cos(pi x): x reduced exactly to r in [-1, 1] (x - 2 rint(x / 2)), then to [-1/2, 1/2] by
    # sin(pi (1 - r)) = sin(pi r), so integers give exact zeros and pi * r loses nothing that matters
    "tt_sinpi":
    """static inline float tt_sinpi(float x) {
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
}""",
    # sqrt(a^2 + b^2 + c^2 + d^2) and its reciprocal without overflow or underflow on the way: m (the largest
    # magnitude) times s = sqrt(sum (x / m)^2), s in [1, 2]; an infinite argument wins over a NaN (as for hypot)
    "tt_norm":
    """static inline float tt_norm4_scaled(float a, float b, float c, float d, thread float& m) {
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
}""",
    # libdevice's ilogb / logb: the unbiased exponent (subnormals included); ilogb(0) and ilogb(NaN) are
    # INT_MIN, ilogb(inf) INT_MAX, as CUDA's
    "tt_ilogb":
    """static inline int tt_ilogb(float x) {
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
}""",
    # CUDA's __byte_perm(x, y, s): byte i of the result is byte (s >> 4i) & 7 of the 8 bytes y:x
    "tt_byte_perm":
    """static inline int tt_byte_perm(int x, int y, int s) {
    const ulong v = ulong(uint(y)) << 32 | uint(x);
    uint r = 0u;
    for (uint i = 0u; i < 4u; ++i) {
        const uint sel = (uint(s) >> (4u * i)) & 7u;
        r |= uint((v >> (8u * sel)) & 0xFFul) << (8u * i);
    }
    return int(r);
}""",
    # an integer converted to float rounded down / up / toward zero: the nearest float, moved one step where it
    # rounded the other way (compared exactly in 64 bits: every float that a 32-bit integer rounds to fits)
    "tt_int_to_float_directed":
    """static inline float tt_int_to_float_directed(long x, int mode) {
    float f = float(x);
    const long back = long(f);
    if (mode == 1 && back > x) {
        f = nextafter(f, -INFINITY);
    } else if (mode == 2 && back < x) {
        f = nextafter(f, INFINITY);
    } else if (mode == 3 && (x >= 0 ? back > x : back < x)) {
        f = nextafter(f, 0.0f);
    }
    return f;
}""",
    "tt_erf":
    """static inline float tt_erf(float x) {
    // erf(x) = x * P(x^2) for |x| < 2; 1 - exp(-x^2) * Q(1/x) for 2 <= |x| < 4; +-1 beyond (erfc(4) < 2^-25).
    // P and Q are least-squares fits (relative error) made for this backend; max 4 ulp measured against
    // double-precision erf on a dense grid over [-5, 5].
    const float small[12] = {-2.0524559829482314e-10f, 7.116791600481065e-09f, -1.2441901731108373e-07f, 1.5090921579030692e-06f, -1.459576469642343e-05f, 0.00012001013237750158f, -0.000854233221616596f, 0.005223552230745554f, -0.026865990832448006f, 0.11283787339925766f, -0.37612637877464294f, 1.128379225730896f};
    const float large[10] = {0.1880146712064743f, -0.840078592300415f, 1.6689608097076416f, -1.8702667951583862f, 1.1613701581954956f, -0.19199569523334503f, -0.24840210378170013f, -0.0038687896449118853f, 0.5644533634185791f, -8.120365237118676e-06f};
    if (isnan(x)) {
        return x;
    }
    const float a = fabs(x);
    float r;
    if (a < 2.0f) {
        const float t = a * a;
        float p = small[0];
        for (int i = 1; i < 12; ++i) {
            p = fma(p, t, small[i]);
        }
        r = a * p;
    } else if (a < 4.0f) {
        const float u = 1.0f / a;
        float q = large[0];
        for (int i = 1; i < 10; ++i) {
            q = fma(q, u, large[i]);
        }
        r = 1.0f - precise::exp(-a * a) * q;
    } else {
        r = 1.0f;
    }
    return copysign(r, x);
}""",
}


# Float math in MSL: templates over float arguments {0}, {1}, {2}. `precise::` keeps full float accuracy
# whatever math mode the Metal compiler is in; `tt_erf` is our own (Metal has no erf; max 4 ulp measured), and so
# are `tt_log1p` and `tt_expm1` (Metal has neither).
METAL_MATH = {
    "exp": "precise::exp({0})", "exp2": "precise::exp2({0})", "exp10": "precise::exp10({0})",
    "log": "precise::log({0})", "log2": "precise::log2({0})", "log10": "precise::log10({0})",
    "sqrt": "precise::sqrt({0})", "rsqrt": "precise::rsqrt({0})", "sin": "precise::sin({0})",
    "cos": "precise::cos({0})", "tan": "precise::tan({0})", "asin": "precise::asin({0})",
    "acos": "precise::acos({0})", "atan": "precise::atan({0})", "sinh": "precise::sinh({0})",
    "cosh": "precise::cosh({0})", "tanh": "precise::tanh({0})", "asinh": "precise::asinh({0})",
    "acosh": "precise::acosh({0})", "atanh": "precise::atanh({0})", "floor": "floor({0})", "ceil": "ceil({0})",
    "trunc": "trunc({0})", "round": "round({0})", "rint": "rint({0})", "fabs": "fabs({0})",
    "pow": "precise::pow({0}, {1})", "atan2": "precise::atan2({0}, {1})", "fmod": "fmod({0}, {1})",
    "copysign": "copysign({0}, {1})", "fdim": "fdim({0}, {1})", "divide": "precise::divide({0}, {1})",
    "fma": "fma({0}, {1}, {2})", "erf": "tt_erf({0})", "fmin": "tt_minnum({0}, {1})", "fmax": "tt_maxnum({0}, {1})",
    "log1p": "tt_log1p({0})", "expm1": "tt_expm1({0})", "hypot": "tt_hypot({0}, {1})", "cbrt": "tt_cbrt({0})",
}


def metal_math(ctx, name: str) -> str:
    """The METAL_MATH template `name`, asking `ctx` for the library helper it calls, if any."""
    tmpl = METAL_MATH[name]
    if tmpl.startswith("tt_"):
        ctx.require(tmpl[:tmpl.index("(")])
    return tmpl


def helper_text(name: str) -> str:
    """The MSL definition of library helper `name`."""
    return HELPERS[name]


# Metal's simd_shuffle family takes 8/16/32-bit values: wider or narrower types move through these.
_SHUFFLE_DIRECT = ("float", "half", "int", "uint", "short", "ushort")
_SHUFFLE_VIA = {"char": "short", "uchar": "ushort"}


def shuffle_helper(metal_fn: str, ctype: str) -> tuple:
    """(key, name, text) of the `tt_<metal_fn>(T v, ushort arg)` overload for MSL type `ctype`, over Metal's
    `metal_fn` (`simd_shuffle`, `simd_shuffle_xor`, ...): 64-bit values and pointers move as two 32-bit
    halves, bool and bfloat as 16-bit integers."""
    name = "tt_" + metal_fn
    head = f"static inline {ctype} {name}({ctype} v, ushort m) {{\n"
    if ctype in _SHUFFLE_DIRECT:
        body = f"    return {metal_fn}(v, m);\n"
    elif ctype in _SHUFFLE_VIA:
        body = f"    return {ctype}({metal_fn}({_SHUFFLE_VIA[ctype]}(v), m));\n"
    elif ctype == "bool":
        body = f"    return {metal_fn}(ushort(v ? 1 : 0), m) != 0;\n"
    elif ctype == "bfloat":
        body = f"    return as_type<bfloat>({metal_fn}(as_type<ushort>(v), m));\n"
    elif ctype in ("long", "ulong"):
        body = (f"    uint2 parts = as_type<uint2>(v);\n    parts.x = {metal_fn}(parts.x, m);\n"
                f"    parts.y = {metal_fn}(parts.y, m);\n    return as_type<{ctype}>(parts);\n")
    elif ctype == "tt_double":  # software float64 (soft_f64.py) moves as its 64 bits
        body = (f"    uint2 parts = as_type<uint2>(v.bits);\n    parts.x = {metal_fn}(parts.x, m);\n"
                f"    parts.y = {metal_fn}(parts.y, m);\n    return tt_f64_from_bits(as_type<ulong>(parts));\n")
    elif ctype.endswith("*"):  # a device pointer moves as its 64-bit address
        body = (f"    uint2 parts = as_type<uint2>(reinterpret_cast<ulong>(v));\n    parts.x = {metal_fn}(parts.x, m);\n"
                f"    parts.y = {metal_fn}(parts.y, m);\n    return reinterpret_cast<{ctype}>(as_type<ulong>(parts));\n")
    else:
        raise ValueError(f"no {metal_fn} overload for MSL type {ctype}")
    return f"{name}:{ctype}", name, head + body + "}"


def vector_register_helpers(ctype: str, width: int, access: str) -> tuple:
    """((key, name, text) of `tt_unpack(thread T* regs, A v)`, which writes the `width` elements a vector
    access of MSL type `access` moved to consecutive registers, and of `tt_pack<width>(thread const T* regs)`,
    which reads them into one such value), for MSL element type `ctype`: the register side of a vector global
    access. `access` is `T<width>`, or 32-bit words (`uint4` for 8 halves), each word holding a `T2`/`T4`."""
    if access == f"{ctype}{width}":
        unpack_body = f"for (int j = 0; j < {width}; ++j) regs[j] = v[j];"
        pack_body = f"{access} v; for (int j = 0; j < {width}; ++j) v[j] = regs[j]; return v;"
    else:
        per = width // int(access[len("uint"):])  # elements per 32-bit word
        part = f"{ctype}{per}"
        unpack_body = f"for (int j = 0; j < {width}; ++j) regs[j] = as_type<{part}>(v[j / {per}])[j % {per}];"
        pack_body = (f"{access} v; for (int w = 0; w < {width // per}; ++w) {{ {part} p; "
                     f"for (int j = 0; j < {per}; ++j) p[j] = regs[{per} * w + j]; v[w] = as_type<uint>(p); }} "
                     f"return v;")
    unpack = (f"tt_unpack:{ctype}:{access}", "tt_unpack",
              f"static inline void tt_unpack(thread {ctype}* regs, {access} v) {{ {unpack_body} }}")
    pack = (f"tt_pack{width}:{ctype}", f"tt_pack{width}",
            f"static inline {access} tt_pack{width}(thread const {ctype}* regs) {{ {pack_body} }}")
    return unpack, pack


# The new value of a locked 64-bit read-modify-write (tt_atomic64_<kind>), from the old value `old` and the
# operand `v`, all as their 64 bits (float64 is software float64, soft_f64.py).
_LOCKED64_UPDATE = {
    "add": "old + v", "and": "old & v", "or": "old | v", "xor": "old ^ v",
    "max": "as_type<long>(old) > as_type<long>(v) ? old : v", "min": "as_type<long>(old) < as_type<long>(v) ? old : v",
    "umax": "max(old, v)", "umin": "min(old, v)", "xchg": "v", "exch": "v",
    "fadd": "tt_f64_add(tt_f64_from_bits(old), tt_f64_from_bits(v)).bits",
}


def locked_atomic64_helper(kind: str) -> tuple:
    """(key, name, text) of `tt_atomic64_<kind>(locks, p, v, lane)` (`cas`: `(locks, p, cmp, v, lane)`): a
    64-bit atomic read-modify-write under the element's lock (the `tt_lock64` helpers), returning the old value.

    The lanes of a simdgroup take turns, in a loop over the lane numbers: a lane waits for the lock only while
    no other lane of its simdgroup holds one or wants one. Lanes may run in lockstep, and a lane that spins
    while another lane of its simdgroup holds the lock can wait for ever: the holder may be parked at a point
    of reconvergence. Forms where lanes try together (`while (!done) { if (try) { update; release; done =
    true; } }`) rely on the compiler keeping the update inside the loop that takes the lock, and clang at -O2
    turns that loop into a spin followed by the update."""
    name = f"tt_atomic64_{kind}"
    params = "ulong cmp, ulong v" if kind == "cas" else "ulong v"
    if kind == "cas":
        update = ("            if (old == cmp) {\n"
                  "                tt_lock64_store(p, v);\n"
                  "            }\n")
    else:
        update = f"            tt_lock64_store(p, {_LOCKED64_UPDATE[kind]});\n"
    text = (f"static inline ulong {name}(device atomic_uint* locks, device ulong* p, {params}, uint lane) {{\n"
            "    device atomic_uint* lock = tt_lock64_for(locks, p);\n"
            "    ulong old = 0;\n"
            f"    for (uint turn = 0u; turn < {SIMD_WIDTH}u; ++turn) {{\n"
            "        if (lane == turn) {\n"
            "            while (!tt_lock64_try(lock)) {\n"
            "            }\n"
            "            old = tt_lock64_load(p);\n" + update +
            "            tt_lock64_release(lock);\n"
            "        }\n"
            "    }\n"
            "    return old;\n"
            "}")
    return name, name, text

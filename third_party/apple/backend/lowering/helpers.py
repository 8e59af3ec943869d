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
    """static inline uchar tt_to_fp8(float x, uint mbits, int bias, float max_finite, uchar nan_code) {
    if (isnan(x)) {
        return nan_code;
    }
    const uchar sign = uchar((as_type<uint>(x) >> 24) & 0x80u);
    const float a = fmin(fabs(x), max_finite);
    const float min_normal = as_type<float>(uint(1 - bias + 127) << 23);
    const float scale = float(1u << mbits);
    if (a < min_normal) {
        const float step = as_type<float>(uint(1 - bias - int(mbits) + 127) << 23);
        return sign | uchar(rint(a / step));
    }
    const uint bits = as_type<uint>(a);
    int e = int((bits >> 23) & 0xFFu) - 127;
    const float m = as_type<float>((bits & 0x7FFFFFu) | 0x3F800000u);
    uint q = uint(rint((m - 1.0f) * scale));
    if (q == (1u << mbits)) {
        q = 0u;
        e += 1;
    }
    return sign | uchar((uint(e + bias) << mbits) | q);
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
    "tt_mulhi_u32":
    """static inline uint tt_mulhi_u32(uint a, uint b) {
    return uint((ulong(a) * ulong(b)) >> 32);
}""",
}


def require(ctx, name: str) -> str:
    """Ask for helper `name` in the module's MSL and return the name to call."""
    ctx.add_helper(name, HELPERS[name])
    return name

"""MSL helper functions that give Triton's semantics where Metal's (or C++'s) defaults differ.

Each helper is emitted once, before the kernel, only when a lowering asks for it. They are plain MSL,
so the same text runs on the GPU and on the emulator; none relies on behaviour C++ leaves undefined.

Integer semantics follow Triton's interpreter: division truncates, division or remainder by zero gives 0,
`INT_MIN / -1` wraps to `INT_MIN`, shifts take the amount as unsigned and shifting by the bit width or
more gives 0 (arithmetic right shift: the sign). Float -> int conversion saturates and maps NaN to 0
(what Metal and NVIDIA GPUs do; the interpreter inherits numpy's host-specific value instead).
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
        return signbit(a) ? b : a;
    }
    return a > b ? a : b;
}""",
    "tt_minimum":
    """template <typename T> static inline T tt_minimum(T a, T b) {
    if (isnan(a) || isnan(b)) {
        return T(NAN);
    }
    if (a == b) {
        return signbit(a) ? a : b;
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
        return signbit(a) ? b : a;
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
        return signbit(a) ? a : b;
    }
    return a < b ? a : b;
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

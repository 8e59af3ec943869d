// Triton's integer semantics where C++ (and so MSL) leaves them undefined or differs, as Triton's interpreter
// has them: division truncates, division or remainder by zero gives 0, `INT_MIN / -1` wraps to `INT_MIN`,
// shifts take the amount as unsigned and shifting by the bit width or more gives 0 (arithmetic right shift:
// the sign); MLIR's rounding divisions; CUDA's byte permutation. None relies on behaviour C++ leaves
// undefined, so the same text runs on the GPU and on the emulator.

// @helper tt_sdiv
template <typename T> static inline T tt_sdiv(T a, T b) {
    if (b == T(0)) {
        return T(0);
    }
    if (b == T(-1)) {
        return T(T(0) - a);
    }
    return T(a / b);
}

// @helper tt_srem
template <typename T> static inline T tt_srem(T a, T b) {
    if (b == T(0) || b == T(-1)) {
        return T(0);
    }
    return T(a % b);
}

// @helper tt_udiv
template <typename T> static inline T tt_udiv(T a, T b) {
    return b == T(0) ? T(0) : T(a / b);
}

// @helper tt_urem
template <typename T> static inline T tt_urem(T a, T b) {
    return b == T(0) ? T(0) : T(a % b);
}

// @helper tt_ceildivsi
/// MLIR's rounding divisions (arith.ceildivsi, arith.floordivsi, arith.ceildivui), e.g. trip counts of loops
/// fused by upstream's fuse_nested_loops; division by zero gives 0 as tt_sdiv does
template <typename T> static inline T tt_ceildivsi(T a, T b) {
    if (b == T(0)) {
        return T(0);
    }
    if (b == T(-1)) {
        return T(T(0) - a);
    }
    const bool inexact = a % b != T(0);
    return T(a / b + T(inexact && (a < T(0)) == (b < T(0)) ? 1 : 0));
}

// @helper tt_floordivsi
template <typename T> static inline T tt_floordivsi(T a, T b) {
    if (b == T(0)) {
        return T(0);
    }
    if (b == T(-1)) {
        return T(T(0) - a);
    }
    const bool inexact = a % b != T(0);
    return T(a / b - T(inexact && (a < T(0)) != (b < T(0)) ? 1 : 0));
}

// @helper tt_ceildivui
template <typename T> static inline T tt_ceildivui(T a, T b) {
    return b == T(0) ? T(0) : T(a / b + T(a % b != T(0) ? 1 : 0));
}

// @helper tt_shl
template <typename T, typename U> static inline T tt_shl(T a, U amount) {
    return amount >= U(sizeof(T) * 8) ? T(0) : T(U(a) << amount);
}

// @helper tt_lshr
template <typename T, typename U> static inline T tt_lshr(T a, U amount) {
    return amount >= U(sizeof(T) * 8) ? T(0) : T(U(a) >> amount);
}

// @helper tt_ashr
template <typename T, typename U> static inline T tt_ashr(T a, U amount) {
    if (amount >= U(sizeof(T) * 8)) {
        return a < T(0) ? T(-1) : T(0);
    }
    return T(a >> amount);
}

// @helper tt_byte_perm
/// CUDA's __byte_perm(x, y, s): byte i of the result is byte (s >> 4i) & 7 of the 8 bytes y:x
static inline int tt_byte_perm(int x, int y, int s) {
    const ulong v = ulong(uint(y)) << 32 | uint(x);
    uint r = 0u;
    for (uint i = 0u; i < 4u; ++i) {
        const uint sel = (uint(s) >> (4u * i)) & 7u;
        r |= uint((v >> (8u * sel)) & 0xFFul) << (8u * i);
    }
    return int(r);
}

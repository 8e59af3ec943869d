// The `tt_<FN>(T v, ushort m)` overloads over Metal's simd_shuffle family (FN: simd_shuffle, simd_shuffle_xor,
// simd_shuffle_down, ...), which moves 8/16/32-bit values only: wider or narrower types move through these.
// One overload is emitted per (FN, T) a kernel uses; msl_helpers.shuffle_helper picks the form by T.
// Parameters: $FN the Metal function, $T the MSL type, $VIA the 16-bit type a char/uchar moves as.

// @helper tt_shuffle_direct
// @params FN T
/// 32-bit and 16-bit values Metal shuffles as they are.
static inline $T tt_$FN($T v, ushort m) {
    return $FN(v, m);
}

// @helper tt_shuffle_via
// @params FN T VIA
/// 8-bit integers move as 16-bit ones.
static inline $T tt_$FN($T v, ushort m) {
    return $T($FN($VIA(v), m));
}

// @helper tt_shuffle_bool
// @params FN T
static inline $T tt_$FN($T v, ushort m) {
    return $FN(ushort(v ? 1 : 0), m) != 0;
}

// @helper tt_shuffle_bfloat
// @params FN T
/// bfloat moves as its 16 bits.
static inline $T tt_$FN($T v, ushort m) {
    return as_type<bfloat>($FN(as_type<ushort>(v), m));
}

// @helper tt_shuffle_64
// @params FN T
/// long and ulong move as two 32-bit halves.
static inline $T tt_$FN($T v, ushort m) {
    uint2 parts = as_type<uint2>(v);
    parts.x = $FN(parts.x, m);
    parts.y = $FN(parts.y, m);
    return as_type<$T>(parts);
}

// @helper tt_shuffle_f64
// @requires tt_f64_core
// @params FN T
/// Software float64 (soft_f64_core.metal) moves as its 64 bits.
static inline $T tt_$FN($T v, ushort m) {
    uint2 parts = as_type<uint2>(v.bits);
    parts.x = $FN(parts.x, m);
    parts.y = $FN(parts.y, m);
    return tt_f64_from_bits(as_type<ulong>(parts));
}

// @helper tt_shuffle_pointer
// @params FN T
/// A device pointer moves as its 64-bit address.
static inline $T tt_$FN($T v, ushort m) {
    uint2 parts = as_type<uint2>(reinterpret_cast<ulong>(v));
    parts.x = $FN(parts.x, m);
    parts.y = $FN(parts.y, m);
    return reinterpret_cast<$T>(as_type<ulong>(parts));
}

// Atomics Metal does not have on every GPU family: 16-bit add and compare-and-swap on the containing 32-bit
// word, float add on threadgroup memory (its atomics are integer ones), and 64-bit add/and/or/xor on two 32-bit
// words (lowering/wide_atomics.py decides which form a 64-bit atomic of a kernel takes).

// @helper tt_atomic16_word
/// 16-bit atomics: Metal's atomics are 32-bit, so these update one 16-bit half (at bit `shift`, little-endian) of a
/// 32-bit word with a compare-and-swap loop (relaxed, like every Metal atomic; callers add fences for sem). The add
/// takes the word in device or threadgroup memory (`W`: `device atomic_uint*` or `threadgroup atomic_uint*`).
template <typename T, typename W> static inline T tt_atomic_add16_word(W word, uint shift, T v) {
    uint old = atomic_load_explicit(word, memory_order_relaxed);
    while (true) {
        const T cur = as_type<T>(ushort(old >> shift));
        const T sum = T(float(cur) + float(v));
        const uint repl = (old & ~(0xFFFFu << shift)) | (uint(as_type<ushort>(sum)) << shift);
        if (atomic_compare_exchange_weak_explicit(word, &old, repl, memory_order_relaxed, memory_order_relaxed)) {
            return cur;
        }
    }
}
template <typename T> static inline T tt_atomic_cas16_word(device atomic_uint* word, uint shift, T cmp, T v) {
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
}

// @helper tt_atomic16_at
// @requires tt_atomic16_word
/// Element `k` of a 16-bit array whose element 0 starts a 32-bit word (`words`): the half `k % 2` of word `k / 2`
/// (the lowering's pointer-free form: `k` is the element's index from a 4-byte aligned kernel argument). The word
/// and half come from the byte offset `2k`, not from `k >> 1` and `k & 1`: `k` is a pointer difference `p - base`,
/// and clang 22 (the emulator's compiler) folded `(p - base) >> 1` into the byte offset of `p` itself, as if `k`
/// were even (odd elements then read the next element, and the last one past the buffer).
static inline device atomic_uint* tt_atomic16_word_at(device atomic_uint* words, long k) {
    return words + (ulong(k) * 2ul >> 2);
}
static inline uint tt_atomic16_shift_at(long k) {
    return uint(ulong(k) * 2ul & 2ul) * 8u;
}
template <typename T> static inline T tt_atomic_add16_at(device atomic_uint* words, long k, T v) {
    return tt_atomic_add16_word(tt_atomic16_word_at(words, k), tt_atomic16_shift_at(k), v);
}
template <typename T> static inline T tt_atomic_cas16_at(device atomic_uint* words, long k, T cmp, T v) {
    return tt_atomic_cas16_word(tt_atomic16_word_at(words, k), tt_atomic16_shift_at(k), cmp, v);
}

// @helper tt_atomic16_load_at
// @requires tt_atomic16_at
/// The bits of element `k` of a 16-bit array whose element 0 starts a 32-bit word (`words`), read with one 32-bit
/// atomic load of its word (`tl.atomic_poll` on 16-bit elements: never torn, the word is read whole).
static inline ushort tt_atomic_load16_at(device atomic_uint* words, long k) {
    return ushort(atomic_load_explicit(tt_atomic16_word_at(words, k), memory_order_relaxed) >> tt_atomic16_shift_at(k));
}

// @helper tt_atomic16_load_address
/// tt_atomic_load16_at with the word found from the element's address (pointers not traced to an aligned kernel
/// argument; a pointer <-> integer reinterpret_cast: unverified on Apple's compiler, see docs/mac.md).
template <typename T> static inline ushort tt_atomic_load16(device T* p) {
    const ulong addr = reinterpret_cast<ulong>(p);
    return ushort(atomic_load_explicit(reinterpret_cast<device atomic_uint*>(addr & ~ulong(3)), memory_order_relaxed)
                  >> (uint(addr & 2ul) * 8u));
}

// @helper tt_atomic16_address
// @requires tt_atomic16_word
/// The containing word from the element's address, for pointers the lowering cannot trace to an aligned kernel
/// argument (a pointer <-> integer reinterpret_cast: unverified on Apple's compiler, see docs/mac.md).
template <typename T> static inline T tt_atomic_add16(device T* p, T v) {
    const ulong addr = reinterpret_cast<ulong>(p);
    return tt_atomic_add16_word(reinterpret_cast<device atomic_uint*>(addr & ~ulong(3)), uint(addr & 2ul) * 8u, v);
}
template <typename T> static inline T tt_atomic_cas16(device T* p, T cmp, T v) {
    const ulong addr = reinterpret_cast<ulong>(p);
    return tt_atomic_cas16_word(reinterpret_cast<device atomic_uint*>(addr & ~ulong(3)), uint(addr & 2ul) * 8u, cmp,
                                v);
}

// @helper tt_tg_atomic_fadd32
/// Float add on threadgroup memory (`ttg.local_atomic_scatter_rmw fadd`): Metal's threadgroup atomics are integer
/// ones, so the float's bits are replaced with a compare-and-swap loop; returns the old value.
static inline float tt_tg_atomic_fadd32(threadgroup atomic_uint* p, float v) {
    uint old = atomic_load_explicit(p, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(p, &old, as_type<uint>(as_type<float>(old) + v),
                                                  memory_order_relaxed, memory_order_relaxed)) {
    }
    return as_type<float>(old);
}

// @helper tt_tg_atomic_add16
// @requires tt_atomic16_word
/// 16-bit float add on threadgroup memory: the half at byte `byte` of the threadgroup array `base`, updated in its
/// 32-bit word (the word and half from the byte offset, as tt_atomic16_at does).
template <typename T> static inline T tt_tg_atomic_add16(threadgroup uchar* base, ulong byte, T v) {
    return tt_atomic_add16_word((threadgroup atomic_uint*)(base + (byte & ~3ul)), uint(byte & 2ul) * 8u, v);
}

// @helper tt_atomic_add64
/// 64-bit add/and/or/xor on two 32-bit words (little-endian: word 0 is the low half). The final value is
/// exact under any contention (the carry out of the low word is added to the high word), but the two
/// halves are updated separately, so these return nothing: there is no atomic 64-bit old value.
static inline void tt_atomic_add64(device long* p, long v) {
    device atomic_uint* w = (device atomic_uint*)p;
    const ulong u = as_type<ulong>(v);
    const uint lo = uint(u);
    const uint hi = uint(u >> 32);
    const uint old_lo = atomic_fetch_add_explicit(&w[0], lo, memory_order_relaxed);
    const uint carry = uint(old_lo + lo < old_lo);
    if (hi + carry != 0u) {
        atomic_fetch_add_explicit(&w[1], hi + carry, memory_order_relaxed);
    }
}

// @helper tt_atomic_bits64
static inline void tt_atomic_and64(device long* p, long v) {
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
}

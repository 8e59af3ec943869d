// 64-bit atomics under a lock (lowering/wide_atomics.py decides which atomics take this form): the lock of an
// element, the read and write of its halves under it, and the read-modify-writes and compare-and-swap that
// return the old value. ${LOCK_MASK} is the lock table's size less one (backend/atomic_locks.py LOCK_WORDS),
// ${SIMD_WIDTH} the lanes of a simdgroup (backend/target.py), both filled when the library is loaded.

// @helper tt_lock64
/// The lock of a 64-bit element and the read and write of its halves under it (backend/atomic_locks.py,
/// lowering/wide_atomics.py). Each lock is a word of the kernel's lock table: 0 free, 1 taken, chosen by the
/// element's key: its index from the kernel argument every locked atomic of the kernel points into, or, where
/// they point into several, its address / 8 (`tt_lock64_address_key`). The fences order the element's accesses
/// after taking the lock and before releasing it.
static inline device atomic_uint* tt_lock64_for(device atomic_uint* locks, ulong key) {
    return &locks[key & ${LOCK_MASK}u];
}
static inline bool tt_lock64_try(device atomic_uint* lock) {
    uint unlocked = 0u;
    if (!atomic_compare_exchange_weak_explicit(lock, &unlocked, 1u, memory_order_relaxed, memory_order_relaxed)) {
        return false;
    }
    atomic_thread_fence(mem_flags::mem_device, memory_order_seq_cst, thread_scope_device);
    return true;
}
static inline void tt_lock64_release(device atomic_uint* lock) {
    atomic_thread_fence(mem_flags::mem_device, memory_order_seq_cst, thread_scope_device);
    atomic_store_explicit(lock, 0u, memory_order_relaxed);
}
static inline ulong tt_lock64_load(device ulong* p) {
    device atomic_uint* w = (device atomic_uint*)p;
    const uint lo = atomic_load_explicit(&w[0], memory_order_relaxed);
    return ulong(atomic_load_explicit(&w[1], memory_order_relaxed)) << 32 | lo;
}
static inline void tt_lock64_store(device ulong* p, ulong v) {
    device atomic_uint* w = (device atomic_uint*)p;
    atomic_store_explicit(&w[0], uint(v), memory_order_relaxed);
    atomic_store_explicit(&w[1], uint(v >> 32), memory_order_relaxed);
}

// @helper tt_atomic64_rmw
// @requires tt_lock64
// @params KIND UPDATE
/// `tt_atomic64_<KIND>(locks, p, key, v, lane)`: a 64-bit read-modify-write under the element's lock, returning the
/// old value; UPDATE is the new value from `old` and `v` (msl_helpers.locked_atomic64_helper has them by kind).
/// The lanes of a simdgroup take turns, in a loop over the lane numbers: a lane waits for the lock only while
/// no other lane of its simdgroup holds one or wants one. Lanes may run in lockstep, and a lane that spins
/// while another lane of its simdgroup holds the lock can wait for ever: the holder may be parked at a point
/// of reconvergence. Forms where lanes try together (`while (!done) { if (try) { update; release; done =
/// true; } }`) rely on the compiler keeping the update inside the loop that takes the lock, and clang at -O2
/// turns that loop into a spin followed by the update.
static inline ulong tt_atomic64_$KIND(device atomic_uint* locks, device ulong* p, ulong key, ulong v, uint lane) {
    device atomic_uint* lock = tt_lock64_for(locks, key);
    ulong old = 0;
    for (uint turn = 0u; turn < ${SIMD_WIDTH}u; ++turn) {
        if (lane == turn) {
            while (!tt_lock64_try(lock)) {
            }
            old = tt_lock64_load(p);
            tt_lock64_store(p, $UPDATE);
            tt_lock64_release(lock);
        }
    }
    return old;
}

// @helper tt_atomic64_cas
// @requires tt_lock64
/// Compare-and-swap in the same turns as tt_atomic64_rmw: stores `v` where the old value is `cmp`.
static inline ulong tt_atomic64_cas(device atomic_uint* locks, device ulong* p, ulong key, ulong cmp, ulong v,
                                    uint lane) {
    device atomic_uint* lock = tt_lock64_for(locks, key);
    ulong old = 0;
    for (uint turn = 0u; turn < ${SIMD_WIDTH}u; ++turn) {
        if (lane == turn) {
            while (!tt_lock64_try(lock)) {
            }
            old = tt_lock64_load(p);
            if (old == cmp) {
                tt_lock64_store(p, v);
            }
            tt_lock64_release(lock);
        }
    }
    return old;
}

// @helper tt_lock64_address_key
/// The lock key of a 64-bit element from its address, where the kernel's locked atomics point into several
/// arguments (a pointer -> integer reinterpret_cast: unverified on Apple's compiler, see docs/mac.md).
static inline ulong tt_lock64_address_key(device ulong* p) {
    return reinterpret_cast<ulong>(p) >> 3;
}

// @helper tt_atomic64_poll_load
// @requires tt_lock64
/// `tl.atomic_poll`'s read of a 64-bit element: both halves under the element's lock, in the same lane turns as
/// tt_atomic64_rmw, so the value is whole with respect to every 64-bit atomic of the kernel (they all take the
/// lock when the kernel polls a 64-bit element). The high half is read again after the low one, until it is
/// unchanged: a plain 64-bit store racing with the poll (which takes no lock) is not seen half written.
static inline ulong tt_atomic64_poll_load(device atomic_uint* locks, device ulong* p, ulong key, uint lane) {
    device atomic_uint* lock = tt_lock64_for(locks, key);
    device atomic_uint* w = (device atomic_uint*)p;
    ulong value = 0;
    for (uint turn = 0u; turn < ${SIMD_WIDTH}u; ++turn) {
        if (lane == turn) {
            while (!tt_lock64_try(lock)) {
            }
            uint hi = atomic_load_explicit(&w[1], memory_order_relaxed);
            while (true) {
                const uint lo = atomic_load_explicit(&w[0], memory_order_relaxed);
                const uint again = atomic_load_explicit(&w[1], memory_order_relaxed);
                if (again == hi) {
                    value = ulong(hi) << 32 | lo;
                    break;
                }
                hi = again;
            }
            tt_lock64_release(lock);
        }
    }
    return value;
}

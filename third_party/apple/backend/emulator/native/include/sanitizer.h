/*
 * sanitizer.h — the kernel-side part of the emulator's tools (racecheck, initcheck, profiler), included by
 * metal_compat.h. The C ABI and the design are in emulator_tools.h.
 *
 * Without TT_EMU_TOOLS (every ordinary kernel build) each helper here is exactly the plain operation it wraps,
 * so the compat header compiles to the same code as without this file. With TT_EMU_TOOLS (kernels built for the
 * tools, which clang also compiles with -fsanitize-coverage=func,trace-loads,trace-stores):
 *   - every atomic operation reports its address to the runtime (__tt_tool_atomic) before it runs, so that
 *     racecheck knows those bytes were accessed atomically (two atomics never race);
 *   - the atomic loads and stores that the compat header's atomics are made of become read-modify-write
 *     operations (fetch_or 0, exchange), which coverage tracing does not see: otherwise they would reach the
 *     runtime as plain accesses and race with the atomics of other threads;
 *   - simdgroup_multiply_accumulate and fma() count themselves for the profiler (__tt_tool_count).
 */
#ifndef TT_SANITIZER_H
#define TT_SANITIZER_H

#ifdef TT_EMU_TOOLS
#include "emulator_tools.h"
#endif

namespace __tt_tools {

#ifdef TT_EMU_TOOLS
template <int N> struct bits;
template <> struct bits<1> { using type = unsigned char; };
template <> struct bits<2> { using type = unsigned short; };
template <> struct bits<4> { using type = unsigned int; };
template <> struct bits<8> { using type = unsigned long; };
#endif

/* An atomic read-modify-write (or exchange, compare-exchange) of the object at `p` is about to run. */
template <class T> inline T *rmw(T *p) {
#ifdef TT_EMU_TOOLS
  __tt_tool_atomic(p, sizeof(T), TT_ATOMIC_RMW);
#endif
  return p;
}

/* The relaxed load of an atomic object's value. */
template <class T> inline T load(T *p) {
#ifdef TT_EMU_TOOLS
  using U = typename bits<sizeof(T)>::type;
  U v = __atomic_fetch_or((U *)p, (U)0, __ATOMIC_RELAXED);
  return __builtin_bit_cast(T, v);
#else
  T v;
  __atomic_load(p, &v, __ATOMIC_RELAXED);
  return v;
#endif
}

/* The relaxed store of an atomic object's value. */
template <class T> inline void store(T *p, T v) {
#ifdef TT_EMU_TOOLS
  using U = typename bits<sizeof(T)>::type;
  (void)__atomic_exchange_n((U *)p, __builtin_bit_cast(U, v), __ATOMIC_RELAXED);
#else
  __atomic_store(p, &v, __ATOMIC_RELAXED);
#endif
}

/* An atomic_load_explicit / atomic_store_explicit of the object at `p` (reported, then done as above). */
template <class T> inline T atomic_load(T *p) {
#ifdef TT_EMU_TOOLS
  __tt_tool_atomic(p, sizeof(T), TT_ATOMIC_LOAD);
#endif
  return load(p);
}
template <class T> inline void atomic_store(T *p, T v) {
#ifdef TT_EMU_TOOLS
  __tt_tool_atomic(p, sizeof(T), TT_ATOMIC_STORE);
#endif
  store(p, v);
}

/* Profiler counts (nothing without the tools). */
inline void count_mma() {
#ifdef TT_EMU_TOOLS
  __tt_tool_count(TT_COUNT_SGM_MMA, 1);
#endif
}
inline float fma(float x, float y, float z) {
#ifdef TT_EMU_TOOLS
  __tt_tool_count(TT_COUNT_FMA, 1);
#endif
  return __builtin_fmaf(x, y, z);
}

} // namespace __tt_tools

#endif /* TT_SANITIZER_H */

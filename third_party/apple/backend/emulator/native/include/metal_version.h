/*
 * metal_version.h — which Metal the compat header stands for: the MSL version and the GPU family's features.
 *
 * Apple's compiler defines __METAL_VERSION__ (MSL specification 1.6.2: 310 for MSL 3.1, 320 for 3.2); the
 * emulator's build defines it the same way, from the MSL version kernels are compiled for
 * (TRITON_APPLE_MSL_VERSION), and __TT_ATOMIC_ULONG_MIN_MAX from the emulated GPU family's features
 * (backend/target.py GPU_FAMILIES; emulator/clang.py target_defines). metal_compat.h marks each declaration that
 * exists only from some MSL version, or only on some families, with one of the macros below, so that a kernel
 * the emulator accepts is one that Metal at that version and on that family accepts:
 *
 *   __TT_SINCE_MSL_3_2(what)    introduced by MSL 3.2 (atomic_thread_fence, memory_order_seq_cst, thread_scope:
 *                               specification 6.15.1-6.15.3)
 *   __TT_ATOMIC_ULONG_FAMILY    the 64-bit atomic min/max of atomic_ulong (specification 6.15.4.6; Apple9)
 *
 * A use of a marked declaration where it does not exist is a compile error whose message names what it needs.
 */
#ifndef TT_METAL_VERSION_H
#define TT_METAL_VERSION_H

#ifndef __METAL_VERSION__
#define __METAL_VERSION__ 320 /* a compile of the header without the emulator's flags: the backend's default */
#endif
#ifndef __TT_ATOMIC_ULONG_MIN_MAX
#define __TT_ATOMIC_ULONG_MIN_MAX 0
#endif

#if __METAL_VERSION__ < 310
#error "the Metal emulator stands for MSL 3.1 (macOS 14) or newer: bfloat, which kernels may use, is MSL 3.1's"
#endif

#define __TT_STR(x) #x
#define __TT_XSTR(x) __TT_STR(x)

#if __METAL_VERSION__ >= 320
#define __TT_SINCE_MSL_3_2(WHAT)
#else
#define __TT_SINCE_MSL_3_2(WHAT)                                                                        \
  __attribute__((unavailable(WHAT " needs MSL 3.2 (macOS 15); this kernel is compiled for __METAL_VERSION__ " \
                             __TT_XSTR(__METAL_VERSION__) " (TRITON_APPLE_MSL_VERSION)")))
#endif

#if __TT_ATOMIC_ULONG_MIN_MAX
#define __TT_ATOMIC_ULONG_FAMILY
#else
#define __TT_ATOMIC_ULONG_FAMILY                                                                        \
  __attribute__((unavailable("64-bit atomic min/max (atomic_ulong) needs an Apple9 GPU (M3 or newer); the "  \
                             "emulated GPU family has none (TRITON_APPLE_FAMILY)")))
#endif

#endif /* TT_METAL_VERSION_H */

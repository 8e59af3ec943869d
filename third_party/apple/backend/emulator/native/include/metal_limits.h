/*
 * Limits of the Apple GPU target that the emulator enforces, in one place for the C/C++ side (the runtime,
 * the compat header and every kernel translation unit include this file). The Python side takes the same
 * numbers from backend/target.py; test/emulator/test_emu_portability.py checks that the two agree.
 */
#ifndef TT_METAL_LIMITS_H
#define TT_METAL_LIMITS_H

#define TT_EMU_SIMD_WIDTH 32      /* target.SIMD_WIDTH: threads per simdgroup */
#define TT_EMU_MAX_THREADS 1024   /* target.MAX_THREADS_PER_THREADGROUP */
#define TT_EMU_MAX_SLOTS 31       /* target.MAX_BUFFER_SLOTS: [[buffer(0..30)]] */
#define TT_EMU_TG_MEM_LIMIT 32768 /* target.MAX_THREADGROUP_MEMORY: bytes per threadgroup */

#endif /* TT_METAL_LIMITS_H */

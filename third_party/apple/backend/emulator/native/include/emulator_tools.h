/*
 * Metal-on-CPU emulator: the C ABI of its tools, the sanitizer (racecheck, initcheck) and the profiler.
 *
 * Kernels built for the tools (emulator/build.py, `tools=True`) are compiled with
 * -fsanitize-coverage=func,trace-loads,trace-stores, which makes clang call __sanitizer_cov_load<N>(addr) /
 * __sanitizer_cov_store<N>(addr) before every load and store of N = 1, 2, 4, 8, 16 bytes left in the optimised
 * code, and with -DTT_EMU_TOOLS, which makes the compat header (sanitizer.h) report atomics and
 * simdgroup_matrix multiplies and keep its own atomic loads/stores out of the traced accesses. The runtime
 * (emulator_runtime.cpp) defines those callbacks. Kernels built without the tools contain none of this, and the
 * runtime's fast paths only test one pointer that stays null.
 *
 * A launch runs with the tools when its entry point was armed (tt_emu_tools_arm) right before it: the caller
 * names the tools and hands a report that the runtime fills when the launch ends (also when it fails). One
 * host thread runs a launch with tools, so that every report is deterministic.
 *
 * Plain C: included by the runtime and, through sanitizer.h, by kernels. The Python side mirrors the structs
 * with ctypes (emulator/tools.py); TT_EMU_TOOLS_ABI_VERSION tells them apart when either changes.
 */
#ifndef TT_EMULATOR_TOOLS_H
#define TT_EMULATOR_TOOLS_H

#include <stddef.h>
#include <stdint.h>

#define TT_EMU_TOOLS_ABI_VERSION 3
#define TT_TOOL_MAX_HAZARDS 32
#define TT_TOOL_MAX_CONFLICT_LINES 16 /* threadgroup instructions with bank conflicts a profile names */
#define TT_TOOL_MAX_ARMED 16

/* Tools of a launch (tt_emu_tools_arm's `tools`). */
enum {
  TT_TOOL_RACE = 1,    /* racecheck: threadgroup-memory hazards, device-memory write-write races */
  TT_TOOL_INIT = 2,    /* initcheck: reads of threadgroup memory / private arrays never written */
  TT_TOOL_PROFILE = 4, /* traffic, access widths, bank conflicts, barriers, FLOPs */
  TT_TOOL_WARN = 8,    /* sanitizer findings do not fail the launch (the caller warns) */
};

/* What a sanitizer finding is. */
enum {
  TT_HAZ_RAW = 1,    /* read after a write by another thread, not ordered by a barrier */
  TT_HAZ_WAR = 2,    /* write after a read by another thread */
  TT_HAZ_WAW = 3,    /* write after a write by another thread (that stored other bytes) */
  TT_HAZ_UNINIT = 4, /* read of bytes no thread wrote (threadgroup memory: in this threadgroup) */
};

/* Where. */
enum {
  TT_SPACE_THREADGROUP = 0,
  TT_SPACE_DEVICE = 1,
  TT_SPACE_PRIVATE = 2, /* the reading thread's own stack: a private array */
};

/* Launch status of a failed sanitizer check (tt_launch_result.status; after emulator_runtime.h's TT_ERR_*). */
enum {
  TT_ERR_RACE = 17,
  TT_ERR_UNINIT = 18,
};

/* What an atomic operation does to its object (__tt_tool_atomic). */
enum {
  TT_ATOMIC_RMW = 0, /* reads and writes it (fetch_*, exchange, compare-exchange) */
  TT_ATOMIC_LOAD = 1,
  TT_ATOMIC_STORE = 2,
};

/* Kernel-side events (__tt_tool_count). */
enum {
  TT_COUNT_SGM_MMA = 1, /* one simdgroup_multiply_accumulate of a simdgroup (8x8x8: 1024 FLOPs) */
  TT_COUNT_FMA = 2,     /* `n` scalar fused multiply-adds (2 FLOPs each) */
};

typedef struct tt_tool_access {
  uint64_t pc_offset; /* the instruction, relative to its library's load base (0: none) */
  uint32_t thread;    /* thread_index_in_threadgroup */
  uint32_t is_write;
  uint32_t atomic;
  uint32_t simd_epoch; /* simdgroup_barriers its simdgroup had passed in the barrier interval */
} tt_tool_access;

typedef struct tt_tool_hazard {
  uint32_t kind;  /* TT_HAZ_* */
  uint32_t space; /* TT_SPACE_* */
  uint32_t tg[3]; /* threadgroup of `second` */
  uint32_t first_tg[3]; /* threadgroup of `first` (device memory: may differ) */
  int32_t slot;   /* device: the buffer's [[buffer(N)]] slot; -1 otherwise */
  int64_t offset; /* byte offset in the buffer / the threadgroup variable / below the kernel's first frame */
  uint32_t size;  /* bytes of the access that found it */
  uint32_t count; /* times this pair of instructions was found (the first occurrence is described) */
  tt_tool_access first, second; /* the earlier access and the one that found the hazard (UNINIT: second only) */
  char name[40]; /* threadgroup: the variable (`threadgroup` declaration or TT_THREADGROUP_BUFFER) */
} tt_tool_hazard;

/* Threadgroup-memory banking model (the caller's parameters, emulator/tools.py). */
typedef struct tt_tool_banks {
  uint32_t banks;      /* number of banks */
  uint32_t bank_bytes; /* bytes per bank word */
} tt_tool_banks;

typedef struct tt_tool_profile {
  /* device (and constant) memory, per access width 1, 2, 4, 8, 16 bytes (index 0..4), per lane */
  uint64_t dev_loads[5], dev_stores[5];
  uint64_t dev_read_distinct, dev_written_distinct; /* bytes: distinct addresses touched */
  uint64_t dev_moved; /* sum over SIMD-wide instructions of the distinct bytes their lanes touch */
  uint64_t ungrouped; /* accesses left out of the per-instruction counts (a simdgroup ran too long alone) */
  /* threadgroup memory */
  uint64_t tg_loads, tg_stores, tg_load_bytes, tg_store_bytes;
  uint64_t tg_simd_accesses;  /* SIMD-wide instructions (one per simdgroup per dynamic instance) */
  uint64_t tg_wavefronts;     /* sum over them of the bank-cycles they take (max distinct words per bank) */
  uint64_t tg_ideal;          /* sum of the fewest cycles their bytes need (distinct bytes / row width) */
  uint64_t tg_max_degree;     /* the worst wavefronts / ideal of one instruction (x1000) */
  uint64_t tg_conflicted;     /* instructions that take more cycles than the ideal */
  /* SIMD lane utilisation of memory instructions (device and threadgroup) */
  uint64_t simd_instructions, simd_lanes;
  /* synchronisation and arithmetic */
  uint64_t threadgroups, barriers, max_barriers, simd_barriers;
  uint64_t sgm_mma, fma;
  /* device: per threadgroup, the distinct bytes it reads plus those it writes, summed over the threadgroups */
  uint64_t dev_tg_distinct;
} tt_tool_profile;

/* One threadgroup-memory instruction that took more bank cycles than its bytes need. */
typedef struct tt_tool_conflict {
  uint64_t pc_offset; /* the instruction: offset in the kernel's library */
  uint64_t accesses;  /* its SIMD-wide executions */
  uint64_t cycles;    /* the bank cycles they took */
  uint64_t ideal;     /* the fewest their bytes need */
} tt_tool_conflict;

typedef struct tt_tool_report {
  uint32_t abi;        /* TT_EMU_TOOLS_ABI_VERSION */
  uint32_t tools;      /* what ran */
  uint32_t nhazards;   /* entries in hazards[] (distinct instruction pairs, first found first) */
  uint32_t _pad;
  uint64_t total;      /* findings in all (each distinct pair counted every time) */
  uint64_t benign_waw; /* write-write pairs that stored the same bytes: not reported */
  tt_tool_hazard hazards[TT_TOOL_MAX_HAZARDS];
  tt_tool_profile profile;
  uint32_t nconflicts; /* entries in conflicts[]: the instructions with the most cycles over the ideal, worst first */
  uint32_t _pad2;
  tt_tool_conflict conflicts[TT_TOOL_MAX_CONFLICT_LINES];
} tt_tool_report;

#pragma GCC visibility push(default)
#ifdef __cplusplus
extern "C" {
#endif

/* The next launch of `entry` runs with `tools` and fills `report` when it ends. Returns 0, or -1 if too many
   entry points are armed at once (TT_TOOL_MAX_ARMED). */
int tt_emu_tools_arm(const void *entry, uint32_t tools, tt_tool_report *report, const tt_tool_banks *banks);
/* Forgets an arming whose launch never began (its caller failed before launching). */
void tt_emu_tools_disarm(const void *entry);
int tt_emu_tools_abi_version(void);

/* ---- hooks called from kernels built with the tools (sanitizer.h) ---- */
/* An atomic operation (TT_ATOMIC_*) on `size` bytes at `p`: never a race with another atomic. */
void __tt_tool_atomic(const volatile void *p, uint32_t size, uint32_t kind);
void __tt_tool_count(uint32_t what, uint32_t n);

#ifdef __cplusplus
}
#endif
#pragma GCC visibility pop
#endif /* TT_EMULATOR_TOOLS_H */

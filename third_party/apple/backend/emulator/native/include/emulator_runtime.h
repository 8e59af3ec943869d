/*
 * Metal-on-CPU emulator: the C ABI between
 *   - the launcher (native/launcher.c, which emulator/launcher.py builds and binds to the runtime's function
 *     addresses), which calls tt_emu_launch_begin/_wait,
 *   - compiled kernels (MSL + metal_compat.h), which call the __tt_* hooks declared below,
 *   - the runtime itself (native/emulator_runtime.cpp).
 *
 * Plain C, no Metal keywords: this header is included both by the runtime and, through
 * metal_compat.h, by every kernel translation unit. Bump TT_EMU_ABI_VERSION whenever a struct or
 * signature here changes (the Python side checks it against the runtime and each kernel).
 */
#ifndef TT_EMULATOR_RUNTIME_H
#define TT_EMULATOR_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#include "metal_limits.h"

#define TT_EMU_ABI_VERSION 8

#define TT_EMU_MAX_LINES 16
#define TT_EMU_MAX_EVENTS 16

/* Kernels are compiled with -fvisibility=hidden: the runtime's functions they call must stay default. */
#pragma GCC visibility push(default)
#ifdef __cplusplus
extern "C" {
#endif

/* Per-thread builtin values handed to the generated trampoline (one struct per emulated thread). */
typedef struct tt_thread_info {
  uint32_t tpos[3];  /* thread_position_in_threadgroup */
  uint32_t tgpos[3]; /* threadgroup_position_in_grid */
  uint32_t ntg[3];   /* threadgroups_per_grid */
  uint32_t tptg[3];  /* threads_per_threadgroup */
  uint32_t tid;      /* thread_index_in_threadgroup */
  uint32_t lane;     /* thread_index_in_simdgroup */
  uint32_t sg;       /* simdgroup_index_in_threadgroup */
  uint32_t nsg;      /* simdgroups_per_threadgroup */
  uint32_t simd_width;
} tt_thread_info;

/* The generated per-kernel trampoline: binds buffer slots and builtins, calls the MSL kernel for threads
   ti->tid, ti->tid + 1, ... up to `end` of a 1-D threadgroup (one thread: end = ti->tid + 1), setting each
   thread's ids in *ti and *cur, and stops early after a thread when *stop is set. Returns the thread after the
   last it ran. */
typedef uint32_t (*tt_entry_fn)(void *const *slots, tt_thread_info *ti, uint32_t end, volatile uint32_t *cur,
                                const volatile uint32_t *stop);

enum {
  TT_BUF_READONLY = 1, /* `constant` or `device const`: mapped read-only, never copied back */
  TT_BUF_SCALAR = 2,   /* bytes for a `constant T&` parameter: 16-byte aligned copy */
};

typedef struct tt_buffer_desc {
  void *host;         /* the caller's memory */
  uint64_t nbytes;    /* bytes the kernel may access, starting at host */
  uint32_t slot;      /* [[buffer(slot)]] */
  uint32_t elem_size; /* for error messages (element index); 0 = report byte offsets */
  uint32_t flags;     /* TT_BUF_* */
  uint32_t _pad;
  const char *name; /* parameter name, for error messages */
} tt_buffer_desc;

typedef struct tt_launch_desc {
  tt_entry_fn entry;
  const char *kernel_name;
  uint32_t grid[3]; /* threadgroups per grid */
  uint32_t tg[3];   /* threads per threadgroup */
  uint32_t nbuffers;
  uint32_t host_threads; /* 0 = number of cores */
  const tt_buffer_desc *buffers;
  uint32_t stack_kb; /* per emulated thread; 0 = default (256) */
  uint32_t schedule; /* TT_SCHED_*: order in which threads run between barriers */
  uint64_t seed;     /* for TT_SCHED_RANDOM */
  uint32_t ub_mode;  /* TT_UB_*: what to do with undefined behaviour the kernel executes */
  uint32_t timeout_ms; /* stop the launch with TT_ERR_TIMEOUT after this long; 0 = no limit */
} tt_launch_desc;

/* Undefined behaviour that Metal does not trap on (integer division by zero, shift by >= width). */
enum {
  TT_UB_WARN = 0,   /* record events (tt_launch_result.events), the caller warns */
  TT_UB_ERROR = 1,  /* abort the launch with TT_ERR_UB */
  TT_UB_IGNORE = 2,
};

/* Thread order within a threadgroup (between two barriers). Running the same kernel with different
   orders exposes missing barriers: fibers never run concurrently, so a race shows up only as a
   dependence on the order. */
enum {
  TT_SCHED_FORWARD = 0, /* thread 0, 1, 2, ... */
  TT_SCHED_REVERSE = 1, /* highest thread first */
  TT_SCHED_RANDOM = 2,  /* a pseudo-random permutation per threadgroup (from `seed`) */
};

/* Launch status / error kinds (tt_launch_result.status). */
enum {
  TT_OK = 0,
  TT_ERR_INVALID = 1,        /* bad launch arguments */
  TT_ERR_OOB = 2,            /* out-of-bounds access to a buffer (guard zone or canary) */
  TT_ERR_READONLY_WRITE = 3, /* write to a constant / device const buffer */
  TT_ERR_TG_OOB = 4,         /* out-of-bounds access to threadgroup memory */
  TT_ERR_STACK = 5,          /* emulated thread overflowed its stack */
  TT_ERR_SEGV = 6,           /* other invalid memory access */
  TT_ERR_SIGNAL = 7,         /* SIGILL / SIGFPE / SIGTRAP that could not be handled */
  TT_ERR_DIVERGENCE = 8,     /* threads of one barrier/collective at different call sites */
  TT_ERR_DEADLOCK = 9,       /* no thread can make progress */
  TT_ERR_SIMD = 10,          /* invalid SIMD-group operation (inactive lane, non-uniform lane...) */
  TT_ERR_TG_MEM = 11,        /* threadgroup memory over the 32 KB limit */
  TT_ERR_LOCAL_OOB = 12,     /* out-of-bounds index into a fixed-size local/threadgroup array */
  TT_ERR_UB = 13,            /* undefined behaviour made fatal (TRITON_APPLE_EMULATOR_UB=error) */
  TT_ERR_INTERNAL = 14,
  TT_ERR_TIMEOUT = 15,       /* the launch ran longer than tt_launch_desc.timeout_ms */
  TT_ERR_INTERRUPTED = 16,   /* tt_emu_launch_cancel(TT_ERR_INTERRUPTED): e.g. Ctrl-C in the caller */
  TT_EMU_PENDING = -1,       /* tt_emu_launch_begin / _wait: the launch is still running */
  TT_EMU_BUSY = -2,          /* tt_emu_launch_begin: another launch holds the runtime; try again */
  TT_EMU_DONE = -3,          /* tt_emu_launch_wait: that launch is not running (any more): see its result */
};

/* Non-fatal events reported back (e.g. integer division by zero: result undefined on Metal). */
enum {
  TT_EV_DIV_ZERO = 1,
  TT_EV_DIV_OVERFLOW = 2, /* INT_MIN / -1 */
  TT_EV_SHIFT = 3,        /* shift count >= bit width or negative */
};

typedef struct tt_event {
  uint32_t kind, line, col, count;
  int64_t a, b; /* operands of the first occurrence */
  char file[64];
} tt_event;

typedef struct tt_launch_result {
  int32_t status;
  int32_t slot;       /* buffer slot involved, -1 if none */
  int64_t index;      /* element index (or byte offset if elem_size==0) of the bad access */
  int32_t is_write;   /* 1 write, 0 read, -1 unknown */
  uint32_t tg[3];     /* threadgroup where the error happened (UINT32_MAX if unknown) */
  int32_t thread;     /* thread_index_in_threadgroup, -1 if none */
  uint32_t nlines;    /* MSL lines involved (1-based, user's source) */
  uint32_t lines[TT_EMU_MAX_LINES];
  uint64_t pc;        /* faulting instruction (signals) */
  uint64_t pc_offset; /* pc relative to the containing object's load base */
  char pc_module[256];
  uint32_t nevents;
  uint32_t _pad;
  tt_event events[TT_EMU_MAX_EVENTS];
  char message[4096];
} tt_launch_result;

/* Launches run on the runtime's pool of host threads while the caller waits, so that the caller can
   react to Ctrl-C and enforce a timeout; one launch runs at a time per process (signal handlers are
   process-wide). `desc`, its buffers and `result` must stay valid until _wait returns a final status.

   `token` is the caller's name for its launch: _wait and _cancel act only on the launch begun with it,
   so a caller interrupted at any point can always cancel and wait for exactly its own launch.

   tt_emu_launch_begin: starts the launch. Returns TT_EMU_PENDING when it runs, TT_EMU_BUSY when another
     launch is in progress (after waiting up to `wait_ms` for it), or a final status (e.g. bad arguments).
   tt_emu_launch_wait: waits up to `wait_ms` for the launch. Returns TT_EMU_PENDING if it still runs;
     otherwise finishes it (results copied back only on success) and returns its final status;
     TT_EMU_DONE if no launch with this token is running (never begun, or already finished).
   tt_emu_launch_cancel: asks the launch to stop with `status` (TT_ERR_INTERRUPTED or TT_ERR_TIMEOUT);
     emulated threads are stopped wherever they are (a spinning loop included). The caller still calls
     _wait to collect the result.
   tt_emu_launch: begin + wait until done (the timeout in `desc` still applies). */
int tt_emu_launch_begin(const tt_launch_desc *desc, tt_launch_result *result, uint32_t wait_ms, uint64_t token);
int tt_emu_launch_wait(uint64_t token, uint32_t wait_ms);
void tt_emu_launch_cancel(uint64_t token, int32_t status);
int tt_emu_launch(const tt_launch_desc *desc, tt_launch_result *result);
int tt_emu_abi_version(void);
/* Microbenchmark helper: average nanoseconds per fiber switch (one direction) over n round trips. */
double tt_emu_bench_switch(uint32_t n);
/* 1 if the runtime was built with the portable ucontext fallback instead of the assembly switch. */
int tt_emu_uses_ucontext(void);

/* ---- hooks called from kernel code (metal_compat.h) ---- */

/* SIMD-group exchange area: each participating lane deposits up to 16 bytes and a 32-bit param.

   Whole-simdgroup execution: when the rendezvous completes, lane `first` runs before any other lane of the
   simdgroup resumes (it is the lane whose arrival completed the rendezvous, or, when the last missing lane
   returned instead, the first lane released). That lane may compute the operation for every lane at once
   (a simdgroup_matrix multiply, a reduction, a scan) and leave each lane's result in `val` (rewriting it)
   or `res`, or write through pointers the lanes deposited; the other lanes only read their result when they
   resume. While it works on lane l's memory it sets *op_lane = l, so that a fault names that lane. */
typedef struct tt_simd_xchg {
  unsigned char val[TT_EMU_SIMD_WIDTH][16];
  uint32_t param[TT_EMU_SIMD_WIDTH];
  uint32_t active; /* lanes that took part (bit per lane) */
  uint32_t nlanes; /* lanes that exist in this simdgroup (partial last simdgroup) */
  uint32_t first;  /* the lane that runs first after the rendezvous (see above) */
  uint32_t _pad;
  unsigned char res[16];      /* a result shared by all lanes (written by lane `first`) */
  volatile uint32_t *op_lane; /* see above; TT_EMU_NO_LANE when not working for another lane */
} tt_simd_xchg;

#define TT_EMU_NO_LANE 0xffffffffu

/* ---- simdgroup_matrix operations without a rendezvous (metal_simdgroup_matrix.h) ----

   Every simdgroup has a stream of simdgroup_matrix operations (load, store, multiply, diagonal constructor):
   op n is the n-th such call of each lane. A lane issues its ops without waiting for the others: the first
   lane at op n records the call site (and, for a multiply, the instantiation) in ring[n % TT_SGM_WINDOW]; the
   other lanes compare theirs with it (a mismatch is a divergence at once) and add their bit to `lanes`. Op n
   is complete when all 32 lanes have issued it; ops complete in order (`completed` counts them). A lane
   stays at most TT_SGM_WINDOW ops ahead of the op that completes next (it waits, __tt_sgm_wait).

   Fragment values shared by the simdgroup live in records (tt_sgm_rec): a simdgroup_load whose lanes pass the
   same arguments reads the whole 8x8 tile once, by the first lane, into a record, and each lane's fragment
   refers to it; a multiply is deferred: its record collects the operands (a record shared by the lanes, or the
   lane's own two elements) and the lane whose issue completes the op computes D for the whole simdgroup. A lane
   that reads a fragment whose multiply is not computed yet waits (__tt_sgm_wait) until it is. Records are
   reference-counted by the fragments (and pending multiplies) that refer to them.

   The runtime checks that the stream is complete (every lane issued every op) whenever the simdgroup meets
   otherwise (a barrier, a SIMD-group function) and when a lane returns, so that an op not reached by every
   lane is still reported. */
#define TT_SGM_WINDOW 128

typedef struct tt_sgm_rec {
  uint32_t refs; /* fragments and pending multiplies that refer to this record (while the op that makes it is not
                    complete, the references its lanes take are counted in the op: tt_sgm_op.drefs) */
  uint32_t done; /* d is valid */
  uint32_t own[3], refd[3]; /* multiply operand k: lanes that deposited their elements / referred to src[k][l] */
  struct tt_sgm_state *st;
  struct tt_sgm_rec *next_free;
  float d[64];     /* the value (a loaded tile, a multiply's result rounded to its type), as float; dense 8x8 */
  float in[3][64]; /* multiply operands: the parts of the lanes in own[k], deposited as values */
  struct tt_sgm_rec *src[3][TT_EMU_SIMD_WIDTH]; /* operand k of the lanes in refd[k]: this record's value */
} tt_sgm_rec;

/* One op of the stream. The first 64 bytes are what every lane touches when it issues a multiply. */
typedef struct tt_sgm_op {
  uint64_t site;    /* line << 32 | column */
  const void *tag;  /* the operation (and, for a multiply, its instantiation: element types) */
  tt_sgm_rec *rec;  /* multiply: its record; load: the tile, if the lanes' arguments agree */
  struct tt_sgm_rec *shared[3]; /* multiply operand k of the lanes not in rec->own[k] | rec->refd[k] */
  uint32_t lanes;   /* lanes that issued this op */
  uint32_t drefs;   /* references to rec taken by the lanes' destinations, added to rec->refs on completion */
  uint32_t cdrops;  /* references to shared[2] that lanes dropped (their old destination), taken on completion */
  uint32_t transpose;
  const void *ptr;  /* load: the first lane's arguments */
  uint64_t ld, ox, oy;
  const char *what; /* operation name, for messages */
} tt_sgm_op;

typedef struct tt_sgm_state {
  uint32_t n[TT_EMU_SIMD_WIDTH]; /* ops issued per lane */
  uint32_t issued, completed;
  uint32_t full;    /* lanes that exist in this simdgroup */
  uint32_t done;    /* lanes that returned */
  uint32_t waiting; /* lanes blocked in __tt_sgm_wait */
  uint32_t sg;      /* simdgroup index */
  tt_sgm_rec *free; /* unused records */
  volatile uint32_t *op_lane; /* as tt_simd_xchg.op_lane: the lane whose elements a whole-tile load reads */
  volatile uint32_t op_line, op_col; /* while a whole-tile load runs: its call site (for a fault's report) */
  tt_sgm_op ring[TT_SGM_WINDOW];
} tt_sgm_state;

enum {
  TT_SGM_NOT_ALL_LANES = 1, /* an op in a partial simdgroup or after a lane returned */
  TT_SGM_OTHER_SITE = 2,    /* op n at another call site than the lanes before */
  TT_SGM_OTHER_TYPES = 3,   /* op n in another instantiation of the same call site */
};

/* The calling lane's simdgroup stream; *lane receives the lane. */
tt_sgm_state *__tt_sgm_enter(uint32_t *lane);
/* Blocks the calling lane until another lane of its simdgroup completes an op (the caller re-checks what it
   waits for). `what`/line/col say where it waits (deadlock reports). */
void __tt_sgm_wait(tt_sgm_state *st, const char *what, uint32_t line, uint32_t col);
/* Makes the waiting lanes of the simdgroup runnable. */
void __tt_sgm_wake(tt_sgm_state *st);
/* A new record (st->free was empty). */
tt_sgm_rec *__tt_sgm_grow(tt_sgm_state *st);
/* Fails the launch for the op that `lane` was issuing (why: TT_SGM_*). */
void __tt_sgm_fail(tt_sgm_state *st, int32_t why, uint32_t lane, const char *what, uint32_t line, uint32_t col)
    __attribute__((noreturn));

/* Threadgroup barrier: every live thread of the threadgroup must arrive at the same call site. */
void __tt_barrier(uint32_t flags, uint32_t line, uint32_t col);
/* SIMD-group rendezvous (collectives and simdgroup_barrier). Returns the exchange area once all
   live lanes of the simdgroup have arrived at the same call site (same op name, line, column and value
   size); *lane receives the caller's lane. */
tt_simd_xchg *__tt_simd(const char *op, const void *val, uint32_t size, uint32_t param, uint32_t line,
                              uint32_t col, uint32_t *lane);
/* Per-threadgroup storage for `threadgroup` variables; `site` identifies the declaration. */
void *__tt_tg_alloc(uint32_t site, uint32_t size, uint32_t align, const char *name);
/* Abort the launch with an error (never returns). */
void __tt_fail(int32_t kind, const char *msg, uint32_t line, uint32_t col) __attribute__((noreturn));

#ifdef __cplusplus
}
#endif
#pragma GCC visibility pop
#endif /* TT_EMULATOR_RUNTIME_H */

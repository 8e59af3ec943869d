// Metal-on-CPU emulator runtime.
//
// Runs a compiled MSL kernel (see metal_compat.h and the generated trampoline) over a grid:
//   * threadgroups are spread over a pool of host threads ("workers"), handed out dynamically; the
//     caller of tt_emu_launch_begin/_wait only waits, so it can be interrupted (Ctrl-C) and enforce a
//     timeout while the workers run;
//   * inside a threadgroup every Metal thread is a fiber with its own stack. A fiber only gives up
//     the host thread at a barrier or a SIMD-group collective. When a thread returns, the same
//     fiber goes on with the next not-yet-started thread, so a kernel that never synchronises costs
//     one plain call per thread and never switches stacks;
//   * barriers and collectives are rendezvous points identified by their call site (MSL line and
//     column); threads waiting at different sites, or a threadgroup in which no thread can make
//     progress, abort the launch with an error that names the threads and lines;
//   * buffers are copied into private mappings fenced by PROT_NONE guard zones (end of data abutting
//     the trailing zone), faults are turned into errors that name the parameter and the element
//     index, results are copied back only when the launch succeeded;
//   * a launch is cancelled (timeout, Ctrl-C) by a flag that the runtime's hooks check and by a signal
//     (kCancelSignal) sent to each worker: a worker executing kernel code leaves it like after a fault,
//     so loops without any barrier (a spin on a flag) are stopped too.
//
// Platforms: Linux (x86-64, AArch64) and macOS (arm64; x86-64 Macs use the ucontext fallback). Define
// TT_EMU_UCONTEXT to use <ucontext.h> instead of the assembly context switch.

#if defined(__APPLE__)
#if !defined(__aarch64__) && !defined(TT_EMU_UCONTEXT)
#define TT_EMU_UCONTEXT 1 // no hand-written switch for x86-64 Mach-O
#endif
#ifdef TT_EMU_UCONTEXT
#define _XOPEN_SOURCE 700 // <ucontext.h>'s (deprecated) routines require it on macOS
#endif
#define _DARWIN_C_SOURCE 1 // keep MAP_ANON, NSIG, dladdr visible next to _XOPEN_SOURCE
#elif !defined(_GNU_SOURCE)
#define _GNU_SOURCE 1
#endif

#include "emulator_runtime.h"
#include "emulator_tools.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <dlfcn.h>
#include <errno.h>
#include <map>
#include <mutex>
#include <new>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <unordered_map>
#include <vector>
#if defined(__APPLE__)
#include <sys/ucontext.h>
#else
#include <ucontext.h>
#endif
#if defined(TT_EMU_UCONTEXT) && defined(__APPLE__)
#include <ucontext.h>
#endif

#if !defined(__x86_64__) && !defined(__aarch64__) && !defined(TT_EMU_UCONTEXT)
#define TT_EMU_UCONTEXT 1
#endif

#ifndef MAP_STACK
#define MAP_STACK 0 // Linux-only hint
#endif
#ifndef MAP_NORESERVE
#define MAP_NORESERVE 0
#endif

#define TT_EXPORT extern "C" __attribute__((visibility("default")))

// Assembly symbol names and ELF-only directives.
#if defined(__APPLE__)
#define TT_ASM_SYM(name) "_" #name
#define TT_ASM_FUNC(name) ".private_extern _" #name "\n.globl _" #name "\n"
#define TT_ASM_END(name) ""
#else
#define TT_ASM_SYM(name) #name
#define TT_ASM_FUNC(name) ".hidden " #name "\n.globl " #name "\n.type " #name ",%function\n"
#define TT_ASM_END(name) ".size " #name ", .-" #name "\n"
#endif

namespace {

// ------------------------------------------------------------------------------------------------
// Execution contexts
// ------------------------------------------------------------------------------------------------

typedef void (*ctx_fn)(void *);

#ifndef TT_EMU_UCONTEXT
// Minimal switch: save the callee-saved registers on the current stack, store the stack pointer,
// load the other stack pointer, restore its registers and return into it. The floating-point
// control state (MXCSR / x87 CW, FPCR) is shared by all fibers of a host thread and not switched.
extern "C" void tt_ctx_switch(void **save_sp, void *new_sp);
extern "C" void tt_ctx_start(void);

#if defined(__x86_64__)
__asm__(".text\n"
        ".p2align 4\n" TT_ASM_FUNC(tt_ctx_switch) TT_ASM_SYM(tt_ctx_switch) ":\n"
        "  pushq %rbp\n"
        "  pushq %rbx\n"
        "  pushq %r12\n"
        "  pushq %r13\n"
        "  pushq %r14\n"
        "  pushq %r15\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  popq %r15\n"
        "  popq %r14\n"
        "  popq %r13\n"
        "  popq %r12\n"
        "  popq %rbx\n"
        "  popq %rbp\n"
        "  ret\n" TT_ASM_END(tt_ctx_switch)
        ".p2align 4\n" TT_ASM_FUNC(tt_ctx_start) TT_ASM_SYM(tt_ctx_start) ":\n"
        "  movq %r12, %rdi\n"
        "  callq *%r13\n"
        "  ud2\n" TT_ASM_END(tt_ctx_start));
static const int kFrameWords = 7; // r15 r14 r13 r12 rbx rbp ret
#elif defined(__aarch64__)
__asm__(".text\n"
        ".p2align 4\n" TT_ASM_FUNC(tt_ctx_switch) TT_ASM_SYM(tt_ctx_switch) ":\n"
        "  sub sp, sp, #160\n"
        "  stp x19, x20, [sp, #0]\n"
        "  stp x21, x22, [sp, #16]\n"
        "  stp x23, x24, [sp, #32]\n"
        "  stp x25, x26, [sp, #48]\n"
        "  stp x27, x28, [sp, #64]\n"
        "  stp x29, x30, [sp, #80]\n"
        "  stp d8, d9, [sp, #96]\n"
        "  stp d10, d11, [sp, #112]\n"
        "  stp d12, d13, [sp, #128]\n"
        "  stp d14, d15, [sp, #144]\n"
        "  mov x2, sp\n"
        "  str x2, [x0]\n"
        "  mov sp, x1\n"
        "  ldp x19, x20, [sp, #0]\n"
        "  ldp x21, x22, [sp, #16]\n"
        "  ldp x23, x24, [sp, #32]\n"
        "  ldp x25, x26, [sp, #48]\n"
        "  ldp x27, x28, [sp, #64]\n"
        "  ldp x29, x30, [sp, #80]\n"
        "  ldp d8, d9, [sp, #96]\n"
        "  ldp d10, d11, [sp, #112]\n"
        "  ldp d12, d13, [sp, #128]\n"
        "  ldp d14, d15, [sp, #144]\n"
        "  add sp, sp, #160\n"
        "  ret\n" TT_ASM_END(tt_ctx_switch)
        ".p2align 4\n" TT_ASM_FUNC(tt_ctx_start) TT_ASM_SYM(tt_ctx_start) ":\n"
        "  mov x0, x19\n"
        "  blr x20\n"
        "  brk #0\n" TT_ASM_END(tt_ctx_start));
#endif

struct Ctx {
  void *sp = nullptr;
};

inline void ctx_init(Ctx *c, char *stack_lo, size_t size, ctx_fn fn, void *arg) {
  uintptr_t top = ((uintptr_t)stack_lo + size) & ~(uintptr_t)15;
#if defined(__x86_64__)
  uintptr_t *sp = (uintptr_t *)(top - kFrameWords * sizeof(uintptr_t));
  sp[0] = 0;                        // r15
  sp[1] = 0;                        // r14
  sp[2] = (uintptr_t)fn;            // r13
  sp[3] = (uintptr_t)arg;           // r12
  sp[4] = 0;                        // rbx
  sp[5] = 0;                        // rbp
  sp[6] = (uintptr_t)&tt_ctx_start; // return address; rsp == top (16-aligned) after ret
#else
  uintptr_t *sp = (uintptr_t *)(top - 160);
  memset(sp, 0, 160);
  sp[0] = (uintptr_t)arg;           // x19
  sp[1] = (uintptr_t)fn;            // x20
  sp[11] = (uintptr_t)&tt_ctx_start; // x30
#endif
  c->sp = sp;
}
inline void ctx_switch(Ctx *from, Ctx *to) { tt_ctx_switch(&from->sp, to->sp); }

#else // TT_EMU_UCONTEXT

struct Ctx {
  ucontext_t uc;
};
static void uc_entry(unsigned fhi, unsigned flo, unsigned ahi, unsigned alo) {
  ctx_fn fn = (ctx_fn)(((uintptr_t)fhi << 32) | flo);
  void *arg = (void *)(((uintptr_t)ahi << 32) | alo);
  fn(arg);
  abort();
}
inline void ctx_init(Ctx *c, char *stack_lo, size_t size, ctx_fn fn, void *arg) {
  getcontext(&c->uc);
  c->uc.uc_stack.ss_sp = stack_lo;
  c->uc.uc_stack.ss_size = size;
  c->uc.uc_link = nullptr;
  uintptr_t f = (uintptr_t)fn, a = (uintptr_t)arg;
  makecontext(&c->uc, (void (*)())uc_entry, 4, (unsigned)(f >> 32), (unsigned)f, (unsigned)(a >> 32),
              (unsigned)a);
}
inline void ctx_switch(Ctx *from, Ctx *to) { swapcontext(&from->uc, &to->uc); }
#endif

// ------------------------------------------------------------------------------------------------
// Data structures
// ------------------------------------------------------------------------------------------------

size_t g_page = 4096;
// PROT_NONE zones around buffers and threadgroup memory: wide enough that a strided or indexed access a
// long way past the end (e.g. a wrong row stride) still faults instead of landing in unrelated memory.
// They only reserve address space (no memory, no commit charge). 8 GB covers every int32 element index of
// 4-byte elements (Triton's offsets are int32 unless they need more), on either side.
const size_t kGuardBytes = (size_t)8 << 30;
const size_t kTgGuardBytes = (size_t)1 << 20;
size_t g_guard = kGuardBytes;
size_t g_tg_guard = kTgGuardBytes;
// Sent to the workers to stop a cancelled launch (see on_cancel_signal). SIGURG: exists on Linux and
// macOS, ignored by default (a late one after the handlers are restored is harmless) and unused by
// Python; it is only ever sent to the runtime's own pool threads, and only while a launch runs.
const int kCancelSignal = SIGURG;

// T_SGM: blocked in __tt_sgm_wait (a simdgroup_matrix result or the op window; see tt_sgm_state)
enum : uint8_t { T_UNSTARTED, T_RUNNING, T_READY, T_BARRIER, T_SIMD, T_DONE, T_SGM };

struct Fiber {
  Ctx ctx;
  char *map = nullptr; // guard page + stack
  size_t maplen = 0;
  char *stack_lo = nullptr;
  size_t stack_size = 0;
  uint32_t thread = 0;
  Fiber *next_free = nullptr;
  // tools (initcheck of private arrays): a byte per stack byte (written or not), the part of the stack the
  // running thread's kernel code owns ([tfill, ttop), filled with kStackSentinel at its start) and the lowest
  // byte any thread on this stack touched (tlow)
  uint8_t *tinit = nullptr;
  uintptr_t tfill = 0, ttop = 0, tlow = 0;
};

// Where a blocked thread is: its fiber and the call site it waits at (op name, MSL line and column) and, for
// SIMD-group functions, the size of the value it deposited. Written when it blocks; its state (T_*) is kept
// apart (Worker::state), the one byte every thread writes.
struct ThreadSt {
  Fiber *fiber;
  uint16_t size;
  uint32_t line, col;
  const char *what;
};

struct SimdGroupSt {
  uint32_t full, arrived, done, gen;
  tt_simd_xchg x[2];
};

struct TgSite {
  uint32_t site, size;
  char *ptr;
  const char *name;
};

struct Region {
  char *map = nullptr;
  size_t maplen = 0;
  char *body = nullptr;
  size_t bodylen = 0;
};

struct Group {
  Region r;
  uintptr_t lo = 0, hi = 0; // host span
  char *data = nullptr;     // copy of host[lo, hi)
  bool readonly = true;
  bool scalar = false;
  std::vector<int> members; // indices into desc->buffers
};

struct Launch;
struct ToolWorker; // the sanitizer and profiler (emulator_tools.h): null unless the launch was armed
struct ToolLaunch;

struct Worker {
  int id = 0;
  pthread_t thread;
  Launch *L = nullptr;
  volatile bool active = false; // running a threadgroup: faults are ours
  // lane of the current simdgroup whose memory a whole-simdgroup operation is touching (tt_simd_xchg.op_lane)
  volatile uint32_t op_lane = TT_EMU_NO_LANE;
  // 1 while the current fiber executes kernel code (not a runtime hook): a cancellation signal may
  // then leave it at once (see on_cancel_signal); runtime code is only left at its own checks.
  volatile sig_atomic_t in_kernel = 0;
  sigjmp_buf jb;
  Ctx main;
  // fibers
  std::vector<Fiber *> fibers;
  Fiber *free_list = nullptr;
  size_t stack_size = 0;
  Fiber *cur_fiber = nullptr;
  uint32_t cur_thread = 0;
  // current threadgroup
  uint32_t N = 0, nsg = 0;
  uint32_t tgpos[3] = {0, 0, 0};
  tt_thread_info ti_proto;
  uint32_t next_unstarted = 0, n_done = 0, n_barrier = 0;
  // A range of threads that the kernel's entry point runs one after the other by itself (see fiber_main): its
  // first thread, UINT32_MAX when none runs; the threads before w->cur_thread have returned but are not yet
  // counted (settle_range). range_stop tells the entry point to return after the current thread.
  uint32_t range_lo = UINT32_MAX;
  volatile uint32_t range_stop = 0;
  uint32_t rq_head = 0, rq_count = 0;
  uint16_t rq[TT_EMU_MAX_THREADS];
  uint16_t order[TT_EMU_MAX_THREADS]; // start / release order of the threads (TT_SCHED_*)
  ThreadSt th[TT_EMU_MAX_THREADS];
  uint8_t state[TT_EMU_MAX_THREADS]; // T_* of each thread: 1 KB, where ThreadSt's 32 KB would leave L1 per threadgroup
  SimdGroupSt sg[TT_EMU_MAX_THREADS / TT_EMU_SIMD_WIDTH];
  // simdgroup_matrix op streams and every record allocated for each simdgroup (reused by later threadgroups)
  tt_sgm_state sgm[TT_EMU_MAX_THREADS / TT_EMU_SIMD_WIDTH];
  std::vector<tt_sgm_rec *> sgm_recs[TT_EMU_MAX_THREADS / TT_EMU_SIMD_WIDTH];
  // threadgroup memory: [guard][TT_EMU_TG_MEM_LIMIT bytes][guard], allocated top-down
  char *tg_map = nullptr;
  char *tg_lo = nullptr, *tg_hi = nullptr, *tg_top = nullptr;
  TgSite sites[64];
  int nsites = 0;
  // signal alternate stack
  char *altstack = nullptr;
  size_t altstack_size = 0;
  // fault captured by the signal handler
  volatile int fault_sig = 0;
  void *fault_addr = nullptr;
  uintptr_t fault_pc = 0;
  int fault_write = -1;
  uintptr_t fault_base = 0; // base register of the faulting access (0: unknown), see access_operand
  bool fault_noncanonical = false; // fault_addr is outside the 48-bit address space
  // non-fatal events of this launch
  uint32_t nevents = 0;
  tt_event events[TT_EMU_MAX_EVENTS];
  // tools: this launch's state (null when it runs without them), kept for the next launch with tools
  ToolWorker *tw = nullptr, *tw_keep = nullptr;
  uint32_t barrier_flags = 0; // mem_flags of the barrier the threads wait at (for the tools)
};

struct Launch {
  const tt_launch_desc *d = nullptr;
  tt_launch_result *res = nullptr;
  void *slots[TT_EMU_MAX_SLOTS + 1];
  std::vector<Group> groups;
  std::atomic<uint64_t> next_tg{0};
  std::atomic<uint64_t> done_tg{0};
  uint64_t total_tg = 0;
  std::atomic<int> abort{0};
  std::atomic<int> cancel{0}; // TT_ERR_TIMEOUT / TT_ERR_INTERRUPTED once cancelled
  std::mutex err_mu;
  bool has_error = false;
  int nworkers = 0;
  uint64_t token = 0; // the caller's name for this launch (tt_emu_launch_begin)
  std::chrono::steady_clock::time_point start;
  ToolLaunch *tools = nullptr; // armed (tt_emu_tools_arm): the launch runs with the sanitizer / profiler
};

// The hooks read this on every barrier and SIMD-group function: initial-exec TLS is a plain %fs-relative load
// instead of a __tls_get_addr call (the runtime is dlopen'ed; one pointer fits in glibc's static TLS surplus).
#if defined(__linux__)
__attribute__((tls_model("initial-exec")))
#endif
thread_local Worker *tl_worker = nullptr;

// Marks runtime code entered from kernel code (a hook): a cancellation signal must not leave it
// half-way (it may hold a lock or be inside malloc). Restores the flag on the way back.
struct HookScope {
  Worker *w;
  sig_atomic_t saved;
  explicit HookScope(Worker *w_) : w(w_), saved(w_->in_kernel) { w->in_kernel = 0; }
  ~HookScope() { w->in_kernel = saved; }
};

// The tools (sanitizer and profiler; "Tools" section below). Each is called only when w->tw is set.
void tools_flush(Worker *w);                            // before a thread may yield: settle its pending check
void tools_barrier_done(Worker *w);                     // a threadgroup barrier completed
void tools_simd_done(Worker *w, uint32_t s, const char *what, uint32_t param); // a SIMD rendezvous completed
size_t tools_stack_fill(Worker *w, Fiber *f);          // bytes of stack initcheck fills for the next thread (0: none)
void tools_thread_start(Worker *w, Fiber *f, unsigned char *below, size_t n); // fills them, [below, below + n)
void tools_thread_done(Worker *w, uint32_t t);          // it returned (after the runtime's own bookkeeping)
void tools_tg_begin(Worker *w, uint64_t linear);
bool tools_tg_end(Worker *w);                           // false: the launch fails (a sanitizer finding)
ToolWorker *tools_worker(Worker *w, Launch *L);        // this worker's tool state for launch L (null: no memory)

// ------------------------------------------------------------------------------------------------
// Error reporting
// ------------------------------------------------------------------------------------------------

struct Msg {
  char buf[4096];
  size_t n = 0;
  Msg() { buf[0] = 0; }
  void add(const char *fmt, ...) __attribute__((format(printf, 2, 3))) {
    if (n >= sizeof(buf) - 1)
      return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf + n, sizeof(buf) - n, fmt, ap);
    va_end(ap);
    if (k > 0)
      n = std::min(sizeof(buf) - 1, n + (size_t)k);
  }
};

void add_line(tt_launch_result *r, uint32_t line) {
  if (!line)
    return;
  for (uint32_t i = 0; i < r->nlines; i++)
    if (r->lines[i] == line)
      return;
  if (r->nlines < TT_EMU_MAX_LINES)
    r->lines[r->nlines++] = line;
}

// Records the first error of a launch. Returns false if another error was recorded first.
bool begin_error(Launch *L, Worker *w, int status, int thread) {
  std::lock_guard<std::mutex> lk(L->err_mu);
  if (L->has_error)
    return false;
  L->has_error = true;
  L->abort.store(1);
  tt_launch_result *r = L->res;
  r->status = status;
  if (w) {
    memcpy(r->tg, w->tgpos, sizeof(r->tg));
    r->thread = thread;
  } else {
    r->tg[0] = r->tg[1] = r->tg[2] = UINT32_MAX; // not attributable to a threadgroup
  }
  return true;
}

void set_message(Launch *L, const Msg &m) {
  snprintf(L->res->message, sizeof(L->res->message), "kernel '%s': %s", L->d->kernel_name ? L->d->kernel_name : "?",
           m.buf);
}

void where(Msg &m, Worker *w, int thread) {
  m.add(" in threadgroup (%u,%u,%u)", w->tgpos[0], w->tgpos[1], w->tgpos[2]);
  if (thread >= 0) {
    const tt_launch_desc *d = w->L->d;
    uint32_t t = (uint32_t)thread, tx = d->tg[0], ty = d->tg[1];
    m.add(", thread %u (position (%u,%u,%u), simdgroup %u lane %u)", t, t % tx, (t / tx) % ty, t / (tx * ty),
          t / TT_EMU_SIMD_WIDTH, t % TT_EMU_SIMD_WIDTH);
  }
}

// Abort the current launch from kernel (fiber) context.
[[noreturn]] void fail_here(Worker *w) {
  w->active = false;
  w->in_kernel = 0;
  w->fault_sig = 0;
  siglongjmp(w->jb, 1);
}

void describe_waiters(Worker *w, Msg &m, uint8_t only_state, int only_simdgroup);

// Records why a cancelled launch stopped and where the threads of this worker's threadgroup were.
// `pc`: the kernel instruction the running thread was stopped at (0: it was in a runtime hook).
void report_cancel(Worker *w, uintptr_t pc) {
  Launch *L = w->L;
  int status = L->cancel.load();
  int thread = (int)w->cur_thread;
  if (!begin_error(L, w, status, thread))
    return;
  Msg m;
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - L->start).count();
  if (status == TT_ERR_TIMEOUT)
    m.add("timed out: stopped after %.2f s (TRITON_APPLE_EMULATOR_TIMEOUT allows %.2f s)", secs,
          L->d->timeout_ms / 1000.0);
  else
    m.add("interrupted after %.2f s", secs);
  m.add("; %llu of %llu threadgroups had finished; stopped", (unsigned long long)L->done_tg.load(),
        (unsigned long long)L->total_tg);
  where(m, w, thread);
  if (pc)
    m.add(", which was running kernel code (a loop that never ends? e.g. a spin on a value that no running "
          "thread changes: only TRITON_APPLE_EMULATOR_THREADS threadgroups run at once)");
  else
    m.add(", which was at %s", w->th[thread].what ? w->th[thread].what : "a runtime call");
  m.add("; threads of that threadgroup:");
  describe_waiters(w, m, 0, -1);
  tt_launch_result *r = L->res;
  r->pc = pc;
  Dl_info info;
  if (pc && dladdr((void *)pc, &info) && info.dli_fname) {
    r->pc_offset = pc - (uintptr_t)info.dli_fbase;
    snprintf(r->pc_module, sizeof(r->pc_module), "%s", info.dli_fname);
  }
  set_message(L, m);
}

// Called by the runtime's hooks: leaves a cancelled launch (the signal does not interrupt hooks).
inline void check_cancel(Worker *w) {
  if (w->L->cancel.load(std::memory_order_relaxed)) {
    report_cancel(w, 0);
    fail_here(w);
  }
}

// ------------------------------------------------------------------------------------------------
// Fibers
// ------------------------------------------------------------------------------------------------

void fiber_main(void *arg);

Fiber *new_fiber(Worker *w) {
  size_t guard = std::max<size_t>(g_page, 16 * 1024); // kernels are built with -fstack-clash-protection
  size_t len = guard + w->stack_size;
  char *m = (char *)mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK,
                         -1, 0);
  if (m == MAP_FAILED)
    return nullptr;
  mprotect(m, guard, PROT_NONE);
  Fiber *f = new Fiber();
  f->map = m;
  f->maplen = len;
  f->stack_lo = m + guard;
  f->stack_size = w->stack_size;
  w->fibers.push_back(f);
  return f;
}

void free_all_fibers(Worker *w) {
  for (Fiber *f : w->fibers) {
    munmap(f->map, f->maplen);
    if (f->tinit)
      munmap(f->tinit, f->stack_size);
    delete f;
  }
  w->fibers.clear();
  w->free_list = nullptr;
}

void reset_fibers(Worker *w) {
  w->free_list = nullptr;
  for (Fiber *f : w->fibers) {
    f->next_free = w->free_list;
    w->free_list = f;
  }
}

inline void release_fiber(Worker *w, Fiber *f) {
  f->next_free = w->free_list;
  w->free_list = f;
}

// Fiber ready to start thread `t` from the top of its stack.
Fiber *start_fiber(Worker *w, uint32_t t) {
  Fiber *f = w->free_list;
  if (f) {
    w->free_list = f->next_free;
  } else {
    f = new_fiber(w);
    if (!f) {
      if (begin_error(w->L, w, TT_ERR_INTERNAL, -1)) {
        Msg m;
        m.add("cannot allocate a %zu KB stack for emulated thread %u (%zu stacks in use on this host thread; "
              "lower TRITON_APPLE_EMULATOR_STACK_KB or TRITON_APPLE_EMULATOR_THREADS, or raise vm.max_map_count)",
              w->stack_size / 1024, t, w->fibers.size());
        where(m, w, -1);
        set_message(w->L, m);
      }
      fail_here(w);
    }
  }
  f->thread = t;
  ctx_init(&f->ctx, f->stack_lo, f->stack_size, fiber_main, f);
  return f;
}

// ------------------------------------------------------------------------------------------------
// Scheduling within a threadgroup
// ------------------------------------------------------------------------------------------------

inline void rq_push(Worker *w, uint32_t t) {
  w->rq[(w->rq_head + w->rq_count) % TT_EMU_MAX_THREADS] = (uint16_t)t;
  w->rq_count++;
}
inline uint32_t rq_pop(Worker *w) {
  uint32_t t = w->rq[w->rq_head];
  w->rq_head = (w->rq_head + 1) % TT_EMU_MAX_THREADS;
  w->rq_count--;
  return t;
}

// The thread's own builtins in `ti`, whose launch and threadgroup fields a fiber copies from ti_proto once
// when it starts (a fiber starts afresh in every threadgroup): per thread only these change.
inline void set_thread_ids(tt_thread_info *ti, uint32_t t, bool one_d) {
  if (one_d) { // 1-D threadgroup: no divisions
    ti->tpos[0] = t;
  } else {
    uint32_t tx = ti->tptg[0], ty = ti->tptg[1];
    ti->tpos[0] = t % tx;
    ti->tpos[1] = (t / tx) % ty;
    ti->tpos[2] = t / (tx * ty);
  }
  ti->tid = t;
  ti->lane = t % TT_EMU_SIMD_WIDTH;
  ti->sg = t / TT_EMU_SIMD_WIDTH;
}

// Threads [lo, hi) of a range (see fiber_main) have returned: what thread_finished does for each, less what
// cannot apply to them. A range starts only when every other started thread has returned, no simdgroup_matrix
// op is outstanding and no tool runs, and ends at the first runtime hook that needs the threadgroup's state,
// so no thread waits at a barrier or collective and no lane skipped an op while these ran.
void settle_returned(Worker *w, uint32_t lo, uint32_t hi) {
  if (lo >= hi)
    return;
  memset(w->state + lo, T_DONE, hi - lo);
  w->n_done += hi - lo;
  for (uint32_t s = lo / TT_EMU_SIMD_WIDTH; s * TT_EMU_SIMD_WIDTH < hi; s++) {
    uint32_t a = std::max(lo, s * TT_EMU_SIMD_WIDTH) - s * TT_EMU_SIMD_WIDTH;
    uint32_t b = std::min(hi, (s + 1) * TT_EMU_SIMD_WIDTH) - s * TT_EMU_SIMD_WIDTH;
    uint32_t bits = (uint32_t)((((uint64_t)1 << b) - 1) & ~(((uint64_t)1 << a) - 1));
    w->sg[s].done |= bits;
    w->sgm[s].done |= bits;
  }
}

// Ends the running range, if any, at the current thread: the threads before it have returned, it runs on
// with the usual bookkeeping (the entry point returns after it) and the threads after it start as usual.
// Called by every hook that reads or changes the threadgroup's thread states, and before they are described.
inline void settle_range(Worker *w) {
  if (__builtin_expect(w->range_lo == UINT32_MAX, 1))
    return;
  uint32_t lo = w->range_lo, t = w->cur_thread;
  w->range_lo = UINT32_MAX;
  w->range_stop = 1;
  settle_returned(w, lo, t);
  w->state[t] = T_RUNNING;
  w->next_unstarted = t + 1; // ranges run in TT_SCHED_FORWARD order only: order[i] == i
}

// The current fiber blocks: run something else. Returns when this thread is resumed.
void schedule_away(Worker *w) {
  Fiber *f = w->cur_fiber;
  uint32_t t = w->cur_thread;
  w->th[t].fiber = f; // where it resumes
  if (w->rq_count) {
    uint32_t n = rq_pop(w);
    ctx_switch(&f->ctx, &w->th[n].fiber->ctx);
  } else if (w->next_unstarted < w->N) {
    Fiber *nf = start_fiber(w, w->order[w->next_unstarted++]);
    ctx_switch(&f->ctx, &nf->ctx);
  } else {
    ctx_switch(&f->ctx, &w->main); // nothing runnable: the scheduler reports the deadlock
  }
  w->cur_fiber = f;
  w->cur_thread = t;
  w->state[t] = T_RUNNING;
}

void append_ranges(Msg &m, const std::vector<uint32_t> &ids) {
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1)
      j++;
    if (i)
      m.add(",");
    if (j == i)
      m.add("%u", ids[i]);
    else
      m.add("%u-%u", ids[i], ids[j]);
    i = j + 1;
  }
}

struct SiteKey {
  const char *what;
  uint32_t line, col;
  bool operator<(const SiteKey &o) const {
    if (line != o.line)
      return line < o.line;
    if (col != o.col)
      return col < o.col;
    return strcmp(what, o.what) < 0;
  }
};

// Describe where the threads of the threadgroup are; used for divergence, deadlock and cancellation.
void describe_waiters(Worker *w, Msg &m, uint8_t only_state, int only_simdgroup) {
  settle_range(w);
  std::map<SiteKey, std::vector<uint32_t>> sites;
  std::vector<uint32_t> done, other, unstarted;
  for (uint32_t t = 0; t < w->N; t++) {
    if (only_simdgroup >= 0 && t / TT_EMU_SIMD_WIDTH != (uint32_t)only_simdgroup)
      continue;
    const ThreadSt &ts = w->th[t];
    const uint8_t state = w->state[t];
    if (state == T_DONE) {
      done.push_back(t);
    } else if (state == T_UNSTARTED) {
      unstarted.push_back(t);
    } else if ((state == T_BARRIER || state == T_SIMD || state == T_SGM) && (!only_state || state == only_state)) {
      sites[SiteKey{ts.what ? ts.what : "?", ts.line, ts.col}].push_back(t);
      add_line(w->L->res, ts.line);
    } else if (state != T_BARRIER && state != T_SIMD && state != T_SGM) {
      other.push_back(t);
    }
  }
  bool first = true;
  auto start = [&] {
    m.add(first ? "\n  threads " : ";\n  threads ");
    first = false;
  };
  for (auto &kv : sites) {
    start();
    append_ranges(m, kv.second);
    m.add(" wait at %s (MSL line %u:%u)", kv.first.what, kv.first.line, kv.first.col);
  }
  if (!other.empty()) {
    start();
    append_ranges(m, other);
    m.add(" are still running");
  }
  if (!unstarted.empty()) {
    start();
    append_ranges(m, unstarted);
    m.add(" have not started");
  }
  if (!done.empty()) {
    start();
    append_ranges(m, done);
    m.add(" have returned");
  }
}

[[noreturn]] void divergence(Worker *w, const char *kind, uint8_t state, int simdgroup) {
  if (begin_error(w->L, w, TT_ERR_DIVERGENCE, -1)) {
    Msg m;
    m.add("divergent %s", kind);
    where(m, w, -1);
    if (simdgroup >= 0)
      m.add(", simdgroup %d", simdgroup);
    m.add(": all live threads must reach the same call site;");
    describe_waiters(w, m, state, simdgroup);
    set_message(w->L, m);
  }
  fail_here(w);
}

void add_lane_ranges(Msg &m, uint32_t s, uint32_t mask) {
  std::vector<uint32_t> ids;
  for (uint32_t l = 0; l < TT_EMU_SIMD_WIDTH; l++)
    if (mask >> l & 1)
      ids.push_back(s * TT_EMU_SIMD_WIDTH + l);
  append_ranges(m, ids);
}

// The simdgroup_matrix ops of simdgroup s must all be complete when its lanes meet at a barrier or a SIMD-group
// function (`at`: which), or when a lane returns (`returned`: that thread): an op issued by some lanes only is
// one that the others skipped.
__attribute__((noinline, cold)) void sgm_not_converged(Worker *w, uint32_t s, const char *at, int returned) {
  tt_sgm_state &st = w->sgm[s];
  if (returned >= 0) {
    uint32_t lane = (uint32_t)returned % TT_EMU_SIMD_WIDTH;
    if (st.n[lane] == st.issued)
      return;
    const tt_sgm_op &op = st.ring[st.n[lane] % TT_SGM_WINDOW]; // the first op the returning lane skipped
    if (begin_error(w->L, w, TT_ERR_SIMD, returned)) {
      Msg m;
      m.add("%s needs all 32 lanes of the simdgroup, but only the lanes in mask 0x%08x take part "
            "(MSL line %u:%u; thread %d returned without it)",
            op.what, op.lanes, (uint32_t)(op.site >> 32), (uint32_t)op.site, returned);
      where(m, w, returned);
      add_line(w->L->res, (uint32_t)(op.site >> 32));
      set_message(w->L, m);
    }
    fail_here(w);
  }
  const tt_sgm_op &op = st.ring[st.completed % TT_SGM_WINDOW]; // the first op some lane did not issue
  uint32_t missing = st.full & ~op.lanes;
  if (begin_error(w->L, w, TT_ERR_DIVERGENCE, -1)) {
    Msg m;
    m.add("divergent simdgroup_matrix operation");
    where(m, w, -1);
    m.add(", simdgroup %u: all 32 lanes must reach the same call site; threads ", s);
    add_lane_ranges(m, s, op.lanes);
    m.add(" issued %s (MSL line %u:%u), threads ", op.what, (uint32_t)(op.site >> 32), (uint32_t)op.site);
    add_lane_ranges(m, s, missing);
    m.add(" reached %s without it;", at);
    add_line(w->L->res, (uint32_t)(op.site >> 32));
    describe_waiters(w, m, 0, (int)s);
    set_message(w->L, m);
  }
  fail_here(w);
}

// Runs for every thread that returns: the check itself stays inline, its report out of line.
inline void check_sgm_converged(Worker *w, uint32_t s, const char *at, int returned) {
  const tt_sgm_state &st = w->sgm[s];
  if (__builtin_expect(st.issued != st.completed, 0))
    sgm_not_converged(w, s, at, returned);
}

// All live threads wait at a barrier: check the call sites and release them.
void complete_barrier(Worker *w, int self) {
  const ThreadSt *ref = nullptr;
  for (uint32_t t = 0; t < w->N; t++) {
    const ThreadSt &ts = w->th[t];
    if (w->state[t] != T_BARRIER)
      continue;
    if (!ref)
      ref = &ts;
    else if (ts.line != ref->line || ts.col != ref->col)
      divergence(w, "threadgroup barrier", T_BARRIER, -1);
  }
  for (uint32_t s = 0; s < w->nsg; s++)
    check_sgm_converged(w, s, "a threadgroup barrier", -1);
  for (uint32_t k = 0; k < w->N; k++) {
    uint32_t t = w->order[k];
    if (w->state[t] != T_BARRIER)
      continue;
    if ((int)t == self) {
      w->state[t] = T_RUNNING;
    } else {
      w->state[t] = T_READY;
      rq_push(w, t);
    }
  }
  w->n_barrier = 0;
  if (w->tw)
    tools_barrier_done(w);
}

inline bool same_site(const ThreadSt &a, const ThreadSt &b) {
  return a.line == b.line && a.col == b.col && a.size == b.size && (a.what == b.what || strcmp(a.what, b.what) == 0);
}

// All live lanes of simdgroup s wait at a collective: check the call sites and release them. The lane that
// runs first afterwards (x->first: `self`, else the first one released) may complete the operation for
// all lanes before the others resume (see tt_simd_xchg).
void complete_simd(Worker *w, uint32_t s, int self) {
  SimdGroupSt &g = w->sg[s];
  ThreadSt *th = &w->th[s * TT_EMU_SIMD_WIDTH];
  const uint32_t arrived = g.arrived;
  const ThreadSt &ref = th[__builtin_ctz(arrived)];
  for (uint32_t m = arrived & (arrived - 1); m; m &= m - 1)
    if (!same_site(th[__builtin_ctz(m)], ref))
      divergence(w, "SIMD-group collective", T_SIMD, (int)s);
  check_sgm_converged(w, s, "a SIMD-group function", -1);
  tt_simd_xchg *x = &g.x[g.gen & 1];
  x->active = arrived;
  x->nlanes = (uint32_t)__builtin_popcount(g.full);
  x->op_lane = &w->op_lane;
  uint32_t first = TT_EMU_NO_LANE;
  if (self >= 0) {
    first = (uint32_t)self % TT_EMU_SIMD_WIDTH;
    w->state[s * TT_EMU_SIMD_WIDTH + first] = T_RUNNING;
  }
  uint32_t others = self >= 0 ? arrived & ~(1u << first) : arrived;
  if (w->L->d->schedule == TT_SCHED_FORWARD) {
    for (uint32_t m = others; m; m &= m - 1) {
      uint32_t l = (uint32_t)__builtin_ctz(m);
      w->state[s * TT_EMU_SIMD_WIDTH + l] = T_READY;
      rq_push(w, s * TT_EMU_SIMD_WIDTH + l);
    }
  } else {
    for (uint32_t m = others; m; m &= ~(1u << (31 - __builtin_clz(m)))) {
      uint32_t l = 31u - (uint32_t)__builtin_clz(m);
      w->state[s * TT_EMU_SIMD_WIDTH + l] = T_READY;
      rq_push(w, s * TT_EMU_SIMD_WIDTH + l);
    }
  }
  if (first == TT_EMU_NO_LANE) // released by a returning lane: the first lane pushed runs first
    first = w->L->d->schedule == TT_SCHED_FORWARD ? (uint32_t)__builtin_ctz(arrived)
                                                  : 31u - (uint32_t)__builtin_clz(arrived);
  x->first = first;
  g.arrived = 0;
  g.gen++;
  if (w->tw)
    tools_simd_done(w, s, ref.what, x->param[__builtin_ctz(arrived)]);
}

void thread_finished(Worker *w, uint32_t t) {
  if (w->tw)
    tools_flush(w);
  check_sgm_converged(w, t / TT_EMU_SIMD_WIDTH, nullptr, (int)t);
  w->sgm[t / TT_EMU_SIMD_WIDTH].done |= 1u << (t % TT_EMU_SIMD_WIDTH);
  w->state[t] = T_DONE;
  w->n_done++;
  SimdGroupSt &g = w->sg[t / TT_EMU_SIMD_WIDTH];
  g.done |= 1u << (t % TT_EMU_SIMD_WIDTH);
  if (g.arrived && (g.arrived | g.done) == g.full)
    complete_simd(w, t / TT_EMU_SIMD_WIDTH, -1);
  if (w->n_barrier && w->n_barrier + w->n_done == w->N)
    complete_barrier(w, -1);
  if (w->tw)
    tools_thread_done(w, t);
}

// No simdgroup_matrix op is issued and not yet complete.
inline bool sgm_idle(const Worker *w) {
  for (uint32_t s = 0; s < w->nsg; s++)
    if (w->sgm[s].issued != w->sgm[s].completed)
      return false;
  return true;
}

void fiber_main(void *arg) {
  Fiber *f = (Fiber *)arg;
  Worker *w = tl_worker;
  // What every thread this fiber runs shares, read once: a thread without barriers or SIMD-group functions
  // costs the bookkeeping below and its own code, nothing else (test_load_store_same_ptr-like launches run
  // 64 M such threads).
  tt_thread_info ti = w->ti_proto;
  const bool one_d = ti.tptg[0] == w->N;
  const tt_entry_fn entry = w->L->d->entry;
  void *const *slots = w->L->slots;
  const bool range_ok = one_d && w->L->d->schedule == TT_SCHED_FORWARD && !w->tw;
  w->cur_fiber = f;
  for (uint32_t t = f->thread;;) {
    w->cur_thread = t;
    w->state[t] = T_RUNNING;
    set_thread_ids(&ti, t, one_d);
    if (__builtin_expect(w->tw != nullptr, 0)) {
      // initcheck of private arrays: the stack the kernel's frames will take, just below this frame, is
      // filled with a sentinel from inside an array of this frame (a block-scoped VLA: the stack is back where
      // it was when the block ends, so the kernel's frames occupy exactly the bytes filled)
      size_t n = tools_stack_fill(w, f);
      if (n) {
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wunknown-warning-option"
#pragma clang diagnostic ignored "-Wvla-extension"
#pragma clang diagnostic ignored "-Wvla-cxx-extension"
        unsigned char below[n];  // a VLA on purpose (see above); clang's extension, the runtime is built by clang
#pragma clang diagnostic pop
        tools_thread_start(w, f, below, n);
      }
    }
    // With no other thread started and alive, the entry point runs this thread and the ones after it itself
    // (a range) until one reaches a hook that needs the others' states (settle_range): a threadgroup whose
    // threads never synchronise costs no bookkeeping per thread.
    uint32_t end = t + 1;
    if (range_ok && w->n_done + 1 == w->next_unstarted && end < w->N && sgm_idle(w)) {
      w->range_lo = t;
      w->range_stop = 0;
      end = w->N;
    }
    w->in_kernel = 1;
    uint32_t next = entry(slots, &ti, end, &w->cur_thread, &w->range_stop);
    w->in_kernel = 0;
    if (end == t + 1 || w->range_lo == UINT32_MAX) { // one thread, or a range ended early at thread next - 1
      t = next - 1;
      thread_finished(w, t);
    } else {
      w->range_lo = UINT32_MAX;
      settle_returned(w, t, next);
      w->next_unstarted = next;
    }
    if (w->rq_count) {
      release_fiber(w, f);
      uint32_t n = rq_pop(w);
      ctx_switch(&f->ctx, &w->th[n].fiber->ctx);
      __builtin_unreachable();
    }
    if (w->next_unstarted < w->N) {
      t = w->order[w->next_unstarted++]; // run the next thread on this same stack
      continue;
    }
    release_fiber(w, f);
    ctx_switch(&f->ctx, &w->main);
    __builtin_unreachable();
  }
}

void report_deadlock(Worker *w) {
  if (begin_error(w->L, w, TT_ERR_DEADLOCK, -1)) {
    Msg m;
    m.add("deadlock");
    where(m, w, -1);
    m.add(": no thread can make progress (barrier or SIMD-group collective not reached by every live thread "
          "of the threadgroup/simdgroup);");
    describe_waiters(w, m, 0, -1);
    set_message(w->L, m);
  }
}

bool run_threadgroup(Worker *w, uint64_t linear) {
  const tt_launch_desc *d = w->L->d;
  uint64_t gx = d->grid[0], gy = d->grid[1];
  w->tgpos[0] = (uint32_t)(linear % gx);
  w->tgpos[1] = (uint32_t)((linear / gx) % gy);
  w->tgpos[2] = (uint32_t)(linear / (gx * gy));
  memcpy(w->ti_proto.tgpos, w->tgpos, sizeof(w->tgpos));
  w->next_unstarted = 0;
  w->n_done = 0;
  w->n_barrier = 0;
  w->range_lo = UINT32_MAX;
  w->rq_head = w->rq_count = 0;
  for (uint32_t s = 0; s < w->nsg; s++) {
    SimdGroupSt &g = w->sg[s];
    g.arrived = g.done = 0;
    g.gen = 0;
    tt_sgm_state &st = w->sgm[s];
    memset(st.n, 0, sizeof(st.n));
    st.issued = st.completed = st.done = st.waiting = 0;
    st.full = g.full;
    st.sg = s;
    st.op_lane = &w->op_lane;
    st.op_line = st.op_col = 0;
    st.free = nullptr; // every record is free again (a failed threadgroup may have left some referenced)
    for (tt_sgm_rec *r : w->sgm_recs[s]) {
      r->next_free = st.free;
      st.free = r;
    }
  }
  w->nsites = 0;
  w->op_lane = TT_EMU_NO_LANE;
  w->tg_top = w->tg_hi;
  memset(w->state, T_UNSTARTED, w->N);
  reset_fibers(w);
  if (d->schedule == TT_SCHED_RANDOM) { // xorshift64*, Fisher-Yates; reproducible per (seed, threadgroup)
    uint64_t x = (d->seed ^ (linear * 0x9E3779B97F4A7C15ull)) | 1;
    for (uint32_t i = 0; i < w->N; i++)
      w->order[i] = (uint16_t)i;
    for (uint32_t i = w->N - 1; i > 0; i--) {
      x ^= x >> 12;
      x ^= x << 25;
      x ^= x >> 27;
      uint32_t j = (uint32_t)(((x * 0x2545F4914F6CDD1Dull) >> 32) % (i + 1));
      uint16_t tmp = w->order[i];
      w->order[i] = w->order[j];
      w->order[j] = tmp;
    }
  }
  if (w->tw)
    tools_tg_begin(w, linear);
  Fiber *f = start_fiber(w, w->order[w->next_unstarted++]);
  ctx_switch(&w->main, &f->ctx);
  if (w->n_done != w->N) {
    report_deadlock(w);
    return false;
  }
  return !w->tw || tools_tg_end(w);
}

// ------------------------------------------------------------------------------------------------
// Buffers
// ------------------------------------------------------------------------------------------------

const unsigned char kCanary = 0xA5;
// Buffer mappings are kept for the next launch (saves the mmap/mprotect of the guard zones), but only
// small ones and only up to kRegionPoolMax in all: a big launch must not leave its copies resident. The
// count is bounded too: each mapping reserves 2 x 8 GB of address space for its guard zones.
std::mutex g_region_mu;
std::multimap<size_t, Region> &g_region_pool = *new std::multimap<size_t, Region>();
size_t g_region_pool_bytes = 0;
const size_t kRegionPoolMax = (size_t)64 << 20;
const size_t kRegionPoolMaxEach = (size_t)8 << 20;
const size_t kRegionPoolMaxCount = 256;

inline size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

bool acquire_region(size_t need, Region *out) {
  size_t bodylen = round_up(need + 16, g_page);
  {
    std::lock_guard<std::mutex> lk(g_region_mu);
    auto it = g_region_pool.find(bodylen);
    if (it != g_region_pool.end()) {
      *out = it->second;
      g_region_pool.erase(it);
      g_region_pool_bytes -= out->bodylen;
      return true;
    }
  }
  size_t maplen = bodylen + 2 * g_guard;
  char *m = (char *)mmap(nullptr, maplen, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED)
    return false;
  if (mprotect(m + g_guard, bodylen, PROT_READ | PROT_WRITE) != 0) {
    munmap(m, maplen);
    return false;
  }
  out->map = m;
  out->maplen = maplen;
  out->body = m + g_guard;
  out->bodylen = bodylen;
  return true;
}

void release_region(Region &r, bool was_readonly) {
  if (!r.map)
    return;
  if (was_readonly)
    mprotect(r.body, r.bodylen, PROT_READ | PROT_WRITE);
  std::lock_guard<std::mutex> lk(g_region_mu);
  if (r.bodylen <= kRegionPoolMaxEach && g_region_pool_bytes + r.bodylen <= kRegionPoolMax &&
      g_region_pool.size() < kRegionPoolMaxCount) {
    g_region_pool.emplace(r.bodylen, r);
    g_region_pool_bytes += r.bodylen;
  } else {
    munmap(r.map, r.maplen);
  }
  r.map = nullptr;
}

// Groups buffers whose host spans overlap (the same tensor bound twice must stay aliased), copies
// each group into a guarded region and fills the slot table.
bool setup_buffers(Launch *L, Msg &err) {
  const tt_launch_desc *d = L->d;
  std::vector<int> order;
  for (uint32_t i = 0; i < d->nbuffers; i++) {
    const tt_buffer_desc &b = d->buffers[i];
    if (b.slot >= TT_EMU_MAX_SLOTS) {
      err.add("buffer slot %u out of range (Metal has %d: 0 to %d)", b.slot, TT_EMU_MAX_SLOTS, TT_EMU_MAX_SLOTS - 1);
      return false;
    }
    order.push_back((int)i);
  }
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    return (uintptr_t)d->buffers[a].host < (uintptr_t)d->buffers[b].host;
  });
  for (int i : order) {
    const tt_buffer_desc &b = d->buffers[i];
    uintptr_t lo = (uintptr_t)b.host, hi = lo + b.nbytes;
    bool scalar = b.flags & TT_BUF_SCALAR;
    if (!scalar && b.nbytes && !L->groups.empty()) {
      Group &g = L->groups.back();
      if (!g.scalar && g.hi > g.lo && lo < g.hi) { // overlaps the previous group
        g.hi = std::max(g.hi, hi);
        g.readonly = g.readonly && (b.flags & TT_BUF_READONLY);
        g.members.push_back(i);
        continue;
      }
    }
    Group g;
    g.lo = lo;
    g.hi = hi;
    g.readonly = b.flags & TT_BUF_READONLY;
    g.scalar = scalar;
    g.members.push_back(i);
    L->groups.push_back(std::move(g));
  }
  for (Group &g : L->groups) {
    size_t n = g.hi - g.lo;
    if (!acquire_region(n, &g.r)) {
      err.add("cannot map %zu bytes for buffer '%s'", n, d->buffers[g.members[0]].name);
      return false;
    }
    uintptr_t end = (uintptr_t)g.r.body + g.r.bodylen;
    uintptr_t want = g.scalar ? 0 : (g.lo & 15); // keep the host pointer's alignment modulo 16
    uintptr_t data = end - n;
    data -= (data - want) & 15;
    g.data = (char *)data;
    memset(g.r.body, kCanary, data - (uintptr_t)g.r.body);
    memset((char *)data + n, kCanary, end - (data + n));
    if (n)
      memcpy(g.data, (const void *)g.lo, n);
    if (g.readonly)
      mprotect(g.r.body, g.r.bodylen, PROT_READ);
    for (int i : g.members) {
      const tt_buffer_desc &b = d->buffers[i];
      L->slots[b.slot] = g.data + ((uintptr_t)b.host - g.lo);
    }
  }
  return true;
}

void release_buffers(Launch *L) {
  for (Group &g : L->groups)
    release_region(g.r, g.readonly);
  L->groups.clear();
}

// Describes a buffer parameter and the element index of `addr`.
void describe_access(Launch *L, const Group &g, int member, uintptr_t addr, Msg &m) {
  const tt_launch_desc *d = L->d;
  const tt_buffer_desc &b = d->buffers[member];
  uintptr_t base = (uintptr_t)g.data + ((uintptr_t)b.host - g.lo);
  int64_t off = (int64_t)(addr - base);
  tt_launch_result *r = L->res;
  r->slot = (int32_t)b.slot;
  m.add("buffer '%s' [[buffer(%u)]]", b.name ? b.name : "?", b.slot);
  for (int j : g.members)
    if (j != member && d->buffers[j].host == b.host && d->buffers[j].nbytes == b.nbytes)
      m.add(" (same memory as '%s' [[buffer(%u)]])", d->buffers[j].name ? d->buffers[j].name : "?", d->buffers[j].slot);
  if (b.elem_size) {
    int64_t es = b.elem_size;
    int64_t idx = off >= 0 ? off / es : -((-off + es - 1) / es);
    r->index = idx;
    m.add(" at element index %lld (buffer has %llu elements of %u bytes", (long long)idx,
          (unsigned long long)(b.nbytes / b.elem_size), b.elem_size);
    if (b.nbytes % b.elem_size)
      m.add(" + %llu bytes", (unsigned long long)(b.nbytes % b.elem_size));
    m.add(")");
  } else {
    r->index = off;
    m.add(" at byte offset %lld (buffer has %llu bytes)", (long long)off, (unsigned long long)b.nbytes);
  }
}

// Start of buffer `member`'s data in its copy.
inline uintptr_t member_start(Launch *L, const Group &g, int member) {
  return (uintptr_t)g.data + ((uintptr_t)L->d->buffers[member].host - g.lo);
}

// The member of `g` whose data contains `ref`, else the one whose data is nearest to it.
int member_near(Launch *L, const Group &g, uintptr_t ref) {
  int best = g.members[0];
  uint64_t best_dist = UINT64_MAX;
  for (int j : g.members) {
    uintptr_t s = member_start(L, g, j), e = s + L->d->buffers[j].nbytes;
    uint64_t dist = ref < s ? s - ref : ref >= e ? ref - e + 1 : 0;
    if (dist < best_dist) {
      best = j;
      best_dist = dist;
    }
  }
  return best;
}

inline bool in_map(const Group &g, uintptr_t a) {
  return a >= (uintptr_t)g.r.map && a < (uintptr_t)g.r.map + g.r.maplen;
}
inline bool in_body(const Group &g, uintptr_t a) {
  return a >= (uintptr_t)g.r.body && a < (uintptr_t)g.r.body + g.r.bodylen;
}

// Maps a faulting address to a buffer; returns false if no buffer can be blamed. In order:
//  1. an address inside a buffer's copy (its padding, or a read-only buffer written): that buffer;
//  2. the provenance of the pointer: the buffer (or its guard zones) that the faulting instruction's base
//     register points into, however far from it the access lands;
//  3. an address inside a buffer's guard zones (8 GB on each side): that buffer;
//  4. otherwise (if `guess`) the nearest buffer, reported as a guess.
// A `constant T&` scalar is only ever blamed for an address inside its own bytes (case 1).
bool classify_buffer_fault(Launch *L, uintptr_t addr, uintptr_t base, int is_write, bool guess, Msg &m,
                           int *status) {
  const tt_launch_desc *d = L->d;
  const Group *hit = nullptr;
  int member = -1;
  const char *how = nullptr; // set when the buffer is not certain
  for (const Group &g : L->groups)
    if (in_body(g, addr)) {
      hit = &g;
      member = member_near(L, g, addr);
    }
  if (!hit && base)
    for (const Group &g : L->groups)
      if (!g.scalar && in_map(g, base)) {
        hit = &g;
        member = member_near(L, g, base);
      }
  if (!hit)
    for (const Group &g : L->groups)
      if (!g.scalar && in_map(g, addr)) {
        hit = &g;
        member = member_near(L, g, addr);
      }
  if (!hit && guess) {
    uint64_t best = UINT64_MAX;
    for (const Group &g : L->groups) {
      if (g.scalar)
        continue;
      uintptr_t lo = (uintptr_t)g.data, hi = lo + (g.hi - g.lo);
      uint64_t dist = addr < lo ? lo - addr : addr >= hi ? addr - hi + 1 : 0;
      if (dist < best) {
        best = dist;
        hit = &g;
        member = member_near(L, g, addr);
      }
    }
    how = "the nearest buffer: a guess, the faulting instruction's base register points into no buffer";
  }
  if (!hit)
    return false;
  const Group &g = *hit;
  uintptr_t s = member_start(L, g, member);
  bool in_bounds = addr >= s && addr < s + d->buffers[member].nbytes;
  if (in_bounds && g.readonly) {
    *status = TT_ERR_READONLY_WRITE;
    m.add("write to read-only (constant or device const) ");
  } else {
    *status = TT_ERR_OOB;
    m.add("out-of-bounds %s of ", is_write == 1 ? "write" : is_write == 0 ? "read" : "access");
  }
  describe_access(L, g, member, addr, m);
  if (how) {
    int64_t off = (int64_t)(addr - s);
    m.add(" [%.1f MB %s the buffer; %s]", (double)(off < 0 ? -off : off) / (1 << 20), off < 0 ? "before" : "past",
          how);
  }
  return true;
}

// After a launch: detect writes into the slack bytes around each buffer (between the data and the
// guard zones). Returns false (and records an error) if a canary byte changed.
bool check_canaries(Launch *L) {
  for (const Group &g : L->groups) {
    if (g.readonly)
      continue; // slack was read-only: writes there already faulted
    const unsigned char *body = (const unsigned char *)g.r.body;
    const unsigned char *data = (const unsigned char *)g.data;
    const unsigned char *end = body + g.r.bodylen;
    const unsigned char *dend = data + (g.hi - g.lo);
    const unsigned char *bad = nullptr;
    for (const unsigned char *p = dend; p < end; p++)
      if (*p != kCanary) {
        bad = p;
        break;
      }
    if (!bad)
      for (const unsigned char *p = data; p > body; p--)
        if (p[-1] != kCanary) {
          bad = p - 1;
          break;
        }
    if (!bad)
      continue;
    const tt_launch_desc *d = L->d;
    int member = g.members[0];
    if (bad >= dend) {
      for (int j : g.members)
        if ((uintptr_t)d->buffers[j].host + d->buffers[j].nbytes >
            (uintptr_t)d->buffers[member].host + d->buffers[member].nbytes)
          member = j;
    }
    if (begin_error(L, nullptr, TT_ERR_OOB, -1)) {
      Msg m;
      m.add("out-of-bounds write (found after the launch in the padding next to the buffer) to ");
      describe_access(L, g, member, (uintptr_t)bad, m);
      L->res->is_write = 1;
      m.add("; the faulting thread is unknown");
      set_message(L, m);
    }
    return false;
  }
  return true;
}

// ------------------------------------------------------------------------------------------------
// Signals
// ------------------------------------------------------------------------------------------------

const int kSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP};
struct sigaction g_old_act[NSIG];

// ---- The interrupted machine state (signal handlers), per platform --------------------------------
// Linux: ucontext_t.uc_mcontext is a struct (x86-64: gregs[REG_*]; AArch64: regs[31], sp, pc and the
// extension records in __reserved). macOS: uc_mcontext points to a __darwin_mcontext64 (__ss thread
// state, __es exception state; arm64 registers through the __darwin_arm_thread_state64_get_* macros,
// which also handle the opaque (pointer-authenticated) layout).

#if defined(__APPLE__) && defined(__aarch64__)
inline uint64_t context_gpr(const ucontext_t *uc, int n) { // n = 0..31, 31 = sp
  const auto &ss = uc->uc_mcontext->__ss;
  if (n < 29)
    return ss.__x[n];
  if (n == 29)
    return (uint64_t)__darwin_arm_thread_state64_get_fp(ss);
  if (n == 30)
    return (uint64_t)__darwin_arm_thread_state64_get_lr(ss);
  return (uint64_t)__darwin_arm_thread_state64_get_sp(ss);
}
#elif defined(__aarch64__)
inline uint64_t context_gpr(const ucontext_t *uc, int n) {
  return n < 31 ? uc->uc_mcontext.regs[n] : uc->uc_mcontext.sp;
}
#elif defined(__x86_64__) && defined(__APPLE__)
inline uint64_t context_gpr(const ucontext_t *uc, int n) { // x86 register number (rax, rcx, rdx, ...)
  const auto &ss = uc->uc_mcontext->__ss;
  const uint64_t r[16] = {ss.__rax, ss.__rcx, ss.__rdx, ss.__rbx, ss.__rsp, ss.__rbp, ss.__rsi, ss.__rdi,
                          ss.__r8,  ss.__r9,  ss.__r10, ss.__r11, ss.__r12, ss.__r13, ss.__r14, ss.__r15};
  return r[n & 15];
}
#elif defined(__x86_64__)
const int kGregOf[16] = {REG_RAX, REG_RCX, REG_RDX, REG_RBX, REG_RSP, REG_RBP, REG_RSI, REG_RDI,
                         REG_R8,  REG_R9,  REG_R10, REG_R11, REG_R12, REG_R13, REG_R14, REG_R15};
inline uint64_t context_gpr(const ucontext_t *uc, int n) { return (uint64_t)uc->uc_mcontext.gregs[kGregOf[n & 15]]; }
#endif

uintptr_t context_pc(void *ucv) {
  ucontext_t *uc = (ucontext_t *)ucv;
#if defined(__APPLE__) && defined(__aarch64__)
  return (uintptr_t)__darwin_arm_thread_state64_get_pc(uc->uc_mcontext->__ss);
#elif defined(__APPLE__) && defined(__x86_64__)
  return (uintptr_t)uc->uc_mcontext->__ss.__rip;
#elif defined(__x86_64__)
  return (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
#elif defined(__aarch64__)
  return (uintptr_t)uc->uc_mcontext.pc;
#else
  (void)uc;
  return 0;
#endif
}

#if defined(__aarch64__)
// Write bit of a data abort's ESR (exception class 0x24/0x25: WnR, bit 6); -1 if not a data abort.
int esr_is_write(uint64_t esr) {
  uint32_t ec = (uint32_t)(esr >> 26) & 0x3f;
  if (ec == 0x24 || ec == 0x25)
    return (esr >> 6) & 1 ? 1 : 0;
  return -1;
}

// Without an ESR (e.g. under qemu-user): the instruction's L bit (bit 22 of the loads-and-stores group:
// LDR/STR, LDP/STP, LD1/ST1, exclusives); -1 for other instructions.
int insn_is_write(uintptr_t pc) {
  uint32_t insn;
  memcpy(&insn, (const void *)pc, 4);
  if ((insn & 0x0a000000) != 0x08000000)
    return -1;
  return (insn >> 22) & 1 ? 0 : 1;
}
#endif

int context_is_write(int sig, void *ucv) {
  if (sig != SIGSEGV && sig != SIGBUS)
    return -1;
  ucontext_t *uc = (ucontext_t *)ucv;
#if defined(__APPLE__) && defined(__aarch64__)
  return esr_is_write(uc->uc_mcontext->__es.__esr);
#elif defined(__APPLE__) && defined(__x86_64__)
  return (uc->uc_mcontext->__es.__err & 2) ? 1 : 0;
#elif defined(__x86_64__)
  return (uc->uc_mcontext.gregs[REG_ERR] & 2) ? 1 : 0;
#elif defined(__aarch64__)
  // Walk the signal frame's extension records for the ESR (ESR_MAGIC = 0x45535201).
  const unsigned char *p = (const unsigned char *)uc->uc_mcontext.__reserved;
  const unsigned char *end = p + sizeof(uc->uc_mcontext.__reserved);
  while (p + 8 <= end) {
    uint32_t magic, size;
    memcpy(&magic, p, 4);
    memcpy(&size, p + 4, 4);
    if (!magic || size < 8)
      break;
    if (magic == 0x45535201 && size >= 16) {
      uint64_t esr;
      memcpy(&esr, p + 8, 8);
      return esr_is_write(esr);
    }
    p += size;
  }
  return uc->uc_mcontext.pc ? insn_is_write((uintptr_t)uc->uc_mcontext.pc) : -1;
#else
  (void)uc;
  return -1;
#endif
}

// The memory operand of a faulting instruction: the register the address was computed from (its
// provenance), and the address itself when the instruction shows it (x86 reports an access to a
// non-canonical address, e.g. past 2^47 after an overflowing offset, with address 0).
struct MemOperand {
  uintptr_t base = 0; // base register (index register when there is no base); 0: unknown
  uintptr_t ea = 0;   // effective address; valid if has_ea
  bool has_ea = false;
};

#if defined(__x86_64__)
// Decodes the memory operand of the x86-64 instruction at `p` (legacy, REX, VEX and EVEX encodings).
MemOperand x86_mem_operand(const uint8_t *p, const ucontext_t *uc) {
  MemOperand r;
  int rex_b = 0, rex_x = 0;
  bool vsib = false;
  for (int i = 0; i < 14; i++) {
    uint8_t b = *p;
    if (b == 0x66 || b == 0x67 || b == 0xF0 || b == 0xF2 || b == 0xF3 || b == 0x2E || b == 0x36 || b == 0x3E ||
        b == 0x26 || b == 0x64 || b == 0x65)
      p++;
    else
      break;
  }
  if ((*p & 0xF0) == 0x40) {
    rex_b = *p & 1;
    rex_x = (*p >> 1) & 1;
    p++;
  }
  uint8_t op = *p;
  if (op == 0xC5) { // 2-byte VEX: map 0F
    p += 3;         // C5, payload, opcode
  } else if (op == 0xC4 || op == 0x62) { // 3-byte VEX / EVEX: inverted X and B in the first payload byte
    rex_x = !((p[1] >> 6) & 1);
    rex_b = !((p[1] >> 5) & 1);
    bool map_0f38 = (p[1] & 3) == 2;
    p += op == 0xC4 ? 3 : 4; // prefix and payload
    uint8_t opc = *p++;
    vsib = map_0f38 && ((opc >= 0x90 && opc <= 0x93) || (opc >= 0xA0 && opc <= 0xA3)); // gathers, scatters
  } else if (op == 0x0F) {
    p += (p[1] == 0x38 || p[1] == 0x3A) ? 3 : 2;
  } else {
    if ((op >= 0xA0 && op <= 0xA7) || (op >= 0xAA && op <= 0xAF))
      return r; // moffs and string instructions: no ModRM
    p += 1;
  }
  uint8_t modrm = *p++;
  int mod = modrm >> 6, rm = modrm & 7;
  if (mod == 3 || (rm == 5 && mod == 0))
    return r; // a register operand, or RIP-relative (a global, not a buffer)
  uint64_t base = 0, index = 0;
  bool has_base = true, has_index = false;
  int scale = 1;
  if (rm == 4) {
    uint8_t sib = *p++;
    int ix = ((sib >> 3) & 7) | (rex_x << 3);
    scale = 1 << (sib >> 6);
    has_index = ix != 4 && !vsib;
    if (has_index)
      index = context_gpr(uc, ix);
    if ((sib & 7) == 5 && mod == 0)
      has_base = false;
    else
      base = context_gpr(uc, (sib & 7) | (rex_b << 3));
  } else {
    base = context_gpr(uc, rm | (rex_b << 3));
  }
  int64_t disp = 0;
  if (mod == 1) {
    disp = (int8_t)*p; // (EVEX scales disp8; only the reported address is off then)
  } else if (mod == 2 || (mod == 0 && !has_base)) {
    int32_t d32;
    memcpy(&d32, p, 4);
    disp = d32;
  }
  r.base = has_base ? (uintptr_t)base : has_index ? (uintptr_t)index : 0;
  r.ea = (uintptr_t)(base + index * (uint64_t)scale + (uint64_t)disp);
  r.has_ea = !vsib;
  return r;
}
#endif

// The memory operand of the access that faulted: its base register (the pointer the address was
// computed from) attributes an out-of-bounds access to the buffer it came from however far it lands.
MemOperand access_operand(void *ucv) {
  const ucontext_t *uc = (const ucontext_t *)ucv;
  uintptr_t pc = context_pc(ucv);
  MemOperand r;
  if (!pc)
    return r;
#if defined(__x86_64__)
  r = x86_mem_operand((const uint8_t *)pc, uc);
#elif defined(__aarch64__)
  uint32_t insn;
  memcpy(&insn, (const void *)pc, 4);
  if ((insn & 0x0a000000) == 0x08000000) // the loads-and-stores encoding group: Rn in bits 5-9 (31: sp)
    r.base = (uintptr_t)context_gpr(uc, (insn >> 5) & 31);
#else
  (void)uc;
#endif
  return r;
}

#if defined(__x86_64__) && defined(__linux__)
// x86 raises #DE for integer division by zero and for INT_MIN / -1; Metal (like AArch64) does not
// trap. Emulate the instruction with AArch64's results (quotient 0 and remainder = dividend for a
// zero divisor; quotient = dividend and remainder 0 for the overflow case) and skip it. (Intel Macs:
// not emulated, the division is reported as SIGFPE.)

bool fixup_divide(void *ucv) {
  ucontext_t *uc = (ucontext_t *)ucv;
  greg_t *g = uc->uc_mcontext.gregs;
  const uint8_t *p = (const uint8_t *)g[REG_RIP];
  bool op16 = false;
  for (int i = 0; i < 8; i++) {
    uint8_t b = *p;
    if (b == 0x66) {
      op16 = true;
      p++;
    } else if (b == 0x67 || b == 0xF0 || b == 0xF2 || b == 0xF3 || b == 0x2E || b == 0x36 || b == 0x3E ||
               b == 0x26 || b == 0x64 || b == 0x65) {
      p++;
    } else {
      break;
    }
  }
  int rex = 0;
  if ((*p & 0xF0) == 0x40)
    rex = *p++;
  uint8_t op = *p++;
  if (op != 0xF6 && op != 0xF7)
    return false;
  uint8_t modrm = *p++;
  int mod = modrm >> 6, reg = (modrm >> 3) & 7, rm = modrm & 7;
  if (reg != 6 && reg != 7)
    return false;
  bool is_signed = reg == 7;
  int width = op == 0xF6 ? 8 : (rex & 8) ? 64 : op16 ? 16 : 32;
  uint64_t raw;
  if (mod == 3) {
    if (width == 8 && !rex && rm >= 4)
      raw = ((uint64_t)g[kGregOf[rm - 4]] >> 8) & 0xff; // AH, CH, DH, BH
    else
      raw = (uint64_t)g[kGregOf[rm | ((rex & 1) << 3)]];
  } else {
    uint64_t ea = 0;
    bool riprel = false;
    int64_t disp = 0;
    if (rm == 4) {
      uint8_t sib = *p++;
      int scale = 1 << (sib >> 6), index = ((sib >> 3) & 7) | ((rex & 2) << 2), base = (sib & 7) | ((rex & 1) << 3);
      if (index != 4)
        ea += (uint64_t)g[kGregOf[index]] * (uint64_t)scale;
      if ((sib & 7) == 5 && mod == 0) {
        int32_t d32;
        memcpy(&d32, p, 4);
        p += 4;
        disp = d32;
      } else {
        ea += (uint64_t)g[kGregOf[base]];
      }
    } else if (rm == 5 && mod == 0) {
      int32_t d32;
      memcpy(&d32, p, 4);
      p += 4;
      disp = d32;
      riprel = true;
    } else {
      ea += (uint64_t)g[kGregOf[rm | ((rex & 1) << 3)]];
    }
    if (mod == 1) {
      disp += (int8_t)*p++;
    } else if (mod == 2) {
      int32_t d32;
      memcpy(&d32, p, 4);
      p += 4;
      disp += d32;
    }
    ea += (uint64_t)disp;
    if (riprel)
      ea += (uint64_t)p;
    raw = 0;
    memcpy(&raw, (const void *)ea, (size_t)width / 8);
  }
  uint64_t mask = width == 64 ? ~0ull : ((1ull << width) - 1);
  raw &= mask;
  uint64_t rax = (uint64_t)g[REG_RAX];
  uint64_t lowdiv = width == 8 ? (rax & 0xff) : (rax & mask); // low half of the dividend
  uint64_t q, r;
  if (raw == 0) {
    q = 0;
    r = lowdiv;
  } else if (is_signed && raw == mask) {
    q = lowdiv; // INT_MIN / -1 == INT_MIN (wraps)
    r = 0;
  } else {
    return false; // quotient overflow of a hand-written wide division: not ours to emulate
  }
  uint64_t rdx = (uint64_t)g[REG_RDX];
  switch (width) {
  case 8:
    rax = (rax & ~0xffffull) | (q & 0xff) | ((r & 0xff) << 8);
    break;
  case 16:
    rax = (rax & ~0xffffull) | (q & 0xffff);
    rdx = (rdx & ~0xffffull) | (r & 0xffff);
    break;
  case 32:
    rax = q & 0xffffffffull;
    rdx = r & 0xffffffffull;
    break;
  default:
    rax = q;
    rdx = r;
  }
  g[REG_RAX] = (greg_t)rax;
  if (width != 8)
    g[REG_RDX] = (greg_t)rdx;
  g[REG_RIP] = (greg_t)(uintptr_t)p;
  return true;
}
#endif

void chain_signal(int sig, siginfo_t *si, void *uc) {
  struct sigaction *old = &g_old_act[sig];
  if (old->sa_flags & SA_SIGINFO) {
    if (old->sa_sigaction) {
      old->sa_sigaction(sig, si, uc);
      return;
    }
  } else if (old->sa_handler != SIG_DFL && old->sa_handler != SIG_IGN) {
    old->sa_handler(sig);
    return;
  }
  // Default action: reinstall it; returning re-executes the faulting instruction.
  signal(sig, SIG_DFL);
}

void on_signal(int sig, siginfo_t *si, void *uc) {
  Worker *w = tl_worker;
  if (w && w->active) {
#if defined(__x86_64__) && defined(__linux__)
    if (sig == SIGFPE && fixup_divide(uc))
      return;
#endif
    w->fault_sig = sig;
    w->fault_addr = si->si_addr;
    w->fault_pc = context_pc(uc);
    w->fault_write = context_is_write(sig, uc);
    w->fault_base = 0;
    w->fault_noncanonical = false;
    if (sig == SIGSEGV || sig == SIGBUS) {
      MemOperand op = access_operand(uc);
      w->fault_base = op.base;
      uint64_t top = (uint64_t)op.ea >> 47;
      if (!si->si_addr && op.has_ea && top != 0 && top != 0x1ffff) { // x86: #GP, the address is not reported
        w->fault_addr = (void *)op.ea;
        w->fault_noncanonical = true;
        w->fault_write = -1; // a #GP's error code does not say
      }
    }
    w->active = false;
    w->in_kernel = 0;
    siglongjmp(w->jb, 2);
  }
  chain_signal(sig, si, uc);
}

// Cancellation (tt_emu_launch_cancel): leave kernel code like after a fault. Inside runtime code
// (in_kernel == 0) nothing happens here; the runtime checks the flag itself (check_cancel) and the
// waiting caller sends the signal again.
void on_cancel_signal(int, siginfo_t *, void *uc) {
  Worker *w = tl_worker;
  if (w && w->active && w->in_kernel && w->L && w->L->cancel.load()) {
    w->fault_sig = kCancelSignal;
    w->fault_addr = nullptr;
    w->fault_pc = context_pc(uc);
    w->fault_write = -1;
    w->active = false;
    w->in_kernel = 0;
    siglongjmp(w->jb, 3);
  }
}

void install_handlers() {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = on_signal;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  for (int s : kSignals)
    sigaction(s, &sa, &g_old_act[s]);
  sa.sa_sigaction = on_cancel_signal;
  sigaction(kCancelSignal, &sa, &g_old_act[kCancelSignal]);
}

void restore_handlers() {
  for (int s : kSignals)
    sigaction(s, &g_old_act[s], nullptr);
  sigaction(kCancelSignal, &g_old_act[kCancelSignal], nullptr);
}

// Turns the fault captured by the handler into an error message (normal context).
void report_fault(Worker *w) {
  Launch *L = w->L;
  int sig = w->fault_sig;
  uintptr_t addr = (uintptr_t)w->fault_addr;
  int thread = (int)w->cur_thread;
  if (w->op_lane < TT_EMU_SIMD_WIDTH) // a whole-simdgroup operation was touching that lane's memory
    thread = (int)(w->cur_thread / TT_EMU_SIMD_WIDTH * TT_EMU_SIMD_WIDTH + w->op_lane);
  Msg m;
  int status = TT_ERR_SEGV;
  bool known = false;
  if (sig == SIGSEGV || sig == SIGBUS) {
    known = classify_buffer_fault(L, addr, w->fault_base, w->fault_write, false, m, &status);
    if (!known && w->tg_map) {
      uintptr_t lo = (uintptr_t)w->tg_map, hi = (uintptr_t)w->tg_hi + g_tg_guard;
      if (addr >= lo && addr < hi) {
        status = TT_ERR_TG_OOB;
        known = true;
        m.add("out-of-bounds %s of threadgroup memory",
              w->fault_write == 1 ? "write" : w->fault_write == 0 ? "read" : "access");
        const TgSite *best = nullptr;
        for (int i = 0; i < w->nsites; i++)
          if (!best || w->sites[i].ptr > best->ptr)
            best = &w->sites[i];
        if (addr >= (uintptr_t)w->tg_hi && best)
          m.add(" ('%s' has %u bytes; access at byte offset %lld)", best->name ? best->name : "?", best->size,
                (long long)(addr - (uintptr_t)best->ptr));
        else
          m.add(" (byte %lld below the threadgroup allocation)",
                (long long)((uintptr_t)w->tg_top - addr));
      }
    }
    if (!known) {
      for (Fiber *f : w->fibers)
        if (addr >= (uintptr_t)f->map && addr < (uintptr_t)f->stack_lo) {
          status = TT_ERR_STACK;
          known = true;
          m.add("stack overflow of an emulated thread (%zu KB per thread; raise TRITON_APPLE_EMULATOR_STACK_KB)",
                w->stack_size / 1024);
          break;
        }
    }
    if (!known)
      known = classify_buffer_fault(L, addr, w->fault_base, w->fault_write, true, m, &status);
    if (!known)
      m.add("invalid memory %s at address %p (not inside any bound buffer)",
            w->fault_write == 1 ? "write" : w->fault_write == 0 ? "read" : "access", (void *)addr);
    if (w->fault_noncanonical)
      m.add(" [address %p is outside the 48-bit address space: the pointer arithmetic overflowed (an offset or "
            "stride too large for the element size?)]",
            (void *)addr);
  } else {
    status = TT_ERR_SIGNAL;
    m.add("%s", sig == SIGFPE ? "arithmetic exception (SIGFPE)"
                : sig == SIGILL ? "illegal instruction (SIGILL; e.g. __builtin_trap / unreachable code)"
                                : "trap (SIGTRAP)");
  }
  if (begin_error(L, w, status, thread)) {
    const tt_sgm_state &st = w->sgm[w->cur_thread / TT_EMU_SIMD_WIDTH];
    if (w->op_lane < TT_EMU_SIMD_WIDTH && st.op_line) { // a whole-tile simdgroup_load (header code: no MSL line)
      m.add(" in simdgroup_load (MSL line %u:%u), reading the elements of lane %u", st.op_line, st.op_col,
            w->op_lane);
      add_line(L->res, st.op_line);
    }
    L->res->is_write = w->fault_write;
    L->res->pc = w->fault_pc;
    Dl_info info;
    if (w->fault_pc && dladdr((void *)w->fault_pc, &info) && info.dli_fname) {
      L->res->pc_offset = w->fault_pc - (uintptr_t)info.dli_fbase;
      snprintf(L->res->pc_module, sizeof(L->res->pc_module), "%s", info.dli_fname);
    }
    where(m, w, thread);
    set_message(L, m);
  }
}

// ------------------------------------------------------------------------------------------------
// Workers and the host thread pool
// ------------------------------------------------------------------------------------------------

size_t g_stack_default = 256 * 1024;

bool prepare_worker(Worker *w, Launch *L) {
  const tt_launch_desc *d = L->d;
  size_t ss = d->stack_kb ? (size_t)d->stack_kb * 1024 : g_stack_default;
  ss = round_up(std::max<size_t>(ss, 16 * 1024), g_page);
  if (ss != w->stack_size) {
    free_all_fibers(w);
    w->stack_size = ss;
  }
  if (!w->tg_map) {
    size_t len = 2 * g_tg_guard + round_up(TT_EMU_TG_MEM_LIMIT, g_page);
    char *m = (char *)mmap(nullptr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED)
      return false;
    mprotect(m + g_tg_guard, round_up(TT_EMU_TG_MEM_LIMIT, g_page), PROT_READ | PROT_WRITE);
    w->tg_map = m;
    w->tg_hi = m + g_tg_guard + round_up(TT_EMU_TG_MEM_LIMIT, g_page);
    w->tg_lo = w->tg_hi - TT_EMU_TG_MEM_LIMIT;
  }
  w->L = L;
  w->N = d->tg[0] * d->tg[1] * d->tg[2];
  w->nsg = (w->N + TT_EMU_SIMD_WIDTH - 1) / TT_EMU_SIMD_WIDTH;
  for (uint32_t s = 0; s < w->nsg; s++) {
    uint32_t lanes = std::min<uint32_t>(TT_EMU_SIMD_WIDTH, w->N - s * TT_EMU_SIMD_WIDTH);
    w->sg[s].full = lanes == 32 ? 0xffffffffu : ((1u << lanes) - 1);
  }
  tt_thread_info &p = w->ti_proto;
  memset(&p, 0, sizeof(p));
  for (int i = 0; i < 3; i++) {
    p.ntg[i] = d->grid[i];
    p.tptg[i] = d->tg[i];
  }
  p.nsg = w->nsg;
  p.simd_width = TT_EMU_SIMD_WIDTH;
  for (uint32_t i = 0; i < w->N; i++)
    w->order[i] = (uint16_t)(d->schedule == TT_SCHED_REVERSE ? w->N - 1 - i : i);
  w->nevents = 0;
  w->fault_sig = 0;
  w->tw = L->tools ? tools_worker(w, L) : nullptr;
  return w->tw || !L->tools;
}

void run_worker(Worker *w, Launch *L) {
  tl_worker = w;
  if (!prepare_worker(w, L)) {
    if (begin_error(L, nullptr, TT_ERR_INTERNAL, -1)) {
      Msg m;
      m.add("cannot allocate threadgroup memory");
      set_message(L, m);
    }
    return;
  }
  if (sigsetjmp(w->jb, 1) != 0) {
    w->active = false;
    w->in_kernel = 0;
    if (w->fault_sig == kCancelSignal)
      report_cancel(w, w->fault_pc);
    else if (w->fault_sig)
      report_fault(w);
    L->abort.store(1);
    return;
  }
  for (;;) {
    if (L->abort.load(std::memory_order_relaxed))
      break;
    uint64_t i = L->next_tg.fetch_add(1);
    if (i >= L->total_tg)
      break;
    w->active = true;
    bool ok = run_threadgroup(w, i);
    w->active = false;
    if (!ok) {
      L->abort.store(1);
      break;
    }
    L->done_tg.fetch_add(1, std::memory_order_relaxed);
  }
}

// Synchronisation objects are immortal (never destroyed): pool threads stay blocked on them until
// the process exits, and destroying a condition variable with waiters blocks in glibc.
struct PoolSync {
  std::mutex launch_mu; // guards `busy`: one launch at a time (signal handlers are process-wide)
  std::condition_variable launch_cv;
  bool busy = false;
  std::mutex pool_mu;
  std::condition_variable pool_cv, done_cv;
  std::vector<Worker *> pool; // the host threads that run kernels
};
PoolSync *g_sync = new PoolSync();
#define g_pool_mu (g_sync->pool_mu)
#define g_pool_cv (g_sync->pool_cv)
#define g_done_cv (g_sync->done_cv)
#define g_pool (g_sync->pool)
// Written under g_pool_mu; atomic so that the waiting sides can first spin on them for a few
// microseconds (a condition-variable wake-up costs tens of microseconds, as much as a small launch).
std::atomic<uint64_t> g_gen{0};
Launch *g_cur = nullptr; // the running launch (between tt_emu_launch_begin and its final _wait)
int g_nactive = 0;
std::atomic<int> g_pending{0};
const auto kSpin = std::chrono::microseconds(100);

// Spins (yielding the CPU) until done() or kSpin has passed; true if done.
template <class F> bool spin_until(F done) {
  auto until = std::chrono::steady_clock::now() + kSpin;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= until)
      return false;
    sched_yield();
  }
  return true;
}

void setup_altstack(Worker *w) {
  if (!w->altstack) {
    w->altstack_size = 64 * 1024;
    w->altstack = (char *)mmap(nullptr, w->altstack_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  }
}

void *pool_main(void *arg) {
  Worker *w = (Worker *)arg;
  stack_t ss;
  memset(&ss, 0, sizeof(ss));
  ss.ss_sp = w->altstack;
  ss.ss_size = w->altstack_size;
  sigaltstack(&ss, nullptr);
  tl_worker = w;
  uint64_t seen = 0;
  bool worked = false;
  std::unique_lock<std::mutex> lk(g_pool_mu);
  for (;;) {
    if (worked && g_gen == seen) { // launches often come back to back: stay awake a moment
      lk.unlock();
      spin_until([&] { return g_gen.load() != seen; });
      lk.lock();
    }
    g_pool_cv.wait(lk, [&] { return g_gen != seen; });
    seen = g_gen;
    worked = w->id < g_nactive;
    if (!worked)
      continue;
    Launch *L = g_cur;
    lk.unlock();
    run_worker(w, L);
    lk.lock();
    if (--g_pending == 0)
      g_done_cv.notify_all();
  }
  return nullptr;
}

bool ensure_pool(int n) {
  while ((int)g_pool.size() < n) {
    Worker *w = new (std::nothrow) Worker();
    if (!w)
      return false;
    w->id = (int)g_pool.size();
    setup_altstack(w);
    sigset_t all, old;
    sigfillset(&all);
    for (int s : kSignals)
      sigdelset(&all, s);
    sigdelset(&all, kCancelSignal);
    sigdelset(&all, SIGABRT);
    pthread_sigmask(SIG_SETMASK, &all, &old); // pool threads never take asynchronous signals
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&w->thread, &attr, pool_main, w);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    if (rc != 0) {
      delete w;
      return false;
    }
    g_pool.push_back(w);
  }
  return true;
}

void after_fork_child() {
  // The pool threads do not exist in the child: forget them (their memory is leaked on purpose).
  g_sync = new PoolSync();
  new (&g_region_mu) std::mutex();
  g_gen = 0;
  g_cur = nullptr;
  g_nactive = g_pending = 0;
}

int host_thread_count() {
#if defined(__linux__)
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0)
      return n;
  }
#endif
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

struct Init {
  Init() {
    long p = sysconf(_SC_PAGESIZE);
    if (p > 0)
      g_page = (size_t)p;
    g_guard = round_up(kGuardBytes, g_page);
    g_tg_guard = round_up(kTgGuardBytes, g_page);
    pthread_atfork(nullptr, nullptr, after_fork_child);
  }
} g_init;

void merge_events(Launch *L, Worker *w) {
  tt_launch_result *r = L->res;
  for (uint32_t i = 0; i < w->nevents; i++) {
    const tt_event &e = w->events[i];
    bool found = false;
    for (uint32_t j = 0; j < r->nevents; j++) {
      tt_event &o = r->events[j];
      if (o.kind == e.kind && o.line == e.line && o.col == e.col && strcmp(o.file, e.file) == 0) {
        o.count += e.count;
        found = true;
        break;
      }
    }
    if (!found && r->nevents < TT_EMU_MAX_EVENTS)
      r->events[r->nevents++] = e;
  }
  w->nevents = 0;
}

// ------------------------------------------------------------------------------------------------
// Tools: racecheck, initcheck and the profiler (emulator_tools.h; README: "Sanitizer and profiler")
// ------------------------------------------------------------------------------------------------
//
// Kernels built for the tools call the __sanitizer_cov_load/store callbacks (below) before every load and store
// left in their optimised code, and __tt_tool_atomic before every atomic. An access is classified by its address:
// threadgroup memory (this worker's block), a buffer's copy (device/constant), the running thread's own stack
// below the frame that calls the kernel (private), or anything else (the runtime's memory, the kernel's
// constants): ignored.
//
// racecheck, threadgroup memory. Time is cut into barrier intervals: a threadgroup_barrier whose flags include
// mem_threadgroup ends one. Per byte the shadow keeps the interval it was last touched in and, for that interval,
// its last writer and two readers (the first and the latest other one), each with the instruction, whether it
// was atomic and how many simdgroup_barrier(mem_threadgroup) its simdgroup had passed in the interval. Two
// accesses of a byte in one interval by different threads, at least one a write and not both atomic, are a
// hazard, unless the threads are lanes of one simdgroup and a simdgroup_barrier(mem_threadgroup) separates them.
// A write after another thread's write whose bytes are the ones that were there (the same value stored twice)
// cannot depend on the order: it is counted as benign, not reported. (Whether the bytes changed is known only
// after the store: it is checked at the writer's next access or runtime call, before any other thread runs.)
//
// racecheck, device memory: a thread's write of a byte another thread wrote in the same launch is a race, unless
// both are in one threadgroup with a barrier with mem_device between them, or either thread had used a device
// atomic in its threadgroup before its write (locks and flags order plain accesses through atomics, which the
// emulator does not model), or the write stored the same bytes (benign, as above).
//
// initcheck: a read of threadgroup memory with a byte no thread of the threadgroup wrote; a read of a private
// array none of whose bytes the thread wrote. The stack the kernel's frames take is filled with kStackSentinel
// when a thread starts: a byte that no traced store wrote but that no longer holds the sentinel was written by
// code the tracing does not see (a memset or memcpy the compiler expanded, the runtime) and counts as written.
//
// The profiler groups the accesses of the lanes of a simdgroup into SIMD-wide instructions: the n-th execution
// of an instruction by each lane since the simdgroup last met (a SIMD-group function, a barrier, the end of its
// lanes) is one instruction. From those: lanes per instruction, the distinct bytes of each device-memory
// instruction, and for threadgroup memory the bank cycles it takes under the banking model (the most distinct
// words it touches in one bank) against the fewest its bytes need.

const uint16_t kNoThread = 0xffff;
const uint16_t kAtomicBit = 0x8000;
const uint16_t kThreadMask = 0x3ff;
const unsigned char kStackSentinel = 0xBE;
const size_t kStackFillMin = 8192;        // stack initcheck fills for a thread before it knows better
const size_t kStackFillReserve = 32768;   // never fills the last bytes of a stack (the runtime's own frames)
const size_t kMaxSimdInstrs = 1 << 16;    // SIMD instructions held per simdgroup between its meetings
enum { ACC_READ = 1, ACC_WRITE = 2 };

struct TAcc { // one access in the threadgroup shadow
  uint32_t pc;  // offset in the kernel's library
  uint16_t tid; // thread | kAtomicBit; kNoThread: none
  uint16_t sep; // simdgroup barriers of its simdgroup in the interval
};
struct TgByte {
  uint32_t epoch, init; // interval of w/r1/r2; threadgroup that last wrote the byte (initcheck)
  TAcc w, r1, r2;
};

struct ToolArm {
  const void *entry;
  uint32_t tools;
  tt_tool_report *report;
  tt_tool_banks banks;
};
std::mutex g_arm_mu;
ToolArm g_arm[TT_TOOL_MAX_ARMED];
std::atomic<int> g_narmed{0};

struct DevShadow { // one buffer group's copy
  uintptr_t lo = 0, hi = 0;
  const Group *g = nullptr;
  uint64_t *wr = nullptr; // racecheck: per byte, its last writer (see dev_word); 0: none
  uint32_t *wr_pc = nullptr;
  uint8_t *rd_bits = nullptr, *wr_bits = nullptr; // profiler: bytes read / written
  uint32_t *rd_tg = nullptr, *wr_tg = nullptr;     // profiler: per byte, 1 + the threadgroup that last read / wrote it
  size_t n = 0;
};

struct SimdInstr { // profiler: one SIMD-wide instruction of a simdgroup
  uint32_t mask;
  uint8_t space, write;
  uint8_t size[TT_EMU_SIMD_WIDTH];
  uintptr_t addr[TT_EMU_SIMD_WIDTH];
};
struct SimdProfile {
  std::unordered_map<uint64_t, uint32_t> count; // (pc, lane) -> executions since the simdgroup met
  std::unordered_map<uint64_t, SimdInstr> instrs; // (pc, n) -> its lanes' accesses
};

struct ToolLaunch {
  ToolArm arm;
  uintptr_t lib_base = 0;
  bool dev_race = false;
  std::vector<DevShadow> dev;
  std::unordered_map<uint32_t, tt_tool_conflict> tg_by_pc; // profiler: bank cycles per threadgroup instruction
  tt_tool_report rep;
};

struct Pending { // a write-write hazard waiting for the store to show whether it changed the bytes
  bool on = false;
  uintptr_t addr = 0;
  uint32_t size = 0;
  unsigned char snap[16];
  tt_tool_hazard h;
};

struct ToolWorker {
  Launch *L = nullptr;
  ToolLaunch *T = nullptr;
  uint32_t tools = 0;
  TgByte *tg = nullptr; // TT_EMU_TG_MEM_LIMIT bytes of threadgroup memory
  // never reset between launches: shadow entries of earlier intervals, threadgroups and launches are stale
  uint32_t epoch = 0, serial = 0;
  uint32_t sepoch[TT_EMU_MAX_THREADS / TT_EMU_SIMD_WIDTH];
  uint32_t dev_epoch = 0; // barriers with mem_device in this threadgroup
  uint64_t linear = 0;
  uint32_t tg_barriers = 0;
  uint8_t synced[TT_EMU_MAX_THREADS]; // used a device atomic in this threadgroup
  Pending pend;
  SimdProfile sp[TT_EMU_MAX_THREADS / TT_EMU_SIMD_WIDTH];
};

void *map_zeroed(size_t n) {
  if (!n)
    return nullptr;
  void *p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}
void unmap(void *p, size_t n) {
  if (p)
    munmap(p, n);
}

// The arming of this launch's entry point, if any: the launch's tool state (its buffers are set up).
ToolLaunch *tools_take(Launch *L) {
  ToolArm arm{};
  {
    std::lock_guard<std::mutex> lk(g_arm_mu);
    for (ToolArm &a : g_arm)
      if (a.entry && a.entry == (const void *)L->d->entry) {
        arm = a;
        a.entry = nullptr;
        g_narmed--;
        break;
      }
  }
  if (!arm.entry)
    return nullptr;
  ToolLaunch *T = new (std::nothrow) ToolLaunch();
  if (!T)
    return nullptr; // the report stays empty (abi 0): the caller says the tools did not run
  T->arm = arm;
  if (!T->arm.banks.banks || !T->arm.banks.bank_bytes)
    T->arm.banks = tt_tool_banks{32, 4};
  memset(&T->rep, 0, sizeof(T->rep));
  T->rep.abi = TT_EMU_TOOLS_ABI_VERSION;
  T->rep.tools = arm.tools;
  Dl_info info;
  if (dladdr((void *)L->d->entry, &info))
    T->lib_base = (uintptr_t)info.dli_fbase;
  T->dev_race = (arm.tools & TT_TOOL_RACE) && L->total_tg <= 0xffffffffull;
  for (const Group &g : L->groups) {
    size_t n = g.hi - g.lo;
    if (!n || g.scalar) // a `constant T&` scalar is a launch argument, not memory the kernel moves
      continue;
    DevShadow ds;
    ds.lo = (uintptr_t)g.data;
    ds.hi = ds.lo + n;
    ds.g = &g;
    ds.n = n;
    if (T->dev_race && !g.readonly && !g.scalar) {
      ds.wr = (uint64_t *)map_zeroed(n * 8);
      ds.wr_pc = (uint32_t *)map_zeroed(n * 4);
    }
    if (arm.tools & TT_TOOL_PROFILE) {
      ds.rd_bits = (uint8_t *)map_zeroed((n + 7) / 8);
      ds.wr_bits = (uint8_t *)map_zeroed((n + 7) / 8);
      ds.rd_tg = (uint32_t *)map_zeroed(n * 4);
      ds.wr_tg = (uint32_t *)map_zeroed(n * 4);
    }
    T->dev.push_back(ds);
  }
  return T;
}

uint64_t popcount_bytes(const uint8_t *p, size_t n) {
  uint64_t c = 0;
  for (size_t i = 0; i < n; i++)
    c += (uint64_t)__builtin_popcount(p[i]);
  return c;
}

// The launch ended (or failed): the report goes to the caller, the shadows go.
void tools_launch_end(Launch *L) {
  ToolLaunch *T = L->tools;
  L->tools = nullptr;
  for (DevShadow &ds : T->dev) {
    if (ds.rd_bits)
      T->rep.profile.dev_read_distinct += popcount_bytes(ds.rd_bits, (ds.n + 7) / 8);
    if (ds.wr_bits)
      T->rep.profile.dev_written_distinct += popcount_bytes(ds.wr_bits, (ds.n + 7) / 8);
    unmap(ds.wr, ds.n * 8);
    unmap(ds.wr_pc, ds.n * 4);
    unmap(ds.rd_bits, (ds.n + 7) / 8);
    unmap(ds.wr_bits, (ds.n + 7) / 8);
    unmap(ds.rd_tg, ds.n * 4);
    unmap(ds.wr_tg, ds.n * 4);
  }
  std::vector<tt_tool_conflict> worst;
  for (const auto &kv : T->tg_by_pc)
    if (kv.second.cycles > kv.second.ideal)
      worst.push_back(kv.second);
  std::sort(worst.begin(), worst.end(), [](const tt_tool_conflict &a, const tt_tool_conflict &b) {
    return a.cycles - a.ideal != b.cycles - b.ideal ? a.cycles - a.ideal > b.cycles - b.ideal
                                                    : a.pc_offset < b.pc_offset;
  });
  T->rep.nconflicts = (uint32_t)std::min<size_t>(worst.size(), TT_TOOL_MAX_CONFLICT_LINES);
  for (uint32_t i = 0; i < T->rep.nconflicts; i++)
    T->rep.conflicts[i] = worst[i];
  if (T->arm.report)
    memcpy(T->arm.report, &T->rep, sizeof(T->rep));
  delete T;
}

ToolWorker *tools_worker(Worker *w, Launch *L) {
  ToolWorker *tw = w->tw_keep;
  if (!tw) {
    tw = new (std::nothrow) ToolWorker();
    if (!tw)
      return nullptr;
    tw->tg = (TgByte *)map_zeroed(sizeof(TgByte) * TT_EMU_TG_MEM_LIMIT);
    if (!tw->tg) {
      delete tw;
      return nullptr;
    }
    w->tw_keep = tw;
  }
  tw->L = L;
  tw->T = L->tools;
  tw->tools = L->tools->arm.tools;
  tw->pend.on = false;
  return tw;
}

inline uint32_t acting_thread(Worker *w) { // a whole-simdgroup operation works for lane op_lane
  uint32_t t = w->cur_thread;
  return w->op_lane < TT_EMU_SIMD_WIDTH ? t / TT_EMU_SIMD_WIDTH * TT_EMU_SIMD_WIDTH + w->op_lane : t;
}

void linear_to_tg(const Launch *L, uint64_t linear, uint32_t out[3]) {
  uint64_t gx = L->d->grid[0], gy = L->d->grid[1];
  out[0] = (uint32_t)(linear % gx);
  out[1] = (uint32_t)((linear / gx) % gy);
  out[2] = (uint32_t)(linear / (gx * gy));
}

void record(ToolWorker *tw, const tt_tool_hazard &h) {
  tt_tool_report &r = tw->T->rep;
  r.total++;
  for (uint32_t i = 0; i < r.nhazards; i++) {
    tt_tool_hazard &o = r.hazards[i];
    if (o.kind == h.kind && o.space == h.space && o.first.pc_offset == h.first.pc_offset &&
        o.second.pc_offset == h.second.pc_offset) {
      o.count++;
      return;
    }
  }
  if (r.nhazards < TT_TOOL_MAX_HAZARDS) {
    r.hazards[r.nhazards] = h;
    r.hazards[r.nhazards].count = 1;
    r.nhazards++;
  }
}

tt_tool_access make_access(uint32_t pc, uint16_t tid, uint16_t sep, bool write) {
  tt_tool_access a;
  a.pc_offset = pc;
  a.thread = tid & kThreadMask;
  a.is_write = write;
  a.atomic = (tid & kAtomicBit) ? 1 : 0;
  a.simd_epoch = sep;
  return a;
}

tt_tool_hazard make_hazard(Worker *w, uint32_t kind, uint32_t space, int32_t slot, int64_t offset, uint32_t size) {
  tt_tool_hazard h;
  memset(&h, 0, sizeof(h));
  if (space == TT_SPACE_THREADGROUP) { // the variable holding the byte, and the offset in it
    uintptr_t a = (uintptr_t)w->tg_lo + (uintptr_t)offset;
    for (int i = 0; i < w->nsites; i++)
      if (a >= (uintptr_t)w->sites[i].ptr && a < (uintptr_t)w->sites[i].ptr + w->sites[i].size) {
        snprintf(h.name, sizeof(h.name), "%s", w->sites[i].name ? w->sites[i].name : "?");
        offset = (int64_t)(a - (uintptr_t)w->sites[i].ptr);
        break;
      }
  }
  h.kind = kind;
  h.space = space;
  memcpy(h.tg, w->tgpos, sizeof(h.tg));
  memcpy(h.first_tg, w->tgpos, sizeof(h.first_tg));
  h.slot = slot;
  h.offset = offset;
  h.size = size;
  return h;
}

// Settles the pending write-write check: the writer's store has happened by now (no other thread ran).
void settle(ToolWorker *tw) {
  Pending &p = tw->pend;
  p.on = false;
  if (memcmp((const void *)p.addr, p.snap, p.size) != 0)
    record(tw, p.h);
  else
    tw->T->rep.benign_waw++;
}

void pend_waw(ToolWorker *tw, const tt_tool_hazard &h, uintptr_t addr, uint32_t size) {
  Pending &p = tw->pend;
  p.on = true;
  p.addr = addr;
  p.size = size > 16 ? 16 : size;
  memcpy(p.snap, (const void *)addr, p.size);
  p.h = h;
}

inline bool conflicts(const TAcc &prev, uint32_t t, bool atomic, uint16_t sep) {
  if (prev.tid == kNoThread)
    return false;
  uint32_t pt = prev.tid & kThreadMask;
  if (pt == t)
    return false; // program order
  if ((prev.tid & kAtomicBit) && atomic)
    return false; // two atomics
  if (pt / TT_EMU_SIMD_WIDTH == t / TT_EMU_SIMD_WIDTH && prev.sep != sep)
    return false; // lanes of one simdgroup with a simdgroup_barrier(mem_threadgroup) between them
  return true;
}

// ---- the profiler's SIMD-wide instructions ----

void simd_note(ToolWorker *tw, uint32_t t, uint32_t pc, uint8_t space, bool write, uintptr_t a, uint32_t n) {
  uint32_t s = t / TT_EMU_SIMD_WIDTH, lane = t % TT_EMU_SIMD_WIDTH;
  SimdProfile &sp = tw->sp[s];
  if (sp.instrs.size() >= kMaxSimdInstrs) { // the simdgroup ran too long without meeting
    tw->T->rep.profile.ungrouped++;
    return;
  }
  uint32_t k = sp.count[(uint64_t)pc << 5 | lane]++;
  SimdInstr &in = sp.instrs[(uint64_t)pc << 24 | (k & 0xffffff)];
  if (!in.mask) {
    in.space = space;
    in.write = write;
  }
  in.mask |= 1u << lane;
  in.addr[lane] = a;
  in.size[lane] = (uint8_t)n;
}

// Accounts for the SIMD instructions simdgroup s executed since it last met.
void simd_flush(Worker *w, uint32_t s) {
  ToolWorker *tw = w->tw;
  SimdProfile &sp = tw->sp[s];
  if (sp.instrs.empty()) {
    sp.count.clear();
    return;
  }
  tt_tool_profile &p = tw->T->rep.profile;
  const tt_tool_banks &b = tw->T->arm.banks;
  uintptr_t tg_base = (uintptr_t)w->tg_lo;
  uint32_t words[TT_EMU_SIMD_WIDTH * 16];
  for (auto &kv : sp.instrs) {
    const SimdInstr &in = kv.second;
    p.simd_instructions++;
    p.simd_lanes += (uint64_t)__builtin_popcount(in.mask);
    uint32_t nw = 0;
    for (uint32_t m = in.mask; m; m &= m - 1) {
      uint32_t l = (uint32_t)__builtin_ctz(m);
      for (uint32_t i = 0; i < in.size[l]; i++) // every byte's word (distinct below): bytes 1 apart share words
        words[nw++] = (uint32_t)((in.addr[l] + i - (in.space == TT_SPACE_THREADGROUP ? tg_base : 0)) /
                                 (in.space == TT_SPACE_THREADGROUP ? b.bank_bytes : 1));
    }
    std::sort(words, words + nw);
    nw = (uint32_t)(std::unique(words, words + nw) - words);
    if (in.space == TT_SPACE_DEVICE) {
      p.dev_moved += nw; // distinct bytes of the instruction
      continue;
    }
    uint32_t per_bank[64] = {0};
    uint32_t cycles = 0, nb = b.banks > 64 ? 64 : b.banks;
    for (uint32_t i = 0; i < nw; i++) {
      uint32_t c = ++per_bank[words[i] % nb];
      if (c > cycles)
        cycles = c;
    }
    uint32_t ideal = (nw + nb - 1) / nb;
    uint32_t pc = (uint32_t)(kv.first >> 24);
    tt_tool_conflict &line = tw->T->tg_by_pc[pc];
    line.pc_offset = pc;
    line.accesses++;
    line.cycles += cycles;
    line.ideal += ideal;
    p.tg_simd_accesses++;
    p.tg_wavefronts += cycles;
    p.tg_ideal += ideal;
    if (cycles > ideal)
      p.tg_conflicted++;
    uint64_t degree = (uint64_t)cycles * 1000 / (ideal ? ideal : 1);
    if (degree > p.tg_max_degree)
      p.tg_max_degree = degree;
  }
  sp.instrs.clear();
  sp.count.clear();
}

// ---- accesses ----

void tg_access(Worker *w, uint32_t off, uint32_t n, int rw, bool atomic, uint32_t pc) {
  ToolWorker *tw = w->tw;
  if (off + n > TT_EMU_TG_MEM_LIMIT)
    n = TT_EMU_TG_MEM_LIMIT - off;
  uint32_t t = acting_thread(w);
  uint16_t tid = (uint16_t)(t | (atomic ? kAtomicBit : 0));
  uint16_t sep = (uint16_t)tw->sepoch[t / TT_EMU_SIMD_WIDTH];
  const bool race = tw->tools & TT_TOOL_RACE, init = tw->tools & TT_TOOL_INIT;
  bool found_read = false, found_write = false, found_uninit = false;
  const TAcc cur{pc, tid, sep};
  for (uint32_t i = 0; i < n; i++) {
    TgByte &b = tw->tg[off + i];
    if (b.epoch != tw->epoch) {
      b.epoch = tw->epoch;
      b.w.tid = b.r1.tid = b.r2.tid = kNoThread;
    }
    if (rw & ACC_READ) {
      if (init && !found_uninit && b.init != tw->serial) {
        found_uninit = true;
        tt_tool_hazard h = make_hazard(w, TT_HAZ_UNINIT, TT_SPACE_THREADGROUP, -1, off + i, n);
        h.second = make_access(pc, tid, sep, rw & ACC_WRITE);
        record(tw, h);
      }
      if (race && !found_read && conflicts(b.w, t, atomic, sep)) {
        found_read = true;
        tt_tool_hazard h = make_hazard(w, TT_HAZ_RAW, TT_SPACE_THREADGROUP, -1, off + i, n);
        h.first = make_access(b.w.pc, b.w.tid, b.w.sep, true);
        h.second = make_access(pc, tid, sep, false);
        record(tw, h);
      }
    }
    if (rw & ACC_WRITE) {
      if (race && !found_write) {
        const TAcc *r = conflicts(b.r1, t, atomic, sep) ? &b.r1 : conflicts(b.r2, t, atomic, sep) ? &b.r2 : nullptr;
        if (r) {
          found_write = true;
          tt_tool_hazard h = make_hazard(w, TT_HAZ_WAR, TT_SPACE_THREADGROUP, -1, off + i, n);
          h.first = make_access(r->pc, r->tid, r->sep, false);
          h.second = make_access(pc, tid, sep, true);
          record(tw, h);
        } else if (!tw->pend.on && conflicts(b.w, t, atomic, sep)) {
          found_write = true;
          tt_tool_hazard h = make_hazard(w, TT_HAZ_WAW, TT_SPACE_THREADGROUP, -1, off + i, n);
          h.first = make_access(b.w.pc, b.w.tid, b.w.sep, true);
          h.second = make_access(pc, tid, sep, true);
          pend_waw(tw, h, (uintptr_t)w->tg_lo + off, n);
        }
      }
    }
    // the shadow is updated after every check (an atomic read-modify-write must be checked against the readers
    // before it becomes one); a plain reader is not displaced by an atomic one (atomics never race atomics)
    if (rw & ACC_READ) {
      if (b.r1.tid == kNoThread || (b.r1.tid & kThreadMask) == t)
        b.r1 = cur;
      else if (b.r2.tid == kNoThread || !atomic || (b.r2.tid & kAtomicBit))
        b.r2 = cur;
    }
    if (rw & ACC_WRITE) {
      b.w = cur;
      b.init = tw->serial;
    }
  }
  if (tw->tools & TT_TOOL_PROFILE) {
    tt_tool_profile &p = tw->T->rep.profile;
    if (rw & ACC_WRITE) {
      p.tg_stores++;
      p.tg_store_bytes += n;
    }
    if (rw & ACC_READ) {
      p.tg_loads++;
      p.tg_load_bytes += n;
    }
    if (!atomic)
      simd_note(tw, t, pc, TT_SPACE_THREADGROUP, rw & ACC_WRITE, (uintptr_t)w->tg_lo + off, n);
  }
}

// The racecheck word of a device byte: valid (bit 63), synced (62: the writer had used a device atomic), the
// writer's threadgroup (30..61, linear index), thread (20..29) and barriers with mem_device before it (0..19).
inline uint64_t dev_word(ToolWorker *tw, uint32_t t) {
  return (1ull << 63) | (tw->synced[t] ? 1ull << 62 : 0) | ((uint64_t)(uint32_t)tw->linear << 30) |
         ((uint64_t)t << 20) | (tw->dev_epoch & 0xfffff);
}

void dev_access(Worker *w, DevShadow &ds, uintptr_t a, uint32_t n, bool write, uint32_t pc) {
  ToolWorker *tw = w->tw;
  if (a + n > ds.hi)
    n = (uint32_t)(ds.hi - a);
  size_t i0 = a - ds.lo;
  uint32_t t = acting_thread(w);
  if (ds.wr && write) {
    uint64_t me = dev_word(tw, t);
    bool found = tw->pend.on;
    for (uint32_t i = 0; i < n; i++) {
      uint64_t old = ds.wr[i0 + i];
      if (!found && (old >> 63)) {
        uint32_t olin = (uint32_t)(old >> 30), ot = (uint32_t)(old >> 20) & kThreadMask, oep = (uint32_t)old & 0xfffff;
        bool same_tg = olin == (uint32_t)tw->linear;
        bool synced = ((old >> 62) & 1) || tw->synced[t];
        if (!(same_tg && ot == t) && !synced && !(same_tg && oep != (tw->dev_epoch & 0xfffff))) {
          found = true;
          int member = member_near(tw->L, *ds.g, a + i);
          tt_tool_hazard h = make_hazard(w, TT_HAZ_WAW, TT_SPACE_DEVICE, (int32_t)tw->L->d->buffers[member].slot,
                                         (int64_t)(a + i - member_start(tw->L, *ds.g, member)), n);
          linear_to_tg(tw->L, olin, h.first_tg);
          h.first = make_access(ds.wr_pc[i0 + i], (uint16_t)ot, 0, true);
          h.second = make_access(pc, (uint16_t)t, 0, true);
          pend_waw(tw, h, a, n);
        }
      }
      ds.wr[i0 + i] = me;
      ds.wr_pc[i0 + i] = pc;
    }
  }
  if (tw->tools & TT_TOOL_PROFILE) {
    tt_tool_profile &p = tw->T->rep.profile;
    int k = n == 1 ? 0 : n == 2 ? 1 : n == 4 ? 2 : n == 8 ? 3 : 4;
    (write ? p.dev_stores : p.dev_loads)[k]++;
    uint8_t *bits = write ? ds.wr_bits : ds.rd_bits;
    if (bits)
      for (uint32_t i = 0; i < n; i++)
        bits[(i0 + i) >> 3] |= (uint8_t)(1u << ((i0 + i) & 7));
    // Distinct per threadgroup: threadgroups run one after another on the one host thread a profiled launch has,
    // so a byte last stamped by another threadgroup is new to this one.
    uint32_t *seen = write ? ds.wr_tg : ds.rd_tg, me = (uint32_t)tw->linear + 1;
    if (seen)
      for (uint32_t i = 0; i < n; i++)
        if (seen[i0 + i] != me) {
          seen[i0 + i] = me;
          p.dev_tg_distinct++;
        }
    simd_note(tw, t, pc, TT_SPACE_DEVICE, write, a, n);
  }
}

void private_access(Worker *w, Fiber *f, uintptr_t a, uint32_t n, bool write, uint32_t pc) {
  ToolWorker *tw = w->tw;
  if (a + n > f->ttop)
    n = (uint32_t)(f->ttop - a);
  if (a < f->tlow)
    f->tlow = a;
  if (!f->tinit)
    return;
  uint8_t *shadow = f->tinit + (a - (uintptr_t)f->stack_lo);
  if (write) {
    memset(shadow, 1, n);
    return;
  }
  if (a < f->tfill)
    return; // not filled for this thread: unknown
  const unsigned char *mem = (const unsigned char *)a;
  for (uint32_t i = 0; i < n; i++)
    if (shadow[i] || mem[i] != kStackSentinel)
      return; // a byte of it was written (by the thread, or by code the tracing does not see)
  tt_tool_hazard h = make_hazard(w, TT_HAZ_UNINIT, TT_SPACE_PRIVATE, -1, (int64_t)(f->ttop - a), n);
  h.second = make_access(pc, (uint16_t)w->cur_thread, 0, false);
  record(tw, h);
}

void tool_access(uintptr_t a, uint32_t n, int rw, bool atomic, uintptr_t pc) {
  Worker *w = tl_worker;
  if (!w || !w->tw)
    return; // a kernel built for the tools, launched without them
  HookScope scope(w);
  ToolWorker *tw = w->tw;
  if (tw->pend.on)
    settle(tw);
  uint32_t pco = (uint32_t)(pc - 1 - tw->T->lib_base); // the call itself: its return address may have no line
  uintptr_t off = a - (uintptr_t)w->tg_lo;
  if (off < TT_EMU_TG_MEM_LIMIT) {
    tg_access(w, (uint32_t)off, n, rw, atomic, pco);
    return;
  }
  for (DevShadow &ds : tw->T->dev)
    if (a >= ds.lo && a < ds.hi) {
      if (!atomic)
        dev_access(w, ds, a, n, rw & ACC_WRITE, pco);
      else
        tw->synced[acting_thread(w)] = 1;
      return;
    }
  Fiber *f = w->cur_fiber;
  if ((tw->tools & TT_TOOL_INIT) && !atomic && f && a >= (uintptr_t)f->stack_lo && a < f->ttop)
    private_access(w, f, a, n, rw & ACC_WRITE, pco);
}

// ---- the scheduler's events ----

void tools_flush(Worker *w) {
  if (w->tw->pend.on)
    settle(w->tw);
}

void tools_barrier_done(Worker *w) {
  ToolWorker *tw = w->tw;
  if (w->barrier_flags & 2) { // mem_threadgroup: a new interval
    if (++tw->epoch == 0) {
      memset(tw->tg, 0, sizeof(TgByte) * TT_EMU_TG_MEM_LIMIT);
      tw->epoch = 1;
    }
    memset(tw->sepoch, 0, sizeof(tw->sepoch));
  }
  if (w->barrier_flags & 1) // mem_device
    tw->dev_epoch++;
  tw->tg_barriers++;
  if (tw->tools & TT_TOOL_PROFILE)
    for (uint32_t s = 0; s < w->nsg; s++)
      simd_flush(w, s);
}

void tools_simd_done(Worker *w, uint32_t s, const char *what, uint32_t param) {
  ToolWorker *tw = w->tw;
  if (what && strcmp(what, "simdgroup_barrier") == 0) {
    if (param & 2) // mem_threadgroup
      tw->sepoch[s]++;
    if (tw->tools & TT_TOOL_PROFILE)
      tw->T->rep.profile.simd_barriers++;
  }
  if (tw->tools & TT_TOOL_PROFILE)
    simd_flush(w, s);
}

size_t tools_stack_fill(Worker *w, Fiber *f) {
  if (!(w->tw->tools & TT_TOOL_INIT))
    return 0;
  if (!f->tinit && !(f->tinit = (uint8_t *)map_zeroed(f->stack_size)))
    return 0;
  size_t used = f->ttop && f->tlow && f->tlow < f->ttop ? f->ttop - f->tlow + 256 : 0;
  size_t n = std::max(used, kStackFillMin);
  size_t most = f->stack_size > 2 * kStackFillReserve ? f->stack_size - 2 * kStackFillReserve : 0;
  return round_up(std::min(n, most), 64);
}

__attribute__((noinline)) void tools_thread_start(Worker *w, Fiber *f, unsigned char *below, size_t n) {
  (void)w;
  f->tfill = (uintptr_t)below;
  f->ttop = (uintptr_t)below + n;
  f->tlow = f->ttop;
  memset(below, kStackSentinel, n);
  memset(f->tinit + (f->tfill - (uintptr_t)f->stack_lo), 0, n);
}

void tools_thread_done(Worker *w, uint32_t t) {
  uint32_t s = t / TT_EMU_SIMD_WIDTH;
  if ((w->tw->tools & TT_TOOL_PROFILE) && (w->sg[s].done == w->sg[s].full))
    simd_flush(w, s);
}

void tools_tg_begin(Worker *w, uint64_t linear) {
  ToolWorker *tw = w->tw;
  if (++tw->epoch == 0 || ++tw->serial == 0) {
    memset(tw->tg, 0, sizeof(TgByte) * TT_EMU_TG_MEM_LIMIT);
    tw->epoch = tw->serial = 1;
  }
  memset(tw->sepoch, 0, sizeof(tw->sepoch));
  memset(tw->synced, 0, w->N);
  tw->dev_epoch = 0;
  tw->linear = linear;
  tw->tg_barriers = 0;
}

bool tools_tg_end(Worker *w) {
  ToolWorker *tw = w->tw;
  tools_flush(w);
  tt_tool_report &r = tw->T->rep;
  if (tw->tools & TT_TOOL_PROFILE) {
    for (uint32_t s = 0; s < w->nsg; s++)
      simd_flush(w, s);
    r.profile.threadgroups++;
    r.profile.barriers += tw->tg_barriers;
    if (tw->tg_barriers > r.profile.max_barriers)
      r.profile.max_barriers = tw->tg_barriers;
  }
  if (!r.total || (tw->tools & TT_TOOL_WARN))
    return true;
  const tt_tool_hazard &h = r.hazards[0];
  int status = h.kind == TT_HAZ_UNINIT ? TT_ERR_UNINIT : TT_ERR_RACE;
  if (begin_error(w->L, w, status, (int)h.second.thread)) {
    Msg m;
    m.add("%s: %llu finding(s) in this threadgroup", h.kind == TT_HAZ_UNINIT ? "initcheck" : "racecheck",
          (unsigned long long)r.total);
    where(m, w, (int)h.second.thread);
    set_message(w->L, m);
  }
  return false;
}

} // namespace

// ---- tools: the callbacks of kernels built for them (-fsanitize-coverage=trace-loads,trace-stores), their
// atomics and counts, and arming (emulator_tools.h) ----

#define TT_COVERAGE_CALLBACKS(N)                                                                       \
  TT_EXPORT void __sanitizer_cov_load##N(const void *p) {                                              \
    tool_access((uintptr_t)p, N, ACC_READ, false, (uintptr_t)__builtin_return_address(0));             \
  }                                                                                                    \
  TT_EXPORT void __sanitizer_cov_store##N(const void *p) {                                             \
    tool_access((uintptr_t)p, N, ACC_WRITE, false, (uintptr_t)__builtin_return_address(0));            \
  }
TT_COVERAGE_CALLBACKS(1)
TT_COVERAGE_CALLBACKS(2)
TT_COVERAGE_CALLBACKS(4)
TT_COVERAGE_CALLBACKS(8)
TT_COVERAGE_CALLBACKS(16)
#undef TT_COVERAGE_CALLBACKS

TT_EXPORT void __tt_tool_atomic(const volatile void *p, uint32_t size, uint32_t kind) {
  int rw = kind == TT_ATOMIC_LOAD ? ACC_READ : kind == TT_ATOMIC_STORE ? ACC_WRITE : ACC_READ | ACC_WRITE;
  tool_access((uintptr_t)p, size, rw, true, (uintptr_t)__builtin_return_address(0));
}

TT_EXPORT void __tt_tool_count(uint32_t what, uint32_t n) {
  Worker *w = tl_worker;
  if (!w || !w->tw || !(w->tw->tools & TT_TOOL_PROFILE))
    return;
  tt_tool_profile &p = w->tw->T->rep.profile;
  if (what == TT_COUNT_SGM_MMA)
    p.sgm_mma += n;
  else if (what == TT_COUNT_FMA)
    p.fma += n;
}

TT_EXPORT int tt_emu_tools_arm(const void *entry, uint32_t tools, tt_tool_report *report, const tt_tool_banks *banks) {
  std::lock_guard<std::mutex> lk(g_arm_mu);
  ToolArm *slot = nullptr;
  for (ToolArm &a : g_arm)
    if (a.entry == entry) {
      slot = &a;
      break;
    }
  if (!slot) {
    for (ToolArm &a : g_arm)
      if (!a.entry) {
        slot = &a;
        break;
      }
    if (!slot)
      return -1;
    g_narmed++;
  }
  slot->entry = entry;
  slot->tools = tools;
  slot->report = report;
  slot->banks = banks ? *banks : tt_tool_banks{0, 0};
  return 0;
}

TT_EXPORT void tt_emu_tools_disarm(const void *entry) {
  std::lock_guard<std::mutex> lk(g_arm_mu);
  for (ToolArm &a : g_arm)
    if (a.entry && a.entry == entry) {
      a.entry = nullptr;
      g_narmed--;
    }
}

TT_EXPORT int tt_emu_tools_abi_version(void) { return TT_EMU_TOOLS_ABI_VERSION; }

// ------------------------------------------------------------------------------------------------
// Hooks called by kernel code
// ------------------------------------------------------------------------------------------------

TT_EXPORT void __tt_barrier(uint32_t flags, uint32_t line, uint32_t col) {
  (void)flags;
  Worker *w = tl_worker;
  HookScope scope(w);
  settle_range(w);
  check_cancel(w);
  if (w->tw) {
    tools_flush(w);
    w->barrier_flags = flags;
    if (w->N == 1) { // no thread to wait for, but the interval still ends here
      tools_barrier_done(w);
      return;
    }
  }
  if (w->N == 1)
    return;
  uint32_t t = w->cur_thread;
  ThreadSt &ts = w->th[t];
  w->state[t] = T_BARRIER;
  ts.line = line;
  ts.col = col;
  ts.what = "threadgroup_barrier";
  w->n_barrier++;
  if (w->n_barrier + w->n_done == w->N) {
    complete_barrier(w, (int)t);
    return;
  }
  schedule_away(w);
  check_cancel(w);
}

TT_EXPORT tt_simd_xchg *__tt_simd(const char *op, const void *val, uint32_t size, uint32_t param, uint32_t line,
                                  uint32_t col, uint32_t *lane_out) {
  Worker *w = tl_worker;
  HookScope scope(w);
  settle_range(w);
  check_cancel(w);
  if (w->tw)
    tools_flush(w);
  uint32_t t = w->cur_thread;
  uint32_t s = t / TT_EMU_SIMD_WIDTH, lane = t % TT_EMU_SIMD_WIDTH;
  *lane_out = lane;
  SimdGroupSt &g = w->sg[s];
  tt_simd_xchg *x = &g.x[g.gen & 1];
  if (size > 16)
    size = 16;
  if (size == 8) // the common sizes as one move each (a pointer, a float2, a 32-bit value)
    memcpy(x->val[lane], val, 8);
  else if (size == 4)
    memcpy(x->val[lane], val, 4);
  else if (size)
    memcpy(x->val[lane], val, size);
  x->param[lane] = param;
  ThreadSt &ts = w->th[t];
  w->state[t] = T_SIMD;
  ts.size = (uint16_t)size;
  ts.line = line;
  ts.col = col;
  ts.what = op;
  g.arrived |= 1u << lane;
  if ((g.arrived | g.done) == g.full)
    complete_simd(w, s, (int)t);
  else
    schedule_away(w);
  check_cancel(w);
  return x;
}

TT_EXPORT tt_sgm_state *__tt_sgm_enter(uint32_t *lane) {
  Worker *w = tl_worker;
  settle_range(w);
  uint32_t t = w->cur_thread;
  *lane = t % TT_EMU_SIMD_WIDTH;
  return &w->sgm[t / TT_EMU_SIMD_WIDTH];
}

TT_EXPORT void __tt_sgm_wait(tt_sgm_state *st, const char *what, uint32_t line, uint32_t col) {
  Worker *w = tl_worker;
  HookScope scope(w);
  check_cancel(w);
  if (w->tw)
    tools_flush(w);
  uint32_t t = w->cur_thread;
  ThreadSt &ts = w->th[t];
  w->state[t] = T_SGM;
  ts.size = 0;
  ts.line = line;
  ts.col = col;
  ts.what = what;
  st->waiting |= 1u << (t % TT_EMU_SIMD_WIDTH);
  schedule_away(w);
  check_cancel(w);
}

TT_EXPORT void __tt_sgm_wake(tt_sgm_state *st) {
  Worker *w = tl_worker;
  uint32_t base = st->sg * TT_EMU_SIMD_WIDTH, m = st->waiting;
  st->waiting = 0;
  if (w->L->d->schedule == TT_SCHED_REVERSE) {
    for (; m; m &= ~(1u << (31 - __builtin_clz(m)))) {
      uint32_t t = base + 31u - (uint32_t)__builtin_clz(m);
      w->state[t] = T_READY;
      rq_push(w, t);
    }
  } else {
    for (; m; m &= m - 1) {
      uint32_t t = base + (uint32_t)__builtin_ctz(m);
      w->state[t] = T_READY;
      rq_push(w, t);
    }
  }
}

TT_EXPORT tt_sgm_rec *__tt_sgm_grow(tt_sgm_state *st) {
  Worker *w = tl_worker;
  HookScope scope(w);
  tt_sgm_rec *r = (tt_sgm_rec *)aligned_alloc(64, (sizeof(tt_sgm_rec) + 63) / 64 * 64);
  if (!r) {
    if (begin_error(w->L, w, TT_ERR_INTERNAL, (int)w->cur_thread)) {
      Msg m;
      m.add("out of memory for simdgroup_matrix results");
      where(m, w, (int)w->cur_thread);
      set_message(w->L, m);
    }
    fail_here(w);
  }
  memset(r, 0, sizeof(*r));
  r->st = st;
  w->sgm_recs[st->sg].push_back(r);
  return r;
}

TT_EXPORT void __tt_sgm_fail(tt_sgm_state *st, int32_t why, uint32_t lane, const char *what, uint32_t line,
                             uint32_t col) {
  Worker *w = tl_worker;
  w->in_kernel = 0;
  uint32_t s = st->sg, t = s * TT_EMU_SIMD_WIDTH + lane;
  const tt_sgm_op &op = st->ring[st->n[lane] % TT_SGM_WINDOW];
  int kind = why == TT_SGM_NOT_ALL_LANES ? TT_ERR_SIMD : TT_ERR_DIVERGENCE;
  if (begin_error(w->L, w, kind, (int)t)) {
    Msg m;
    if (why == TT_SGM_NOT_ALL_LANES) {
      m.add("%s needs all 32 lanes of the simdgroup, but only the lanes in mask 0x%08x take part (MSL line %u:%u)",
            what, st->full & ~st->done, line, col);
    } else {
      m.add("divergent %s", why == TT_SGM_OTHER_TYPES ? what : "simdgroup_matrix operation");
      if (why == TT_SGM_OTHER_TYPES)
        m.add(": lanes of the simdgroup run different instantiations (element types) of the same call site "
              "(MSL line %u:%u)", line, col);
      else
        m.add(": all 32 lanes of a simdgroup must reach the same call site");
      m.add(";\n  threads ");
      add_lane_ranges(m, s, op.lanes);
      m.add(" issued %s (MSL line %u:%u)%s;\n  thread %u issues %s (MSL line %u:%u)", op.what,
            (uint32_t)(op.site >> 32), (uint32_t)op.site, why == TT_SGM_OTHER_TYPES ? " in another instantiation" : "",
            t, what, line, col);
      add_line(w->L->res, (uint32_t)(op.site >> 32));
    }
    add_line(w->L->res, line);
    where(m, w, (int)t);
    set_message(w->L, m);
  }
  fail_here(w);
}

TT_EXPORT void *__tt_tg_alloc(uint32_t site, uint32_t size, uint32_t align, const char *name) {
  Worker *w = tl_worker;
  HookScope scope(w);
  for (int i = 0; i < w->nsites; i++)
    if (w->sites[i].site == site)
      return w->sites[i].ptr;
  if (align < 16)
    align = 16;
  uintptr_t top = (uintptr_t)w->tg_top, lo = (uintptr_t)w->tg_lo;
  uintptr_t p = size <= top - lo ? ((top - size) & ~(uintptr_t)(align - 1)) : 0;
  if (!p || p < lo || w->nsites >= (int)(sizeof(w->sites) / sizeof(w->sites[0]))) {
    if (begin_error(w->L, w, TT_ERR_TG_MEM, (int)w->cur_thread)) {
      Msg m;
      m.add("threadgroup memory exhausted: '%s' needs %u bytes but only %zu of the %d bytes Metal allows are left",
            name ? name : "?", size, (size_t)(top - lo), TT_EMU_TG_MEM_LIMIT);
      where(m, w, (int)w->cur_thread);
      set_message(w->L, m);
    }
    fail_here(w);
  }
  // Metal leaves threadgroup memory uninitialised: start every threadgroup with 0xFF bytes (NaN for
  // float/half/bfloat, -1 for integers) so that reading before writing gives visibly wrong values.
  memset((void *)p, 0xFF, size);
  TgSite &s = w->sites[w->nsites++];
  s.site = site;
  s.size = size;
  s.ptr = (char *)p;
  s.name = name;
  w->tg_top = (char *)p;
  return (void *)p;
}

TT_EXPORT void __tt_fail(int32_t kind, const char *msg, uint32_t line, uint32_t col) {
  Worker *w = tl_worker;
  w->in_kernel = 0;
  if (begin_error(w->L, w, kind, (int)w->cur_thread)) {
    Msg m;
    m.add("%s", msg);
    if (line)
      m.add(" (MSL line %u:%u)", line, col);
    where(m, w, (int)w->cur_thread);
    add_line(w->L->res, line);
    set_message(w->L, m);
  }
  fail_here(w);
}

// ---- UndefinedBehaviorSanitizer hooks (kernels are built with -fsanitize=integer-divide-by-zero,
// signed-integer-overflow (only division is instrumented under -fwrapv), shift-exponent and
// array-bounds, without the sanitizer runtime: these definitions are that runtime). The layouts
// below are the compiler's documented handler ABI.
namespace {
struct UbLoc {
  const char *file;
  uint32_t line, col;
};
struct UbType {
  uint16_t kind, info;
  char name[1];
};
struct UbBinaryData {
  UbLoc loc;
  const UbType *a;
  const UbType *b;
};

int64_t ub_value(const UbType *t, uintptr_t v) {
  if (!t || t->kind != 0)
    return (int64_t)v;
  unsigned bits = 1u << (t->info >> 1);
  if (bits > 64)
    return 0; // passed by pointer; never produced by MSL types
  bool is_signed = t->info & 1;
  if (bits < 64) {
    uint64_t m = (1ull << bits) - 1;
    uint64_t x = (uint64_t)v & m;
    if (is_signed && (x >> (bits - 1)) & 1)
      x |= ~m;
    return (int64_t)x;
  }
  return (int64_t)v;
}

const char *base_name(const char *p) {
  const char *s = strrchr(p ? p : "", '/');
  return s ? s + 1 : (p ? p : "");
}

void ub_event(uint32_t kind, const UbLoc &loc, int64_t a, int64_t b, const char *what) {
  Worker *w = tl_worker;
  if (!w || !w->L)
    return;
  HookScope scope(w);
  uint32_t mode = w->L->d->ub_mode;
  if (mode == TT_UB_IGNORE)
    return;
  if (mode == TT_UB_ERROR) {
    if (begin_error(w->L, w, TT_ERR_UB, (int)w->cur_thread)) {
      Msg m;
      m.add("undefined behaviour: %s (operands %lld, %lld) at %s line %u:%u", what, (long long)a, (long long)b,
            base_name(loc.file), loc.line, loc.col);
      where(m, w, (int)w->cur_thread);
      add_line(w->L->res, loc.line);
      set_message(w->L, m);
    }
    fail_here(w);
  }
  const char *file = base_name(loc.file);
  for (uint32_t i = 0; i < w->nevents; i++) {
    tt_event &e = w->events[i];
    if (e.kind == kind && e.line == loc.line && e.col == loc.col && strncmp(e.file, file, sizeof(e.file) - 1) == 0) {
      e.count++;
      return;
    }
  }
  if (w->nevents >= TT_EMU_MAX_EVENTS)
    return;
  tt_event &e = w->events[w->nevents++];
  e.kind = kind;
  e.line = loc.line;
  e.col = loc.col;
  e.count = 1;
  e.a = a;
  e.b = b;
  snprintf(e.file, sizeof(e.file), "%s", file);
}

void ub_divrem(void *data, uintptr_t lhs, uintptr_t rhs) {
  const UbBinaryData *d = (const UbBinaryData *)data;
  int64_t a = ub_value(d->a, lhs), b = ub_value(d->a, rhs);
  if (b == 0)
    ub_event(TT_EV_DIV_ZERO, d->loc, a, b, "integer division by zero");
  else
    ub_event(TT_EV_DIV_OVERFLOW, d->loc, a, b, "signed integer division overflow");
}

void ub_shift(void *data, uintptr_t lhs, uintptr_t rhs) {
  const UbBinaryData *d = (const UbBinaryData *)data;
  ub_event(TT_EV_SHIFT, d->loc, ub_value(d->a, lhs), ub_value(d->b, rhs), "shift count out of range");
}

[[noreturn]] void ub_oob(void *data, uintptr_t index) {
  const UbBinaryData *d = (const UbBinaryData *)data;
  Worker *w = tl_worker;
  w->in_kernel = 0;
  if (begin_error(w->L, w, TT_ERR_LOCAL_OOB, (int)w->cur_thread)) {
    Msg m;
    m.add("index %lld out of bounds for array of type %s at %s line %u:%u", (long long)ub_value(d->b, index),
          d->a ? d->a->name : "?", base_name(d->loc.file), d->loc.line, d->loc.col);
    where(m, w, (int)w->cur_thread);
    add_line(w->L->res, d->loc.line);
    set_message(w->L, m);
  }
  fail_here(w);
}
} // namespace

TT_EXPORT void __ubsan_handle_divrem_overflow(void *d, uintptr_t a, uintptr_t b) { ub_divrem(d, a, b); }
TT_EXPORT void __ubsan_handle_divrem_overflow_abort(void *d, uintptr_t a, uintptr_t b) { ub_divrem(d, a, b); }
TT_EXPORT void __ubsan_handle_shift_out_of_bounds(void *d, uintptr_t a, uintptr_t b) { ub_shift(d, a, b); }
TT_EXPORT void __ubsan_handle_shift_out_of_bounds_abort(void *d, uintptr_t a, uintptr_t b) { ub_shift(d, a, b); }
TT_EXPORT void __ubsan_handle_out_of_bounds(void *d, uintptr_t i) { ub_oob(d, i); }
TT_EXPORT void __ubsan_handle_out_of_bounds_abort(void *d, uintptr_t i) { ub_oob(d, i); }

// ------------------------------------------------------------------------------------------------
// Public entry points
// ------------------------------------------------------------------------------------------------

TT_EXPORT int tt_emu_abi_version(void) { return TT_EMU_ABI_VERSION; }

TT_EXPORT int tt_emu_uses_ucontext(void) {
#ifdef TT_EMU_UCONTEXT
  return 1;
#else
  return 0;
#endif
}

namespace {

void init_result(tt_launch_result *res) {
  memset(res, 0, sizeof(*res));
  res->slot = -1;
  res->index = 0;
  res->is_write = -1;
  res->thread = -1;
}

// Stops the running launch: the flag is seen by the runtime's hooks and by workers between
// threadgroups; the signal takes a worker out of kernel code (on_cancel_signal). Called with
// g_pool_mu held; sent again on every wait slice until the workers are done.
void signal_workers(Launch *L) {
  for (int i = 0; i < L->nworkers && i < (int)g_pool.size(); i++)
    if (g_pool[i]->active)
      pthread_kill(g_pool[i]->thread, kCancelSignal);
}

void cancel_locked(Launch *L, int status) {
  int expected = 0;
  if (L->cancel.compare_exchange_strong(expected, status))
    L->abort.store(1);
  signal_workers(L);
}

void release_launch_slot() {
  std::lock_guard<std::mutex> lk(g_sync->launch_mu);
  g_sync->busy = false;
  g_sync->launch_cv.notify_all();
}

// After the workers are done: events, canaries, copy-back, cleanup. Returns the final status.
int finish_launch(Launch *L) {
  restore_handlers();
  tt_launch_result *res = L->res;
  for (int i = 0; i < L->nworkers; i++)
    merge_events(L, g_pool[i]);
  int cancel = L->cancel.load();
  if (!L->has_error && cancel && L->done_tg.load() < L->total_tg && begin_error(L, nullptr, cancel, -1)) {
    Msg m; // cancelled before any worker was inside a threadgroup
    m.add("%s before %llu of %llu threadgroups finished", cancel == TT_ERR_TIMEOUT ? "timed out" : "interrupted",
          (unsigned long long)(L->total_tg - L->done_tg.load()), (unsigned long long)L->total_tg);
    set_message(L, m);
  }
  if (!L->has_error)
    check_canaries(L);
  if (!L->has_error) {
    for (const Group &g : L->groups)
      if (!g.readonly && g.hi > g.lo)
        memcpy((void *)g.lo, g.data, g.hi - g.lo);
  }
  if (L->tools)
    tools_launch_end(L);
  release_buffers(L);
  delete L;
  release_launch_slot();
  return res->status;
}

} // namespace

TT_EXPORT int tt_emu_launch_begin(const tt_launch_desc *d, tt_launch_result *res, uint32_t wait_ms, uint64_t token) {
  {
    std::unique_lock<std::mutex> lk(g_sync->launch_mu);
    if (!g_sync->launch_cv.wait_for(lk, std::chrono::milliseconds(wait_ms), [] { return !g_sync->busy; }))
      return TT_EMU_BUSY;
    g_sync->busy = true;
  }
  init_result(res);
  Launch *L = new Launch();
  L->d = d;
  L->res = res;
  L->token = token;
  L->start = std::chrono::steady_clock::now();
  memset(L->slots, 0, sizeof(L->slots));
  auto fail_early = [&](int status, const Msg &m) {
    res->status = status;
    if (status != TT_OK)
      set_message(L, m);
    if (L->tools)
      tools_launch_end(L);
    release_buffers(L);
    delete L;
    release_launch_slot();
    return status;
  };
  {
    Msg m;
    uint64_t nthreads = (uint64_t)d->tg[0] * d->tg[1] * d->tg[2];
    if (!d->entry)
      m.add("no kernel entry point");
    else if (nthreads == 0 || nthreads > TT_EMU_MAX_THREADS)
      m.add("threads per threadgroup (%u,%u,%u) = %llu must be between 1 and %d", d->tg[0], d->tg[1], d->tg[2],
            (unsigned long long)nthreads, TT_EMU_MAX_THREADS);
    else if (d->ub_mode > TT_UB_IGNORE)
      m.add("ub_mode %u is not one of TT_UB_WARN, TT_UB_ERROR, TT_UB_IGNORE", d->ub_mode);
    if (m.n)
      return fail_early(TT_ERR_INVALID, m);
  }
  L->total_tg = (uint64_t)d->grid[0] * d->grid[1] * d->grid[2];
  if (L->total_tg == 0)
    return fail_early(TT_OK, Msg());
  {
    Msg m;
    if (!setup_buffers(L, m))
      return fail_early(TT_ERR_INVALID, m);
  }
  if (g_narmed.load(std::memory_order_relaxed))
    L->tools = tools_take(L); // the launch was armed: its tools need its buffers' copies
  // one host thread runs a launch with tools: its reports are then deterministic
  int want = L->tools ? 1 : d->host_threads ? (int)d->host_threads : host_thread_count();
  int nw = (int)std::min<uint64_t>((uint64_t)std::max(want, 1), L->total_tg);
  std::lock_guard<std::mutex> lk(g_pool_mu);
  if (!ensure_pool(nw))
    nw = (int)g_pool.size();
  if (nw == 0) {
    Msg m;
    m.add("cannot start a host thread for the emulator");
    return fail_early(TT_ERR_INTERNAL, m);
  }
  L->nworkers = nw;
  install_handlers();
  g_cur = L;
  g_nactive = nw;
  g_pending = nw;
  g_gen++;
  g_pool_cv.notify_all();
  return TT_EMU_PENDING;
}

TT_EXPORT int tt_emu_launch_wait(uint64_t token, uint32_t wait_ms) {
  using clock = std::chrono::steady_clock;
  Launch *L;
  spin_until([] { return g_pending.load() == 0; });
  {
    std::unique_lock<std::mutex> lk(g_pool_mu);
    L = g_cur;
    if (!L || L->token != token)
      return TT_EMU_DONE;
    auto until = clock::now() + std::chrono::milliseconds(wait_ms);
    while (g_pending) {
      auto now = clock::now();
      if (L->d->timeout_ms && !L->cancel.load() &&
          now - L->start >= std::chrono::milliseconds(L->d->timeout_ms))
        cancel_locked(L, TT_ERR_TIMEOUT);
      else if (L->cancel.load())
        signal_workers(L); // a worker may have been inside a hook when the last signal came
      if (now >= until)
        return TT_EMU_PENDING;
      auto slice = std::min<clock::duration>(until - now, std::chrono::milliseconds(20));
      g_done_cv.wait_for(lk, slice, [] { return g_pending == 0; });
    }
    g_cur = nullptr;
  }
  return finish_launch(L);
}

TT_EXPORT void tt_emu_launch_cancel(uint64_t token, int32_t status) {
  std::lock_guard<std::mutex> lk(g_pool_mu);
  if (g_cur && g_cur->token == token && g_pending)
    cancel_locked(g_cur, status == TT_ERR_TIMEOUT ? TT_ERR_TIMEOUT : TT_ERR_INTERRUPTED);
}

TT_EXPORT int tt_emu_launch(const tt_launch_desc *d, tt_launch_result *res) {
  static std::atomic<uint64_t> next_token{1ull << 63}; // apart from the tokens Python hands out
  uint64_t token = next_token.fetch_add(1);
  int st;
  while ((st = tt_emu_launch_begin(d, res, 1000, token)) == TT_EMU_BUSY) {
  }
  while (st == TT_EMU_PENDING)
    st = tt_emu_launch_wait(token, 1000);
  return st == TT_EMU_DONE ? res->status : st;
}

namespace {
struct BenchState {
  Ctx main, fib;
  uint32_t n;
};
void bench_fiber(void *arg) {
  BenchState *b = (BenchState *)arg;
  for (;;)
    ctx_switch(&b->fib, &b->main);
}
} // namespace

TT_EXPORT double tt_emu_bench_switch(uint32_t n) {
  size_t size = 64 * 1024;
  char *stack = (char *)mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (stack == MAP_FAILED)
    return -1;
  BenchState b;
  b.n = n;
  ctx_init(&b.fib, stack, size, bench_fiber, &b);
  ctx_switch(&b.main, &b.fib); // warm up
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (uint32_t i = 0; i < n; i++)
    ctx_switch(&b.main, &b.fib);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  munmap(stack, size);
  double ns = (double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec);
  return ns / (2.0 * n);
}

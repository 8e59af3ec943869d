"""An autotuned kernel's configs compiled two at a time, ahead of the autotuner's timing of each, and a config that
compiles to a kernel already timed in the run given that timing.

Triton 3.9's autotuner compiles and times its configs one after another: config k is compiled (Triton's
frontend and passes, then our lowering), its library is built (clang, a subprocess), it is timed, and only then
does config k+1's compile start. On the emulator all of it is host work that could overlap: upstream's passes
release the GIL, clang runs in another process, and the native launcher releases the GIL while a kernel runs.
So when the autotuner asks to time a run's first config (:func:`before_timing`), two background threads start
compiling the run's configs in order, with the autotuner's own arguments (`run(..., warmup=True)`: no launch, no
hook), and load each compiled kernel (which starts its library's build, `background.py`); the timing of every
config, the first included, first waits for its compile, so the autotuner's own calls find each config compiled
and its library built or building, and the autotuner's thread compiles nothing.

Triton's frontend parses Python with the `ast` module, whose object conversion is not safe in two threads at
once on CPython 3.11 ("AST constructor recursion depth mismatch"). So the two threads take turns for it: a thread
holds :data:`_frontend` from the start of a compile until the backend's first stage begins (:func:`past_frontend`,
called by compiler.py once the frontend has made the TTIR) or the compile returns; the rest of each compile
(upstream's passes, our lowering, the library's build) overlaps the other thread's. A config that compiles to the
same kernel as an earlier one (equal but for num_stages, `autotune_call.same_kernel_key`) waits for that one, so
Triton's cache serves it instead of both compiling at once.

What the autotuner is timing is read from the callable it benchmarks (`autotune_call.what_is_timed`). Where the
callable is not of that shape, or the autotuner prunes its configs (`prune_configs_by`: the configs it will time
are not known before it prunes), nothing is done and the autotuner compiles as usual. Triton's JIT hooks and
compile-time warnings run on these threads. A config whose compile fails here is compiled again by the autotuner,
which reports or skips it as it always does; the run's lookahead stops first (the compiles in flight finish), so
that no frontend runs beside it, and the run's later configs compile in the autotuner's thread. Not covered: an
autotuner pre-hook that compiles another Triton kernel for the first time would run that frontend beside these
threads' (on CPython 3.11 that can fail with the error above, a crash rather than a wrong result);
`TRITON_APPLE_EMULATOR_AUTOTUNE_LOOKAHEAD=0` turns the lookahead off.

Configs that differ only in num_stages compile to the same kernel on this backend (compiler.py records every
num_stages as 1), and autotune lists often multiply their configs by several values: timing each would launch the
same kernel with the same arguments again. So a config whose compile here produced the kernel an earlier config of
the same run was timed with (the same Triton cache key, which covers every constexpr and option), with the same
config hook, gets that timing (:func:`earlier_timing`, :func:`record_timing`). A run is one lookahead: the
autotuner calls every config of a run with the same arguments, and a new run (a new key, or the same key after
its cache was cleared) starts from its first config again.
"""
from __future__ import annotations

import contextvars
import os
import threading
import weakref
from typing import Any, Dict, List, Optional

from triton.runtime import _async_compile

from .. import knobs
from .autotune_call import same_kernel_key, what_is_timed

# Compiles at once: one in Triton's frontend (under `_frontend`) while the other runs its passes and lowering.
THREADS = 2

_runs: "weakref.WeakKeyDictionary[Any, _Lookahead]" = weakref.WeakKeyDictionary()
_runs_lock = threading.Lock()
_frontend = threading.Lock()  # held by a lookahead thread while Triton's frontend may run in it
_holding = threading.local()  # `.frontend`: whether this thread holds `_frontend`


class _Lookahead:
    """The configs of one autotuner run, compiled in order by daemon threads, and the timings taken in the run. It
    keeps no reference to the autotuner or the arguments once those threads are done (a tensor must not outlive its
    run)."""

    def __init__(self, configs: List[Any]):
        self.configs = list({id(c): c for c in configs}.values())  # a config listed twice is compiled once
        self.done: Dict[int, threading.Event] = {id(c): threading.Event() for c in self.configs}
        self.failed: set = set()  # ids of the configs whose compile raised here
        self.kernels: Dict[int, str] = {}  # id of a config -> Triton's cache key of the kernel it compiled to
        self.timings: Dict[tuple, Any] = {}  # (that key, the config's hook) -> the timing taken
        self.stopped = False
        self.threads: List[threading.Thread] = []
        self._next = 0
        self._lock = threading.Lock()
        # the config that compiles to the same kernel as each config, earlier in the list (waited for)
        first: Dict[Any, Any] = {}
        self.same_as: Dict[int, Any] = {}
        for c in self.configs:
            key = same_kernel_key(c)
            if key is not None:
                if key in first:
                    self.same_as[id(c)] = first[key]
                else:
                    first[key] = c

    def start(self, tuner: Any, args: tuple, meta: Dict[str, Any]) -> None:
        for i in range(min(THREADS, len(self.configs))):
            # the autotuner's own compiles see the same context (the quick-library rule of tuning.py)
            context = contextvars.copy_context()
            thread = threading.Thread(target=context.run, args=(self._compile_all, tuner, args, meta), daemon=True,
                                      name=f"apple-emulator-autotune-lookahead-{i}")
            self.threads.append(thread)
            thread.start()

    def stop(self) -> None:
        """Compile no further config, and return once the ones being compiled are done."""
        self.stopped = True
        for thread in self.threads:
            if thread is not threading.current_thread():
                thread.join()

    def _take(self) -> Optional[Any]:
        with self._lock:
            if self.stopped or self._next >= len(self.configs):
                return None
            self._next += 1
            return self.configs[self._next - 1]

    def _compile_all(self, tuner: Any, args: tuple, meta: Dict[str, Any]) -> None:
        _async_compile.active_mode.set(None)  # compile here, not in an async-compile executor the caller has open
        try:
            while True:
                config = self._take()
                if config is None:
                    break
                try:
                    same = self.same_as.get(id(config))
                    if same is not None:  # compiled by the other thread, or done: then Triton's cache has it
                        self.done[id(same)].wait()
                    self._compile(tuner, args, meta, config)
                finally:
                    self.done[id(config)].set()
        except BaseException:
            self.stopped = True
            raise
        finally:
            if self.stopped:  # the configs no thread will compile: no timing waits for them
                with self._lock:
                    untaken = self.configs[self._next:]
                for c in untaken:
                    self.done[id(c)].set()

    def _compile(self, tuner: Any, args: tuple, meta: Dict[str, Any], config: Any) -> None:
        # the autotuner's own call for this config, compiling without a launch (`warmup`)
        kwargs = {"grid": (1, ), **meta, **config.all_kwargs(), "warmup": True}
        try:
            _frontend.acquire()
            _holding.frontend = True
            try:
                kernel = tuner.fn.run(*args, **kwargs)
            finally:
                past_frontend()  # when the backend's first stage did not (a compile served by Triton's cache)
        except Exception:
            self.failed.add(id(config))  # compiled again by the autotuner, which reports or skips the config
            return
        if kernel is not None:
            self.kernels[id(config)] = kernel.hash
            try:
                kernel._init_handles()  # load_binary: the library's build starts now
            except Exception:
                if kernel.module is None:  # load_binary raised: the autotuner's own launch loads it again
                    kernel._run = None     # and meets the error
                # else Triton keeps the error (OutOfResources) for the autotuner's own launch to raise

    def wait_for(self, config: Any) -> bool:
        """Let the compile of `config` finish, rather than compile it twice; False when that compile raised (the
        autotuner's own call compiles it again, to meet the error)."""
        event = self.done.get(id(config))
        if event is not None:
            event.wait()
        return id(config) not in self.failed

    def timing_key(self, config: Any) -> Optional[tuple]:
        compiled = self.kernels.get(id(config))
        return None if compiled is None else (compiled, config.pre_hook)


def past_frontend() -> None:
    """Called by the backend's first stage: this thread's compile is past Triton's frontend, so a lookahead thread
    lets the other one start its next compile (nothing happens in a thread that does not hold the lock)."""
    if getattr(_holding, "frontend", False):
        _holding.frontend = False
        _frontend.release()


def _target(kernel_call: Any):
    """(autotuner, args, keyword arguments, config, the autotuner's configs) when the lookahead applies to the
    config `kernel_call` times, else None."""
    if not knobs.emulator_autotune_lookahead.get():
        return None
    found = what_is_timed(kernel_call)
    if found is None:
        return None
    tuner = found[0]
    if tuner.early_config_prune is not None or tuner.perf_model is not None or not _compiles_only(tuner.fn):
        return None
    return (*found, list(tuner.configs))


def _compiles_only(fn: Any) -> bool:
    """Whether `fn.run(..., warmup=True)` only compiles: a JITFunction, possibly under `@triton.heuristics` (an
    autotuner nested inside would time its own configs)."""
    from triton.runtime.autotuner import Heuristics
    from triton.runtime.jit import JITFunction
    while isinstance(fn, Heuristics):
        fn = fn.fn
    return isinstance(fn, JITFunction)


def _take(tuner: Any) -> Optional[_Lookahead]:
    with _runs_lock:
        return _runs.pop(tuner, None)


def before_timing(kernel_call: Any) -> None:
    """Called by the emulator's benchmarker before its first call of `kernel_call`: on an autotuner run's first
    config, stop what is left of an earlier run's lookahead and start this run's; then wait for the lookahead's
    compile of the config, so that the autotuner's own call finds it compiled."""
    target = _target(kernel_call)
    if target is None:
        return
    tuner, args, meta, config, configs = target
    if configs and configs[0] is config:  # the autotuner times its configs in order: a new run
        earlier = _take(tuner)
        if earlier is not None:
            earlier.stop()
        if len(configs) < 2:
            return
        lookahead = _Lookahead(configs)
        with _runs_lock:
            _runs[tuner] = lookahead
        lookahead.start(tuner, args, meta)
    with _runs_lock:
        lookahead = _runs.get(tuner)
    if lookahead is not None and not lookahead.wait_for(config):
        # the autotuner compiles this config again: its frontend must not run beside a lookahead thread's, so the
        # run's later configs compile in the autotuner's thread too (a failed timing would stop the lookahead anyway)
        stopped = _take(tuner)
        if stopped is not None:
            stopped.stop()


def _run_of(kernel_call: Any):
    """(the lookahead of the run `kernel_call` belongs to, its config), or None."""
    found = what_is_timed(kernel_call)
    if found is None:
        return None
    with _runs_lock:
        lookahead = _runs.get(found[0])
    return None if lookahead is None else (lookahead, found[3])


def earlier_timing(kernel_call: Any) -> Optional[Any]:
    """The timing of an earlier config of this run whose compile produced the same kernel as the config
    `kernel_call` times (with the same hook), or None. Called after :func:`before_timing`."""
    run = _run_of(kernel_call)
    if run is None:
        return None
    lookahead, config = run
    key = lookahead.timing_key(config)
    timing = None if key is None else lookahead.timings.get(key)
    return list(timing) if isinstance(timing, list) else timing


def record_timing(kernel_call: Any, timing: Any) -> None:
    """Keep the timing of the config `kernel_call` timed, for the configs of its run that compile to its kernel."""
    run = _run_of(kernel_call)
    if run is not None:
        lookahead, config = run
        key = lookahead.timing_key(config)
        if key is not None:
            lookahead.timings.setdefault(key, list(timing) if isinstance(timing, list) else timing)


def stop(kernel_call: Any) -> None:
    """Called when timing `kernel_call` raised: the autotuner's run is over, so its lookahead compiles no more
    (the caller may compile other kernels next, which must not run beside it)."""
    target = _target(kernel_call)
    if target is not None:
        lookahead = _take(target[0])
        if lookahead is not None:
            lookahead.stop()


def _after_fork_in_child() -> None:
    global _runs_lock, _frontend
    _runs_lock = threading.Lock()
    _frontend = threading.Lock()  # held, perhaps, by a parent's lookahead thread, which the child does not have
    _holding.frontend = False
    _runs.clear()  # their threads are the parent's: a child's autotuner runs start their own


os.register_at_fork(after_in_child=_after_fork_in_child)

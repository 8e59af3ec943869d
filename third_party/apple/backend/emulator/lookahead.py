"""An autotuned kernel's later configs compiled while the autotuner times the current one.

Triton 3.9's autotuner compiles and times its configs one after another: config k is compiled (Triton's
frontend and passes, then our lowering: Python, one core), its library is built (clang, a subprocess), it is
timed, and only then does config k+1's compile start. On the emulator all of it is host work, and the two halves
use different resources: while clang builds config k's library and its launches run (the native launcher
releases the GIL), the interpreter is idle. So once the autotuner's own first call of a run's first config has
compiled it (:func:`loaded`: the driver loads the compiled kernel, whose library then builds; or
:func:`after_first_call`, when the kernel was already compiled), one background thread compiles the configs after
it, with the same
arguments, and loads each compiled kernel (which starts its library's build, `background.py`); each later
config's timing first waits for that thread to have compiled it (:func:`before_timing`). The timing loop then
finds each config compiled and its library built or building, and Triton's frontend never runs in two threads
at once. What the autotuner is timing is read from the callable it benchmarks: `Autotuner._bench`'s
`kernel_call`, whose free variables are the autotuner (`self`), the call's positional arguments (`args`), its
keyword arguments with the config's (`current`) and the config (`config`). Where the callable is not of that shape (a user's own
`do_bench` caller, another Triton), or the autotuner prunes its configs (`prune_configs_by`: the configs it will
time are not known before it prunes), nothing is done. Nothing is launched ahead: the autotuner's pre- and
post-hooks run only in its own calls (Triton's JIT hooks and compile-time warnings of a config compiled ahead
run on the lookahead thread). A config whose compile fails here is compiled again by the autotuner, which reports
or skips it as it always does; the run's lookahead stops first (its next compile finishes), so that the two
frontends do not overlap, and the run's later configs compile in the autotuner's thread. Not covered: an
autotuner pre-hook that compiles another Triton kernel for the first time would run that frontend beside the
lookahead's (on CPython 3.11 that can fail with the error above, a crash rather than a wrong result);
`TRITON_APPLE_EMULATOR_AUTOTUNE_LOOKAHEAD=0` turns the lookahead off.
"""
from __future__ import annotations

import contextvars
import os
import threading
import weakref
from typing import Any, Dict, List, Optional, Tuple

from .. import knobs

_runs: "weakref.WeakKeyDictionary[Any, _Lookahead]" = weakref.WeakKeyDictionary()
_runs_lock = threading.Lock()
# Per thread: the run whose first config this thread is calling, until its lookahead starts (`loaded` or
# `after_first_call`): (autotuner, args, keyword arguments, its configs).
_first = threading.local()


class _Lookahead:
    """The configs of one autotuner run after its first, compiled in order in a daemon thread. It keeps no
    reference to the autotuner or the arguments once that thread is done (a tensor must not outlive its run)."""

    def __init__(self, configs: List[Any]):
        self.configs = configs
        self.done: Dict[int, threading.Event] = {id(c): threading.Event() for c in configs}
        self.failed: set = set()  # ids of the configs whose compile raised here
        self.stopped = False
        self.thread: Optional[threading.Thread] = None

    def start(self, tuner: Any, args: tuple, meta: Dict[str, Any]) -> None:
        # the autotuner's own compiles see the same context (the quick-library rule of tuning.py)
        context = contextvars.copy_context()
        self.thread = threading.Thread(target=context.run, args=(self._compile_all, tuner, args, meta), daemon=True,
                                       name="apple-emulator-autotune-lookahead")
        self.thread.start()

    def stop(self) -> None:
        """Compile no further config, and return once the one being compiled is done."""
        self.stopped = True
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join()

    def _compile_all(self, tuner: Any, args: tuple, meta: Dict[str, Any]) -> None:
        try:
            for config in self.configs:
                if self.stopped:
                    break
                try:
                    # the autotuner's own call for this config, compiling without a launch (`warmup`)
                    kwargs = {"grid": (1, ), **meta, **config.all_kwargs(), "warmup": True}
                    try:
                        kernel = tuner.fn.run(*args, **kwargs)
                    except Exception:
                        self.failed.add(id(config))
                        raise
                    if kernel is not None:
                        try:
                            kernel._init_handles()  # load_binary: the library's build starts now
                        except Exception:
                            kernel._run = None  # the autotuner's own launch loads it again and meets the error
                            raise
                except Exception:
                    pass  # compiled again by the autotuner, which reports or skips the config as usual
                finally:
                    self.done[id(config)].set()
        finally:
            for event in self.done.values():  # whatever stopped this thread, no timing waits for it
                event.set()

    def wait_for(self, config: Any) -> bool:
        """Let a compile of `config` this lookahead has started (or will start) finish, rather than compile it
        twice; False when that compile raised (the autotuner's own call compiles it again, to meet the error)."""
        event = self.done.get(id(config))
        if event is not None:
            event.wait()
        return id(config) not in self.failed


def what_is_timed(kernel_call: Any) -> Optional[Tuple[Any, tuple, Dict[str, Any], Any]]:
    """(autotuner, args, keyword arguments without the config's, config) read from the benchmarked callable,
    or None when it is not `Autotuner._bench`'s `kernel_call`."""
    from triton.runtime.autotuner import Autotuner, Config
    code = getattr(kernel_call, "__code__", None)
    cells = getattr(kernel_call, "__closure__", None)
    if code is None or cells is None or len(code.co_freevars) != len(cells):
        return None
    try:
        free = {name: cell.cell_contents for name, cell in zip(code.co_freevars, cells)}
    except ValueError:  # an empty cell
        return None
    tuner, args, current, config = (free.get(k) for k in ("self", "args", "current", "config"))
    if not (isinstance(tuner, Autotuner) and isinstance(args, tuple) and isinstance(current, dict)
            and isinstance(config, Config)):
        return None
    own = config.all_kwargs()
    return tuner, args, {k: v for k, v in current.items() if k not in own}, config


def _compiles_only(fn: Any) -> bool:
    """Whether `fn.run(..., warmup=True)` only compiles: a JITFunction, possibly under `@triton.heuristics` (an
    autotuner nested inside would time its own configs)."""
    from triton.runtime.autotuner import Heuristics
    from triton.runtime.jit import JITFunction
    while isinstance(fn, Heuristics):
        fn = fn.fn
    return isinstance(fn, JITFunction)


def _target(kernel_call: Any) -> Optional[Tuple[Any, tuple, Dict[str, Any], Any, List[Any]]]:
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


def _take(tuner: Any) -> Optional[_Lookahead]:
    with _runs_lock:
        return _runs.pop(tuner, None)


def before_timing(kernel_call: Any) -> None:
    """Called by the emulator's benchmarker before its first call of `kernel_call`: on an autotuner run's first
    config, stop what is left of an earlier run's lookahead; on a later config, wait for the lookahead's compile
    of it, so that the autotuner's own call finds it compiled."""
    target = _target(kernel_call)
    if target is None:
        return
    tuner, args, meta, config, configs = target
    if configs and configs[0] is config:  # the autotuner times its configs in order: a new run
        earlier = _take(tuner)
        if earlier is not None:
            earlier.stop()
        _first.run = (tuner, args, meta, configs) if len(configs) > 1 else None
        return
    with _runs_lock:
        lookahead = _runs.get(tuner)
    if lookahead is not None and not lookahead.wait_for(config):
        # the autotuner compiles this config again: its frontend must not run beside the lookahead's, so the run's
        # later configs compile in the autotuner's thread too (a failed timing would stop the lookahead anyway)
        stopped = _take(tuner)
        if stopped is not None:
            stopped.stop()


def loaded(kernel_name: str) -> None:
    """Called by the driver when this thread loads a compiled kernel (its library's build starts). When that is
    the kernel of the run whose first config this thread is calling, that config's Triton compile is over: the
    lookahead starts now, and compiles the next config while clang builds this one's library. Not before:
    Triton's frontend parses Python with the `ast` module, whose object conversion is not safe in two threads at
    once on CPython 3.11 ("AST constructor recursion depth mismatch"), so the lookahead compiles only while the
    autotuner's own thread does not. (Another kernel loaded first, by a pre-hook, does not start it.)"""
    run = getattr(_first, "run", None)
    if run is not None and _kernel_name(run[0].fn) == kernel_name:
        _first.run = None
        _start(*run)


def after_first_call(kernel_call: Any) -> None:
    """Called once the benchmarker's first call of `kernel_call` has returned: on an autotuner run's first
    config whose kernel was compiled without being loaded here (the JIT had it already), start the lookahead."""
    run = getattr(_first, "run", None)
    _first.run = None
    if run is not None:
        _start(*run)


def _start(tuner: Any, args: tuple, meta: Dict[str, Any], configs: List[Any]) -> None:
    lookahead = _Lookahead(configs[1:])
    with _runs_lock:
        _runs[tuner] = lookahead
    lookahead.start(tuner, args, meta)


def _kernel_name(fn: Any) -> Optional[str]:
    """The name the driver loads `fn`'s compiled kernels under (a JITFunction's, under any heuristics)."""
    from triton.runtime.autotuner import Heuristics
    while isinstance(fn, Heuristics):
        fn = fn.fn
    return getattr(fn, "__name__", None)


def stop(kernel_call: Any) -> None:
    """Called when timing `kernel_call` raised: the autotuner's run is over, so its lookahead compiles no more
    (the caller may compile other kernels next, which must not run beside it)."""
    _first.run = None
    target = _target(kernel_call)
    if target is not None:
        lookahead = _take(target[0])
        if lookahead is not None:
            lookahead.stop()


def _after_fork_in_child() -> None:
    global _runs_lock
    _runs_lock = threading.Lock()
    _first.run = None  # the forking thread's: the child's only thread starts its own runs
    _runs.clear()  # their threads are the parent's: a child's autotuner runs start their own


os.register_at_fork(after_in_child=_after_fork_in_child)

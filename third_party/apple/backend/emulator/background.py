"""Kernel libraries built before their first launch, in a small pool of threads.

`load_binary` hands the MSL of a kernel over as soon as Triton has lowered it, but the library is needed only at
the kernel's first launch. Where many kernels are loaded before any runs (torch.compile loads every kernel of a
graph before it runs the graph) their clang builds, each a subprocess, then run side by side and alongside the
lowering of the next kernels, instead of one after another at each first launch. Where a launch follows its
load at once (an autotuner benchmarking config after config), the launch simply waits for its own build.

Nothing about a build changes: it is `compile_msl` (the same cache entry, its locks and trust rules), called from
a worker thread; its result or its error is what the first launch gets (:func:`result`). A child forked while
builds are pending cannot wait for them (the pool's threads do not exist there): it builds on its own.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Optional, Union

_pool: Optional[ThreadPoolExecutor] = None
_pool_pid = 0
_lock = threading.Lock()


def workers() -> int:
    """Builds at once: one per core (each is one clang process), at least 2 so that a build overlaps the
    lowering of the next kernel, at most 8."""
    return max(2, min(8, os.cpu_count() or 1))


def start(source: Union[str, bytes], kernel_name: str, quick: Optional[bool] = False) -> Future:
    """Start building `kernel_name`'s library from `source` (`compile_msl` in a worker thread; `quick` as
    `compile_msl`'s, see tuning.py)."""
    from .kernel import compile_msl
    with _lock:
        future = _submit(compile_msl, source, kernel_name, quick)
    future.pid = os.getpid()
    return future


def _submit(fn, *args) -> Future:
    """`fn(*args)` in the pool (made afresh in a forked child); the caller holds `_lock`."""
    global _pool, _pool_pid
    if _pool is None or _pool_pid != os.getpid():
        _pool = ThreadPoolExecutor(max_workers=workers(), thread_name_prefix="apple-emulator-build")
        _pool_pid = os.getpid()
    return _pool.submit(fn, *args)


_runtime: Optional[Future] = None


def prepare_runtime() -> None:
    """Start building and loading the emulator runtime (`library.runtime_library`) in the pool, once per
    process, unless it is loaded already: its build (seconds, once per cache) then runs beside the lowering and
    the library builds of the first kernels instead of before their first launch, which waits for it."""
    global _runtime
    from . import library
    if library.runtime_loaded():
        return
    with _lock:
        if started_here(_runtime):
            return
        _runtime = _submit(library.runtime_library)
        _runtime.pid = os.getpid()


def started_here(future: Optional[Future]) -> bool:
    """Whether `future` (from this module) was started by this process: one started by the process this one was
    forked from never finishes here (its pool's threads do not exist in a child)."""
    return future is not None and getattr(future, "pid", None) == os.getpid()


def result(future: Optional[Future], source: Union[str, bytes], kernel_name: str, quick: Optional[bool] = False):
    """The EmulatorKernel `future` (from :func:`start`) builds, or its error; built here (`quick` as
    :func:`start`'s) when there is no future or it belongs to the process this one was forked from."""
    if not started_here(future):
        from .kernel import compile_msl
        return compile_msl(source, kernel_name, quick)
    return future.result()


def _after_fork_in_child() -> None:
    global _lock, _pool, _runtime
    _lock = threading.Lock()
    _pool = None  # its threads are the parent's; the child starts its own pool when it needs one
    _runtime = None


os.register_at_fork(after_in_child=_after_fork_in_child)

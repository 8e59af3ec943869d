"""What the apple backend did for each kernel, as events: the `msl` stage lowered it (our passes and the MSL
lowering, timed), and the emulator built its library with clang or found it in its cache. Tools listen with
`listen()` (bench/models.py splits a model's cold start with it, test/models proves kernels ran here);
``TRITON_APPLE_LOG_COMPILES=1`` prints each event as one line on stderr, once per kernel and event.

Events of compiles that ran in another process (inductor's compile workers) are seen there, not here; a kernel
Triton found in its own cache is never lowered again, so only its library event shows."""
from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass
from typing import Callable, List

from . import knobs

LOWERED = "lowered"  # our passes + MSL lowering ran (the `msl` stage)
COMPILED = "compiled"  # the emulator's clang built the kernel's library
LOADED = "loaded"  # the emulator's library came from its on-disk cache


@dataclass(frozen=True)
class KernelEvent:
    kernel: str
    what: str  # LOWERED, COMPILED or LOADED
    target: str  # "cpu:apple7", "mps:apple9", or "emulator" for a library
    seconds: float  # time of the step (0 for LOADED)
    where: str = ""  # the cache entry of a library

    def line(self) -> str:
        if self.what == LOWERED:
            return (f"apple backend: kernel '{self.kernel}' lowered for {self.target} (our passes + MSL lowering) in "
                    f"{self.seconds * 1000:.0f} ms")
        if self.what == COMPILED:
            return (f"apple backend: kernel '{self.kernel}' emulator library compiled by clang in "
                    f"{self.seconds * 1000:.0f} ms ({self.where})")
        return f"apple backend: kernel '{self.kernel}' emulator library loaded from the cache ({self.where})"


_listeners: List[Callable[[KernelEvent], None]] = []
_lock = threading.Lock()


def listen(fn: Callable[[KernelEvent], None]) -> Callable[[], None]:
    """Call `fn(event)` for every event of this process from now on (from whichever thread produced it); returns
    the function that stops it."""
    with _lock:
        _listeners.append(fn)

    def stop() -> None:
        with _lock:
            if fn in _listeners:
                _listeners.remove(fn)

    return stop


def emit(kernel: str, what: str, target: str, seconds: float, where: str = "") -> None:
    event = KernelEvent(kernel, what, target, seconds, where)
    if knobs.log_compiles.get():
        print(event.line(), file=sys.stderr, flush=True)
    with _lock:
        listeners = list(_listeners)
    for fn in listeners:
        fn(event)


def target_name(opt) -> str:
    """`<torch device type>:<family>` of the options a kernel is compiled with."""
    return f"{getattr(opt, 'backend_name', '?')}:{getattr(opt, 'arch', '?')}"


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # a fork during emit() must not leave the child's lock held


os.register_at_fork(after_in_child=_after_fork_in_child)

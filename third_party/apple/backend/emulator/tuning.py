"""Quick libraries for autotune configs while they are timed.

`@triton.autotune` compiles every config of a kernel and times each; on the emulator that timing ranks CPU
emulation and predicts nothing about a GPU, and all but one config are never launched again. While the
driver's benchmarker times configs (:func:`timing_configs`), the libraries built for kernels loaded in that
time are quick ones: the same MSL compiled at -O0 (`clang.QUICK_KERNEL_FLAGS`), about 8x less clang time for a large
kernel, the same results. The config that wins is launched afterwards outside the benchmarker, and its first
such launch builds (or loads) the optimised library, which every later launch uses (`driver.EmulatorFunction`).
`TRITON_APPLE_EMULATOR_AUTOTUNE_QUICK=0` times configs on optimised libraries instead.
"""
from __future__ import annotations

import contextlib
from contextvars import ContextVar
from typing import Iterator

from .. import knobs

_timing: ContextVar[bool] = ContextVar("apple_emulator_timing_configs", default=False)


@contextlib.contextmanager
def timing_configs() -> Iterator[None]:
    """Within it, kernels loaded on this thread get quick libraries (when the knob allows)."""
    token = _timing.set(True)
    try:
        yield
    finally:
        _timing.reset(token)


def quick_builds() -> bool:
    """Whether a library built now, on this thread, is a quick one."""
    return _timing.get() and knobs.emulator_autotune_quick.get()

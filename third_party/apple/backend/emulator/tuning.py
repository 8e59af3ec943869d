"""Which of a kernel's two libraries runs on the emulator: the quick one or the optimised one.

Every kernel has two libraries built from the same MSL with the same rules for every floating-point and integer
operation: a quick one (-O0, `clang.QUICK_KERNEL_FLAGS`: several times less clang time than the optimised one for a
large kernel, up to about 3x slower runs) and the optimised one (-O2). They compute the same bits
(test/emulator/test_autotune_quick_builds.py). Which one a launch uses:

* **autotune configs being timed** (:func:`timing_configs`, the driver's benchmarker) run on quick libraries:
  the timing ranks CPU emulation and predicts nothing about a GPU, and all but one config never run again
  (`TRITON_APPLE_EMULATOR_AUTOTUNE_QUICK=0` times them on optimised libraries);
* **any other launch** starts on the optimised library if this process or the cache has it, else on the quick
  one; once the kernel has spent `TRITON_APPLE_EMULATOR_OPTIMISE_AFTER_MS` running on the quick library, the
  optimised one is built in the background and launches move to it when it is ready (`driver.EmulatorFunction`).
  Building optimised code for a kernel that ran only briefly would cost more clang time than it could save
  (a rent-or-buy choice: buy once the rent paid reaches about the price of a typical optimised build). With
  the knob at 0, every kernel is built optimised for its first launch.
"""
from __future__ import annotations

import contextlib
from contextvars import ContextVar
from typing import Iterator, Optional

from .. import knobs

# Set within `timing_configs`: the launches being timed (configs are being timed when it is set).
_launches: "ContextVar[Optional[Launches]]" = ContextVar("apple_emulator_timed_launches", default=None)


class Launches:
    """The kernel launches made while configs are timed, as the driver's launcher timed them: the kernel's run
    alone, without its compile, its library's build or load, or the autotuner's hooks."""

    def __init__(self) -> None:
        self.count = 0
        self.seconds = 0.0

    def reset(self) -> None:
        self.count, self.seconds = 0, 0.0


@contextlib.contextmanager
def timing_configs() -> Iterator[Launches]:
    """Within it, kernels loaded on this thread get quick libraries (when the knob allows); the launches made are
    counted and timed in what it yields."""
    launches = Launches()
    token = _launches.set(launches)
    try:
        yield launches
    finally:
        _launches.reset(token)


def launched(seconds: float) -> None:
    """A kernel launch on this thread ran for `seconds` (counted when configs are being timed)."""
    launches = _launches.get()
    if launches is not None:
        launches.count += 1
        launches.seconds += seconds


def quick_builds() -> bool:
    """Whether a library built now, on this thread, is a quick one because autotune configs are being timed."""
    return _launches.get() is not None and knobs.emulator_autotune_quick.get()


def first_library() -> Optional[bool]:
    """`compile_msl`'s `quick` for a kernel loaded now: True (quick) while configs are timed, None (the
    optimised library if it exists, else the quick one) when kernels start quick, else False (optimised)."""
    if _launches.get() is not None:
        return knobs.emulator_autotune_quick.get()
    return None if optimise_after() is not None else False


def optimise_after() -> Optional[float]:
    """Seconds of running on its quick library after which a kernel's optimised library is built; None when
    every kernel is built optimised for its first launch."""
    ms = knobs.emulator_optimise_after_ms.get()
    return ms / 1000.0 if ms > 0 else None

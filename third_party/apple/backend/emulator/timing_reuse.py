"""Autotune configs that compile to the same kernel on this backend, timed once per autotuner run.

This backend compiles every `num_stages` the same way (compiler.py records it as 1), and autotune lists often
multiply their configs by several num_stages values: on the emulator, timing each would launch the same kernel
with the same arguments again. So the emulator's benchmarker gives such a config the timing of the earlier config
of the same run it repeats (:func:`earlier`, :func:`record`): the same autotuner, the same argument objects and
keyword values, the same config hook, and a config equal to it in everything but num_stages. Nothing else is
shared, a config with any argument this cannot compare (an unhashable config value, a list argument) is timed
as usual, and no argument is kept alive: tensors are held through weak references.
"""
from __future__ import annotations

import threading
import weakref
from typing import Any, List, Optional, Tuple

from .autotune_call import same_kernel_key, what_is_timed

_SCALARS = (int, float, bool, str, bytes, type(None))


class _Run:
    """The arguments of one autotuner run (weakly, or by value for scalars) and the timings taken in it."""

    def __init__(self, args: tuple, meta: dict):
        self.args = [_remember(a) for a in args]
        self.meta = {k: _remember(v) for k, v in meta.items()}
        self.timings = {}

    def same_call(self, args: tuple, meta: dict) -> bool:
        return (len(args) == len(self.args) and all(_same(m, a) for m, a in zip(self.args, args))
                and meta.keys() == self.meta.keys() and all(_same(self.meta[k], v) for k, v in meta.items()))


def _remember(x: Any) -> Tuple[str, Any]:
    if isinstance(x, _SCALARS):
        return "value", x
    if type(x) is tuple:  # a grid, a tuple argument
        return "tuple", [_remember(e) for e in x]
    try:
        return "ref", weakref.ref(x)
    except TypeError:
        return "other", None  # compared with nothing: the run's configs are timed as usual


def _same(remembered: Tuple[str, Any], x: Any) -> bool:
    kind, held = remembered
    if kind == "value":
        return type(held) is type(x) and held == x
    if kind == "tuple":
        return type(x) is tuple and len(x) == len(held) and all(_same(h, e) for h, e in zip(held, x))
    return kind == "ref" and held() is x


_runs: "weakref.WeakKeyDictionary[Any, _Run]" = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def _lookup(kernel_call: Any):
    """(run, key) of the config `kernel_call` times, the run made afresh when its arguments are new; None when
    the call is not an autotuner's or cannot be compared."""
    found = what_is_timed(kernel_call)
    if found is None:
        return None
    tuner, args, meta, config = found
    key = same_kernel_key(config)
    if key is None:
        return None
    with _lock:
        run = _runs.get(tuner)
        if run is None or not run.same_call(args, meta):
            run = _runs[tuner] = _Run(args, meta)
    return run, key


def earlier(kernel_call: Any) -> Optional[List[float]]:
    """The timing an earlier config of this autotuner run got, when the config `kernel_call` times compiles to
    the same kernel and is called the same way; else None."""
    found = _lookup(kernel_call)
    if found is None:
        return None
    run, key = found
    timing = run.timings.get(key)
    return None if timing is None else (list(timing) if isinstance(timing, list) else timing)


def record(kernel_call: Any, timing: Any) -> None:
    """Remember the timing of the config `kernel_call` timed, for the configs of its run that repeat it."""
    found = _lookup(kernel_call)
    if found is not None:
        run, key = found
        run.timings[key] = list(timing) if isinstance(timing, list) else timing

"""What Triton's autotuner asks the emulator's benchmarker to time, and which of its configs are expected to compile
to the same kernel on this backend (`lookahead.py`).

The benchmarker receives `Autotuner._bench`'s `kernel_call`, whose free variables are the autotuner (`self`), the
call's positional arguments (`args`), its keyword arguments with the config's (`current`) and the config (`config`).
Where the callable has another shape (a user's own `do_bench` caller, another Triton), nothing is read.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

# Config fields that do not change what this backend compiles (compiler.py records every num_stages as 1).
SAME_KERNEL_FIELDS_IGNORED = ("num_stages", )


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


def same_kernel_key(config: Any) -> Optional[tuple]:
    """A key equal for configs expected to compile to the same kernel here: equal in everything but num_stages,
    with the same hook (a heuristic or a kernel parameter reading num_stages would still make another kernel, so
    this only orders compiles; timings are shared by the compiled kernel's own cache key). None when a value cannot
    be compared (unhashable)."""
    try:
        fields = tuple(sorted((k, v) for k, v in config.all_kwargs().items() if k not in SAME_KERNEL_FIELDS_IGNORED))
        hash(fields)
    except TypeError:
        return None
    return fields, config.pre_hook

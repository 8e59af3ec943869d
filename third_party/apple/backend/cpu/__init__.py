"""Triton's `cpu` backend name, served by the apple backend's emulator.

Upstream names a target after the torch device type its kernels run on, and PyTorch relies on it: inductor's
`cpu_backend="triton"` looks up `triton.backends.backends["cpu"]` (`set_driver_to_cpu`) and compiles for
`GPUTarget("cpu", "", 32)`. This package is that backend, registered by the entry point
`triton.backends: cpu = triton.backends.apple.cpu`, so inductor's subprocess compile workers find it too.
Its `compiler.py` and `driver.py` each hold one thin subclass of the apple backend's classes; every line of
real work is shared with `apple`.

Priority rule: a `cpu` backend of another distribution (triton-cpu ships one as `triton.backends.cpu`, or
registers a `cpu` entry point of its own) always wins. Then this package re-exports that backend's classes, so
`backends["cpu"]` is the real CPU backend whichever entry point Triton happens to read last, and the emulator
names its own target `metal` instead (see docs/conventions.md).
"""
from __future__ import annotations

import functools
import importlib.util
from typing import Optional

OUR_ENTRY = "triton.backends.apple.cpu"


@functools.lru_cache(None)
def foreign_cpu_backend() -> Optional[str]:
    """The module of another installed `cpu` Triton backend, or None when the `cpu` name is ours."""
    from importlib.metadata import entry_points
    for ep in entry_points().select(group="triton.backends"):
        if ep.name == "cpu" and ep.value != OUR_ENTRY:
            return ep.value
    try:
        in_tree = importlib.util.find_spec("triton.backends.cpu")
    except (ImportError, ValueError):
        in_tree = None
    return "triton.backends.cpu" if in_tree is not None else None


def foreign_class(kind: str, base: type) -> type:
    """The one concrete `base` subclass in the foreign backend's `kind` module (`compiler` or `driver`)."""
    import inspect
    module = importlib.import_module(f"{foreign_cpu_backend()}.{kind}")
    found = [v for v in vars(module).values()
             if isinstance(v, type) and issubclass(v, base) and not inspect.isabstract(v)]
    if len(found) != 1:
        raise RuntimeError(f"apple backend: cannot defer to the installed `cpu` Triton backend "
                           f"{foreign_cpu_backend()}: its {kind} module has {len(found)} concrete "
                           f"{base.__name__} subclasses")
    return found[0]

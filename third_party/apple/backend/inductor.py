"""torch.compile on a Mac through this backend (opt-in: `TRITON_APPLE_INDUCTOR_MPS=1`).

Inductor generates Metal itself for `mps` tensors (its MetalScheduling). With the knob set on a Mac with MPS,
this module registers inductor's Triton code generator for the `mps` device instead, so compiled graphs become
Triton kernels compiled by the apple backend for `GPUTarget("mps", "", 32)` (the default family) and launched
by the `apple` driver in Metal mode: the same code that runs hand-written kernels. Everything below the
registration is shared with the emulator path, which is tested; the registration is tested on Linux, but
**no model has ever run through it on Apple hardware** (README, Status).

The registration must happen before inductor registers its defaults (`init_backend_registration`, which
keeps a registration it finds). The `apple` driver module asks for it when Triton discovers its backends,
which can be in the middle of inductor's own imports, so it is deferred until
`torch._inductor.codegen.common` has finished loading.

On the emulator nothing is needed: inductor's `cpu_backend="triton"` finds Triton's `cpu` backend through
the entry point (`cpu/`).
"""
from __future__ import annotations

import importlib.abc
import sys

_COMMON = "torch._inductor.codegen.common"


def enable_mps() -> None:
    """Make inductor generate Triton kernels for `mps` tensors (replaces its Metal code generator)."""
    from torch._inductor.codegen.common import register_backend_for_device
    from torch._inductor.codegen.triton import TritonScheduling
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen
    register_backend_for_device("mps", TritonScheduling, PythonWrapperCodegen)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs `enable_mps` right after `torch._inductor.codegen.common` has been executed."""

    def find_spec(self, fullname, path, target=None):
        if fullname != _COMMON:
            return None
        sys.meta_path.remove(self)
        from importlib.util import find_spec
        spec = find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_register(module):
            exec_module(module)
            enable_mps()

        spec.loader.exec_module = exec_then_register
        return spec


def enable_mps_when_inductor_loads() -> None:
    """`enable_mps` now if inductor's codegen registry is loaded, else as soon as it is."""
    module = sys.modules.get(_COMMON)
    if module is not None and hasattr(module, "init_backend_registration"):
        enable_mps()
    elif not any(isinstance(f, _AfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport())

"""The compiler of Triton's `cpu` target: the apple backend's, for kernels the emulator runs on CPU tensors.

Exactly one concrete `BaseBackend` subclass lives here (Triton's backend discovery requires it): ours, or the
installed foreign `cpu` backend's, re-exported (the priority rule in `__init__.py`).
"""
from triton.backends.compiler import BaseBackend as _BaseBackend

from . import foreign_class as _foreign_class, foreign_cpu_backend as _foreign_cpu_backend
from .. import compiler as _apple

if _foreign_cpu_backend():
    CpuBackend = _foreign_class("compiler", _BaseBackend)
else:

    class AppleCpuBackend(_apple.AppleBackend):
        """`GPUTarget("cpu", arch, 32)`: `arch` is an Apple GPU family, or "" (what inductor passes for a CPU
        device) for the default one. Compiles exactly as `AppleBackend`; only the target name differs."""
        TARGET_NAMES = ("cpu", )

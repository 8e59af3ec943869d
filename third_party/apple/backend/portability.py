"""Portability notes: what this backend accepts and NVIDIA's backend refuses, said once per kernel and line.

Kernels developed on the emulator or a Mac are often meant to run on NVIDIA GPUs too. Where a Triton construct
is valid here (and on AMD's backend) but refused by NVIDIA's, compiling it on the `apple` target warns once, so
the difference shows up where the code is written rather than on the first NVIDIA run. The facts are NVIDIA's
backend's lower bounds on `tl.dot` shapes (its `min_dot_size`), which Triton 3.9 checks at the call: K must be
at least 32 for 8-bit operands, 16 for 16-bit, 8 for 32-bit and 4 for 64-bit ones; M and N may be anything.
Set `TRITON_APPLE_PORTABILITY_WARNINGS=0` to silence them.
"""
from __future__ import annotations

import threading
import warnings
from typing import Set, Tuple

from . import knobs
from .ir.core import Module
from .ir.types import TensorType

# operand bit width -> the smallest K NVIDIA's backend accepts for tl.dot
NVIDIA_MIN_DOT_K = {8: 32, 16: 16, 32: 8, 64: 4}


class PortabilityWarning(UserWarning):
    """Accepted by the apple backend, refused by another Triton backend (named in the message)."""


_said: Set[Tuple[str, str, int, int, str]] = set()
_said_lock = threading.Lock()


def warn_where_nvidia_refuses(module: Module, kernel_name: str) -> None:
    """Warn once per (kernel, source line) for each construct of `module` that NVIDIA's backend refuses."""
    if not knobs.portability_warnings.get():
        return
    for fn in module.functions:
        for op in fn.walk():
            if op.name != "tt.dot" or len(op.operands) < 2:
                continue
            a = op.operands[0].type
            if not isinstance(a, TensorType) or len(a.shape) < 2:
                continue
            bits = getattr(a.element, "bitwidth", 0)
            k, least = a.shape[-1], NVIDIA_MIN_DOT_K.get(bits)
            if least is None or k >= least:
                continue
            key = (kernel_name, op.loc.file, op.loc.line, k, str(a.element))
            with _said_lock:
                if key in _said:
                    continue
                _said.add(key)
            warnings.warn(PortabilityWarning(
                f"apple backend: kernel '{kernel_name}': tl.dot at {op.loc} has K={k} on {bits}-bit operands: "
                f"accepted here (and by AMD's backend), but NVIDIA's backend requires K >= {least} for "
                f"{bits}-bit operands, so this kernel will not compile there "
                "(TRITON_APPLE_PORTABILITY_WARNINGS=0 silences this)"), stacklevel=2)

"""Lowering of barriers: `ttg.barrier` (what `tl.debug_barrier()` becomes) and `gpu.barrier`. Both order
every thread of the threadgroup, and the memory they wrote, before any thread goes on."""
from __future__ import annotations

from ..ir import Op
from .emitter import FunctionEmitter
from .registry import OpFamily

FAMILY = OpFamily("barrier")


@FAMILY.lowers("ttg.barrier", "gpu.barrier")
def _barrier(em: FunctionEmitter, op: Op) -> None:
    em.emit(em.target.barrier(device=True))

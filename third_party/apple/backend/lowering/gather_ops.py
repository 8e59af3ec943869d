"""Lowering of `tt.gather`: the source goes to threadgroup memory row-major (in rounds when it is larger than
the room there), and every thread reads the elements its indices name along the gather axis."""
from __future__ import annotations

from ..ir import Op
from .emitter import FunctionEmitter, Lowered
from .registry import OpFamily
from .relayout import through_scratch
from .shared_memory import index_expr, row_major_strides

FAMILY = OpFamily("gather")


@FAMILY.lowers("tt.gather")
def _gather(em: FunctionEmitter, op: Op) -> None:
    src_v, idx_v = op.operands
    axis = int(op.attrs["axis"])
    idx = em.get(idx_v)
    src_strides = row_major_strides(src_v.type.shape)
    strides = list(src_strides)
    strides[axis] = 0

    def read_index(out: Lowered, r: str) -> str:
        return f"{index_expr(em, out.layout, r, strides)} + int({idx.at(r)}) * {src_strides[axis]}"

    through_scratch(em, op, em.get(src_v), read_index)

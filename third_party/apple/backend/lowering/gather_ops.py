"""Lowering of `tt.gather`: the source goes to threadgroup memory row-major, and every thread reads the
elements its indices name along the gather axis."""
from __future__ import annotations

from ..ir import Op
from ..ir.types import TensorType
from .convert_layout_ops import tensor_scratch
from .emitter import FunctionEmitter
from .registry import OpFamily
from .shared_memory import index_expr, row_major_strides, store_registers

FAMILY = OpFamily("gather")


@FAMILY.lowers("tt.gather")
def _gather(em: FunctionEmitter, op: Op) -> None:
    src_v, idx_v = op.operands
    axis = int(op.attrs["axis"])
    src = em.get(src_v)
    idx = em.get(idx_v)
    src_ty: TensorType = src_v.type
    buf = tensor_scratch(em, op, src_ty, "smem")
    src_strides = row_major_strides(src_ty.shape)
    store_registers(em, src, buf, src_strides)
    em.barrier()
    out = em.declare(op.result)
    strides = list(src_strides)
    strides[axis] = 0
    with em.for_regs(out.regs) as r:
        other = index_expr(em, out.layout, r, strides)
        em.emit(f"{out.at(r)} = {em.tg_load(buf, f'{other} + int({idx.at(r)}) * {src_strides[axis]}', out.ctype)};")

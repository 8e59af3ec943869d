"""Lowering of `tt.histogram`: bins are threadgroup-memory atomic counters; each element (on its owner
thread, inside the bin range and the mask) increments one, then every thread reads the bins it holds."""
from __future__ import annotations

from ..ir import Op
from ..ir.types import TensorType
from .emitter import FunctionEmitter
from .registry import OpFamily

FAMILY = OpFamily("histogram")


@FAMILY.lowers("tt.histogram")
def _histogram(em: FunctionEmitter, op: Op) -> None:
    src_v = op.operands[0]
    src = em.get(src_v)
    mask = em.get(op.operands[1]) if len(op.operands) > 1 else None
    res_ty: TensorType = op.result.type
    bins = res_ty.shape[0]
    t = em.target
    buf = em.scratch(op, [(t.atomic_type("int"), bins * 4)], "hist_smem")[0]
    b = em.loop_var("bin")
    em.open(f"for (uint {b} = tt_tid; {b} < {bins}; {b} += {em.ctx.num_threads})")
    em.emit(f"{t.atomic_store(f'&{buf}[{b}]', '0')};")
    em.close()
    em.barrier()
    in_range = lambda r: f"uint({src.at(r)}) < {bins}u" + (f" && {mask.at(r)}" if mask is not None else "")  # noqa: E731
    with em.owned_regs(em.layout(src_v.type), in_range) as r:
        em.emit(f"{t.atomic_rmw('add', f'&{buf}[{src.at(r)}]', '1')};")
    em.barrier()
    out = em.declare(op.result)
    with em.for_regs(out.regs) as r:
        em.emit(f"{out.at(r)} = {t.atomic_load(f'&{buf}[{em.coord_expr(out.layout, 0, r)}]')};")

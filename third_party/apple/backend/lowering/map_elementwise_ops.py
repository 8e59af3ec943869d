"""Lowering of `tt.map_elementwise`: the scalar function (its region) becomes one MSL function, called for
each group of `pack` registers of the thread (which elements share a call does not matter to an
elementwise function)."""
from __future__ import annotations

from ..ir import Op
from .combine import emit_scalar_function
from .emitter import FunctionEmitter
from .registry import OpFamily

FAMILY = OpFamily("map_elementwise")


@FAMILY.lowers("tt.map_elementwise")
def _map_elementwise(em: FunctionEmitter, op: Op) -> None:
    pack = int(op.attrs.get("pack", 1))
    ins = [em.get(v) for v in op.operands]
    outs = [em.declare(r) for r in op.results]
    regs = outs[0].regs
    if regs % pack:
        raise em.unsupported(f"map_elementwise with pack={pack} over a layout of {regs} registers per thread; "
                             "use a pack that divides the elements each thread holds")
    fn = emit_scalar_function(em, op, op.results[0].name)
    with em.for_regs(regs // pack, "g") as g:
        base = f"{g} * {pack}" if pack > 1 else g
        at = [f"{base} + {j}" if pack > 1 else base for j in range(pack)]
        em.emit(fn.call([v.at(r) for v in ins for r in at], [o.at(r) for o in outs for r in at]))

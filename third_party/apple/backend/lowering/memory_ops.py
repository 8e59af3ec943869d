"""Lowering of global memory ops: `tt.addptr`, `tt.load`, `tt.store`, `tt.int_to_ptr`/`ptr_to_int`.

A masked-off lane never touches memory (the emulator's bounds check would report it, and on the GPU
it could fault). Stores of elements that the layout replicates over registers, lanes or warps are done
by exactly one owner, so a store never races with itself.
"""
from __future__ import annotations

from ..ir import Op
from .core import FunctionEmitter, Lowered, elem_type, is_tensor, lowers
from .elementwise_ops import elementwise


@lowers("tt.addptr")
def _addptr(em: FunctionEmitter, op: Op) -> None:
    elementwise(em, op, lambda a: f"{a[0]} + {a[1]}")


@lowers("tt.load")
def _load(em: FunctionEmitter, op: Op) -> None:
    ptr = op.operands[0]
    mask = op.operands[1] if len(op.operands) > 1 else None
    other = op.operands[2] if len(op.operands) > 2 else None
    ct = em.ctype(elem_type(op.result))
    default = f"{ct}(0)"

    def make(a):
        if mask is None:
            return f"*{a[0]}"
        fallback = a[2] if other is not None else default
        return f"{a[1]} ? *{a[0]} : {fallback}"

    elementwise(em, op, make)


@lowers("tt.store")
def _store(em: FunctionEmitter, op: Op) -> None:
    ptr = em.get(op.operands[0])
    val = em.get(op.operands[1])
    mask = em.get(op.operands[2]) if len(op.operands) > 2 else None
    if not is_tensor(op.operands[0]):
        em.open("if (tt_tid == 0)")
        if mask is not None:
            em.open(f"if ({mask.at(0)})")
        em.emit(f"*{ptr.at(0)} = {val.at(0)};")
        if mask is not None:
            em.close()
        em.close()
        return
    lay = em.layout(op.operands[0].type)
    own = em.owner_predicate(lay)
    free = lay.free_reg_mask()
    if own:
        em.open(f"if ({own})")
    with em.for_regs(lay.num_regs) as r:
        conds = []
        if free:
            conds.append(f"({r} & {free}) == 0")
        if mask is not None:
            conds.append(mask.at(r))
        if conds:
            em.open(f"if ({' && '.join(conds)})")
        em.emit(f"*{ptr.at(r)} = {val.at(r)};")
        if conds:
            em.close()
    if own:
        em.close()

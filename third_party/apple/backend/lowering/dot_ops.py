"""Lowering of `tt.dot` on the FMA path: every thread computes its result elements as a K-long chain of
fused multiply-adds over operand registers that already hold whole rows of A and columns of B.

This is the general fallback (any element type, any shape, batched dots). Products and sums are computed
in float (int32 for integer dots) and rounded to the accumulator type after each step, which matches
upstream's FMA path. `input_precision` is ignored: Metal has no tf32, so every dot is an IEEE dot.
"""
from __future__ import annotations

from typing import List

from ..ir import Op
from ..ir.types import DotOperandEncoding, TensorType
from ..layouts import LinearLayout
from .core import FunctionEmitter, elem_type, linear_expr, lowers


def _reg_index(lay: LinearLayout, coord) -> int:
    for r in range(lay.num_regs):
        if lay.reg_coord(r) == tuple(coord):
            return r
    raise KeyError(coord)


@lowers("tt.dot")
def _dot(em: FunctionEmitter, op: Op) -> None:
    a_v, b_v, c_v = op.operands[:3]
    a_ty: TensorType = a_v.type
    b_ty: TensorType = b_v.type
    c_ty: TensorType = c_v.type
    for v, idx in ((a_v, 0), (b_v, 1)):
        enc = v.type.encoding
        if not (isinstance(enc, DotOperandEncoding) and enc.op_idx == idx and enc.parent == c_ty.encoding):
            raise em.error(f"dot operand {idx} has layout {enc}; the FMA path needs a dot operand layout whose "
                           "parent is the result's layout")
    a, b, c = (em.get(v) for v in (a_v, b_v, c_v))
    la, lb, lc = em.layout(a_ty), em.layout(b_ty), em.layout(c_ty)
    rank = len(c_ty.shape)
    K = a_ty.shape[-1]
    # For each result register bit: the A and B registers holding the same (batch, m) / (batch, n).
    a_map: List[int] = []
    b_map: List[int] = []
    for basis in lc.reg:
        ca = list(basis)
        ca[rank - 1] = 0
        cb = list(basis)
        cb[rank - 2] = 0
        a_map.append(_reg_index(la, ca) if any(ca) else 0)
        b_map.append(_reg_index(lb, cb) if any(cb) else 0)
    a_k = [_reg_index(la, [0] * (rank - 1) + [1 << i]) for i in range(K.bit_length() - 1)]
    b_k = [_reg_index(lb, [0] * (rank - 2) + [1 << i, 0]) for i in range(K.bit_length() - 1)]
    acc_t = elem_type(op.result)
    out = em.declare(op.result)
    integer = acc_t.is_int
    work = "int" if integer else "float"
    with em.for_regs(out.regs) as r:
        ra = linear_expr(r, a_map) if out.regs > 1 else "0"
        rb = linear_expr(r, b_map) if out.regs > 1 else "0"
        acc = em.temp("acc")
        em.emit(f"{work} {acc} = {work}({c.at(r)});")
        em.open(f"for (uint k = 0; k < {K}; ++k)")
        ia = f"({ra}) ^ ({linear_expr('k', a_k)})" if K > 1 else ra
        ib = f"({rb}) ^ ({linear_expr('k', b_k)})" if K > 1 else rb
        if integer:
            em.emit(f"{acc} = {acc} + int({a.at(ia)}) * int({b.at(ib)});")
        elif acc_t.name == "f32":
            em.emit(f"{acc} = fma(float({a.at(ia)}), float({b.at(ib)}), {acc});")
        else:  # f16 / bf16 accumulators round after every step
            em.emit(f"{acc} = float({out.ctype}(fma(float({a.at(ia)}), float({b.at(ib)}), {acc})));")
        em.close()
        em.emit(f"{out.at(r)} = {out.ctype}({acc});")

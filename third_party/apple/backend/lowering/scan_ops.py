"""Lowering of `tt.scan` (inclusive prefix scans with any combine region, any axis, `reverse`).

When the layout keeps every line along the scan axis inside one thread, the scan is a sequential pass over
registers in coordinate order. Otherwise the lines are spread over lanes or warps and the scan runs as a
Hillis-Steele ladder over threadgroup memory: log2(length) steps, each combining every element with the
one `d` positions earlier. Both preserve the operand order the combine region sees (earlier element first),
so non-commutative combines scan correctly.
"""
from __future__ import annotations

from typing import List

from ..ir import Op
from ..ir.types import TensorType
from .combine import emit_combine_function, operand_scratch
from .emitter import BF16, FunctionEmitter, Lowered, elem_type
from .registry import OpFamily
from .shared_memory import index_expr, row_major_strides

FAMILY = OpFamily("scan")


def _combine_into(em: FunctionEmitter, combine, ctypes: List[str], earlier: List[str], later: List[str],
                  out: List[str]) -> None:
    """out_i = earlier ⊕ later, written so that `out` may alias `later`."""
    temps = []
    for ct, e in zip(ctypes, earlier):
        t = em.temp("scan")
        em.emit(f"{ct} {t} = {e};")
        temps.append(t)
    em.emit(combine.call(temps, list(later)))
    for o, t in zip(out, temps):
        em.emit(f"{o} = {t};")


@FAMILY.lowers("tt.scan")
def _scan(em: FunctionEmitter, op: Op) -> None:
    axis = int(op.attrs["axis"])
    reverse = bool(op.attrs.get("reverse", False))
    ty: TensorType = op.operands[0].type
    lay = em.layout(ty)
    srcs = [em.get(v) for v in op.operands]
    # bfloat16 scans accumulate in float, as Triton does on NVIDIA GPUs (measured on an H200: a bf16
    # cumsum stored to a float32 pointer equals the float64 reference to float32 precision); the results
    # are rounded to bfloat16 once, and `arith.extf` of a result reads the float value (elementwise_ops).
    wide = any(elem_type(v) == BF16 for v in op.operands)
    combine = emit_combine_function(em, op, op.results[0].name, wide_bf16=wide)
    outs = [_declare_accumulator(em, r, wide) for r in op.results]
    ctypes = [o.ctype for o in outs]
    R = lay.num_regs
    for o, s in zip(outs, srcs):
        with em.for_regs(R) as r:
            em.emit(f"{o.at(r)} = {s.at(r)};")
    length = ty.shape[axis]
    if length > 1 and not any(b[axis] for b in lay.lane + lay.warp):
        _scan_in_registers(em, op, lay, axis, reverse, combine, ctypes, outs)
    elif length > 1:
        _scan_through_smem(em, op, ty, lay, axis, reverse, combine, ctypes, outs)
    for res, o in zip(op.results, outs):
        if o.ctype == em.ctype(res.type):
            continue
        em.ctx.wide_values[id(res)] = o
        final = em.declare(res)
        with em.for_regs(R) as r:
            em.emit(f"{final.at(r)} = {final.ctype}({o.at(r)});")


def _declare_accumulator(em: FunctionEmitter, res, wide: bool) -> Lowered:
    """The scan's working array for result `res`: its own type, or float for bfloat16 when `wide`."""
    if not (wide and elem_type(res) == BF16):
        return em.declare(res)
    lay = em.layout(res.type)
    name = em.temp(f"{res.name}_wide")
    em.emit(f"float {name}[{lay.num_regs}];")
    return Lowered(name, "float", lay.num_regs, False, lay)


def _scan_in_registers(em, op, lay, axis, reverse, combine, ctypes, outs) -> None:
    """Every thread holds whole lines: walk each line's registers in coordinate order."""
    lines = {}
    for r in range(lay.num_regs):
        c = lay.reg_coord(r)
        key = c[:axis] + c[axis + 1:]
        lines.setdefault(key, {})
        lines[key].setdefault(c[axis], r)  # duplicates of an element keep the first register
    dup = {}
    for r in range(lay.num_regs):
        c = lay.reg_coord(r)
        first = lines[c[:axis] + c[axis + 1:]][c[axis]]
        if first != r:
            dup[r] = first
    for key, by_pos in lines.items():
        order = [by_pos[p] for p in sorted(by_pos, reverse=reverse)]
        for prev, cur in zip(order, order[1:]):
            _combine_into(em, combine, ctypes, [o.at(prev) for o in outs], [o.at(cur) for o in outs],
                          [o.at(cur) for o in outs])
    for r, first in sorted(dup.items()):
        for o in outs:
            em.emit(f"{o.at(r)} = {o.at(first)};")


def _scan_through_smem(em, op, ty, lay, axis, reverse, combine, ctypes, outs) -> None:
    strides = row_major_strides(ty.shape)
    length = ty.shape[axis]
    bufs = operand_scratch(em, ctypes, op, ty.numel, "scan_smem")
    R = lay.num_regs
    idx_name, pos_name = em.temp("scan_idx"), em.temp("scan_pos")
    em.emit(f"uint {idx_name}[{R}];")
    em.emit(f"uint {pos_name}[{R}];")
    with em.for_regs(R) as r:
        em.emit(f"{idx_name}[{r}] = {index_expr(em, lay, r, strides)};")
        pos = em.coord_expr(lay, axis, r)
        em.emit(f"{pos_name}[{r}] = {length - 1} - ({pos});" if reverse else f"{pos_name}[{r}] = {pos};")
        for b, o in zip(bufs, outs):
            em.emit(em.tg_store(b, f"{idx_name}[{r}]", o.at(r), o.ctype))
    em.barrier()
    step = strides[axis]
    d = em.loop_var("d")
    em.open(f"for (uint {d} = 1; {d} < {length}; {d} <<= 1)")
    prevs = []
    for ct in ctypes:
        p = em.temp("scan_prev")
        em.emit(f"{ct} {p}[{R}];")
        prevs.append(p)
    with em.for_regs(R) as r:
        em.open(f"if ({pos_name}[{r}] >= {d})")
        neighbour = f"{idx_name}[{r}] + {d} * {step}" if reverse else f"{idx_name}[{r}] - {d} * {step}"
        for p, b, ct in zip(prevs, bufs, ctypes):
            em.emit(f"{p}[{r}] = {em.tg_load(b, neighbour, ct)};")
        em.close()
    em.barrier()
    with em.for_regs(R) as r:
        em.open(f"if ({pos_name}[{r}] >= {d})")
        _combine_into(em, combine, ctypes, [f"{p}[{r}]" for p in prevs], [o.at(r) for o in outs],
                      [o.at(r) for o in outs])
        for b, o in zip(bufs, outs):
            em.emit(em.tg_store(b, f"{idx_name}[{r}]", o.at(r), o.ctype))
        em.close()
    em.barrier()
    em.close()

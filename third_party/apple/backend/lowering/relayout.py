"""The relayout mechanism `ttg.convert_layout`, the view ops and `tt.gather` share: an op whose result
element at coordinate c is the source element at `project(c)`.

When the linear layouts say every thread already holds the elements it needs, the result is a register
permutation (or no code at all); when data only moves inside each simdgroup (layout conversions), simdgroup
shuffles move it (a GF(2) plan from the two layouts); otherwise the elements go through threadgroup memory
row-major (`through_scratch`, in rounds when the source is larger than the room left). Pointers that move between
threads move as their element index from the kernel argument they point into (pointer_base.py), rebuilt as
`base + index` (pointers not traced to one argument move as they are).
"""
from __future__ import annotations

from typing import Callable, List, Optional, Sequence

from ..ir import Op
from ..ir.types import TensorType
from ..layouts import Coord, LinearLayout, local_register_map, warp_shuffle_plan
from .emitter import FunctionEmitter, Lowered, linear_expr
from .pointer_base import kernel_argument
from .scratch_padding import conversion_strides, scratch_bytes
from .shared_memory import index_expr, load_registers, row_major_strides, store_registers


def relayout(em: FunctionEmitter, op: Op, project: Callable[[Coord], Coord], src_index_strides: List[int]) -> None:
    """Lower an op whose result element at coordinate c is the source element at `project(c)`.
    `src_index_strides` give the row-major index of `project(c)` in the source as sum(c[d] * stride[d])."""
    src_v, res = op.operands[0], op.result
    src = em.get(src_v)
    dst_lay = em.layout(res.type)
    ct = em.ctype(res.type)
    if src.uniform:
        em.bind(res, Lowered(src.name, ct, dst_lay.num_regs, True, dst_lay))
        return
    mapping = local_register_map(dst_lay, src.layout, project)
    if mapping is not None:
        if mapping == [1 << i for i in range(len(mapping))] and dst_lay.num_regs == src.regs:
            em.bind(res, Lowered(src.name, ct, dst_lay.num_regs, False, dst_lay))
            return
        out = em.declare(res)
        with em.for_regs(out.regs) as r:
            em.emit(f"{out.at(r)} = {src.at(linear_expr(r, mapping) if out.regs > 1 else '0')};")
        return
    base = _pointer_base(em, op)
    moved = _as_indices(em, src, base) if base else src
    out = _declare_like(em, moved, dst_lay) if base else None
    plan = warp_shuffle_plan(dst_lay, src.layout) if op.name == "ttg.convert_layout" else None
    if plan is not None:
        out = _relayout_with_shuffles(em, op, moved, dst_lay, plan, out)
    else:
        strides = (_bank_strides(em, op, moved, dst_lay, 8 if base else src_v.type.element.nbytes)
                   or src_index_strides) if op.name == "ttg.convert_layout" else None
        read = strides or src_index_strides
        out = through_scratch(em, op, moved, lambda o, r: index_expr(em, o.layout, r, read), out, strides)
    if base:
        res = em.declare(op.result)
        with em.for_regs(res.regs) as r:
            em.emit(f"{res.at(r)} = {base} + {out.at(r)};")


def _bank_strides(em: FunctionEmitter, op: Op, src: Lowered, dst_lay: LinearLayout,
                  elem_bytes: int) -> Optional[List[int]]:
    """Padded strides for a conversion's buffer (scratch_padding.py) when they take fewer bank cycles and the padded
    buffer fits where the kernel's threadgroup memory already reaches; None: row-major."""
    shape = op.operands[0].type.shape
    strides = conversion_strides(src.layout, dst_lay, shape, elem_bytes, src.ctype)
    if strides == row_major_strides(shape):
        return None
    nbytes = scratch_bytes(shape, strides, elem_bytes)
    return strides if nbytes <= em.ctx.scratch_room(op) and em.ctx.scratch_in_place(op, nbytes) else None


def _pointer_base(em: FunctionEmitter, op: Op) -> str:
    """The MSL name of the kernel argument every pointer of `op`'s source points into; "" for other values."""
    arg = kernel_argument(em.ctx.module.kernel, op.operands[0])
    return em.get(arg).name if arg is not None and id(arg) in em.values else ""


def _as_indices(em: FunctionEmitter, src: Lowered, base: str) -> Lowered:
    """The element indices `p - base` of the pointers in `src`'s registers."""
    idx = _declare_like(em, src, src.layout, "index")
    with em.for_regs(src.regs) as r:
        em.emit(f"{idx.at(r)} = {src.at(r)} - {base};")
    return idx


def _declare_like(em: FunctionEmitter, src: Lowered, lay: LinearLayout, hint: str = "moved") -> Lowered:
    """Registers of element indices (`long`) in layout `lay`."""
    name = em.temp(hint)
    em.emit(f"long {name}[{lay.num_regs}];")
    return Lowered(name, "long", lay.num_regs, False, lay)


def _span(images: Sequence[int]) -> List[int]:
    values = {0}
    for v in images:
        values |= {x ^ v for x in values}
    return sorted(values)


def _relayout_with_shuffles(em: FunctionEmitter, op: Op, src: Lowered, dst_lay: LinearLayout, plan,
                            out: Optional[Lowered] = None) -> Lowered:
    """Data that stays inside each simdgroup moves with `simd_shuffle`: per destination register, one
    shuffle per distinct source register the lanes need. The registers are `op`'s result unless `out` is
    given."""
    out = out or em.declare(op.result)
    shuffle = em.ctx.require_shuffle(em.target.shuffle_builtin("idx"), out.ctype)
    lane_dep = linear_expr("tt_lane", plan.reg_from_lane)
    with em.for_regs(out.regs) as r:
        src_lane = em.temp("src_lane")
        parts = [p for p in (linear_expr(r, plan.lane_from_reg) if out.regs > 1 else "0",
                             linear_expr("tt_lane", plan.lane_from_lane)) if p != "0"]
        em.emit(f"const ushort {src_lane} = ushort({' ^ '.join(parts) if parts else '0'});")
        base = linear_expr(r, plan.reg_from_reg) if out.regs > 1 else "0"
        choices = _span(plan.reg_from_lane)
        if len(choices) == 1:
            em.emit(f"{out.at(r)} = {shuffle}({src.at(base)}, {src_lane});")
        for t in choices if len(choices) > 1 else ():
            got = em.temp("shfl")
            idx = f"({base}) ^ {t}" if base != "0" else str(t)
            em.emit(f"const {out.ctype} {got} = {shuffle}({src.at(idx)}, {src_lane});")
            em.open(f"if (({lane_dep}) == {t})")
            em.emit(f"{out.at(r)} = {got};")
            em.close()
    return out


def tensor_scratch(em: FunctionEmitter, op: Op, ty: TensorType, hint: str) -> str:
    """A threadgroup-memory view that holds all of `ty` row-major, free for `op` to write (after a barrier)."""
    return em.scratch(op, [(em.ctype(ty), ty.nbytes)], hint)[0]


def through_scratch(em: FunctionEmitter, op: Op, src: Lowered, read_index: Callable[[Lowered, str], str],
                    out: Optional[Lowered] = None, strides: Optional[List[int]] = None) -> Lowered:
    """Write `src` (`op`'s source, or its element indices) to threadgroup memory row-major; each result register
    `r` then reads the element at row-major index `read_index(result, r)`. The result registers are `op`'s
    result unless `out` is given. `strides`: where the elements go (row-major, or padded rows), which the result
    then reads at too, in vector loads where it can, instead of through `read_index` (only for a buffer that fits
    whole; when it does not, row-major strides move in rounds as without them). A source larger than the
    room left at `op` moves in rounds, each through a buffer of one slab of the source (row-major index in
    [c * size, (c + 1) * size)): every thread writes what it holds of the slab and reads what it needs from it."""
    src_ty: TensorType = op.operands[0].type
    ctype = em.ctype(src_ty) if out is None else src.ctype  # element indices are long, as wide as pointers
    nbytes = scratch_bytes(src_ty.shape, strides, 8 if out is not None else src_ty.element.nbytes) if strides \
        else src_ty.nbytes
    chunks = 1
    while nbytes // chunks > em.ctx.scratch_room(op) and chunks < src_ty.numel:
        chunks *= 2
    if strides and chunks > 1 and strides != row_major_strides(src_ty.shape):
        raise em.internal(f"a padded conversion buffer of {nbytes} bytes does not fit in the room left")
    if chunks == 1:
        buf = em.scratch(op, [(ctype, nbytes)], "smem")[0]
        store_registers(em, src, buf, strides or row_major_strides(src_ty.shape))
        em.barrier()
        out = out or em.declare(op.result)
        if strides:
            load_registers(em, out, buf, strides)
        else:
            with em.for_regs(out.regs) as r:
                em.emit(f"{out.at(r)} = {em.tg_load(buf, read_index(out, r), out.ctype)};")
        return out
    size = src_ty.numel // chunks
    buf = em.scratch(op, [(ctype, size * src_ty.element.nbytes)], "smem")[0]
    out = out or em.declare(op.result)
    src_strides = row_major_strides(src_ty.shape)
    c = em.loop_var("chunk")
    em.open(f"for (uint {c} = 0; {c} < {chunks}; ++{c})")
    with em.owned_regs(src.layout) as r:
        idx = em.temp("idx")
        em.emit(f"const uint {idx} = {index_expr(em, src.layout, r, src_strides)};")
        em.open(f"if ({idx} / {size} == {c})")
        em.emit(em.tg_store(buf, f"{idx} - {c} * {size}", src.at(r), src.ctype))
        em.close()
    em.barrier()
    with em.for_regs(out.regs) as r:
        idx = em.temp("idx")
        em.emit(f"const uint {idx} = {read_index(out, r)};")
        em.open(f"if ({idx} / {size} == {c})")
        em.emit(f"{out.at(r)} = {em.tg_load(buf, f'{idx} - {c} * {size}', out.ctype)};")
        em.close()
    em.barrier()
    em.close()
    return out

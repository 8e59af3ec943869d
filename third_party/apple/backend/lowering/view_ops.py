"""Lowering of the view ops, which rearrange a tensor's elements without computing: `tt.broadcast`,
`tt.expand_dims`, `tt.reshape`, `tt.trans` (relayouts, shared with `ttg.convert_layout`: relayout.py),
`tt.join`, `tt.split` (register pairs), `tt.cat` (through threadgroup memory) and `tt.unsplat`."""
from __future__ import annotations

from ..ir import Op
from ..ir.types import TensorType
from ..layouts import Coord, LinearLayout, local_register_map
from .emitter import FunctionEmitter, Lowered, linear_expr
from .registry import OpFamily
from .relayout import relayout, tensor_scratch
from .shared_memory import load_registers, row_major_strides, store_registers

FAMILY = OpFamily("view")


@FAMILY.lowers("tt.broadcast")
def _broadcast(em: FunctionEmitter, op: Op) -> None:
    src_shape = op.operands[0].type.shape
    dst_shape = op.result.type.shape
    keep = [s == d for s, d in zip(src_shape, dst_shape)]
    src_strides = row_major_strides(src_shape)
    strides = [st if k else 0 for st, k in zip(src_strides, keep)]
    relayout(em, op, lambda c: tuple(x if k else 0 for x, k in zip(c, keep)), strides)


@FAMILY.lowers("tt.expand_dims")
def _expand_dims(em: FunctionEmitter, op: Op) -> None:
    axis = int(op.attrs["axis"])
    relayout(em, op, lambda c: c[:axis] + c[axis + 1:], row_major_strides(op.result.type.shape))


def _reorder_free(em: FunctionEmitter, op: Op) -> bool:
    """Whether an `allow_reorder` reshape may hand its registers on as they are: its result is then the source's
    elements in another order (what upstream's lowering does for every reshape). That holds when each layout holds
    every element exactly once, in as many registers per thread. Only reductions may read such a result (Triton
    reshapes a reduction's operands so for `axis=None`), and every operand of each of them must be one of these
    reshapes from and to the same layouts: then all are permuted alike, and a tuple's elements stay together."""
    if not op.attrs.get("allow_reorder"):
        return False

    def copy_free(lay: LinearLayout) -> bool:
        return not (lay.free_reg_mask() or lay.free_lane_mask() or lay.free_warp_mask())

    def layouts(o: Op):
        return em.layout(o.operands[0].type), em.layout(o.result.type)

    src_lay, dst_lay = layouts(op)
    if not (copy_free(src_lay) and copy_free(dst_lay) and src_lay.num_regs == dst_lay.num_regs):
        return False
    users = em.ctx.users_of(op.result)
    for user in users:
        if user.name != "tt.reduce":
            return False
        for v in user.operands:
            o = v.owner
            if not (isinstance(o, Op) and o.name == "tt.reshape" and o.attrs.get("allow_reorder")
                    and layouts(o) == (src_lay, dst_lay)):
                return False
    return bool(users)


@FAMILY.lowers("tt.reshape")
def _reshape(em: FunctionEmitter, op: Op) -> None:
    src = em.get(op.operands[0])
    if not src.uniform and _reorder_free(em, op):
        em.bind(op.result, Lowered(src.name, em.ctype(op.result.type), src.regs, False, em.layout(op.result.type)))
        return
    src_shape = op.operands[0].type.shape
    dst_shape = op.result.type.shape
    dst_strides = row_major_strides(dst_shape)
    src_strides = row_major_strides(src_shape)

    def project(c: Coord) -> Coord:
        idx = sum(x * s for x, s in zip(c, dst_strides))
        return tuple((idx // s) % n for s, n in zip(src_strides, src_shape))

    relayout(em, op, project, dst_strides)


@FAMILY.lowers("tt.trans")
def _trans(em: FunctionEmitter, op: Op) -> None:
    order = [int(x) for x in op.attrs["order"]]
    src_strides = row_major_strides(op.operands[0].type.shape)

    def project(c: Coord) -> Coord:
        src = [0] * len(c)
        for i, o in enumerate(order):
            src[o] = c[i]
        return tuple(src)

    relayout(em, op, project, [src_strides[o] for o in order])


def _pair_bit(lay: LinearLayout) -> int:
    """The register bit whose basis is the unit vector of the last (size-2) dimension, or -1."""
    unit = tuple(0 for _ in lay.shape[:-1]) + (1, )
    for i, b in enumerate(lay.reg):
        if b == unit:
            return i
    return -1


def _without_reg_bit(lay: LinearLayout, bit: int, drop_last: bool) -> LinearLayout:
    def d(c):
        return c[:-1] if drop_last else c

    regs = tuple(d(b) for i, b in enumerate(lay.reg) if i != bit)
    shape = lay.shape[:-1] if drop_last else lay.shape
    return LinearLayout(shape, regs, tuple(d(b) for b in lay.lane), tuple(d(b) for b in lay.warp))


def _compress(r: str, bit: int) -> str:
    """Register index `r` with bit `bit` removed."""
    low = (1 << bit) - 1
    if bit == 0:
        return f"({r} >> 1)"
    return f"((({r} >> {bit + 1}) << {bit}) | ({r} & {low}))"


@FAMILY.lowers("tt.join")
def _join(em: FunctionEmitter, op: Op) -> None:
    a, b = (em.get(v) for v in op.operands)
    dst = em.layout(op.result.type)
    bit = _pair_bit(dst)
    sub = _without_reg_bit(dst, bit, True) if bit >= 0 else None
    ref = a if not a.uniform else b
    mapping = local_register_map(sub, ref.layout, lambda c: c) if sub is not None and not ref.uniform else None
    if bit < 0 or any(x[-1] for x in dst.lane + dst.warp) or (mapping is None and not ref.uniform):
        raise em.unsupported("tt.join into a layout that splits the joined dimension across threads is not supported")
    out = em.declare(op.result)
    with em.for_regs(out.regs) as r:
        inner = _compress(r, bit) if out.regs > 1 else "0"
        src_idx = linear_expr(inner, mapping) if mapping else "0"
        em.emit(f"{out.at(r)} = (({r} >> {bit}) & 1) ? {b.at(src_idx)} : {a.at(src_idx)};")


@FAMILY.lowers("tt.split")
def _split(em: FunctionEmitter, op: Op) -> None:
    src = em.get(op.operands[0])
    lay = src.layout
    bit = _pair_bit(lay)
    if bit < 0 or any(x[-1] for x in lay.lane + lay.warp):
        raise em.unsupported("tt.split of a layout that splits the last dimension across threads is not supported")
    sub = _without_reg_bit(lay, bit, True)
    for half, res in enumerate(op.results):
        dst = em.layout(res.type)
        mapping = local_register_map(dst, sub, lambda c: c)
        if mapping is None:
            raise em.unsupported("tt.split result layout does not match its operand")
        out = em.declare(res)
        with em.for_regs(out.regs) as r:
            inner = linear_expr(r, mapping) if out.regs > 1 else "0"
            # re-insert the pair bit into the compressed register index
            low = (1 << bit) - 1
            full = f"(((({inner}) >> {bit}) << {bit + 1}) | (({inner}) & {low}) | {half << bit})"
            em.emit(f"{out.at(r)} = {src.at(full)};")


@FAMILY.lowers("tt.cat")
def _cat(em: FunctionEmitter, op: Op) -> None:
    a_v, b_v = op.operands
    a, b = em.get(a_v), em.get(b_v)
    res_ty: TensorType = op.result.type
    buf = tensor_scratch(em, op, res_ty, "smem")
    for src, v, base in ((a, a_v, 0), (b, b_v, a_v.type.numel)):
        shifted = f"{buf} + {base}" if base else buf
        store_registers(em, src, f"({shifted})", row_major_strides(v.type.shape))
    em.barrier()
    load_registers(em, em.declare(op.result), buf, row_major_strides(res_ty.shape))


@FAMILY.lowers("tt.unsplat")
def _unsplat(em: FunctionEmitter, op: Op) -> None:
    """A one-element tensor to its scalar: every thread holds the element (all bases of a one-element
    layout are zero) in register 0."""
    src = em.get(op.operands[0])
    name = em.fresh(op.result.name)
    em.emit(f"const {src.ctype} {name} = {src.at(0)};")
    em.bind(op.result, Lowered(name, src.ctype))

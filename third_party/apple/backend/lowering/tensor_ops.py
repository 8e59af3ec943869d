"""Lowering of ops that create tensors or move their elements between registers and threads:
constants, `tt.make_range`, `tt.splat`, `tt.broadcast`, `tt.expand_dims`, `tt.reshape`,
`ttg.convert_layout`, program ids.

Shape and layout changes are one mechanism ("relayout"): when the linear layouts say every thread
already holds the elements it needs, the result is a register permutation (or no code at all);
otherwise the elements go through threadgroup memory in row-major order.
"""
from __future__ import annotations

import math
import struct
from typing import Callable, List, Sequence

from ..ir import Op
from ..ir.types import TensorType
from ..layouts import Coord, LinearLayout, local_register_map, warp_shuffle_plan
from .core import FunctionEmitter, Lowered, elem_type, linear_expr, lowers


# -- constants ----------------------------------------------------------------------------------------

def _float_bits_to_value(bits: int, name: str) -> float:
    if name == "f32":
        return struct.unpack("<f", struct.pack("<I", bits))[0]
    if name == "f16":
        return struct.unpack("<e", struct.pack("<H", bits))[0]
    if name == "bf16":
        return struct.unpack("<f", struct.pack("<I", bits << 16))[0]
    if name == "f64":
        return struct.unpack("<d", struct.pack("<Q", bits))[0]
    raise ValueError(name)


def float_literal(value: float, name: str) -> str:
    """An exact MSL spelling of a float constant of type `name` (f16/bf16/f32)."""
    if math.isnan(value):
        lit = "NAN"
    elif math.isinf(value):
        lit = "INFINITY" if value > 0 else "-INFINITY"
    else:
        f32 = struct.unpack("<f", struct.pack("<f", value))[0]
        text = repr(f32)
        denormal = 0 < abs(f32) < 1.1754943508222875e-38
        if denormal or struct.unpack("<f", struct.pack("<f", float(text)))[0] != f32:
            bits = struct.unpack("<I", struct.pack("<f", f32))[0]
            lit = f"as_type<float>(0x{bits:08X}u)"
        else:
            lit = text + "f" if ("." in text or "e" in text) else text + ".0f"
            if value == 0 and math.copysign(1.0, value) < 0:
                lit = "-0.0f"
    if name == "f16":
        return f"half({lit})"
    if name == "f64":  # only reached with allow_fp64_demotion: computed in float
        return lit
    if name == "bf16":
        return f"bfloat({lit})"
    return lit


def scalar_literal(text: str, ty) -> str:
    name = ty.name
    text = text.strip()
    if name == "i1":
        return "true" if text in ("true", "1", "-1") else "false"
    if ty.is_int:
        v = int(text, 0)
        ct = {"i8": "char", "i16": "short", "i32": "int", "i64": "long", "index": "long"}[name]
        if name in ("i64", "index"):
            if v == -(1 << 63):
                return "long(-9223372036854775807L - 1)"
            return f"{v}L"
        if name == "i32" and v == -(1 << 31):
            return "int(-2147483647 - 1)"
        return str(v) if name == "i32" else f"{ct}({v})"
    if text.startswith("0x"):
        return float_literal(_float_bits_to_value(int(text, 16), name), name)
    return float_literal(float(text), name)


@lowers("arith.constant")
def _constant(em: FunctionEmitter, op: Op) -> None:
    res = op.result
    value = str(op.attrs["value"]).strip()
    ty = elem_type(res)
    if ty.name == "f64" and not em.ctx.demote_f64:
        # Hoisted constants have no source location; the op that uses this one reports float64.
        em.bind(res, Lowered("<float64 constant>", "double"))
        return
    ct = em.ctype(ty)
    if value.startswith("dense<"):
        inner = value[len("dense<"):-1].strip()
        if inner.startswith("["):
            raise em.error("non-splat dense tensor constants are not supported by the apple backend yet")
        lit = scalar_literal(inner.strip('"'), ty)
    else:
        lit = scalar_literal(value, ty)
    name = em.fresh(res.name)
    em.emit(f"const {ct} {name} = {lit};")
    lay = em.layout(res.type)
    em.bind(res, Lowered(name, ct, lay.num_regs if lay else None, uniform=lay is not None, layout=lay))


@lowers("ub.poison")
def _poison(em: FunctionEmitter, op: Op) -> None:
    res = op.result
    ct = em.ctype(elem_type(res))
    name = em.fresh(res.name)
    em.emit(f"const {ct} {name} = {ct}(0);")
    lay = em.layout(res.type)
    em.bind(res, Lowered(name, ct, lay.num_regs if lay else None, uniform=lay is not None, layout=lay))


# -- program ids ---------------------------------------------------------------------------------------

_AXES = {"x": "x", "y": "y", "z": "z", "0": "x", "1": "y", "2": "z"}


@lowers("tt.get_program_id")
def _program_id(em: FunctionEmitter, op: Op) -> None:
    axis = _AXES[str(op.attrs.get("_keyword", op.attrs.get("axis", "x")))]
    name = em.fresh(op.result.name)
    em.emit(f"const int {name} = int(tt_pid.{axis});")
    em.bind(op.result, Lowered(name, "int"))


@lowers("tt.get_num_programs")
def _num_programs(em: FunctionEmitter, op: Op) -> None:
    axis = _AXES[str(op.attrs.get("_keyword", op.attrs.get("axis", "x")))]
    name = em.fresh(op.result.name)
    em.emit(f"const int {name} = int(tt_nprog.{axis});")
    em.bind(op.result, Lowered(name, "int"))


# -- make_range and splat ------------------------------------------------------------------------------

@lowers("tt.make_range")
def _make_range(em: FunctionEmitter, op: Op) -> None:
    start = int(op.attrs.get("start", 0))
    out = em.declare(op.result)
    with em.for_regs(out.regs) as r:
        c = em.coord_expr(out.layout, 0, r)
        em.emit(f"{out.at(r)} = {start} + int({c});" if start else f"{out.at(r)} = int({c});")


@lowers("tt.splat")
def _splat(em: FunctionEmitter, op: Op) -> None:
    src = em.get(op.operands[0])
    lay = em.layout(op.result.type)
    em.bind(op.result, Lowered(src.name if not src.is_tensor else src.at(0), em.ctype(op.result.type),
                               lay.num_regs, True, lay))


# -- relayout: broadcast, expand_dims, reshape, convert_layout ---------------------------------------

def _relayout(em: FunctionEmitter, op: Op, project: Callable[[Coord], Coord], src_index_strides: List[int]) -> None:
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
    if op.name == "ttg.convert_layout":
        plan = warp_shuffle_plan(dst_lay, src.layout)
        if plan is not None:
            _relayout_with_shuffles(em, op, src, dst_lay, plan)
            return
    _relayout_through_smem(em, op, src, dst_lay, src_index_strides)


def _span(images: Sequence[int]) -> List[int]:
    values = {0}
    for v in images:
        values |= {x ^ v for x in values}
    return sorted(values)


def _relayout_with_shuffles(em: FunctionEmitter, op: Op, src: Lowered, dst_lay: LinearLayout, plan) -> None:
    """Data that stays inside each simdgroup moves with `simd_shuffle`: per destination register, one
    shuffle per distinct source register the lanes need."""
    from .reduce_ops import SHUFFLE
    em.ctx.add_helper("tt_shuffle", SHUFFLE)
    out = em.declare(op.result)
    lane_dep = linear_expr("tt_lane", plan.reg_from_lane)
    with em.for_regs(out.regs) as r:
        src_lane = em.temp("src_lane")
        parts = [p for p in (linear_expr(r, plan.lane_from_reg) if out.regs > 1 else "0",
                             linear_expr("tt_lane", plan.lane_from_lane)) if p != "0"]
        em.emit(f"const ushort {src_lane} = ushort({' ^ '.join(parts) if parts else '0'});")
        base = linear_expr(r, plan.reg_from_reg) if out.regs > 1 else "0"
        choices = _span(plan.reg_from_lane)
        if len(choices) == 1:
            em.emit(f"{out.at(r)} = tt_shuffle({src.at(base)}, {src_lane});")
        for t in choices if len(choices) > 1 else ():
            got = em.temp("shfl")
            idx = f"({base}) ^ {t}" if base != "0" else str(t)
            em.emit(f"const {out.ctype} {got} = tt_shuffle({src.at(idx)}, {src_lane});")
            em.open(f"if (({lane_dep}) == {t})")
            em.emit(f"{out.at(r)} = {got};")
            em.close()


def row_major_strides(shape: Sequence[int]) -> List[int]:
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= n
    return list(reversed(strides))


def index_expr(em: FunctionEmitter, lay: LinearLayout, reg: str, strides: Sequence[int]) -> str:
    terms = []
    for d, s in enumerate(strides):
        if s == 0 or lay.shape[d] == 1:
            continue
        c = em.coord_expr(lay, d, reg)
        if c == "0":
            continue
        terms.append(f"({c})" if s == 1 else f"({c}) * {s}")
    return " + ".join(terms) if terms else "0"


def smem_pointer(em: FunctionEmitter, op: Op, ctype: str, nbytes: int) -> str:
    """A `threadgroup T*` into the scratch space this op may use, after a barrier that makes it free."""
    offset = em.ctx.scratch_offset(op, nbytes)
    name = em.temp("smem")
    em.emit("threadgroup_barrier(mem_flags::mem_threadgroup);")
    em.emit(f"threadgroup {ctype}* {name} = (threadgroup {ctype}*)(tt_smem + {offset});")
    return name


def smem_ctype(em: FunctionEmitter, ty) -> str:
    ct = em.ctype(ty)
    if ct.startswith("device "):
        raise em.error("moving a tensor of pointers between threads is not supported yet; "
                       "move the integer offsets instead")
    return ct


def store_registers(em: FunctionEmitter, src: Lowered, buf: str, strides: Sequence[int]) -> None:
    """Every element of `src` written once to `buf` at its row-major index."""
    with em.owned_regs(src.layout) as r:
        em.emit(f"{buf}[{index_expr(em, src.layout, r, strides)}] = {src.at(r)};")


def _relayout_through_smem(em: FunctionEmitter, op: Op, src: Lowered, dst_lay: LinearLayout,
                           dst_strides: Sequence[int]) -> None:
    src_ty: TensorType = op.operands[0].type
    ct = smem_ctype(em, src_ty)
    buf = smem_pointer(em, op, ct, src_ty.numel * em.ctx.elem_bytes(src_ty.element))
    store_registers(em, src, buf, row_major_strides(src_ty.shape))
    em.emit("threadgroup_barrier(mem_flags::mem_threadgroup);")
    out = em.declare(op.result)
    with em.for_regs(out.regs) as r:
        em.emit(f"{out.at(r)} = {buf}[{index_expr(em, dst_lay, r, dst_strides)}];")


@lowers("ttg.convert_layout")
def _convert_layout(em: FunctionEmitter, op: Op) -> None:
    shape = op.result.type.shape
    _relayout(em, op, lambda c: c, row_major_strides(shape))


@lowers("tt.broadcast")
def _broadcast(em: FunctionEmitter, op: Op) -> None:
    src_shape = op.operands[0].type.shape
    dst_shape = op.result.type.shape
    keep = [s == d for s, d in zip(src_shape, dst_shape)]
    src_strides = row_major_strides(src_shape)
    strides = [st if k else 0 for st, k in zip(src_strides, keep)]
    _relayout(em, op, lambda c: tuple(x if k else 0 for x, k in zip(c, keep)), strides)


@lowers("tt.expand_dims")
def _expand_dims(em: FunctionEmitter, op: Op) -> None:
    axis = int(op.attrs["axis"])
    _relayout(em, op, lambda c: c[:axis] + c[axis + 1:], row_major_strides(op.result.type.shape))


@lowers("tt.reshape")
def _reshape(em: FunctionEmitter, op: Op) -> None:
    src_shape = op.operands[0].type.shape
    dst_shape = op.result.type.shape
    dst_strides = row_major_strides(dst_shape)
    src_strides = row_major_strides(src_shape)

    def project(c: Coord) -> Coord:
        idx = sum(x * s for x, s in zip(c, dst_strides))
        return tuple((idx // s) % n for s, n in zip(src_strides, src_shape))

    _relayout(em, op, project, dst_strides)


@lowers("tt.trans")
def _trans(em: FunctionEmitter, op: Op) -> None:
    order = [int(x) for x in op.attrs["order"]]
    src_strides = row_major_strides(op.operands[0].type.shape)

    def project(c: Coord) -> Coord:
        src = [0] * len(c)
        for i, o in enumerate(order):
            src[o] = c[i]
        return tuple(src)

    _relayout(em, op, project, [src_strides[o] for o in order])


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


@lowers("tt.join")
def _join(em: FunctionEmitter, op: Op) -> None:
    a, b = (em.get(v) for v in op.operands)
    dst = em.layout(op.result.type)
    bit = _pair_bit(dst)
    sub = _without_reg_bit(dst, bit, True) if bit >= 0 else None
    ref = a if not a.uniform else b
    mapping = local_register_map(sub, ref.layout, lambda c: c) if sub is not None and not ref.uniform else None
    if bit < 0 or any(x[-1] for x in dst.lane + dst.warp) or (mapping is None and not ref.uniform):
        raise em.error("tt.join into a layout that splits the joined dimension across threads is not supported")
    out = em.declare(op.result)
    with em.for_regs(out.regs) as r:
        inner = _compress(r, bit) if out.regs > 1 else "0"
        src_idx = linear_expr(inner, mapping) if mapping else "0"
        em.emit(f"{out.at(r)} = (({r} >> {bit}) & 1) ? {b.at(src_idx)} : {a.at(src_idx)};")


@lowers("tt.split")
def _split(em: FunctionEmitter, op: Op) -> None:
    src = em.get(op.operands[0])
    lay = src.layout
    bit = _pair_bit(lay)
    if bit < 0 or any(x[-1] for x in lay.lane + lay.warp):
        raise em.error("tt.split of a layout that splits the last dimension across threads is not supported")
    sub = _without_reg_bit(lay, bit, True)
    for half, res in enumerate(op.results):
        dst = em.layout(res.type)
        mapping = local_register_map(dst, sub, lambda c: c)
        if mapping is None:
            raise em.error("tt.split result layout does not match its operand")
        out = em.declare(res)
        with em.for_regs(out.regs) as r:
            inner = linear_expr(r, mapping) if out.regs > 1 else "0"
            # re-insert the pair bit into the compressed register index
            low = (1 << bit) - 1
            full = f"(((({inner}) >> {bit}) << {bit + 1}) | (({inner}) & {low}) | {half << bit})"
            em.emit(f"{out.at(r)} = {src.at(full)};")


@lowers("tt.cat")
def _cat(em: FunctionEmitter, op: Op) -> None:
    a_v, b_v = op.operands
    a, b = em.get(a_v), em.get(b_v)
    ty_a: TensorType = a_v.type
    ct = smem_ctype(em, ty_a)
    res_ty: TensorType = op.result.type
    buf = smem_pointer(em, op, ct, res_ty.numel * em.ctx.elem_bytes(res_ty.element))
    strides = row_major_strides(res_ty.shape)
    for src, v, base in ((a, a_v, 0), (b, b_v, ty_a.numel)):
        shifted = f"{buf} + {base}" if base else buf
        store_registers(em, src, f"({shifted})", row_major_strides(v.type.shape))
    em.emit("threadgroup_barrier(mem_flags::mem_threadgroup);")
    out = em.declare(op.result)
    with em.for_regs(out.regs) as r:
        em.emit(f"{out.at(r)} = {buf}[{index_expr(em, out.layout, r, strides)}];")


@lowers("tt.gather")
def _gather(em: FunctionEmitter, op: Op) -> None:
    src_v, idx_v = op.operands
    axis = int(op.attrs["axis"])
    src = em.get(src_v)
    idx = em.get(idx_v)
    src_ty: TensorType = src_v.type
    ct = smem_ctype(em, src_ty)
    buf = smem_pointer(em, op, ct, src_ty.numel * em.ctx.elem_bytes(src_ty.element))
    src_strides = row_major_strides(src_ty.shape)
    store_registers(em, src, buf, src_strides)
    em.emit("threadgroup_barrier(mem_flags::mem_threadgroup);")
    out = em.declare(op.result)
    strides = list(src_strides)
    strides[axis] = 0
    with em.for_regs(out.regs) as r:
        other = index_expr(em, out.layout, r, strides)
        em.emit(f"{out.at(r)} = {buf}[{other} + int({idx.at(r)}) * {src_strides[axis]}];")


@lowers("tt.histogram")
def _histogram(em: FunctionEmitter, op: Op) -> None:
    src_v = op.operands[0]
    src = em.get(src_v)
    mask = em.get(op.operands[1]) if len(op.operands) > 1 else None
    res_ty: TensorType = op.result.type
    bins = res_ty.shape[0]
    offset = em.ctx.scratch_offset(op, bins * 4)
    buf = em.temp("hist_smem")
    em.emit("threadgroup_barrier(mem_flags::mem_threadgroup);")
    em.emit(f"threadgroup atomic_int* {buf} = (threadgroup atomic_int*)(tt_smem + {offset});")
    em.open(f"for (uint b = tt_tid; b < {bins}; b += {em.ctx.module.num_warps * 32})")
    em.emit(f"atomic_store_explicit(&{buf}[b], 0, memory_order_relaxed);")
    em.close()
    em.emit("threadgroup_barrier(mem_flags::mem_threadgroup);")
    in_range = lambda r: f"uint({src.at(r)}) < {bins}u" + (f" && {mask.at(r)}" if mask is not None else "")  # noqa: E731
    with em.owned_regs(em.layout(src_v.type), in_range) as r:
        em.emit(f"atomic_fetch_add_explicit(&{buf}[{src.at(r)}], 1, memory_order_relaxed);")
    em.emit("threadgroup_barrier(mem_flags::mem_threadgroup);")
    out = em.declare(op.result)
    with em.for_regs(out.regs) as r:
        em.emit(f"{out.at(r)} = atomic_load_explicit(&{buf}[{em.coord_expr(out.layout, 0, r)}], "
                "memory_order_relaxed);")

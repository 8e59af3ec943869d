"""Lowering of `tt.reduce` with any combine region, on any axis, with any number of operands.

The linear layout of the operand says where the reduced axis lives: register bits whose basis points
along the axis are combined inside each thread, lane bits by `simd_shuffle_xor` butterflies, and warp
bits through threadgroup memory. The combine region becomes an MSL function called at every step.
"""
from __future__ import annotations

from typing import List, Sequence, Tuple

from ..ir import Op
from ..ir.types import TensorType
from ..layouts import LinearLayout, local_register_map
from .core import FunctionEmitter, Lowered, elem_type, linear_expr, lowers
from .tensor_ops import row_major_strides, index_expr

def shuffle_helpers(name: str, metal_fn: str) -> str:
    """`name(T v, ushort arg)` overloads for every scalar type over Metal's `metal_fn`, which only takes
    8/16/32-bit values: 64-bit values move as two 32-bit halves, bool as ushort."""
    direct = ["float", "half", "int", "uint", "short", "ushort"]
    out = [f"static inline {t} {name}({t} v, ushort m) {{\n    return {metal_fn}(v, m);\n}}" for t in direct]
    out.append(f"static inline char {name}(char v, ushort m) {{\n    return char({metal_fn}(short(v), m));\n}}")
    out.append(f"static inline uchar {name}(uchar v, ushort m) {{\n    return uchar({metal_fn}(ushort(v), m));\n}}")
    out.append(f"static inline bool {name}(bool v, ushort m) {{\n    return {metal_fn}(ushort(v ? 1 : 0), m) != 0;\n}}")
    out.append(f"static inline bfloat {name}(bfloat v, ushort m) {{\n"
               f"    return as_type<bfloat>({metal_fn}(as_type<ushort>(v), m));\n}}")
    for t in ("long", "ulong"):
        out.append(f"static inline {t} {name}({t} v, ushort m) {{\n    uint2 parts = as_type<uint2>(v);\n"
                   f"    parts.x = {metal_fn}(parts.x, m);\n    parts.y = {metal_fn}(parts.y, m);\n"
                   f"    return as_type<{t}>(parts);\n}}")
    return "\n".join(out)


SHUFFLE_XOR = shuffle_helpers("tt_shuffle_xor", "simd_shuffle_xor")
SHUFFLE = shuffle_helpers("tt_shuffle", "simd_shuffle")


def _classify(bases: Sequence[Tuple[int, ...]], axis: int, what: str, em: FunctionEmitter) -> Tuple[List[int], List[int]]:
    """Split basis indices into those along `axis` (reduced) and those off it (kept)."""
    along, off = [], []
    for i, b in enumerate(bases):
        others = any(x for d, x in enumerate(b) if d != axis)
        if b[axis] and others:
            raise em.error(f"reduction over a layout whose {what} bit {i} mixes the reduced axis with another "
                           "dimension is not supported")
        (along if b[axis] else off).append(i)
    return along, off


class Combine:
    """A combine region emitted as an MSL function; `call` spells one invocation."""

    def __init__(self, name: str, captured: List[str]):
        self.name = name
        self.captured = captured

    def call(self, accs: List[str], others: List[str]) -> str:
        return f"{self.name}({', '.join(list(accs) + list(others) + self.captured)});"


def _external_values(region) -> list:
    defined, used = set(), []
    for block in region.blocks:
        for a in block.args:
            defined.add(id(a))
        for op in block.ops:
            for inner in op.walk():
                for r in inner.results:
                    defined.add(id(r))
                for reg in inner.regions:
                    for b in reg.blocks:
                        for a in b.args:
                            defined.add(id(a))
    for block in region.blocks:
        for op in block.ops:
            for inner in op.walk():
                for v in inner.operands:
                    if id(v) not in defined and all(v is not u for u in used):
                        used.append(v)
    return used


def emit_combine_function(em: FunctionEmitter, op: Op, hint: str) -> Combine:
    """Emit the combine region of a reduce/scan as `void f(thread T& acc..., T other..., captured...)`.
    Values the region reads from outside (hoisted constants, scalars) are re-created or passed in."""
    from .core import FunctionEmitter as Emitter
    region = op.regions[0]
    block = region.entry
    n = len(op.operands)
    name = em.ctx.unique_helper_name(f"{em.ctx.kernel_name}_combine_{hint}")
    sub = Emitter(em.ctx)
    params = []
    for i, arg in enumerate(block.args):
        ct = sub.ctype(arg.type)
        pname = sub.fresh(f"acc{i}" if i < n else f"other{i - n}")
        params.append(f"thread {ct}& {pname}" if i < n else f"{ct} {pname}")
        sub.bind(arg, Lowered(pname, ct))
    captured = []
    for v in _external_values(region):
        owner = v.owner
        if isinstance(owner, Op) and owner.name == "arith.constant" and not isinstance(v.type, TensorType):
            sub.lower_op(owner)
            continue
        outer = em.get(v)
        if outer.is_tensor and not outer.uniform:
            raise em.error("a combine region that reads a tensor defined outside it is not supported")
        pname = sub.fresh(v.name)
        params.append(f"{outer.ctype} {pname}")
        sub.bind(v, Lowered(pname, outer.ctype))
        captured.append(outer.at(0))
    *body, ret = block.ops
    if ret.name not in ("tt.reduce.return", "tt.scan.return"):
        raise em.error(f"combine region ends with {ret.name}, expected a return")
    sub.lower_block(body)
    vals = [sub.get(v) for v in ret.operands]
    temps = []
    for i, v in enumerate(vals):
        t = sub.fresh(f"result{i}")
        sub.emit(f"{v.ctype} {t} = {v.at(0)};")
        temps.append(t)
    for i, t in enumerate(temps):
        sub.emit(f"{params[i].split('&')[1].strip()} = {t};")
    text = f"static inline void {name}({', '.join(params)}) {{\n" + "\n".join(sub.lines) + "\n}"
    em.ctx.add_helper(name, text)
    return Combine(name, captured)


@lowers("tt.reduce")
def _reduce(em: FunctionEmitter, op: Op) -> None:
    axis = int(op.attrs["axis"])
    srcs = [em.get(v) for v in op.operands]
    src_ty: TensorType = op.operands[0].type
    lay: LinearLayout = em.layout(src_ty)
    combine = emit_combine_function(em, op, op.results[0].name)
    n = len(srcs)

    red_regs, keep_regs = _classify(lay.reg, axis, "register", em)
    red_lanes, _ = _classify(lay.lane, axis, "lane", em)
    red_warps, _ = _classify(lay.warp, axis, "warp", em)
    K = 1 << len(keep_regs)
    G = 1 << len(red_regs)
    ctypes = [s.ctype for s in srcs]

    accs = [em.temp(f"{op.results[0].name}_acc") for _ in range(n)]
    for a, ct in zip(accs, ctypes):
        em.emit(f"{ct} {a}[{K}];")

    def call(k: str, others: List[str]) -> str:
        return combine.call([f"{a}[{k}]" for a in accs], others)

    # 1. within each thread
    with em.for_regs(K, "k") as k:
        base = linear_expr(k, [1 << b for b in keep_regs]) if K > 1 else "0"
        for a, s in zip(accs, srcs):
            em.emit(f"{a}[{k}] = {s.at(base)};")
        if G > 1:
            em.open(f"for (uint j = 1; j < {G}; ++j)")
            spread = linear_expr("j", [1 << b for b in red_regs])
            idx = f"({base}) ^ ({spread})" if base != "0" else spread
            em.emit(call(k, [s.at(idx) for s in srcs]))
            em.close()
    # 2. across the lanes of a simdgroup
    if red_lanes:
        em.ctx.add_helper("tt_shuffle_xor", SHUFFLE_XOR)
        with em.for_regs(K, "k") as k:
            for bit in red_lanes:
                others = []
                for a, ct in zip(accs, ctypes):
                    o = em.temp("shfl")
                    em.emit(f"{ct} {o} = tt_shuffle_xor({a}[{k}], ushort({1 << bit}));")
                    others.append(o)
                em.emit(call(k, others))
    # 3. across simdgroups, through threadgroup memory
    out_shape = src_ty.shape[:axis] + src_ty.shape[axis + 1:]
    out_numel = 1
    for d in out_shape:
        out_numel *= d
    if red_warps:
        W = 1 << len(red_warps)
        sizes = [W * out_numel * em.ctx.elem_bytes(elem_type(v)) for v in op.operands]
        offs, total = [], 0
        for s in sizes:
            offs.append(total)
            total += (s + 15) // 16 * 16
        base_off = em.ctx.scratch_offset(op, total)
        em.emit("threadgroup_barrier(mem_flags::mem_threadgroup);")
        bufs = []
        for o, ct in zip(offs, ctypes):
            b = em.temp("red_smem")
            em.emit(f"threadgroup {ct}* {b} = (threadgroup {ct}*)(tt_smem + {base_off + o});")
            bufs.append(b)
        slot = em.temp("warp_slot")
        wvals = [0] * len(lay.warp)
        for j, bit in enumerate(red_warps):
            wvals[bit] = 1 << j
        em.emit(f"const uint {slot} = {linear_expr('tt_warp', wvals)};")
        out_strides = row_major_strides(out_shape)
        strides = out_strides[:axis] + [0] + out_strides[axis:]
        with em.for_regs(K, "k") as k:
            base = linear_expr(k, [1 << b for b in keep_regs]) if K > 1 else "0"
            idx = index_expr(em, lay, f"({base})", strides)
            for a, b in zip(accs, bufs):
                em.emit(f"{b}[{slot} * {out_numel} + {idx}] = {a}[{k}];")
        em.emit("threadgroup_barrier(mem_flags::mem_threadgroup);")
        with em.for_regs(K, "k") as k:
            base = linear_expr(k, [1 << b for b in keep_regs]) if K > 1 else "0"
            idx = index_expr(em, lay, f"({base})", strides)
            for a, b in zip(accs, bufs):
                em.emit(f"{a}[{k}] = {b}[{idx}];")
            em.open(f"for (uint w = 1; w < {W}; ++w)")
            em.emit(call(k, [f"{b}[w * {out_numel} + {idx}]" for b in bufs]))
            em.close()
    # 4. results
    for i, res in enumerate(op.results):
        if not isinstance(res.type, TensorType):
            name = em.fresh(res.name)
            em.emit(f"const {ctypes[i]} {name} = {accs[i]}[0];")
            em.bind(res, Lowered(name, ctypes[i]))
            continue
        dst = em.layout(res.type)

        def drop(c):
            return c[:axis] + c[axis + 1:]

        zero = tuple(0 for _ in out_shape)
        acc_layout = LinearLayout(
            tuple(out_shape), tuple(drop(lay.reg[b]) for b in keep_regs),
            tuple(zero if j in red_lanes else drop(b) for j, b in enumerate(lay.lane)),
            tuple(zero if j in red_warps else drop(b) for j, b in enumerate(lay.warp)))
        mapping = local_register_map(dst, acc_layout, lambda c: c)
        if mapping is None:
            raise em.error(f"internal error: reduce result layout {res.type} does not match its operand layout")
        if mapping == [1 << b for b in range(len(mapping))] and dst.num_regs == K:
            em.bind(res, Lowered(accs[i], ctypes[i], K, False, dst))
            continue
        out = em.declare(res)
        with em.for_regs(out.regs) as r:
            em.emit(f"{out.at(r)} = {accs[i]}[{linear_expr(r, mapping) if out.regs > 1 else '0'}];")

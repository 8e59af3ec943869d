"""Lowering of the ops `passes/decompose_scaled_dot.py` builds `tt.dot_scaled` from, that have no other home:

- `ttg.fp4_to_fp` (upstream's op): e2m1 values stored two per byte (low nibble first) along `axis`, unpacked to
  f16/bf16. The result layout keeps each byte in the thread that loaded it (the pass derives it from the
  source's linear layout), so this is register-local: destination register r reads source register map(r) and
  its nibble is a linear function of r.
- `apple.scale_broadcast` (ours): a block scale, already converted into the operand's layout seen from the
  scale tensor, read out register for register over the operand's shape (result coordinate c reads scale
  coordinate (c[dims[i]] >> shifts[i])_i); the data never moves between threads.
"""
from __future__ import annotations

from ..ir import Op
from ..layouts import local_register_map
from .emitter import FunctionEmitter, Lowered, linear_expr
from .registry import OpFamily

FAMILY = OpFamily("scaled_dot")

# e2m1 magnitudes times two (0, 0.5, 1, 1.5, 2, 3, 4, 6 -> 0..12), one per nibble of this word, by code & 7
_E2M1_TWICE = 0xC8643210


@FAMILY.lowers("ttg.fp4_to_fp")
def _fp4_to_fp(em: FunctionEmitter, op: Op) -> None:
    axis = int(op.attrs["axis"])
    src = em.get(op.operands[0])
    dst_lay = em.layout(op.result.type)
    if any(b[axis] & 1 for b in dst_lay.lane + dst_lay.warp):
        raise em.internal("ttg.fp4_to_fp: the result layout splits a byte's two values between threads")

    def project(c):
        return tuple(x >> 1 if d == axis else x for d, x in enumerate(c))

    if src.uniform:
        mapping = [0] * len(dst_lay.reg)
    else:
        mapping = local_register_map(dst_lay, src.layout, project)
        if mapping is None:
            raise em.internal("ttg.fp4_to_fp: the result layout does not keep each byte in its thread")
    nibble = [b[axis] & 1 for b in dst_lay.reg]
    out = em.declare(op.result)
    with em.for_regs(out.regs) as r:
        src_reg = linear_expr(r, mapping) if out.regs > 1 else "0"
        shift = linear_expr(r, nibble) if out.regs > 1 else "0"
        code = em.temp("e2m1")
        mag = em.temp("mag")
        em.emit(f"const uint {code} = (uint(uchar({src.at(src_reg)})) >> (4u * uint({shift}))) & 15u;")
        em.emit(f"const float {mag} = float(({_E2M1_TWICE:#x}u >> (({code} & 7u) * 4u)) & 15u) * 0.5f;")
        em.emit(f"{out.at(r)} = {out.ctype}(({code} & 8u) ? -{mag} : {mag});")


@FAMILY.lowers("apple.scale_broadcast")
def _scale_broadcast(em: FunctionEmitter, op: Op) -> None:
    dims = [int(d) for d in op.attrs["dims"]]
    shifts = [int(s) for s in op.attrs["shifts"]]
    src = em.get(op.operands[0])
    dst_lay = em.layout(op.result.type)
    ct = em.ctype(op.result.type)
    if src.uniform:
        em.bind(op.result, Lowered(src.name, ct, dst_lay.num_regs, True, dst_lay))
        return

    def project(c):
        return tuple(c[d] >> s for d, s in zip(dims, shifts))

    mapping = local_register_map(dst_lay, src.layout, project)
    if mapping is None:
        raise em.internal("apple.scale_broadcast: the scale is not in the operand's layout")
    out = em.declare(op.result)
    with em.for_regs(out.regs) as r:
        em.emit(f"{out.at(r)} = {src.at(linear_expr(r, mapping) if out.regs > 1 else '0')};")

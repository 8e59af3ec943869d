"""Lowering of ops that create values from nothing or from a scalar: `arith.constant`, `ub.poison`,
`tt.make_range` and `tt.splat`. Splat-like results stay one scalar ("uniform") until an op needs registers."""
from __future__ import annotations

import math
import struct

from ..ir import Op
from ..ir.types import PointerType
from ..abi.scalars import ELEMENT_TYPES
from . import soft_f64
from .emitter import FunctionEmitter, Lowered, elem_type
from .registry import OpFamily

FAMILY = OpFamily("constant")


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


def scalar_literal(text: str, ty, demote_f64: bool = False) -> str:
    name = ty.name
    text = text.strip()
    if name == "i1":
        return "true" if text in ("true", "1", "-1") else "false"
    if ty.is_int:
        v = int(text, 0)
        ct = ELEMENT_TYPES[name].msl
        if name in ("i64", "index"):
            if v == -(1 << 63):
                return "long(-9223372036854775807L - 1)"
            return f"{v}L"
        if name == "i32" and v == -(1 << 31):
            return "int(-2147483647 - 1)"
        return str(v) if name == "i32" else f"{ct}({v})"
    value = _float_bits_to_value(int(text, 16), name) if text.startswith("0x") else float(text)
    if name == "f64" and not demote_f64:
        return soft_f64.constant(value)
    return float_literal(value, name)


@FAMILY.lowers("arith.constant")
def _constant(em: FunctionEmitter, op: Op) -> None:
    res = op.result
    value = str(op.attrs["value"]).strip()
    ty = elem_type(res)
    ct = em.ctype(ty)
    if value.startswith("dense<"):
        inner = value[len("dense<"):-1].strip()
        if inner.startswith("["):
            raise em.unsupported("non-splat dense tensor constants are not supported by the apple backend yet")
        lit = scalar_literal(inner.strip('"'), ty, em.ctx.demote_f64)
    else:
        lit = scalar_literal(value, ty, em.ctx.demote_f64)
    name = em.fresh(res.name)
    em.emit(f"const {ct} {name} = {lit};")
    em.scalar_or_splat(res, name, ct)


@FAMILY.lowers("ub.poison")
def _poison(em: FunctionEmitter, op: Op) -> None:
    # A poison value may be anything (it is undefined until something defined is chosen for it); zero is a
    # value of every type, so the kernel computes the same on every run and on every target.
    res = op.result
    ty = elem_type(res)
    ct = em.ctype(ty)
    name = em.fresh(res.name)
    if isinstance(ty, PointerType):  # `T*(0)` is not a C++ expression; the pointer itself stays assignable
        em.emit(f"{ct} const {name} = nullptr;")
    else:
        em.emit(f"const {ct} {name} = {ct}(0);")
    em.scalar_or_splat(res, name, ct)


@FAMILY.lowers("tt.make_range")
def _make_range(em: FunctionEmitter, op: Op) -> None:
    start = int(op.attrs.get("start", 0))
    out = em.declare(op.result)
    with em.for_regs(out.regs) as r:
        c = em.coord_expr(out.layout, 0, r)
        em.emit(f"{out.at(r)} = {start} + int({c});" if start else f"{out.at(r)} = int({c});")


@FAMILY.lowers("tt.splat")
def _splat(em: FunctionEmitter, op: Op) -> None:
    src = em.get(op.operands[0])
    lay = em.layout(op.result.type)
    em.bind(op.result, Lowered(src.name if not src.is_tensor else src.at(0), em.ctype(op.result.type),
                               lay.num_regs, True, lay))

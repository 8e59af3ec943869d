"""Lowering of `tt.print` (`tl.device_print`) and `tt.assert` (`tl.device_assert`).

Metal has no printf, so a kernel that prints or asserts gets one more buffer, `tt_debug`, after its
arguments. Each printed element (and each failing assertion) appends a record there through an atomic
cursor; the launcher decodes the records after the launch and prints them, or raises for assertions.
The record layout is defined in `abi/debug_buffer.py`, which both sides import. The formats (prefix, value
types, source line) travel in the kernel metadata.
"""
from __future__ import annotations

from typing import List

from ..abi.debug_buffer import BUFFER_WORDS, HEADER_WORDS
from ..ir import Op
from ..ir.types import TensorType
from .conversions import fp8_to_float
from .emitter import FunctionEmitter, elem_type
from .registry import OpFamily
from .shared_memory import index_expr, row_major_strides

FAMILY = OpFamily("debug")


def _value_words(em: FunctionEmitter, ty, expr: str) -> List[str]:
    """Two 32-bit words holding `expr`: float values as float bits (+0), integers sign/zero-extended."""
    name = ty.name
    if name == "f64":  # software float64: its bits
        return [f"uint({expr}.bits)", f"uint({expr}.bits >> 32)"]
    if name in ("f16", "bf16", "f32") or name.startswith("f8"):  # fp8: decoded from its byte
        return [f"as_type<uint>({fp8_to_float(em, ty, expr)})", "0u"]
    if name == "i1":
        return [f"uint({expr} ? 1 : 0)", "0u"]
    if name in ("i64", "index"):
        return [f"uint(ulong({expr}) & 0xFFFFFFFFul)", f"uint(ulong({expr}) >> 32)"]
    return [f"uint(int({expr}))", f"uint(int({expr}) >> 31)"]


def _emit_record(em: FunctionEmitter, fmt_id: int, index: str, words: List[str]) -> None:
    n = HEADER_WORDS + len(words)
    pos = em.temp("dbg_pos")
    cursor = em.target.device_atomic(em.target.atomic_type("uint"), "tt_debug")
    em.emit(f"const uint {pos} = {em.target.atomic_rmw('add', cursor, f'{n}u')} + 1u;")
    em.open(f"if ({pos} + {n}u <= {BUFFER_WORDS}u)")
    header = [str(n) + "u", f"{fmt_id}u", "tt_pid.x", "tt_pid.y", "tt_pid.z", f"uint({index})"]
    for i, w in enumerate(header + words):
        em.emit(f"tt_debug[{pos} + {i}u] = {w};")
    em.close()


def _for_each_owned_element(em: FunctionEmitter, values, body) -> None:
    """Call `body(r, index_expr)` once per element of the (common) layout of `values`, on its owner."""
    tensors = [v for v in values if isinstance(v.type, TensorType)]
    lay = em.layout(tensors[0].type) if tensors else None
    with em.owned_regs(lay) as r:
        body(r, index_expr(em, lay, r, row_major_strides(tensors[0].type.shape)) if tensors else "0")


@FAMILY.lowers("tt.print")
def _print(em: FunctionEmitter, op: Op) -> None:
    prefix = str(op.attrs.get("prefix", ""))
    signed = list(op.attrs.get("isSigned", []))
    shape = list(op.operands[0].type.shape) if op.operands and isinstance(op.operands[0].type, TensorType) else []
    fmt_id = em.ctx.add_debug_format({
        "kind": "print", "prefix": prefix, "hex": bool(op.attrs.get("hex", False)),
        "types": [elem_type(v).name for v in op.operands], "signed": signed, "shape": shape,
        "where": str(op.loc)
    })
    vals = [em.get(v) for v in op.operands]

    def body(r, index):
        words = []
        for v, low in zip(op.operands, vals):
            words += _value_words(em, elem_type(v), low.at(r))
        _emit_record(em, fmt_id, index, words)

    _for_each_owned_element(em, op.operands, body)


@FAMILY.lowers("tt.assert")
def _assert(em: FunctionEmitter, op: Op) -> None:
    message = str(op.attrs.get("message", "")) or "assertion failed"
    cond_v = op.operands[0]
    shape = list(cond_v.type.shape) if isinstance(cond_v.type, TensorType) else []
    fmt_id = em.ctx.add_debug_format({
        "kind": "assert", "prefix": message, "hex": False, "types": [], "signed": [], "shape": shape,
        "where": str(op.loc)
    })
    cond = em.get(cond_v)

    def body(r, index):
        em.open(f"if (!({cond.at(r)}))")
        _emit_record(em, fmt_id, index, [])
        em.close()

    _for_each_owned_element(em, [cond_v], body)

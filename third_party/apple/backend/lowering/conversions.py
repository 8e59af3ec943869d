"""Value conversions that several op families spell: fp8 bytes decoded to float (casts, dots, extern calls,
debug printing) and float to integer as Triton converts (casts, libdevice conversions); the fp8 formats."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..ir.types import Type
from .msl_types import unsigned_type

if TYPE_CHECKING:
    from .emitter import FunctionEmitter

# fp8 formats: (mantissa bits, exponent bias, largest finite value, NaN code, has infinities)
FP8_FORMATS = {"f8E5M2": (2, 15, "57344.0f", "uchar(0x7F)", True), "f8E4M3FN": (3, 7, "448.0f", "uchar(0x7F)", False)}

# The float bounds a signed integer of each width saturates at, and the integer limits themselves
_INT_LIMITS = {
    8: ("-128.0f", "128.0f", "char(-128)", "char(127)"),
    16: ("-32768.0f", "32768.0f", "short(-32768)", "short(32767)"),
    32: ("-2147483648.0f", "2147483648.0f", "int(-2147483647 - 1)", "int(2147483647)"),
    64: ("-9223372036854775808.0f", "9223372036854775808.0f", "long(-9223372036854775807L - 1)",
         "long(9223372036854775807L)"),
}
# The same for unsigned integers: (first float past the range, largest value)
_UINT_LIMITS = {8: ("256.0f", "uchar(255)"), 16: ("65536.0f", "ushort(65535)"), 32: ("4294967296.0f", "uint(~0u)"),
                64: ("18446744073709551616.0f", "ulong(~0ul)")}


def fp8_to_float(em: "FunctionEmitter", ty: Type, expr: str) -> str:
    """MSL float value of `expr`, an element of type `ty`: fp8 values (held as their byte) are decoded."""
    if ty.name not in FP8_FORMATS:
        return f"float({expr})"
    mbits, bias, _, _, has_inf = FP8_FORMATS[ty.name]
    return f"{em.ctx.require('tt_from_fp8')}({expr}, {mbits}u, {bias}, {'true' if has_inf else 'false'})"


def float_to_int(em: "FunctionEmitter", expr: str, dst: Type, signed: bool) -> str:
    """MSL of float `expr` converted to integer type `dst` as Triton converts: toward zero, saturating at the
    type's limits, NaN to 0."""
    ct, bits = em.ctype(dst), dst.bitwidth
    if signed:
        lo, hi, imin, imax = _INT_LIMITS[bits]
        return f"{em.ctx.require('tt_fptosi')}<{ct}>({expr}, {lo}, {hi}, {imin}, {imax})"
    hi, imax = _UINT_LIMITS[bits]
    return f"{ct}({em.ctx.require('tt_fptoui')}<{unsigned_type(dst)}>({expr}, {hi}, {imax}))"

"""MSL spellings of types: the MSL type of an IR type and the size of an MSL type (both from the kernel ABI's
scalar table, `abi/scalars.py`), and identifier hygiene (names MSL reserves, and the MSL name of a Triton
function). Sizes of IR types are the types' own (`ir.types`: `nbytes`), which passes read too."""
from __future__ import annotations

from ..errors import UnsupportedFeatureError
from ..ir.types import PointerType, ScalarType, TensorType, Type
from ..abi.scalars import ELEMENT_TYPES

# Identifiers the MSL compiler reserves (or that our prelude uses) and so cannot name a value.
_RESERVED = frozenset("""
alignas alignof and asm auto bool break case catch char class const constexpr continue default delete do double
else enum explicit extern false float for friend goto if inline int long mutable namespace new noexcept not nullptr
operator or private protected public register return short signed sizeof static struct switch template this
throw true try typedef typeid typename union unsigned using virtual void volatile while xor half bfloat uint uchar
ushort ulong kernel device threadgroup constant thread vertex fragment metal sampler texture array vec uniform
min max abs clamp select fma exp log sqrt sin cos tan pow isnan isinf signbit floor ceil round trunc
main object mesh visible size_t ptrdiff_t int8_t int16_t int32_t int64_t uint8_t uint16_t
uint32_t uint64_t float2 float3 float4 half2 half3 half4 int2 int3 int4 uint2 uint3 uint4 bool2 bool4 NAN INFINITY
""".split())


def is_reserved(name: str) -> bool:
    return name in _RESERVED


def msl_function_name(name: str) -> str:
    """A Triton function name as an MSL identifier: names MSL reserves (`kernel`, `half`, `main`, ...) and
    names in the backend's own `tt_` namespace get a trailing underscore."""
    if name in _RESERVED or name.startswith("tt_") or name.startswith("__"):
        return name.lstrip("_") + "_"
    return name


def msl_type(ty: Type, demote_f64: bool = False) -> str:
    """The MSL spelling of a scalar or pointer type (for tensors: of their element); float64 is the software
    `tt_double` (float with `demote_f64`). Raises UnsupportedFeatureError for types Metal lacks."""
    if isinstance(ty, TensorType):
        ty = ty.element
    if isinstance(ty, PointerType):
        if ty.pointee == ScalarType("f64") and demote_f64:
            raise UnsupportedFeatureError("float64 tensors are not supported with allow_fp64_demotion=True (it "
                                          "computes float64 values in float32, which cannot read or write float64 "
                                          "memory); drop the option to use software float64")
        if ty.pointee == ScalarType("f64"):  # software float64 lives in memory as its bits
            return "device ulong*"
        return f"device {msl_type(ty.pointee)}*"
    if isinstance(ty, ScalarType):
        if ty.name == "f64" and demote_f64:
            return "float"
        row = ELEMENT_TYPES.get(ty.name)
        if row is not None:
            return row.msl
    raise UnsupportedFeatureError(f"type {ty} has no Metal equivalent")


def unsigned_type(ty: Type) -> str:
    """The unsigned MSL type of the same width as integer type `ty` (arithmetic that must wrap uses it)."""
    return ELEMENT_TYPES[ty.scalar.name].msl_unsigned


_MSL_SIZES = {row.msl: row.nbytes for row in ELEMENT_TYPES.values()}


def msl_size(ctype: str) -> int:
    """Bytes of a value of MSL type `ctype` (pointers: 8)."""
    return 8 if ctype.endswith("*") else _MSL_SIZES[ctype]

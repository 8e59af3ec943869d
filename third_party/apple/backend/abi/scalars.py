"""Scalar types across the compile/launch boundary: the one table, and the one packer.

The table says, for every element type a kernel can have, how Triton's signatures spell it, how our IR
spells it, which MSL type holds it, its size, and which torch dtype stores it. The packer turns a Python
number into the bytes a kernel reads for a scalar parameter of an MSL type. Every launch path packs with
it: the Metal launch, the packed-scalars buffer of kernels over Metal's 31 buffer slots, the emulator's own
API; the emulator launcher's C fast path (`emulator/native/launcher.c`) packs the same bytes itself and
`test/abi` pins it to this module value by value.

The rules a value meets (one for every path):
- integers take the signed or the unsigned range of their width (Triton passes unsigned values in signed
  parameters), stored as the two's-complement bit pattern; `bool` takes 0, 1, False and True;
- floats are rounded once, to nearest even, from the Python float; a finite value that would round to
  infinity is refused (saying the largest finite value); infinities pass;
- a NaN keeps its sign and the leading bits of its payload, with the quiet bit set, as IEEE 754 recommends
  for narrowing conversions and as CPU and GPU conversion instructions do;
- float64 (`tt_double`, software binary64 in the kernel) is the 8 bytes of the Python float.
"""
from __future__ import annotations

import math
import operator
import struct
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple


class ScalarValueError(ValueError):
    """A value does not fit the scalar type it is passed as. The message says why; callers add which kernel
    and argument it was."""


@dataclass(frozen=True)
class MslScalar:
    """One MSL scalar type as a kernel parameter: its size, what values it takes and how they are stored."""
    name: str  # MSL spelling ("int", "bfloat", "tt_double")
    nbytes: int
    kind: str  # "bool" | "int" | "float"
    torch: str  # torch dtype name of the same values (Metal-mode tensors are of this dtype)
    largest: float = 0.0  # floats: the largest finite value

    @property
    def bits(self) -> int:
        return 8 * self.nbytes


_F32_MAX = struct.unpack("<f", struct.pack("<I", 0x7F7FFFFF))[0]
_BF16_MAX = struct.unpack("<f", struct.pack("<I", 0x7F7F0000))[0]

MSL_SCALARS: Dict[str, MslScalar] = {s.name: s for s in (
    MslScalar("bool", 1, "bool", "bool"),
    MslScalar("char", 1, "int", "int8"),
    MslScalar("uchar", 1, "int", "uint8"),
    MslScalar("short", 2, "int", "int16"),
    MslScalar("ushort", 2, "int", "uint16"),
    MslScalar("int", 4, "int", "int32"),
    MslScalar("uint", 4, "int", "uint32"),
    MslScalar("long", 8, "int", "int64"),
    MslScalar("ulong", 8, "int", "uint64"),
    MslScalar("half", 2, "float", "float16", 65504.0),
    MslScalar("bfloat", 2, "float", "bfloat16", _BF16_MAX),
    MslScalar("float", 4, "float", "float32", _F32_MAX),
    # software IEEE binary64 (lowering/soft_f64.py): a struct of the 64 bits; Metal has no double
    MslScalar("tt_double", 8, "float", "float64", 1.7976931348623157e308),
)}

# Other spellings of the MSL scalar types (C's, and the `<stdint.h>` names MSL accepts)
MSL_ALIASES: Dict[str, str] = {
    "int8_t": "char", "uint8_t": "uchar", "int16_t": "short", "uint16_t": "ushort", "int32_t": "int",
    "uint32_t": "uint", "int64_t": "long", "uint64_t": "ulong", "size_t": "ulong", "ptrdiff_t": "long",
    "signed char": "char", "unsigned char": "uchar", "unsigned short": "ushort", "unsigned int": "uint",
    "unsigned": "uint", "unsigned long": "ulong",
}


@dataclass(frozen=True)
class ElementType:
    """One element type of our IR. `ir` is its MLIR spelling (signless for integers), `msl` the MSL type that
    holds it (fp8 travels as its byte), `msl_unsigned` the MSL type integer arithmetic wraps in, `signature`
    Triton's spellings of it in a kernel signature (`"*fp32"` without the star), `torch` the torch dtype of a
    tensor of it."""
    ir: str
    msl: str
    nbytes: int
    torch: str
    signature: Tuple[str, ...] = ()
    msl_unsigned: Optional[str] = None


ELEMENT_TYPES: Dict[str, ElementType] = {e.ir: e for e in (
    ElementType("i1", "bool", 1, "bool", ("i1", "u1"), "bool"),
    ElementType("i8", "char", 1, "int8", ("i8", "u8"), "uchar"),
    ElementType("i16", "short", 2, "int16", ("i16", "u16"), "ushort"),
    ElementType("i32", "int", 4, "int32", ("i32", "u32"), "uint"),
    ElementType("i64", "long", 8, "int64", ("i64", "u64"), "ulong"),
    ElementType("index", "long", 8, "int64", (), "ulong"),
    ElementType("f16", "half", 2, "float16", ("fp16",)),
    ElementType("bf16", "bfloat", 2, "bfloat16", ("bf16",)),
    ElementType("f32", "float", 4, "float32", ("fp32",)),
    ElementType("f64", "tt_double", 8, "float64", ("fp64",)),
    ElementType("f8E4M3FN", "uchar", 1, "uint8", ("fp8e4nv",)),
    ElementType("f8E5M2", "uchar", 1, "uint8", ("fp8e5",)),
)}

# Triton's signature spelling ("fp32", "u16") -> our IR's element type
SIGNATURE_TO_IR: Dict[str, str] = {sig: e.ir for e in ELEMENT_TYPES.values() for sig in e.signature}


def msl_scalar(name: str) -> MslScalar:
    """The MSL scalar type spelled `name` (aliases and Triton signature spellings accepted); KeyError if none."""
    name = " ".join(name.split())
    name = MSL_ALIASES.get(name, name)
    if name in MSL_SCALARS:
        return MSL_SCALARS[name]
    if name in SIGNATURE_TO_IR:
        return MSL_SCALARS[ELEMENT_TYPES[SIGNATURE_TO_IR[name]].msl]
    if name in ELEMENT_TYPES:
        return MSL_SCALARS[ELEMENT_TYPES[name].msl]
    raise KeyError(name)


def msl_of_signature(ty: str) -> str:
    """The MSL type of a kernel argument given Triton's signature spelling (`"*fp32"` -> a device pointer)."""
    if ty.startswith("*"):
        return "device void*"
    row = ELEMENT_TYPES.get(SIGNATURE_TO_IR.get(ty, ""))
    return row.msl if row else ty


# ------------------------------------------------------------------------------------------------
# The packer


def _integer(value: Any) -> int:
    if isinstance(value, bool) or isinstance(value, int):
        return int(value)
    if isinstance(value, float) or not hasattr(value, "__index__"):
        raise ScalarValueError(f"expects an integer, got {type(value).__name__}")
    return operator.index(value)


def _real(value: Any) -> float:
    if isinstance(value, (int, float)):
        try:
            return float(value)
        except OverflowError:
            raise ScalarValueError(f"an integer of {len(str(abs(value)))} digits is too large for a float") from None
    if isinstance(value, (str, bytes)) or not hasattr(value, "__float__"):
        raise ScalarValueError(f"expects a float, got {type(value).__name__}")
    return float(value)


def _nan_bits(x: float, exp_bits: int, mant_bits: int) -> int:
    """A NaN narrowed from a double: sign, all-ones exponent, the leading `mant_bits` bits of the payload,
    quiet bit set."""
    d = struct.unpack("<Q", struct.pack("<d", x))[0]
    sign = d >> 63
    payload = (d & ((1 << 52) - 1)) >> (52 - mant_bits)
    return (sign << (exp_bits + mant_bits)) | (((1 << exp_bits) - 1) << mant_bits) | payload | (1 << (mant_bits - 1))


def _bfloat_bits(x: float) -> Optional[int]:
    """The bfloat nearest to finite `x` (ties to even), as bits; None when that is infinity."""
    sign = 0x8000 if math.copysign(1.0, x) < 0 else 0
    a = abs(x)
    if a == 0.0:
        return sign
    _, e = math.frexp(a)  # a = m * 2**e with 0.5 <= m < 1
    # bfloat has 8 significant bits; below 2**-126 its values are multiples of the subnormal step 2**-133
    shift = max(e - 8, -133)
    rounded = math.ldexp(round(math.ldexp(a, -shift)), shift)  # exact scalings; round() ties to even
    if rounded > _BF16_MAX:
        return None
    return sign | struct.unpack("<I", struct.pack("<f", rounded))[0] >> 16


def pack(msl: str, value: Any) -> bytes:
    """The little-endian bytes a kernel reads for `value` passed as MSL scalar type `msl` (see the module's
    rules). Raises ScalarValueError saying why a value does not fit; KeyError for an unknown type."""
    t = msl_scalar(msl)
    if t.kind == "bool":
        if isinstance(value, float) or not (isinstance(value, int) or hasattr(value, "__index__")):
            raise ScalarValueError(f"expects a bool, got {type(value).__name__}")
        v = operator.index(value)
        if v not in (0, 1):
            raise ScalarValueError(f"{v} is not a bool (0 or 1)")
        return bytes([v])
    if t.kind == "int":
        v = _integer(value)
        lo, hi = -(1 << (t.bits - 1)), (1 << t.bits) - 1
        if not lo <= v <= hi:
            raise ScalarValueError(f"{v} does not fit in {t.name} ({t.bits} bits: {lo} to {hi}, values above "
                                   f"{(1 << (t.bits - 1)) - 1} as their two's-complement bit pattern)")
        return (v & hi).to_bytes(t.nbytes, "little")
    x = _real(value)
    if t.name == "tt_double":
        return struct.pack("<d", x)
    if math.isnan(x):
        exp_bits, mant_bits = {"half": (5, 10), "bfloat": (8, 7), "float": (8, 23)}[t.name]
        return _nan_bits(x, exp_bits, mant_bits).to_bytes(t.nbytes, "little")
    overflow = ScalarValueError(f"{x!r} does not fit in {t.name} (largest finite value {t.largest:.8g}); it would "
                                "become infinity")
    if t.name == "bfloat":
        if math.isinf(x):
            return struct.pack("<H", 0xFF80 if x < 0 else 0x7F80)
        bits = _bfloat_bits(x)
        if bits is None:
            raise overflow
        return struct.pack("<H", bits)
    try:  # struct rounds once from the double to nearest even, and refuses what would become infinity
        return struct.pack("<e" if t.name == "half" else "<f", x)
    except OverflowError:
        raise overflow from None


def unpack(msl: str, data: bytes) -> Any:
    """The Python value of the bytes of one MSL scalar (for reports and tests)."""
    t = msl_scalar(msl)
    if t.kind == "bool":
        return bool(data[0])
    if t.kind == "int":
        return int.from_bytes(data[:t.nbytes], "little", signed=not t.name.startswith("u"))
    if t.name == "bfloat":
        return struct.unpack("<f", b"\0\0" + data[:2])[0]
    return struct.unpack({"half": "<e", "float": "<f", "tt_double": "<d"}[t.name], data[:t.nbytes])[0]

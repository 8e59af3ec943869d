"""Facts about the Apple GPU target, in one place: limits, GPU families and their features, and the table
of scalar types across Triton's signatures, our IR, MSL and torch.

Sources: Apple's Metal feature set tables and the Metal Shading Language specification (limits, which
family has which feature); everything else in the backend asks this module instead of spelling a number.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional

# -- limits (Metal feature set tables, every Apple-silicon family) ---------------------------------------
SIMD_WIDTH = 32  # threads per simdgroup: Triton's warp
MAX_THREADGROUP_MEMORY = 32 * 1024  # bytes of threadgroup memory per threadgroup
MAX_THREADS_PER_THREADGROUP = 1024
MAX_WARPS = MAX_THREADS_PER_THREADGROUP // SIMD_WIDTH
MAX_BUFFER_SLOTS = 31  # [[buffer(0..30)]]


@dataclass(frozen=True)
class Family:
    """One Apple GPU family and what differs between families."""
    name: str
    chips: str
    native_bfloat: bool  # bfloat arithmetic in hardware (MSL 3.1 type on every family; emulated on M1)
    atomic_ulong_min_max: bool  # 64-bit atomic min/max on device memory (MSL 2.4, Apple9)


FAMILIES: Dict[str, Family] = {
    "apple7": Family("apple7", "M1", native_bfloat=False, atomic_ulong_min_max=False),
    "apple8": Family("apple8", "M2", native_bfloat=True, atomic_ulong_min_max=False),
    "apple9": Family("apple9", "M3, M4", native_bfloat=True, atomic_ulong_min_max=True),
}
DEFAULT_FAMILY = "apple7"


def family(name: str) -> Family:
    try:
        return FAMILIES[name]
    except KeyError:
        raise ValueError(f"apple backend: unknown GPU family {name!r}; expected one of {tuple(FAMILIES)}") from None


# -- scalar types --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scalar:
    """One element type. `ir` is its MLIR spelling (signless for integers), `msl` the MSL type that holds
    it (fp8 travels as its byte), `msl_unsigned` the MSL type integer arithmetic wraps in, `torch` the
    torch dtype a one-element tensor of it has."""
    ir: str
    msl: str
    nbytes: int
    torch: str
    msl_unsigned: Optional[str] = None
    is_float: bool = False


_TABLE = (
    Scalar("i1", "bool", 1, "bool", "bool"),
    Scalar("i8", "char", 1, "int8", "uchar"),
    Scalar("i16", "short", 2, "int16", "ushort"),
    Scalar("i32", "int", 4, "int32", "uint"),
    Scalar("i64", "long", 8, "int64", "ulong"),
    Scalar("index", "long", 8, "int64", "ulong"),
    Scalar("f16", "half", 2, "float16", is_float=True),
    Scalar("bf16", "bfloat", 2, "bfloat16", is_float=True),
    Scalar("f32", "float", 4, "float32", is_float=True),
    Scalar("f8E4M3FN", "uchar", 1, "uint8", is_float=True),
    Scalar("f8E5M2", "uchar", 1, "uint8", is_float=True),
)
SCALARS: Dict[str, Scalar] = {s.ir: s for s in _TABLE}

# Triton's signature spelling (`"*fp32"`, `"u16"`) -> our IR's element type. Unsigned integers are signless
# in the IR; the kernel reads them through the same-width MSL type.
SIGNATURE_TO_IR: Dict[str, str] = {
    "i1": "i1", "u1": "i1", "i8": "i8", "u8": "i8", "i16": "i16", "u16": "i16", "i32": "i32", "u32": "i32",
    "i64": "i64", "u64": "i64", "fp16": "f16", "bf16": "bf16", "fp32": "f32", "fp64": "f64", "fp8e5": "f8E5M2",
    "fp8e4nv": "f8E4M3FN"
}

# MSL value type -> torch dtype name, for scalars bound as one-element tensors on Metal.
MSL_TO_TORCH: Dict[str, str] = {
    "bool": "bool", "char": "int8", "short": "int16", "int": "int32", "long": "int64", "uchar": "uint8",
    "ushort": "uint16", "uint": "uint32", "ulong": "uint64", "half": "float16", "bfloat": "bfloat16",
    "float": "float32"
}


def scalar(ir_name: str) -> Optional[Scalar]:
    """The table row of an IR element type, or None (float64 and other types Metal lacks)."""
    return SCALARS.get(ir_name)


def msl_of_signature(ty: str) -> str:
    """The MSL type of a kernel argument given Triton's signature spelling (`"*fp32"` -> a device pointer)."""
    if ty.startswith("*"):
        return "device void*"
    row = SCALARS.get(SIGNATURE_TO_IR.get(ty, ""))
    return row.msl if row else ty

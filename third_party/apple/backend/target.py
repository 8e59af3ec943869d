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
    """One Apple GPU family and what differs between families.

    The device properties Triton's tools read (`driver.active.utils.get_device_properties`) come from here
    where Metal has no query for them. Apple publishes none of these figures; each names where it comes from:
    - `gpu_cores`: GPU cores of the family's base chip (Apple's product pages); a Mac reports its own count.
    - `regs_per_core`: 32-bit registers of one GPU core's register file, a lower bound measured by Asahi
      Linux's reverse engineering of the M1 GPU (A. Rosenzweig, 2021: at least 208 KiB per core; up to
      128 registers per thread). Not measured for later families, which are assumed to have no fewer.
    - `gpu_clock_mhz`: the base chip's peak GPU clock. Apple states FP32 TFLOPS = cores x 128 lanes x 2 x
      clock (M1 2.6, M2 3.6); the MHz are those P. Turner's metal-benchmarks reports (M1 1278, M2 1398);
      M3's is the commonly reported figure, not one we measured.
    - `mem_clock_mhz`, `mem_bus_bits`: the base chip's LPDDR I/O clock (half the transfer rate) and bus
      width (M1 LPDDR4X-4266: 2 x 2133 MHz x 128 bits / 8 = 68.25 GB/s, Apple's figure; M2, M3 LPDDR5-6400:
      102.4 GB/s, which Apple rounds to 100).
    """
    name: str
    chips: str
    native_bfloat: bool  # bfloat arithmetic in hardware (MSL 3.1 type on every family; emulated on M1)
    atomic_ulong_min_max: bool  # 64-bit atomic min/max on device memory (MSL 2.4, Apple9)
    gpu_cores: int = 8
    regs_per_core: int = 208 * 1024 // 4
    gpu_clock_mhz: int = 1278
    mem_clock_mhz: int = 2133
    mem_bus_bits: int = 128


FAMILIES: Dict[str, Family] = {
    "apple7": Family("apple7", "M1", native_bfloat=False, atomic_ulong_min_max=False, gpu_cores=8,
                     gpu_clock_mhz=1278, mem_clock_mhz=2133, mem_bus_bits=128),  # LPDDR4X-4266
    "apple8": Family("apple8", "M2", native_bfloat=True, atomic_ulong_min_max=False, gpu_cores=10,
                     gpu_clock_mhz=1398, mem_clock_mhz=3200, mem_bus_bits=128),  # LPDDR5-6400
    "apple9": Family("apple9", "M3, M4", native_bfloat=True, atomic_ulong_min_max=True, gpu_cores=10,
                     gpu_clock_mhz=1380, mem_clock_mhz=3200, mem_bus_bits=128),  # M3: LPDDR5-6400
}
# Registers one thread can address (Asahi Linux: 128 32-bit registers, i.e. 256 16-bit halves).
MAX_REGS_PER_THREAD = 128
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
    # float64: software IEEE binary64 (lowering/soft_f64.py); Metal has no double
    Scalar("f64", "tt_double", 8, "float64", is_float=True),
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
    "float": "float32", "tt_double": "float64"
}


def scalar(ir_name: str) -> Optional[Scalar]:
    """The table row of an IR element type, or None (types Metal lacks)."""
    return SCALARS.get(ir_name)


def msl_of_signature(ty: str) -> str:
    """The MSL type of a kernel argument given Triton's signature spelling (`"*fp32"` -> a device pointer)."""
    if ty.startswith("*"):
        return "device void*"
    row = SCALARS.get(SIGNATURE_TO_IR.get(ty, ""))
    return row.msl if row else ty

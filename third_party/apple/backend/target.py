"""Facts about the Apple GPU target, in one place: limits, GPU families and their features, and how many
threads a threadgroup of `num_warps` simdgroups has. (How scalar types cross the compile/launch boundary is
the kernel ABI's: `abi/scalars.py`.)

Sources: Apple's Metal feature set tables and the Metal Shading Language specification (limits, which
family has which feature); everything else in the backend asks this module instead of spelling a number.
"""
from __future__ import annotations

import platform
from dataclasses import dataclass
from typing import Dict

from . import knobs

# -- limits (Metal feature set tables, every Apple-silicon family) ---------------------------------------
SIMD_WIDTH = 32  # threads per simdgroup: Triton's warp
MAX_THREADGROUP_MEMORY = 32 * 1024  # bytes of threadgroup memory per threadgroup
MAX_THREADS_PER_THREADGROUP = 1024
MAX_WARPS = MAX_THREADS_PER_THREADGROUP // SIMD_WIDTH
MAX_BUFFER_SLOTS = 31  # [[buffer(0..30)]]
# Threadgroup memory banking. Apple publishes neither the number of banks nor their width. These are the parameters
# public Metal kernels are written against: 32 banks of 4-byte words, a 128-byte row per cycle (MLX's steel GEMM, for
# one, pads its threadgroup tiles by 4 floats per row so that column reads spread over the banks; Philip Turner's
# "metal-benchmarks" (github.com/philipturner/metal-benchmarks) documents the M1 core's threadgroup memory size, not
# its banking). The emulator's profiler measures conflicts under this model and the lowering pads the buffers layout
# conversions go through for it (lowering/scratch_padding.py). A bank-conflict microbenchmark on a Mac (strided
# 4-byte reads by one simdgroup: the stride at which time doubles) would correct it here.
THREADGROUP_BANKS = {"banks": 32, "bank_bytes": 4}
# Threads of a dispatch per grid dimension: MSL's grid positions and sizes (`thread_position_in_grid`,
# `threads_per_grid`, `threadgroup_position_in_grid`) are 32-bit `uint`s, so a larger dispatch cannot be numbered.
MAX_GRID_THREADS = (1 << 32) - 1


def dispatch_threads(grid, num_threads: int):
    """Threads per grid dimension of a launch of `grid` threadgroups of `num_threads` threads (x, y, z): what
    `dispatchThreads` is given on a Mac. Triton's program ids are the threadgroups' positions."""
    return (grid[0] * num_threads, grid[1], grid[2])


def threads_per_threadgroup(num_warps: int) -> int:
    """Threads of a kernel's threadgroup: Triton's warps are Metal's simdgroups."""
    return num_warps * SIMD_WIDTH


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
    base_chip: str  # the chip the figures below are those of (host.PEAK_GBPS's name for it)
    # 64-bit atomic min/max on device memory (MSL 2.4, specification 6.15.4.6; the Metal feature set tables give
    # Apple9, and Apple8 GPUs in Macs in part: only Apple9 is assumed). The lowering emits them and the emulator's
    # compat header accepts them only where this is true.
    atomic_ulong_min_max: bool
    gpu_cores: int = 8
    regs_per_core: int = 208 * 1024 // 4
    gpu_clock_mhz: int = 1278
    mem_clock_mhz: int = 2133
    mem_bus_bits: int = 128

    @property
    def peak_fp32_flops(self) -> float:
        """The base chip's peak FP32 FLOP/s, by Apple's formula above."""
        return self.gpu_cores * 128 * 2 * self.gpu_clock_mhz * 1e6


# GPU families by name (apple7: M1, apple8: M2, apple9: M3 and M4)
GPU_FAMILIES: Dict[str, Family] = {
    "apple7": Family("apple7", "M1", atomic_ulong_min_max=False, gpu_cores=8,
                     gpu_clock_mhz=1278, mem_clock_mhz=2133, mem_bus_bits=128),  # LPDDR4X-4266
    "apple8": Family("apple8", "M2", atomic_ulong_min_max=False, gpu_cores=10,
                     gpu_clock_mhz=1398, mem_clock_mhz=3200, mem_bus_bits=128),  # LPDDR5-6400
    "apple9": Family("apple9", "M3", atomic_ulong_min_max=True, gpu_cores=10,
                     gpu_clock_mhz=1380, mem_clock_mhz=3200, mem_bus_bits=128),  # M3: LPDDR5-6400
}
# Registers one thread can address (Asahi Linux: 128 32-bit registers, i.e. 256 16-bit halves).
MAX_REGS_PER_THREAD = 128
DEFAULT_FAMILY = "apple7"


@dataclass(frozen=True)
class MslVersion:
    """One Metal Shading Language version the backend can compile for (MSL specification 1.6.10 lists the
    `-std=` values and the OS each belongs to; 1.6.2 defines `__METAL_VERSION__`)."""
    name: str  # "3.1"
    number: int  # what `__METAL_VERSION__` is at this version (Major Minor Patch: 3.1 -> 310)
    macos: int  # the macOS release whose Metal compiler has it as newest version

    @property
    def std(self) -> str:
        """The offline compiler's `-std=` value (`xcrun metal -std=metal3.1`)."""
        return f"metal{self.name}"

    @property
    def needs(self) -> str:
        """How a refusal names what a feature needs: "MSL 3.2 (macOS 15)"."""
        return f"MSL {self.name} (macOS {self.macos})"


# The MSL versions kernels are compiled for, oldest first. PyTorch's `torch.mps.compile_shader` compiles at the
# newest version of the running macOS (14: 3.1, 15: 3.2, 26: 4.0; older PyTorch releases pinned 3.1 on every
# macOS from 14): the emitted source guards what needs more than its oldest version with `__METAL_VERSION__`.
MSL_VERSIONS: Dict[str, MslVersion] = {v.name: v for v in (MslVersion("3.1", 310, 14), MslVersion("3.2", 320, 15),
                                                           MslVersion("4.0", 400, 26))}
# bfloat (MSL 3.1, macOS 14) is the newest feature every kernel may use: nothing older is supported.
OLDEST_MSL_VERSION = "3.1"
# The version compiled for off a Mac (the emulator): macOS 15's, the first with device-scope fences.
DEFAULT_MSL_VERSION = "3.2"


def msl_version(name: str) -> MslVersion:
    try:
        return MSL_VERSIONS[name]
    except KeyError:
        raise ValueError(f"apple backend: unknown MSL version {name!r}; expected one of {tuple(MSL_VERSIONS)}") \
            from None


def msl_version_of_macos(release: str) -> str:
    """The MSL version the Metal compiler of macOS `release` ("14.6", "15.1", "26.0") compiles at by default."""
    try:
        major = int(release.split(".")[0])
    except ValueError:
        return DEFAULT_MSL_VERSION
    chosen = OLDEST_MSL_VERSION
    for v in MSL_VERSIONS.values():
        if v.macos <= major:
            chosen = v.name
    return chosen


def default_msl_version() -> str:
    """TRITON_APPLE_MSL_VERSION, else the running macOS's own version, else DEFAULT_MSL_VERSION (off a Mac)."""
    chosen = knobs.msl_version.get()
    if chosen:
        return chosen
    release = platform.mac_ver()[0] if platform.system() == "Darwin" else ""
    return msl_version_of_macos(release) if release else DEFAULT_MSL_VERSION


def family(name: str) -> Family:
    try:
        return GPU_FAMILIES[name]
    except KeyError:
        raise ValueError(f"apple backend: unknown GPU family {name!r}; expected one of {tuple(GPU_FAMILIES)}") from None

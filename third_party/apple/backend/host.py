"""Facts about the machine this process runs on: whether PyTorch's MPS device is there, which Apple chip and
GPU family it has and how many GPU cores, and the family kernels are compiled for by default. The compiler and
the driver both ask here (the driver decides where kernels run; the compiler which family they target).

It also holds the one table of Apple chips' peak DRAM (unified memory) bandwidth (`PEAK_GBPS`), which the device
properties (`mem_bus_width`), the self-check and the benchmarks divide by. These are the vendor's peak figures,
not something a kernel can reach. Where a chip was sold with two memory configurations (M3 Max, M4 Max) the GPU
core count tells them apart.

Sources (as retrieved for this table):
  M1         no bandwidth in Apple's M1 announcement; 68.25 GB/s is LPDDR4X-4266 on a 128-bit bus
             (4266 MT/s x 16 bytes), which Apple's M2 announcement confirms indirectly: "100GB/s ... 50
             percent more than M1" (MacRumors, 2022-06-06, macrumors.com/2022/06/06/apple-announces-m2-chip-
             with-support-for-up-to-24gb-memory/)
  M1 Pro/Max Apple, 2021-10-18 ("M1 Pro offers up to 200GB/s", "M1 Max delivers up to 400GB/s"), as
             reported by mybroadband.co.za/news/hardware/418862-apple-m1-pro-and-m1-max-new-chips-powering-
             the-macbook-pro.html
  M1 Ultra   Apple, 2022-03-08 ("up to 800GB per second"), lifewiress.pages.dev/posts/apple-s-m1-ultra-chip-
             boasts-even-better-performance
  M2         MacRumors 2022-06-06 (above): 100GB/s
  M2 Pro/Max MacRumors 2023-10-31, macrumors.com/2023/10/31/apple-m3-pro-less-memory-bandwidth/ (M2 Pro
             200GB/s; M2 Max 400GB/s in both GPU configurations)
  M2 Ultra   Apple WWDC 2023 ("800 GB/s"), blog.patti.tech/2023/06/05/as-rumored-the-mac-studio-gets-an-
             m2-refresh-including-fused-together-m2-ultra (Ars Technica)
  M3 family  MacRumors 2023-10-31 (above): M3 Pro 150GB/s; M3 Max 300GB/s (30-core GPU) or 400GB/s (40-core
             GPU); M3 100GB/s per abachy.com/news/apples-m3-series-chips-enhanced-performance-and-advanced-gpus
  M3 Ultra   Apple, 2025-03-05 ("819GB/s"), techpowerup.com/news-tags/Mac%20Studio
  M4 family  Apple, 2024-10-30: M4 Pro 273GB/s, M4 Max up to 546GB/s (macrumors.com/2024/10/30/apple-
             announces-m4-max-chip/, techmoran.com/2024/10/31/apple-unveils-its-most-powerful-chips-the-m4-
             pro-and-m4-max/); M4 120GB/s and M4 Max 410GB/s with the 32-core GPU are Apple's spec-sheet
             figures for those configurations (not re-checked here)
  M5         Apple, 2025-10-15: 153GB/s (dig.watch/updates/apple-launches-m5-with-bigger-ai-gains)
Chips not listed (M5 Pro/Max, ...) print "unknown" rather than a guess.
"""
from __future__ import annotations

import functools
import platform
from typing import Dict, Optional, Tuple

from . import knobs
from .target import DEFAULT_FAMILY


def mps_available() -> bool:
    if platform.system() != "Darwin":
        return False
    try:
        import torch
        return bool(torch.backends.mps.is_available())
    except ImportError:
        return False


def default_family() -> str:
    """TRITON_APPLE_FAMILY, else the Mac's own family, else apple7 (the emulator's default)."""
    return knobs.family.get() or (mac_family() if mps_available() else None) or DEFAULT_FAMILY


@functools.lru_cache(None)
def mac_family() -> Optional[str]:  # pragma: no cover - needs a Mac
    """The family of this Mac's GPU from its chip name ("Apple M2 Pro" -> apple8); None if unknown."""
    brand = _sysctl("machdep.cpu.brand_string")
    for chip, fam in (("M1", "apple7"), ("M2", "apple8"), ("M3", "apple9"), ("M4", "apple9")):
        if f"Apple {chip}" in brand:
            return fam
    return "apple9" if "Apple M" in brand else None  # a newer chip has at least Apple9's features


@functools.lru_cache(None)
def mac_chip() -> Optional[str]:  # pragma: no cover - needs a Mac
    """This Mac's chip as Apple names it ("M2 Pro", "M1"), from the CPU brand string ("Apple M2 Pro",
    "Apple M1 (Virtual)"); None off a Mac or for a brand string that names no M-series chip."""
    if platform.system() != "Darwin":
        return None
    import re
    m = re.search(r"\b(M\d+)(?: (Pro|Max|Ultra))?\b", _sysctl("machdep.cpu.brand_string"))
    return " ".join(part for part in m.groups() if part) if m else None


def _sysctl(name: str) -> str:  # pragma: no cover - needs a Mac
    import subprocess
    try:
        return subprocess.run(["sysctl", "-n", name], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def mps_gpu_cores() -> Optional[int]:
    """GPU cores of the MPS device as PyTorch reports them (`torch.backends.mps.get_core_count()`, the Metal
    device's core count), else the I/O registry's (`mac_gpu_cores`); None where neither answers."""
    try:
        import torch
        cores = int(torch.backends.mps.get_core_count())
        if cores > 0:
            return cores
    except (ImportError, AttributeError, RuntimeError, TypeError, ValueError):  # no MPS build, no device
        pass
    return mac_gpu_cores()


@functools.lru_cache(None)
def mac_gpu_cores() -> Optional[int]:  # pragma: no cover - needs a Mac
    """GPU cores of this Mac (`gpu-core-count` of the AGX accelerator in the I/O registry), None if unknown."""
    import re
    import subprocess
    try:
        out = subprocess.run(["ioreg", "-rd1", "-c", "AGXAccelerator"], capture_output=True, text=True,
                             timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r'"gpu-core-count"\s*=\s*(\d+)', out)
    return int(m.group(1)) if m else None


# chip -> peak GB/s, or {GPU core count: GB/s} where two memory configurations exist
PEAK_GBPS: Dict[str, object] = {
    "M1": 68.25, "M1 Pro": 200.0, "M1 Max": 400.0, "M1 Ultra": 800.0,
    "M2": 100.0, "M2 Pro": 200.0, "M2 Max": 400.0, "M2 Ultra": 800.0,
    "M3": 100.0, "M3 Pro": 150.0, "M3 Max": {30: 300.0, 40: 400.0}, "M3 Ultra": 819.0,
    "M4": 120.0, "M4 Pro": 273.0, "M4 Max": {32: 410.0, 40: 546.0},
    "M5": 153.0,
}


def peak_bandwidth(chip: Optional[str], gpu_cores: Optional[int]) -> Tuple[Optional[float], str]:
    """(peak GB/s or None, how it was chosen)."""
    if chip is None:
        return None, "not a Mac"
    entry = PEAK_GBPS.get(chip)
    if entry is None:
        return None, f"{chip}: not in the chip table (backend/host.py)"
    if isinstance(entry, dict):
        if gpu_cores in entry:
            return entry[gpu_cores], f"{chip}, {gpu_cores}-core GPU"
        best = max(entry.values())
        return best, f"{chip}, GPU core count {gpu_cores} not in the table: the higher figure"
    return float(entry), chip


def mac_peak_bandwidth() -> Tuple[Optional[float], str]:
    """(peak GB/s of this Mac's chip or None, how it was chosen)."""
    chip = mac_chip()
    return peak_bandwidth(chip, mac_gpu_cores() if chip else None)

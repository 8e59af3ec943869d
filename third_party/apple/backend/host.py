"""Facts about the machine this process runs on: whether PyTorch's MPS device is there, which Apple chip and
GPU family it has and how many GPU cores, and the family kernels are compiled for by default. The compiler and
the driver both ask here (the driver decides where kernels run; the compiler which family they target)."""
from __future__ import annotations

import functools
import platform
from typing import Optional

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

"""Peak DRAM (unified memory) bandwidth of Apple silicon chips, and the figure for this Mac.

Which chip this is, and its GPU core count, the backend knows (`triton.backends.apple.host`).
bench/device_bench.py divides measured GB/s by these numbers. They are the vendor's peak figures, not
something a kernel can reach: a streaming kernel on Apple GPUs typically gets a good part of it, and what it
gets is the point of the comparison.

The table itself, with its sources, lives in the backend (`triton.backends.apple.host.PEAK_GBPS`), which the
device properties and the self-check read too; this module is the benchmarks' view of it.
"""
from __future__ import annotations

from typing import Optional, Tuple

from triton.backends.apple.host import PEAK_GBPS, peak_bandwidth  # noqa: F401 (the one chip table)


def detect() -> Tuple[Optional[str], Optional[int], str]:
    """(chip such as "M2 Pro" or None, GPU core count or None, a label for the report: "Apple M2 Pro" or "")."""
    from triton.backends.apple import host
    chip = host.mac_chip()
    if chip is None:
        return None, None, ""
    return chip, host.mac_gpu_cores(), f"Apple {chip}"


if __name__ == "__main__":  # python -m bench.apple_chips: what this machine reports
    c, n, b = detect()
    print(b or "not a Mac", "->", c, n, peak_bandwidth(c, n))

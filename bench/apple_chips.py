"""Peak DRAM (unified memory) bandwidth of Apple silicon chips, with sources, and the figure for this Mac.

Which chip this is, and its GPU core count, the backend knows (`triton.backends.apple.host`); this table is
only the benchmarks' business. bench/device_bench.py divides measured GB/s by these numbers. They are the
vendor's peak figures, not something a kernel can reach: a streaming kernel on Apple GPUs typically gets a
good part of it, and what it gets is the point of the comparison. Where a chip was sold with two memory
configurations (M3 Max, M4 Max) the GPU core count tells them apart.

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

from typing import Dict, Optional, Tuple

# chip -> peak GB/s, or {GPU core count: GB/s} where two memory configurations exist
PEAK_GBPS: Dict[str, object] = {
    "M1": 68.25, "M1 Pro": 200.0, "M1 Max": 400.0, "M1 Ultra": 800.0,
    "M2": 100.0, "M2 Pro": 200.0, "M2 Max": 400.0, "M2 Ultra": 800.0,
    "M3": 100.0, "M3 Pro": 150.0, "M3 Max": {30: 300.0, 40: 400.0}, "M3 Ultra": 819.0,
    "M4": 120.0, "M4 Pro": 273.0, "M4 Max": {32: 410.0, 40: 546.0},
    "M5": 153.0,
}


def detect() -> Tuple[Optional[str], Optional[int], str]:
    """(chip such as "M2 Pro" or None, GPU core count or None, a label for the report: "Apple M2 Pro" or "")."""
    from triton.backends.apple import host
    chip = host.mac_chip()
    if chip is None:
        return None, None, ""
    return chip, host.mac_gpu_cores(), f"Apple {chip}"


def peak_bandwidth(chip: Optional[str], gpu_cores: Optional[int]) -> Tuple[Optional[float], str]:
    """(peak GB/s or None, how it was chosen)."""
    if chip is None:
        return None, "not a Mac"
    entry = PEAK_GBPS.get(chip)
    if entry is None:
        return None, f"{chip}: not in bench/apple_chips.py"
    if isinstance(entry, dict):
        if gpu_cores in entry:
            return entry[gpu_cores], f"{chip}, {gpu_cores}-core GPU"
        best = max(entry.values())
        return best, f"{chip}, GPU core count {gpu_cores} not in the table: the higher figure"
    return float(entry), chip


if __name__ == "__main__":  # python -m bench.apple_chips: what this machine reports
    c, n, b = detect()
    print(b or "not a Mac", "->", c, n, peak_bandwidth(c, n))

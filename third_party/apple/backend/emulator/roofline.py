"""The roofline of a profiled launch on Apple GPUs: the bound each family's base chip puts on it, and its plot.

Per GPU family (`target.GPU_FAMILIES`), its base chip's peak FP32 rate (`Family.peak_fp32_flops`: Apple's own
formula for its TFLOPS figures), and that chip's peak DRAM bandwidth from the one chip table
(`host.PEAK_GBPS`). A launch's profile (`tools.profile_dict`) gives the FLOPs the profiler counts
(`simdgroup_matrix` multiplies and `fma()` calls: elementwise math is not counted) and the bytes: its arithmetic
intensity is counted FLOPs over the minimal bytes (what any kernel computing the same thing must move), and its
time on a chip is bounded from below by the larger of the minimal bytes at peak bandwidth and the counted FLOPs at
peak rate. `plot` draws one launch on every family's roof as a PNG; it needs matplotlib (`scripts/install.sh
--test` installs it) and is the only part that does.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

from ..host import peak_bandwidth
from ..target import GPU_FAMILIES

# One colour per family in the plot (matplotlib's default cycle, so the legend reads as usual).
COLOURS = {"apple7": "#1f77b4", "apple8": "#2ca02c", "apple9": "#d62728"}
# M2 and M3 share a bandwidth and nearly a peak: M2's wider line stays visible around M3's.
WIDTHS = {"apple7": 1.5, "apple8": 4.0, "apple9": 1.5}
KERNEL_COLOUR = "#ff7f0e"


@dataclass(frozen=True)
class Roof:
    """One family's base chip: its peak FP32 FLOP/s and its peak DRAM bytes/s."""
    family: str
    chip: str
    peak_flops: float
    peak_bytes_per_s: float

    @property
    def ridge(self) -> float:
        """The intensity (FLOP/byte) above which the chip's peak rate, not its bandwidth, bounds a kernel."""
        return self.peak_flops / self.peak_bytes_per_s

    def attainable(self, intensity: float) -> float:
        """FLOP/s at most, at this arithmetic intensity."""
        return min(self.peak_flops, intensity * self.peak_bytes_per_s)


def roofs() -> List[Roof]:
    """Every family whose base chip the chip table has, oldest first."""
    out = []
    for family, f in GPU_FAMILIES.items():
        gbps, _ = peak_bandwidth(f.base_chip, f.gpu_cores)
        if gbps is None:
            raise RuntimeError(f"roofline: chip {f.base_chip} of family {family} is not in host.PEAK_GBPS")
        out.append(Roof(family, f.base_chip, f.peak_fp32_flops, gbps * 1e9))
    return out


def counted_flops(d: dict) -> int:
    """FLOPs the profiler counts in a launch: simdgroup_matrix multiplies and fma() calls."""
    return int(d["simdgroup_matrix_flops"] + d["fma_flops"])


def intensity(d: dict, bytes_key: str = "global_bytes_minimal") -> Optional[float]:
    """Counted FLOPs per byte (`bytes_key`: the minimal bytes, or `global_bytes_moved` for the traffic the kernel
    makes); None when the launch moves no global bytes."""
    n = d[bytes_key]
    return counted_flops(d) / n if n else None


@dataclass(frozen=True)
class Bound:
    """The least time a launch can take on one chip, and which peak sets it."""
    roof: Roof
    seconds: float
    memory_bound: bool


def bounds(d: dict) -> List[Bound]:
    """Per family: the larger of the minimal bytes at peak bandwidth and the counted FLOPs at peak rate."""
    out = []
    for r in roofs():
        t_mem = d["global_bytes_minimal"] / r.peak_bytes_per_s
        t_flop = counted_flops(d) / r.peak_flops
        out.append(Bound(r, max(t_mem, t_flop), t_mem >= t_flop))
    return out


@dataclass(frozen=True)
class PlottedPoint:
    """Where `plot` drew the launch on one roof: data coordinates, and the marker's centre in image pixels (column,
    row from the top). `clipped`: the launch has no counted FLOPs (intensity 0, off a logarithmic axis), so the
    marker sits at the left edge on the bandwidth slope, pointing left."""
    family: str
    intensity: float
    flops_per_s: float
    pixel: tuple
    clipped: bool


@dataclass(frozen=True)
class Plot:
    path: str
    width: int
    height: int
    title: str
    description: str
    points: List[PlottedPoint]


def describe(d: dict) -> str:
    """The numbers the plot prints (and stores as the PNG's Description)."""
    b = bounds(d)
    ratio = "-" if d["moved_over_minimal"] is None else f"{d['moved_over_minimal']:.2f}"
    share = "-" if d["share_16_byte"] is None else f"{d['share_16_byte']:.2f}"
    sgm = "-" if d["simdgroup_matrix_share"] is None else f"{d['simdgroup_matrix_share']:.2f}"
    times = ", ".join(f"{x.roof.chip} {x.seconds * 1e6:.3g} us ({'memory' if x.memory_bound else 'compute'})"
                      for x in b)
    return (f"minimal {d['global_bytes_minimal'] / 1e6:.4g} MB, moved/minimal {ratio}, 16-byte share {share}\n"
            f"counted FLOPs {counted_flops(d):.4g} (simdgroup_matrix share {sgm}; elementwise math not counted)\n"
            f"time bound: {times}")


def plot(d: dict, path: str, dpi: int = 100) -> Plot:
    """Draw the launch `d` (a profile dict) on every family's roofline into the PNG file `path`: the roofs, a filled
    marker on each at the intensity of the minimal bytes, a hollow one at the intensity of the bytes moved (where it
    differs), and the numbers of `describe`. Returns where it drew what."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as e:
        raise RuntimeError("roofline.plot needs matplotlib (scripts/install.sh --test installs it)") from e
    rs = roofs()
    ai = intensity(d)
    ai_moved = intensity(d, "global_bytes_moved")
    clipped = not ai
    ridges = [r.ridge for r in rs]
    lo = min(1 / 16, ai / 8) if ai else 1 / 16
    hi = max(max(ridges) * 16, ai * 8 if ai else 0)
    y_lo = min(r.attainable(lo) for r in rs) / 2
    y_hi = max(r.peak_flops for r in rs) * 3

    title = f"{d['kernel']} grid={tuple(d['grid'])} threadgroup={tuple(d['threadgroup'])}"
    text = describe(d)
    fig = Figure(figsize=(8, 6), dpi=dpi)
    canvas = FigureCanvasAgg(fig)
    ax = fig.add_axes((0.1, 0.22, 0.85, 0.7))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(y_lo, y_hi)
    ax.set_xlabel("arithmetic intensity (counted FLOP / byte)")
    ax.set_ylabel("attainable FP32 FLOP/s")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="major", color="#dddddd", linewidth=0.6)
    for r in rs:
        ax.plot([lo, r.ridge, hi], [r.attainable(lo), r.peak_flops, r.peak_flops], color=COLOURS[r.family],
                linewidth=WIDTHS[r.family], label=f"{r.chip} ({r.family}): {r.peak_flops / 1e12:.2f} TFLOP/s, "
                f"{r.peak_bytes_per_s / 1e9:.4g} GB/s")
    drawn = []
    for r in rs:
        x = lo if clipped else ai
        y = r.attainable(x)
        ax.plot([x], [y], marker="<" if clipped else "o", markersize=9, markerfacecolor=KERNEL_COLOUR,
                markeredgecolor="black", linestyle="none", zorder=5, clip_on=False)
        drawn.append((r.family, x, y))
        if not clipped and ai_moved and ai_moved != ai and ai_moved >= lo:
            ax.plot([ai_moved], [r.attainable(ai_moved)], marker="o", markersize=9, markerfacecolor="none",
                    markeredgecolor=KERNEL_COLOUR, linestyle="none", zorder=5)
    if not clipped:
        ax.axvline(ai, color="#888888", linestyle=":", linewidth=1)
    ax.plot([], [], marker="<" if clipped else "o", markerfacecolor=KERNEL_COLOUR, markeredgecolor="black",
            linestyle="none", label="this launch: no counted FLOPs, off the axis" if clipped
            else "this launch (minimal bytes; hollow: bytes moved)")
    ax.legend(loc="lower right", fontsize=8)
    fig.text(0.02, 0.03, text, fontsize=8, family="monospace", va="bottom")
    canvas.draw()
    width, height = (int(v) for v in canvas.get_width_height())
    points = []
    for family, x, y in drawn:
        px, py = ax.transData.transform((x, y))
        points.append(PlottedPoint(family, x, y, (float(px), float(height - py)), clipped))
    fig.savefig(path, format="png", dpi=dpi, metadata={"Title": title, "Description": text})
    return Plot(path, width, height, title, text, points)

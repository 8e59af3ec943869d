"""The backend's self-check: one command that says whether this machine runs Triton kernels right, and how fast.

    python -m triton.backends.apple.selfcheck [--report PATH] [--size quick|full] [--metal auto|mps|standin|skip]

It reports the device (Metal device name, chip, GPU cores, the GPU family the backend detects and compiles for,
the MSL version kernels are compiled at, the emulator's compiler), runs a conformance subset
(`selfcheck_cases.py`) on the GPU and on the Metal-on-CPU emulator from the same inputs and compares the results,
times a vector add (GB/s against torch.add and the chip's peak DRAM bandwidth, `host.PEAK_GBPS`) and an fp16
GEMM (TFLOP/s against torch.mm on the same device), and writes a Markdown report (to PATH, else to stdout)
meant to be pasted into an issue. The exit status is 1 when a result differs or a step fails, 2 when the Metal
half did not run (nothing was compared), 0 otherwise.

The Metal half runs on `mps` on a Mac. Elsewhere (`--metal auto`, the default) it runs on the MPS stand-in of the
repository's tests (`test/support/mps_standin.py`, which imitates `torch.mps` on the emulator: it exists only in
a checkout) when that is at hand, and is skipped otherwise; on the stand-in the "GPU" numbers are the
emulator's, and the report says so. Sizes default to `full` on a Mac and `quick` elsewhere.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib
import platform
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

SIZES = {
    "quick": dict(add=[1 << 14], gemm=[64], warmup=1.0, rep=5.0),
    "full": dict(add=[1 << 20, 1 << 24], gemm=[1024, 2048], warmup=25.0, rep=100.0),
}
GEMM_BLOCKS = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32)
GEMM_WARPS = 4


@dataclass
class Report:
    """What the self-check found: Markdown sections, and whether everything it compared agreed."""
    sections: List[str] = field(default_factory=list)
    failures: List[str] = field(default_factory=list)
    incomplete: str = ""  # why nothing was compared (the Metal half did not run), if so

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def exit_status(self) -> int:
        """0: everything compared agreed; 1: a difference or a failed step; 2: the Metal half did not run."""
        return 1 if self.failures else 2 if self.incomplete else 0

    def markdown(self) -> str:
        verdict = ("**Result: FAILED** — " + "; ".join(self.failures) if self.failures else
                   f"**Result: incomplete** — {self.incomplete}." if self.incomplete else
                   "**Result: every check passed.**")
        return "\n\n".join(["# triton-apple self-check", verdict, *self.sections]) + "\n"


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------- the Metal half


def _repository_root() -> Optional[Path]:
    """The checkout this backend runs from (editable installs), if it has the tests' support package."""
    for parent in Path(__file__).resolve().parents:
        if (parent / "test" / "support" / "mps_standin.py").is_file():
            return parent
    return None


def load_standin():
    """The MPS stand-in module of the repository's tests (imported as the tests import it), or None."""
    if "support.mps_standin" in sys.modules:
        return sys.modules["support.mps_standin"]
    root = _repository_root()
    if root is None:
        return None
    tests = str(root / "test")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    return importlib.import_module("support.mps_standin")


@dataclass
class MetalHalf:
    """Where the "GPU" half runs: `mps` (a Mac), `standin` (the MPS stand-in, on the emulator) or `skip`."""
    kind: str
    reason: str = ""
    standin: Any = None  # the installed MPSStandin, when kind == "standin" and this run installed it

    @property
    def runs(self) -> bool:
        return self.kind in ("mps", "standin")


def choose_metal(choice: str) -> MetalHalf:
    from . import driver as drv
    from .host import mps_available
    if choice == "skip":
        return MetalHalf("skip", "--metal skip")
    if choice in ("auto", "mps") and mps_available():
        return MetalHalf("mps")
    if choice == "mps":
        return MetalHalf("skip", "no MPS device (torch.backends.mps.is_available() is False)")
    if drv.METAL_DEVICE != "mps":  # a stand-in is installed already (the tests' `mps` fixture)
        return MetalHalf("standin")
    module = load_standin()
    if module is None:
        return MetalHalf("skip", "no MPS device, and no MPS stand-in (it ships only with the repository's tests)")
    return MetalHalf("standin", standin=module.MPSStandin().install())


@contextlib.contextmanager
def _driver(mode: str) -> Iterator[Any]:
    """The apple driver in `mode` made Triton's active driver for the block, the previous one restored after."""
    import triton

    from .driver import AppleDriver
    previous = triton.runtime.driver.active
    active = AppleDriver(mode=mode)
    triton.runtime.driver.set_active(active)
    try:
        yield active
    finally:
        triton.runtime.driver.set_active(previous)


# ----------------------------------------------------------------------------------------------- sections


def device_section(metal: MetalHalf, emulator_note: str) -> str:
    import torch
    import triton

    from . import host, target
    from .driver import device_properties
    fam = host.default_family()
    rows = [("date", datetime.datetime.now().astimezone().isoformat(timespec="seconds")),
            ("OS", platform.platform()), ("Python", platform.python_version()),
            ("torch / Triton", f"{torch.__version__} / {triton.__version__}")]
    if metal.kind == "mps":
        name = torch.backends.mps.get_name() if hasattr(torch.backends.mps, "get_name") else "(unknown)"
        chip = host.mac_chip()
        peak, how = host.mac_peak_bandwidth()
        rows += [("Metal device", name), ("chip", f"Apple {chip}" if chip else "not recognised"),
                 ("GPU cores", host.mps_gpu_cores() or "unknown"),
                 ("GPU family", f"{fam} (detected: {host.mac_family() or 'unknown'}; TRITON_APPLE_FAMILY overrides)"),
                 ("peak DRAM bandwidth", f"{peak:g} GB/s ({how})" if peak else f"unknown ({how})")]
    elif metal.kind == "standin":
        rows += [("Metal device", "none: the MPS stand-in (the Metal launch path on the emulator, CPU tensors)"),
                 ("GPU family", f"{fam} (compiled for; no Apple GPU here)")]
    else:
        rows += [("Metal device", f"none ({metal.reason})"), ("GPU family", f"{fam} (compiled for)")]
    mac = platform.mac_ver()[0]
    version = target.default_msl_version()
    rows += [("MSL version", f"{version} (macOS {mac}; compile_shader compiles at the macOS's own version)" if mac
              else f"{version} (the emulator's; TRITON_APPLE_MSL_VERSION overrides)"),
             ("device properties", ", ".join(f"{k}={v}" for k, v in device_properties(
                 "metal" if metal.runs else "emulator", fam).items() if k in ("multiprocessor_count", "max_shared_mem",
                                                                             "mem_bus_width"))),
             ("emulator", emulator_note)]
    return "## Device\n\n" + _table(("", ""), rows)


def _emulator_note() -> str:
    try:
        from .emulator.clang import compiler_version, find_compiler
        cxx = find_compiler()
        return f"{cxx} ({compiler_version(cxx)[1]})"
    except Exception as e:  # no usable clang: the emulator half cannot run
        return f"unavailable: {e}"


def _same(a, b, rtol: float, atol: float) -> tuple:
    """(equal, max |difference|) of two CPU tensors; NaNs at the same places count as equal."""
    import torch
    if a.shape != b.shape or a.dtype != b.dtype:
        return False, f"shape/dtype {tuple(a.shape)} {a.dtype} vs {tuple(b.shape)} {b.dtype}"
    if not a.is_floating_point():
        diff = (a.to(torch.int64) - b.to(torch.int64)).abs().max().item() if a.numel() else 0
        return bool(torch.equal(a, b)), diff
    nan_a, nan_b = torch.isnan(a), torch.isnan(b)
    fa, fb = a.float(), b.float()
    finite = ~(nan_a | nan_b)
    same_inf = torch.equal(torch.isinf(fa) & finite, torch.isinf(fb) & finite) and \
        torch.equal(fa[torch.isinf(fa) & finite], fb[torch.isinf(fa) & finite])
    both = finite & ~torch.isinf(fa) & ~torch.isinf(fb)
    diff = (fa[both] - fb[both]).abs().max().item() if both.any() else 0.0
    if rtol == 0 and atol == 0:
        equal = torch.equal(nan_a, nan_b) and torch.equal(a[finite].view(-1), b[finite].view(-1)) and \
            torch.equal(torch.signbit(fa[finite]), torch.signbit(fb[finite]))
    else:
        equal = torch.equal(nan_a, nan_b) and same_inf and bool(torch.allclose(fa[both], fb[both], rtol=rtol, atol=atol))
    return equal, diff


def conformance_section(report: Report, metal: MetalHalf, emulator_ok: bool) -> str:
    import torch

    from . import driver as drv
    from .selfcheck_cases import CASES, jit_cases
    gpu_kernels, emu_kernels = jit_cases(), jit_cases()
    rows = []
    matched = 0
    for case in CASES:
        results = {}
        for half, mode, device, kernels, wanted in (("gpu", "metal", drv.METAL_DEVICE, gpu_kernels, metal.runs),
                                                     ("emulator", "emulator", "cpu", emu_kernels, emulator_ok)):
            if not wanted:
                continue
            try:
                with _driver(mode):
                    results[half] = case.run(kernels[case.name], torch.device(device), torch.Generator().manual_seed(24))
            except Exception as e:
                results[half] = e
        verdict, diff = _verdict(case, results)
        if verdict == "match":
            matched += 1
        elif verdict != "not compared":
            report.failures.append(f"conformance case {case.name}: {verdict}")
        rows.append((f"`{case.name}`", case.covers, verdict, diff,
                     "bit for bit" if case.rtol == 0 and case.atol == 0 else f"rtol {case.rtol:g}, atol {case.atol:g}"))
    where = {"mps": "the GPU (mps)", "standin": "the MPS stand-in", "skip": "nothing (Metal half skipped)"}[metal.kind]
    head = (f"## Conformance subset: {where} against the emulator\n\n{matched} of {len(CASES)} cases match. Same "
            "inputs on both; each output compared element by element.")
    return head + "\n\n" + _table(("case", "covers", "result", "max abs difference", "tolerance"), rows)


def _verdict(case, results: Dict[str, Any]) -> tuple:
    errors = [f"{half} failed: {type(r).__name__}: {str(r).splitlines()[0] if str(r) else ''}"
              for half, r in results.items() if isinstance(r, Exception)]
    if errors:
        return "; ".join(errors), "-"
    if len(results) < 2:
        return "not compared", "-"
    worst: Any = 0
    for a, b in zip(results["gpu"], results["emulator"]):
        equal, diff = _same(a, b, case.rtol, case.atol)
        if not equal:
            return "DIFFERENT", diff
        worst = max(worst, diff) if isinstance(diff, (int, float)) else diff
    return "match", f"{worst:.3g}" if isinstance(worst, float) else worst


def _timed(bench: Callable, fn: Callable, warmup: float, rep: float) -> float:
    return bench(fn, warmup=warmup, rep=rep, quantiles=[0.5])


def vector_add_section(report: Report, metal: MetalHalf, sizes: dict) -> str:
    import torch
    import triton

    from . import driver as drv, host
    from .selfcheck_cases import jit_cases
    kernel = jit_cases()["vector_add"]
    peak, how = host.mac_peak_bandwidth() if metal.kind == "mps" else (None, "not a Mac")
    rows = []
    with _driver("metal") as active:
        bench = active.get_benchmarker()
        dev = torch.device(drv.METAL_DEVICE)
        for n in sizes["add"]:
            g = torch.Generator().manual_seed(n)
            x, y = torch.randn(n, generator=g).to(dev), torch.randn(n, generator=g).to(dev)
            out = torch.empty_like(x)

            def run():
                kernel[(triton.cdiv(n, 1024), )](x, y, out, n, BLOCK=1024, num_warps=4)

            run()
            if not torch.equal(out.cpu(), (x + y).cpu()):
                report.failures.append(f"vector add of {n}: wrong result")
            ms = _timed(bench, run, sizes["warmup"], sizes["rep"])
            ref = _timed(bench, lambda: torch.add(x, y, out=out), sizes["warmup"], sizes["rep"])
            gbps, ref_gbps = 12 * n / ms / 1e6, 12 * n / ref / 1e6
            rows.append((n, f"{gbps:.3g}", f"{ref_gbps:.3g}", f"{gbps / ref_gbps:.3g}",
                         f"{peak:g}" if peak else f"unknown ({how})", f"{gbps / peak:.0%}" if peak else "-"))
    return ("## Vector add (3 x 4 bytes per element)\n\n" +
            _table(("n", "Triton GB/s", "torch.add GB/s", "Triton / torch", "peak GB/s", "Triton / peak"), rows))


def gemm_section(report: Report, metal: MetalHalf, sizes: dict) -> str:
    import torch
    import triton

    from . import driver as drv
    from .selfcheck_cases import jit_cases
    kernel = jit_cases()["gemm"]
    rows = []
    with _driver("metal") as active:
        bench = active.get_benchmarker()
        dev = torch.device(drv.METAL_DEVICE)
        for n in sizes["gemm"]:
            g = torch.Generator().manual_seed(n)
            a = torch.randn(n, n, generator=g).to(torch.float16).to(dev)
            b = torch.randn(n, n, generator=g).to(torch.float16).to(dev)
            c = torch.empty(n, n, dtype=torch.float16, device=dev)
            grid = (triton.cdiv(n, GEMM_BLOCKS["BLOCK_M"]), triton.cdiv(n, GEMM_BLOCKS["BLOCK_N"]))

            def run():
                kernel[grid](a, b, c, n, n, n, num_warps=GEMM_WARPS, **GEMM_BLOCKS)

            run()
            expected = (a.float() @ b.float()).cpu()
            err = ((c.float().cpu() - expected).abs().max() / expected.abs().max()).item()
            if not err < 1e-2:
                report.failures.append(f"fp16 GEMM {n}: relative error {err:.3g}")
            ms = _timed(bench, run, sizes["warmup"], sizes["rep"])
            ref = _timed(bench, lambda: torch.mm(a, b, out=c), sizes["warmup"], sizes["rep"])
            tflops, ref_tflops = 2 * n**3 / ms / 1e9, 2 * n**3 / ref / 1e9
            rows.append((n, f"{tflops:.3g}", f"{ref_tflops:.3g}", f"{tflops / ref_tflops:.3g}", f"{err:.2e}"))
    return ("## fp16 GEMM, float32 accumulation (C = A @ B, square, tiles "
            f"{GEMM_BLOCKS['BLOCK_M']}x{GEMM_BLOCKS['BLOCK_N']}x{GEMM_BLOCKS['BLOCK_K']}, {GEMM_WARPS} simdgroups)\n\n" +
            _table(("M = N = K", "Triton TFLOP/s", "torch.mm TFLOP/s", "Triton / torch", "max error / max |C|"), rows))


def notes_section(metal: MetalHalf, size: str) -> str:
    lines = [f"- sizes: `{size}`; timings are medians of `driver.get_benchmarker()` (on `mps`: batches of calls "
             "between `torch.mps.synchronize()` calls on the host clock)."]
    if metal.kind == "standin":
        lines.append("- The Metal half ran on the MPS stand-in: the driver's Metal launch path on the emulator, "
                     "on CPU tensors. Its results check the launch path, not a GPU; its timings are the "
                     "emulator's and say nothing about Apple hardware.")
    elif metal.kind == "skip":
        lines.append(f"- The Metal half did not run: {metal.reason}.")
    return "## Notes\n\n" + "\n".join(lines)


# ----------------------------------------------------------------------------------------------- entry points


def run(size: Optional[str] = None, metal: str = "auto") -> Report:
    """Run every section and return the report (`Report.markdown()`); never raises for a failed step (it is a
    failure in the report)."""
    report = Report()
    half = choose_metal(metal)
    size = size or ("full" if half.kind == "mps" else "quick")
    sizes = SIZES[size]
    if not half.runs:
        report.incomplete = f"the Metal half did not run ({half.reason}): nothing was compared"
    try:
        note = _emulator_note()
        emulator_ok = not note.startswith("unavailable")
        if not emulator_ok:
            report.failures.append("the emulator is unavailable, so nothing was compared")
        report.sections.append(device_section(half, note))
        steps = [lambda: conformance_section(report, half, emulator_ok)]
        if half.runs:
            steps += [lambda: vector_add_section(report, half, sizes), lambda: gemm_section(report, half, sizes)]
        for step in steps:
            try:
                report.sections.append(step())
            except Exception as e:
                report.failures.append(f"{type(e).__name__}: {e}")
                report.sections.append("## A step failed\n\n```\n" + traceback.format_exc() + "```")
        report.sections.append(notes_section(half, size))
    finally:
        if half.standin is not None:
            half.standin.uninstall()
    return report


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m triton.backends.apple.selfcheck", description=__doc__.split("\n")[0])
    p.add_argument("--report", help="write the Markdown report here (default: stdout)")
    p.add_argument("--size", choices=sorted(SIZES), help="problem sizes (default: full on a Mac, quick elsewhere)")
    p.add_argument("--metal", choices=("auto", "mps", "standin", "skip"), default="auto",
                   help="where the Metal half runs (default: mps on a Mac, else the MPS stand-in of a checkout)")
    args = p.parse_args(argv)
    report = run(args.size, args.metal)
    text = report.markdown()
    if args.report:
        Path(args.report).write_text(text, encoding="utf-8")
        verdict = "FAILED" if report.failures else "incomplete" if report.incomplete else "passed"
        print(f"self-check report written to {args.report}: {verdict}")
    else:
        sys.stdout.write(text)
    return report.exit_status


if __name__ == "__main__":
    sys.exit(main())

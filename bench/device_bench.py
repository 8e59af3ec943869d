"""Device benchmarks for the Mac job: Triton kernels on the apple backend against torch, same device, same run.

    python -m bench.device_bench [--sections launch,add,gemm,attention,atomics] [--size tiny|full] [--json out.json]
                                                                  (from the repository root)

On a Mac (MPS) the default size is "full"; on the emulator it is "tiny" (the emulator runs kernels on the
CPU, thousands of times slower than a GPU: its numbers only prove that the benchmark runs and that every
result is right). Sections:

  launch     µs per launch of an empty kernel (1 tensor + 1 int, and 5 tensors + 9 ints), launched
             back to back from Python and synchronised once at the end, against a torch op on the same
             stream (`x.add_(1)` on a 1-element tensor): host wall-clock, median of 5 batches.
  add        vector add (examples/kernels.py, 1024 per program) in GB/s (3 x 4 bytes per element) against
             `torch.add(x, y, out=out)` and against the chip's peak DRAM bandwidth (bench/apple_chips.py).
  gemm       fp16 and bf16 C = A @ B (the tutorial-style kernel of bench/kernels.py, fp32
             accumulation; the best of the tile configs in cases.MATMUL_CONFIGS at full size)
             in TFLOP/s against `torch.mm`.
  attention  flash-attention forward, fp16, head dim 64, non-causal and causal (bench/kernels.py)
             in TFLOP/s against `torch.nn.functional.scaled_dot_product_attention`.
  atomics    scatter-add of n values into 4096 bins with `tl.atomic_add`, in millions of updates per second:
             int32 (Metal's atomics), int64 whose old value is unused (two 32-bit words) and int64 whose old
             value is stored (under a lock of the lock table, docs/architecture.md), against
             `Tensor.index_add_` of the same dtype, and the locked form against the two-word one.

Every ratio is Triton / torch measured in this run; nothing asserts a speed. Every Triton result is checked
against torch (a wrong result makes the exit status 1).

Timing: `triton.testing.do_bench` (median), whose events come from the apple driver's device interface:
`torch.mps` events on a Mac, host timestamps on the emulator (its launches return when the kernel is
done). If do_bench fails on the device, the benchmark falls back to host timing (`torch.mps.synchronize()`
around a loop, `time.perf_counter`) and says so in its output; `--timer host` asks for that directly.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

import torch
import triton

from . import apple_chips
from . import cases as tk
from .kernels import empty_kernel, empty_kernel_many_args, scatter_add_kernel
from .report_table import table

SIZES = {
    "tiny": dict(launches=200, add=[1 << 16, 1 << 20], gemm=[128, 256], attention=[(2, 128)], atomics=[1 << 14]),
    "full": dict(launches=5000, add=[1 << 20, 1 << 22, 1 << 24, 1 << 26], gemm=[512, 1024, 2048, 4096],
                 attention=[(16, 512), (16, 1024), (16, 2048), (8, 4096)], atomics=[1 << 20, 1 << 24]),
}


class Timer:
    """Median milliseconds of fn() on the active device."""

    def __init__(self, device: torch.device, mode: str, quick: bool):
        self.device, self.mode, self.quick = device, mode, quick
        self.fallback_reason: Optional[str] = None

    def sync(self) -> None:
        if self.device.type == "mps":
            torch.mps.synchronize()

    def host_ms(self, fn: Callable[[], object], reps: int) -> float:
        fn()
        self.sync()
        samples = []
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(reps):
                fn()
            self.sync()
            samples.append((time.perf_counter() - t) * 1e3 / reps)
        return statistics.median(samples)

    def __call__(self, fn: Callable[[], object]) -> float:
        if self.mode == "do_bench" and self.fallback_reason is None:
            try:
                warmup, rep = (10, 40) if self.quick else (25, 100)
                return float(triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median"))
            except Exception as e:  # noqa: BLE001 (reported once, then host timing)
                self.fallback_reason = tk.describe_error(e)
        fn()
        self.sync()
        t = time.perf_counter()
        fn()
        self.sync()
        once = time.perf_counter() - t
        return self.host_ms(fn, max(1, min(100, int(0.02 / max(once, 1e-6)))))


def num(x: float) -> str:
    """3 significant digits: GPU TFLOP/s and emulator MFLOP/s alike stay readable."""
    return f"{x:.3g}"


def checked(launch: tk.Launch, failures: List[str], what: str) -> str:
    """Runs the launch once and compares with torch; returns a table cell."""
    try:
        launch.call()
        if launch_device(launch).type == "mps":
            torch.mps.synchronize()
        err = launch.error()
    except Exception as e:  # noqa: BLE001 (reported in the table)
        failures.append(f"{what}: {tk.describe_error(e)}")
        return "FAIL (error)"
    if err > launch.tol:
        failures.append(f"{what}: max err/(1+|ref|) {err:.2e} > {launch.tol:.0e}")
        return f"FAIL {err:.0e}"
    return f"ok {err:.0e}"


def launch_device(launch: tk.Launch) -> torch.device:
    return next(v.device for v in launch.args.values() if isinstance(v, torch.Tensor))


# ------------------------------------------------------------------------------------------------ sections


def bench_launch(device, size, timer, failures) -> dict:
    n = size["launches"]
    x = torch.zeros(1, device=device)
    ts = [torch.zeros(1, device=device) for _ in range(5)]

    def per_launch_us(fn) -> float:
        fn()
        timer.sync()
        samples = []
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(n):
                fn()
            timer.sync()
            samples.append((time.perf_counter() - t) * 1e6 / n)
        return statistics.median(samples)

    torch_us = per_launch_us(lambda: x.add_(1.0))
    rows, out = [], {"torch_add_us": torch_us}
    ints = list(range(3, 12))  # neither 1 nor multiples of 16: the JIT passes them as runtime arguments
    for name, fn in (("empty kernel (1 tensor, 1 int)", lambda: empty_kernel[(1, )](x, 7)),
                     ("empty kernel (5 tensors, 9 ints)", lambda: empty_kernel_many_args[(1, )](*ts, *ints))):
        try:
            us = per_launch_us(fn)
        except Exception as e:  # noqa: BLE001
            failures.append(f"launch {name}: {tk.describe_error(e)}")
            rows.append([name, "error", num(torch_us), "-"])
            continue
        out[name] = us
        rows.append([name, num(us), num(torch_us), f"{us / torch_us:.3g}x"])
    print(f"\nLaunch overhead: {n} launches back to back, one synchronize, median of 5 batches")
    print(table(["kernel", "Triton µs/launch", "torch x.add_(1) µs", "Triton/torch"], rows))
    return out


def rate(timer: Timer, fn: Callable[[], object], work: float, failures: List[str], what: str) -> Optional[float]:
    """work / second of fn() (work in bytes or FLOPs), or None if fn fails (recorded in `failures`)."""
    try:
        return work / (timer(fn) * 1e-3)
    except Exception as e:  # noqa: BLE001 (reported in the table and at the end)
        failures.append(f"{what}: {tk.describe_error(e)}")
        return None


def cells(ours: Optional[float], theirs: Optional[float], scale: float) -> List[str]:
    """[ours, theirs, ours/theirs] in units of `scale` (1e9: GB/s or GFLOP/s; 1e12: TFLOP/s)."""
    fmt = lambda v: "error" if v is None else num(v / scale)  # noqa: E731
    ratio = f"{ours / theirs:.3g}x" if ours and theirs else "-"
    return [fmt(ours), fmt(theirs), ratio]


def bench_add(device, size, timer, failures, peak) -> dict:
    rows, out = [], {}
    for n in size["add"]:
        launch = tk.vector_add(device, n)
        x, y, o = launch.args["x_ptr"], launch.args["y_ptr"], launch.args["out_ptr"]
        ok = checked(launch, failures, f"vector add n={n}")
        ours = rate(timer, launch.call, launch.bytes, failures, f"vector add n={n}")
        theirs = rate(timer, lambda: torch.add(x, y, out=o), launch.bytes, failures, f"torch.add n={n}")
        pct = f"{100 * ours / 1e9 / peak:.0f}%" if peak and ours else "n/a"
        rows.append([n] + cells(ours, theirs, 1e9) + [pct, ok])
        out[n] = dict(triton_gbps=ours and ours / 1e9, torch_gbps=theirs and theirs / 1e9, peak_gbps=peak, check=ok)
    print("\nVector add (fp32, 12 bytes per element)")
    print(table(["n", "Triton GB/s", "torch.add GB/s", "Triton/torch", "of peak DRAM", "check"], rows))
    return out


def bench_gemm(device, size, timer, failures, full: bool) -> dict:
    """TFLOP/s on MPS; the emulator's (tiny) numbers are printed in the same unit, hence tiny."""
    rows, out = [], {}
    configs = tk.MATMUL_CONFIGS if full else tk.MATMUL_CONFIGS[:1]
    for dtype in (torch.float16, torch.bfloat16):
        dname = str(dtype).replace("torch.", "")
        for n in size["gemm"]:
            best, errors = None, []
            for cfg in configs:  # the best tile; one that does not compile or fit is left out
                launch = tk.matmul(device, n, n, n, dtype, cfg)
                ours = rate(timer, launch.call, launch.flops, errors, launch.note)
                if ours is not None and (best is None or ours > best[0]):
                    best = (ours, launch)
            launch = best[1] if best else tk.matmul(device, n, n, n, dtype)
            a, b = launch.args["a_ptr"], launch.args["b_ptr"]
            theirs = rate(timer, lambda: torch.mm(a, b), launch.flops, failures, f"torch.mm {dname} {n}")
            if best is None:
                failures.append(f"gemm {dname} {n}: every tile failed: {'; '.join(errors)}")
                rows.append([dname, n] + cells(None, theirs, 1e12) + ["-", errors[0][:70] if errors else "-"])
                continue
            ok = checked(launch, failures, f"gemm {dname} {n}")
            rows.append([dname, n] + cells(best[0], theirs, 1e12) + [launch.note, ok])
            out[f"{dname} {n}"] = dict(triton_tflops=best[0] / 1e12, torch_tflops=theirs and theirs / 1e12,
                                       config=launch.note, check=ok, tile_errors=errors)
    print("\nGEMM C = A @ B, M = N = K (fp32 accumulation)")
    print(table(["dtype", "M=N=K", "Triton TFLOP/s", "torch.mm TFLOP/s", "Triton/torch", "tile", "check"], rows))
    return out


def bench_attention(device, size, timer, failures) -> dict:
    rows, out = [], {}
    for heads, ctx in size["attention"]:
        for causal in (False, True):
            what = f"attention {heads}x{ctx}{' causal' if causal else ''}"
            launch = tk.attention(device, heads, ctx, 64, causal)
            q, k, v = (launch.args[n].unsqueeze(0) for n in ("Q", "K", "V"))
            scale = launch.args["sm_scale"]
            ok = checked(launch, failures, what)
            ours = rate(timer, launch.call, launch.flops, failures, what)
            theirs = rate(
                timer, lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale),
                launch.flops, failures, f"SDPA {heads}x{ctx}")
            rows.append([heads, ctx, "yes" if causal else "no"] + cells(ours, theirs, 1e12) + [ok])
            out[what] = dict(triton_tflops=ours and ours / 1e12, torch_tflops=theirs and theirs / 1e12, check=ok)
    print("\nFlash attention forward, fp16, head dim 64 (heads = batch x heads; causal counts half the FLOPs)")
    print(table(["heads", "seq", "causal", "Triton TFLOP/s", "SDPA TFLOP/s", "Triton/torch", "check"], rows))
    return out


def bench_atomics(device, size, timer, failures) -> dict:
    rows, out, bins = [], {}, 4096
    for n in size["atomics"]:
        g = torch.Generator().manual_seed(n)
        idx = torch.randint(0, bins, (n, ), generator=g)
        for dtype, use_old, form in ((torch.int32, False, "native 32-bit"), (torch.int64, False, "two 32-bit words"),
                                     (torch.int64, True, "locked")):
            what = f"atomic_add {str(dtype)[6:]} n={n} ({form})"
            v = torch.randint(-1000, 1000, (n, ), generator=g, dtype=dtype)
            ref = torch.zeros(bins, dtype=torch.int64).index_add_(0, idx, v.long())
            hist = torch.zeros(bins, dtype=dtype, device=device)
            dv, didx, old = v.to(device), idx.to(torch.int32).to(device), torch.empty(n, dtype=dtype, device=device)

            def call():
                scatter_add_kernel[(triton.cdiv(n, 1024), )](hist, didx, dv, old, n, USE_OLD=use_old, BLOCK=1024)

            try:
                call()
                ok = "ok" if torch.equal(hist.cpu().long(), ref) else "FAIL"
            except Exception as e:  # noqa: BLE001 (reported in the table)
                ok = "FAIL (error)"
                failures.append(f"{what}: {tk.describe_error(e)}")
            if ok == "FAIL":
                failures.append(f"{what}: wrong bin totals")
            ours = rate(timer, call, n, failures, what)
            idx_dev, h2 = idx.to(device), torch.zeros(bins, dtype=dtype, device=device)
            theirs = rate(timer, lambda: h2.index_add_(0, idx_dev, dv), n, failures, f"index_add_ {what}")
            rows.append([str(dtype)[6:], n, form] + cells(ours, theirs, 1e6) + [ok])
            out[what] = dict(triton_mups=ours and ours / 1e6, torch_mups=theirs and theirs / 1e6, check=ok)
        words, locked = (out[f"atomic_add int64 n={n} ({f})"]["triton_mups"] for f in ("two 32-bit words", "locked"))
        out[f"locked / two words n={n}"] = locked / words if locked and words else None
    print(f"\nScatter-add into {bins} bins with tl.atomic_add (millions of updates per second)")
    print(table(["dtype", "n", "form", "Triton Mupd/s", "index_add_ Mupd/s", "Triton/torch", "check"], rows))
    for n in size["atomics"]:
        r = out[f"locked / two words n={n}"]
        print(f"n={n}: locked int64 / two-word int64 = {f'{r:.3g}x' if r else '-'}")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sections", default="launch,add,gemm,attention,atomics")
    ap.add_argument("--size", choices=sorted(SIZES), default=None, help="default: full on MPS, tiny elsewhere")
    ap.add_argument("--timer", choices=("do_bench", "host"), default="do_bench")
    ap.add_argument("--json", default="", help="also write the results here")
    opts = ap.parse_args(argv)

    sections = [s.strip() for s in opts.sections.split(",") if s.strip()]
    unknown = set(sections) - {"launch", "add", "gemm", "attention", "atomics"}
    if unknown:
        ap.error(f"unknown sections {sorted(unknown)}; choose from launch, add, gemm, attention, atomics")
    driver = triton.runtime.driver.active
    device = driver.get_active_torch_device()
    if type(driver).__module__.split(".")[:3] != ["triton", "backends", "apple"]:
        print(f"the active Triton driver is {type(driver).__module__}, not the apple backend's "
              "(TRITON_APPLE_DEVICE=off, or a CUDA/ROCm driver is active)", file=sys.stderr)
        return 2
    size_name = opts.size or ("full" if device.type == "mps" else "tiny")
    size = SIZES[size_name]
    chip, cores, brand = apple_chips.detect()
    peak, peak_note = apple_chips.peak_bandwidth(chip, cores)
    mode = getattr(driver, "mode", device.type)
    print(f"triton {triton.__version__}, torch {torch.__version__}; apple driver mode: {mode} "
          f"(tensors on {device}); sizes: {size_name}")
    print(f"chip: {brand or 'not a Mac'}; peak DRAM bandwidth: {f'{peak:g} GB/s' if peak else 'n/a'} ({peak_note})")
    if device.type != "mps":
        print("emulator: kernels run on the host CPU, so the numbers below say nothing about a GPU; they show "
              "the benchmarks run and their results are right")
    timer = Timer(device, opts.timer, quick=size_name == "tiny")
    failures: List[str] = []
    results: Dict[str, object] = dict(device=str(device), mode=mode, chip=brand, peak_gbps=peak, size=size_name)
    for section in sections:
        if section == "launch":
            results["launch"] = bench_launch(device, size, timer, failures)
        elif section == "add":
            results["add"] = bench_add(device, size, timer, failures, peak)
        elif section == "gemm":
            results["gemm"] = bench_gemm(device, size, timer, failures, size_name == "full")
        elif section == "atomics":
            results["atomics"] = bench_atomics(device, size, timer, failures)
        else:
            results["attention"] = bench_attention(device, size, timer, failures)
    how = "triton.testing.do_bench (median)" if opts.timer == "do_bench" else "host wall-clock"
    if timer.fallback_reason:
        how = f"host wall-clock: do_bench failed on this device ({timer.fallback_reason})"
    print(f"\ntimed with {how}")
    results["timer"] = how
    results["failures"] = failures
    for f in failures:
        print(f"FAILED: {f}")
    if opts.json:
        Path(opts.json).write_text(json.dumps(results, indent=1, default=str))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

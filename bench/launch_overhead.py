"""Launch overhead on the Metal-on-CPU emulator, layer by layer, against torch's own op dispatch in the same run.

    python -m bench.launch_overhead [--rounds 3] [--launches 2000] [--json out.json]   (from the repository root)

What is timed (µs per launch, best of `--rounds` x 5 batches of `--launches` launches, after one warm-up
launch that compiles), one grid of one threadgroup of 32 threads, on CPU tensors:

* `empty`: a kernel with one pointer and one int argument and no body;
* `tiny`: 16 floats loaded, scaled by a float argument and stored (2 pointers, an int, a float);
* `wide`: 8 pointers and 4 scalars (int, long, float, float), two stores: the cost per argument;

each through two entry points: Triton's JIT (`kernel[grid](...)`: Triton's argument binder, then our
launcher) and the compiled kernel directly (`compiled[grid](...)`: our launcher alone), so the difference is
what Triton's binder costs. `emulator API` is `EmulatorKernel.launch` of an empty MSL kernel with two tensors
and a scalar: the emulator without Triton in front of it.

The baseline is torch's dispatch of the op the `tiny` kernel computes, `torch.mul(x, 2.0, out=y)` on the same
16 floats, timed the same way in the same process: the cost a framework pays per small op on this machine, so
the last column says how many torch ops one launch costs. Every kernel's result is checked; a wrong result
makes the exit status 1. Nothing asserts a speed.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Callable, Dict

os.environ.setdefault("TRITON_APPLE_DEVICE", "emulator")

import torch  # noqa: E402

from . import kernels as kn  # noqa: E402
from .report_table import table  # noqa: E402

EMPTY_MSL = """#include <metal_stdlib>
using namespace metal;
kernel void bench_empty(device float* x [[buffer(0)]], device float* y [[buffer(1)]],
                        constant int& n [[buffer(2)]], uint i [[thread_position_in_grid]]) {
    if (n < 0 && i == 0) y[0] = x[0];
}
"""


def _cases():
    """(name, JIT launch, the compiled kernel's arguments (constexprs included, as Triton passes them), check)."""
    x = torch.arange(16, dtype=torch.float32)
    y = torch.zeros(16)
    ptrs = [torch.zeros(4) for _ in range(7)]
    out = torch.zeros(2)
    wide_args = (*ptrs, out, 3, 2**40 + 5, 0.5, 0.25)
    return [
        ("empty", lambda: kn.empty_kernel[(1, )](x, 16, num_warps=1), (x, 16), lambda: True),
        ("tiny", lambda: kn.tiny_kernel[(1, )](x, y, 16, 2.0, BLOCK=16, num_warps=1), (x, y, 16, 2.0, 16),
         lambda: torch.equal(y, 2 * x)),
        ("wide", lambda: kn.wide_kernel[(1, )](*wide_args, num_warps=1), wide_args,
         lambda: out.tolist() == [3.75, 1.0]),
    ]


def _best_us(fn: Callable[[], object], launches: int, batches: int) -> float:
    best = float("inf")
    for _ in range(batches):
        t = time.perf_counter()
        for _ in range(launches):
            fn()
        best = min(best, (time.perf_counter() - t) / launches)
    return best * 1e6


def measure(launches: int) -> tuple:
    """({what: µs per launch} of one round, whether every result was right)."""
    from triton.backends.apple import emulator
    results: Dict[str, float] = {}
    ok = True
    for name, jit_launch, args, check in _cases():
        compiled = jit_launch()  # compiles; returns the CompiledKernel
        ok &= bool(check())
        grid_runner = compiled[(1, 1, 1)]
        results[f"{name} (Triton JIT)"] = _best_us(jit_launch, launches, 5)
        results[f"{name} (compiled kernel)"] = _best_us(lambda: grid_runner(*args), launches, 5)
        ok &= bool(check())
    k = emulator.compile_msl(EMPTY_MSL, "bench_empty")
    a, b = torch.zeros(4), torch.zeros(4)
    results["emulator API"] = _best_us(
        lambda: k.launch(grid=1, threadgroup=32, buffers=[a, b, emulator.Scalar(4, "int")]), launches, 5)
    x, y = torch.arange(16, dtype=torch.float32), torch.zeros(16)
    results["torch.mul(x, 2.0, out=y)"] = _best_us(lambda: torch.mul(x, 2.0, out=y), launches, 5)
    ok &= torch.equal(y, 2 * x)
    return results, ok


TORCH = "torch.mul(x, 2.0, out=y)"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="rounds of every measurement (the best is kept)")
    ap.add_argument("--launches", type=int, default=2000, help="launches per timed batch")
    ap.add_argument("--json", default="")
    opts = ap.parse_args(argv)
    best: Dict[str, float] = {}
    ok = True
    for _ in range(opts.rounds):  # rounds interleave every measurement, so a busy moment hurts all alike
        got, round_ok = measure(opts.launches)
        ok &= round_ok
        for k, v in got.items():
            best[k] = min(v, best.get(k, float("inf")))
    if opts.json:
        Path(opts.json).write_text(json.dumps(dict(us=best, ok=ok), indent=1))
    load = os.getloadavg()
    print(f"Emulator launch overhead, µs per launch (best of {opts.rounds} x 5 x {opts.launches}); baseline: "
          f"{TORCH} in the same process; load average {load[0]:.1f} on {os.cpu_count()} cores")
    base = best[TORCH]
    rows = [(k, f"{v:.1f}", f"{v / base:.1f}x") for k, v in best.items()]
    print(table(("launch", "µs", "vs torch op"), rows))
    if not ok:
        print("a kernel's result was wrong", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

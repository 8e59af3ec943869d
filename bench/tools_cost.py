"""What the emulator's tools cost: wall time of each tutorial-style kernel run plainly, under racecheck, initcheck,
both, and the profiler, and the time of the instrumented build.

    python -m bench.tools_cost [--kernels "softmax,matmul fp16"] [--repeat 3] [--size report|speed]

For every case of bench/cases.py each mode launches the kernel once untimed (in a fresh cache directory: the plain first
launch compiles the kernel to MSL and builds its library, the first launch under racecheck builds its instrumented
library; both are the last column), then `--repeat` times; the table shows the best wall time per mode and its ratio to the
plain launch of the same run. A launch with tools runs on one host thread (that is part of what they cost), so the
plain column is given with one host thread too (TRITON_APPLE_EMULATOR_THREADS=1 for the whole run). Each result is
checked against torch; a wrong one exits with status 1. Nothing asserts a speed.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

from . import cases
from .report_table import table

MODES = [("plain", None), ("race", ("race", )), ("init", ("init", )), ("race,init", ("race", "init")),
         ("profile", "profile")]


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernels", default="", help="comma list of case names (default: all)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--size", default="report", choices=["report", "speed"])
    args = ap.parse_args(argv)
    os.environ["TRITON_APPLE_EMULATOR_THREADS"] = "1"
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="tools_cost_")  # builds are measured, not found
    from triton.backends.apple import emulator as emu

    wanted = [w.strip() for w in args.kernels.split(",") if w.strip()]
    rows, failures = [], []
    emu.compile_msl("#include <metal_stdlib>\nkernel void warm_up() {}\n", "warm_up").launch()  # the runtime and the compat header's PCH
    for c in cases.CASES:
        if wanted and c.name not in wanted:
            continue
        launch = c.launch("cpu", args.size)
        times, builds = {}, {}
        for name, mode in MODES:
            def run():
                if mode is None:
                    return launch.call()
                scope = emu.profile() if mode == "profile" else emu.sanitize(mode)
                with scope:
                    return launch.call()
            builds[name] = _timed(run)  # the first launch builds what this mode needs
            if launch.error() > launch.tol:
                failures.append(f"{c.name} ({name}): wrong result")
            times[name] = min(_timed(run) for _ in range(args.repeat))
        base = times["plain"]
        row = [c.name, f"{base * 1e3:.1f}"]
        row += [f"{times[n] * 1e3:.1f} ({times[n] / base:.0f}x)" for n, _ in MODES[1:]]
        row += [f"{builds['plain']:.2f} / {builds['race']:.2f}"]
        rows.append(row)
    head = ["case", "plain ms"] + [f"{n} ms" for n, _ in MODES[1:]] + ["first launch s: plain / race"]
    print(table(head, rows))
    for f in failures:
        print("WRONG RESULT:", f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

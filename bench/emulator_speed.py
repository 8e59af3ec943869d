"""Speed of the Metal-on-CPU emulator against Triton's interpreter (TRITON_INTERPRET=1), same kernels.

    python bench/emulator_speed.py [--kernels "vector add,matmul fp16"] [--repeat 3] [--json out.json]

For every kernel of bench/tutorial_kernels.py at its "speed" size (vector add of 1M floats, softmax /
layer norm / cumsum / argmax / bias+GELU on 512 x 1000, fp16 matmul 256^3, flash attention 2 x 256 x 64)
each side runs in a fresh subprocess on the same inputs (seeded), launches the kernel once untimed
(compiling it: clang for the emulator), then `--repeat` times; the table shows the best wall time of
each side and their ratio. Both sides check their result against torch; a wrong result makes the exit
status 1. Nothing asserts a speed.

The emulator spreads threadgroups over TRITON_APPLE_EMULATOR_THREADS host threads (one per core by
default); the interpreter runs on one thread with numpy. On a Mac this measures the emulator too
(TRITON_APPLE_DEVICE=emulator is set for its side).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def worker(kernels: list, repeat: int, out: str) -> None:
    """Runs in the subprocess: times each kernel on whatever TRITON_INTERPRET / the driver select."""
    sys.path.insert(0, str(HERE))
    import tutorial_kernels as tk
    results = {}
    for name in kernels:
        case = tk.case(name)
        try:
            launch = case.launch("cpu", "speed")
            t = time.perf_counter()
            launch.call()  # compiles (emulator) / warms up (interpreter)
            first = time.perf_counter() - t
            times = []
            for _ in range(repeat):
                t = time.perf_counter()
                launch.call()
                times.append(time.perf_counter() - t)
            err = launch.error()
            results[name] = dict(best=min(times), first=first, err=err, tol=launch.tol, flops=launch.flops,
                                 bytes=launch.bytes, size=tk.fmt_size(case.sizes["speed"]))
        except Exception as e:  # noqa: BLE001 (reported in the table)
            results[name] = dict(error=tk.describe_error(e))
        print(f"  {os.environ.get('TRITON_INTERPRET') and 'interpreter' or 'emulator'}: {name}", file=sys.stderr,
              flush=True)
    Path(out).write_text(json.dumps(results))


def run_side(side: str, kernels: list, repeat: int) -> dict:
    env = dict(os.environ, TRITON_APPLE_DEVICE="emulator")
    env.pop("TRITON_INTERPRET", None)
    if side == "interpreter":
        env["TRITON_INTERPRET"] = "1"
    with tempfile.TemporaryDirectory(prefix="emulator_speed_") as tmp:
        out = os.path.join(tmp, "result.json")
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", out, "--repeat", str(repeat),
               "--kernels", ",".join(kernels)]
        res = subprocess.run(cmd, env=env)
        if res.returncode != 0:
            raise RuntimeError(f"{side} worker failed (exit status {res.returncode})")
        return json.loads(Path(out).read_text())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernels", default="", help="comma-separated subset of kernel names")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per side after one untimed (default 3)")
    ap.add_argument("--json", default="", help="also write the measurements here")
    ap.add_argument("--worker", default="", help=argparse.SUPPRESS)
    opts = ap.parse_args(argv)
    names = [k.strip() for k in opts.kernels.split(",") if k.strip()]
    if opts.worker:
        worker(names, opts.repeat, opts.worker)
        return 0
    if not names:
        sys.path.insert(0, str(HERE))
        os.environ.setdefault("TRITON_APPLE_DEVICE", "emulator")
        import tutorial_kernels as tk
        names = [c.name for c in tk.CASES]

    emu = run_side("emulator", names, opts.repeat)
    interp = run_side("interpreter", names, opts.repeat)
    threads = os.environ.get("TRITON_APPLE_EMULATOR_THREADS") or f"{os.cpu_count()} (one per core)"
    print(f"Emulator vs TRITON_INTERPRET=1: best of {opts.repeat} warm runs, ms; emulator threads: {threads}")
    head = ("kernel", "size", "emulator", "interpreter", "interp/emu", "emulator first run", "emulator GFLOP/s",
            "check emu / interp")
    rows, failures = [], 0

    def check(r):
        nonlocal failures
        if "error" in r:
            failures += 1
            return "ERROR"
        ok = r["err"] <= r["tol"]
        failures += not ok
        return f"{'ok' if ok else 'FAIL'} {r['err']:.0e}"

    for name in names:
        e, i = emu[name], interp[name]
        row = [name, e.get("size", i.get("size", ""))]
        row.append(f"{1e3 * e['best']:.1f}" if "best" in e else e["error"])
        row.append(f"{1e3 * i['best']:.1f}" if "best" in i else i["error"])
        row.append(f"{i['best'] / e['best']:.1f}x" if "best" in e and "best" in i else "-")
        row.append(f"{1e3 * e['first']:.0f}" if "first" in e else "-")
        row.append(f"{e['flops'] / e['best'] / 1e9:.2f}" if e.get("flops") else "-")
        row.append(f"{check(e)} / {check(i)}")
        rows.append(row)
    widths = [max(len(str(r[k])) for r in rows + [head]) for k in range(len(head))]
    fmt = "| " + " | ".join(f"{{:<{w}}}" for w in widths) + " |"
    print(fmt.format(*head))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print(fmt.format(*r))
    for name in names:
        for side, r in (("emulator", emu[name]), ("interpreter", interp[name])):
            if "error" in r:
                print(f"  {name} on the {side}: {r['error']}")
    if opts.json:
        Path(opts.json).write_text(json.dumps({"emulator": emu, "interpreter": interp}, indent=1))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

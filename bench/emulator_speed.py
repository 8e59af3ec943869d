"""Speed of the Metal-on-CPU emulator against Triton's interpreter (TRITON_INTERPRET=1), same kernels.

    python -m bench.emulator_speed [--kernels "vector add,matmul fp16"] [--repeat 3] [--json out.json]
                                   [--baseline-rev REV]          (from the repository root)

For every case of bench/cases.py at its "speed" size (vector add of 1M floats, softmax /
layer norm / cumsum / argmax / bias+GELU on 512 x 1000, fp16 matmul 256^3, flash attention 2 x 256 x 64)
each side runs in a fresh subprocess on the same inputs (seeded), launches the kernel once untimed
(compiling it: clang for the emulator), then `--repeat` times; the table shows the best wall time of
each side and their ratio. Both sides check their result against torch; a wrong result makes the exit
status 1. Nothing asserts a speed.

The emulator spreads threadgroups over TRITON_APPLE_EMULATOR_THREADS host threads (one per core by
default); the interpreter runs on one thread with numpy. On a Mac this measures the emulator too
(TRITON_APPLE_DEVICE=emulator is set for its side).

`--baseline-rev REV` also measures the emulator of git revision REV in the same run: a third subprocess runs
against REV's backend (bench/revision.py: its whole third_party/apple exported, its emulator finding its own
native sources). Both emulators then run the same MSL (what this tree's compiler generated for each kernel in
the emulator subprocess) on the same inputs, launched through the emulator's own API
(`compile_msl(...).launch(...)`, which REV must have), best of `--repeat`; the second table shows both and the
speed-up. The result of REV's launch is checked too.
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

from . import revision
from .report_table import table

REPO = Path(__file__).resolve().parents[1]


def _best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def _direct_launch(emu, msl: dict, launch, threads: int):
    """A closure launching the saved MSL of a kernel with `emu` (an emulator package) on `launch`'s arguments:
    buffer slot by parameter name, scalars typed as the MSL parameter."""
    kernel = emu.compile_msl(msl["source"], msl["name"])
    buffers = {}
    for p in msl["params"]:
        value = launch.args[p["name"]]
        buffers[p["slot"]] = value if p["kind"] == "pointer" else emu.Scalar(value, p["msl_type"])
    grid = tuple(launch.grid) + (1,) * (3 - len(launch.grid))
    return lambda: kernel.launch(grid, (threads, 1, 1), buffers)


def worker(kernels: list, repeat: int, out: str, msl_dir: str = "", baseline: bool = False) -> None:
    """Runs in the subprocess: times each kernel on whatever TRITON_INTERPRET / the driver select. With
    `msl_dir` (emulator side) it also saves each kernel's MSL there and times launching it directly; with
    `baseline` (run against a revision's backend by bench/revision.py) it only does the latter, with that
    revision's emulator, on the MSL saved in `msl_dir`."""
    from . import cases as tk
    if baseline:
        from triton.backends.apple import emulator as emu
    side = "baseline" if baseline else os.environ.get("TRITON_INTERPRET") and "interpreter" or "emulator"
    results = {}
    for name in kernels:
        case = tk.case(name)
        saved = Path(msl_dir) / (name.replace(" ", "_") + ".json") if msl_dir else None
        try:
            launch = case.launch("cpu", "speed")
            if baseline:
                msl = json.loads(saved.read_text())
                run = _direct_launch(emu, msl, launch, msl["threads"])
                t = time.perf_counter()
                run()  # compiles
                first = time.perf_counter() - t
                results[name] = dict(direct=_best(run, repeat), first=first, err=launch.error(), tol=launch.tol)
                print(f"  {side}: {name}", file=sys.stderr, flush=True)
                continue
            t = time.perf_counter()
            compiled = launch.call()  # compiles (emulator) / warms up (interpreter)
            first = time.perf_counter() - t
            best = _best(launch.call, repeat)
            err = launch.error()
            results[name] = dict(best=best, first=first, err=err, tol=launch.tol, flops=launch.flops,
                                 bytes=launch.bytes, size=tk.fmt_size(case.sizes["speed"]))
            if saved is not None:
                import triton.backends.apple.emulator as this_emu
                source = compiled.asm["msl"]
                msl = dict(source=source if isinstance(source, str) else source.decode(), name=compiled.metadata.name,
                           params=json.loads(compiled.metadata.kernel_signature),
                           threads=launch.num_warps * 32)
                saved.write_text(json.dumps(msl))
                run = _direct_launch(this_emu, msl, launch, msl["threads"])
                run()
                results[name].update(direct=_best(run, repeat), direct_err=launch.error())
        except Exception as e:  # noqa: BLE001 (reported in the table)
            results[name] = dict(error=tk.describe_error(e))
        print(f"  {side}: {name}", file=sys.stderr, flush=True)
    Path(out).write_text(json.dumps(results))


def run_side(side: str, kernels: list, repeat: int, msl_dir: str = "", base: revision.Revision = None) -> dict:
    """One side's measurements, from a fresh subprocess (`base`: against that revision's backend)."""
    with tempfile.TemporaryDirectory(prefix="emulator_speed_") as tmp:
        out = os.path.join(tmp, "result.json")
        args = ["--worker", out, "--repeat", str(repeat), "--kernels", ",".join(kernels)]
        if msl_dir:
            args += ["--msl-dir", msl_dir]
        if base is not None:
            base.run("bench.emulator_speed", args + ["--baseline-worker"])
            return json.loads(Path(out).read_text())
        env = dict(os.environ, TRITON_APPLE_DEVICE="emulator")
        env.pop("TRITON_INTERPRET", None)
        if side == "interpreter":
            env["TRITON_INTERPRET"] = "1"
        res = subprocess.run([sys.executable, "-m", "bench.emulator_speed", *args], cwd=REPO, env=env)
        if res.returncode != 0:
            raise RuntimeError(f"{side} worker failed (exit status {res.returncode})")
        return json.loads(Path(out).read_text())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernels", default="", help="comma-separated subset of kernel names")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per side after one untimed (default 3)")
    ap.add_argument("--json", default="", help="also write the measurements here")
    ap.add_argument("--baseline-rev", default="",
                    help="also time the emulator of this git revision (same MSL, same run; see below)")
    ap.add_argument("--worker", default="", help=argparse.SUPPRESS)
    ap.add_argument("--msl-dir", default="", help=argparse.SUPPRESS)
    ap.add_argument("--baseline-worker", action="store_true", help=argparse.SUPPRESS)
    opts = ap.parse_args(argv)
    names = [k.strip() for k in opts.kernels.split(",") if k.strip()]
    if opts.worker:
        worker(names, opts.repeat, opts.worker, opts.msl_dir, opts.baseline_worker)
        return 0
    if not names:
        os.environ.setdefault("TRITON_APPLE_DEVICE", "emulator")
        from . import cases as tk
        names = [c.name for c in tk.CASES]

    base, commit = None, ""
    with tempfile.TemporaryDirectory(prefix="emulator_speed_msl_") as msl_dir:
        if opts.baseline_rev:
            with revision.export(opts.baseline_rev) as rev:
                commit = rev.commit
                emu = run_side("emulator", names, opts.repeat, msl_dir)
                base = run_side("baseline", names, opts.repeat, msl_dir, rev)
        else:
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
    print(table(head, rows))
    for name in names:
        for side, r in (("emulator", emu[name]), ("interpreter", interp[name])):
            if "error" in r:
                print(f"  {name} on the {side}: {r['error']}")
    if base is not None:
        print()
        print(f"This tree's emulator vs the emulator of {opts.baseline_rev} ({commit[:12]}), same MSL and inputs, "
              f"launched with compile_msl(...).launch(...): best of {opts.repeat} warm runs, ms")
        head = ("kernel", "this tree", f"baseline {opts.baseline_rev}", "baseline/this", "interp/this",
                "check this / baseline")
        rows = []
        for name in names:
            e, b, i = emu[name], base[name], interp[name]
            row = [name, f"{1e3 * e['direct']:.1f}" if "direct" in e else e.get("error", "-"),
                   f"{1e3 * b['direct']:.1f}" if "direct" in b else b.get("error", "-")]
            row.append(f"{b['direct'] / e['direct']:.1f}x" if "direct" in e and "direct" in b else "-")
            row.append(f"{i['best'] / e['direct']:.1f}x" if "direct" in e and "best" in i else "-")
            ok_e = "direct_err" in e and e["direct_err"] <= e["tol"]
            ok_b = "err" in b and b["err"] <= b["tol"]
            failures += (not ok_e) + (not ok_b)
            row.append(f"{'ok' if ok_e else 'FAIL'} / {'ok' if ok_b else 'FAIL'}")
            rows.append(row)
        print(table(head, rows))
    if opts.json:
        Path(opts.json).write_text(json.dumps({"emulator": emu, "interpreter": interp, "baseline": base,
                                               "baseline_commit": commit}, indent=1))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

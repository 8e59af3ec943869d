"""Launch overhead on the Metal-on-CPU emulator: µs per launch of tiny kernels, native launcher vs the ctypes one.

    python bench/launch_overhead.py [--baseline REV] [--rounds 3] [--launches 2000] [--json out.json]

What is timed, per kernel (best of `--rounds` x 5 batches of `--launches` launches, after one warm-up launch that
compiles it), one grid of one threadgroup of 32 threads:

* `empty`: a kernel with one pointer and one int argument and no body;
* `tiny`: 16 floats loaded, scaled by a float argument and stored (2 pointers, an int, a float);
* `wide`: 8 pointers and 4 scalars (int, long, float, float), two stores: the cost per argument;

each through the two entry points: Triton's JIT (`kernel[grid](...)`: Triton's argument binder, then our
launcher) and the compiled kernel directly (`compiled[grid](...)`: our launcher alone). `emulator API` is
`EmulatorKernel.launch` of an empty MSL kernel with two tensors and a scalar.

The baseline side runs the same script on a copy of this tree in which the launch code (backend/driver.py,
backend/emulator/runtime.py, backend/emulator/__init__.py, backend/driver.c) is that of git revision REV: by default the last
revision that marshalled launches with ctypes. Everything else, the emulator runtime included, is this tree's,
so the table compares the launchers alone, on the same machine, in the same run. The two sides alternate
(`--rounds` subprocesses each) so that a busy machine hurts both alike. Every kernel's result is checked
against torch on both sides; a wrong result makes the exit status 1. Nothing asserts a speed.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CTYPES_LAUNCHER = "c49c151675c8"  # the last revision whose emulator launches were marshalled with ctypes
LAUNCH_FILES = ("third_party/apple/backend/driver.py", "third_party/apple/backend/emulator/runtime.py",
                "third_party/apple/backend/emulator/__init__.py")

EMPTY_MSL = """#include <metal_stdlib>
using namespace metal;
kernel void bench_empty(device float* x [[buffer(0)]], device float* y [[buffer(1)]],
                        constant int& n [[buffer(2)]], uint i [[thread_position_in_grid]]) {
    if (n < 0 && i == 0) y[0] = x[0];
}
"""


def _kernels():
    import triton
    import triton.language as tl

    @triton.jit
    def empty(x_ptr, n):
        pass

    @triton.jit
    def tiny(x_ptr, y_ptr, n, s, BLOCK: tl.constexpr):
        i = tl.arange(0, BLOCK)
        m = i < n
        tl.store(y_ptr + i, tl.load(x_ptr + i, mask=m) * s, mask=m)

    @triton.jit
    def wide(a, b, c, d, e, f, g, out, n, big, s, h):
        if tl.program_id(0) == 0:
            tl.store(out, n + s + h)
            tl.store(out + 1, (big >> 40).to(tl.float32))

    return empty, tiny, wide


def _cases():
    """(name, JIT launch, the compiled kernel's arguments (constexprs included, as Triton passes them), check)."""
    import torch
    empty, tiny, wide = _kernels()
    x = torch.arange(16, dtype=torch.float32)
    y = torch.zeros(16)
    ptrs = [torch.zeros(4) for _ in range(7)]
    out = torch.zeros(2)
    wide_args = (*ptrs, out, 3, 2**40 + 5, 0.5, 0.25)
    return [
        ("empty", lambda: empty[(1, )](x, 16, num_warps=1), (x, 16), lambda: True),
        ("tiny", lambda: tiny[(1, )](x, y, 16, 2.0, BLOCK=16, num_warps=1), (x, y, 16, 2.0, 16),
         lambda: torch.equal(y, 2 * x)),
        ("wide", lambda: wide[(1, )](*wide_args, num_warps=1), wide_args, lambda: out.tolist() == [3.75, 1.0]),
    ]


def _best_us(fn, launches: int, batches: int) -> float:
    best = float("inf")
    for _ in range(batches):
        t = time.perf_counter()
        for _ in range(launches):
            fn()
        best = min(best, (time.perf_counter() - t) / launches)
    return best * 1e6


def worker(launches: int, out: str) -> None:
    """Runs in a subprocess: times every case with whatever launcher this interpreter imports."""
    import torch
    import triton.backends.apple.driver as driver
    from triton.backends.apple import emulator
    results, ok = {}, True
    for name, jit_launch, args, check in _cases():
        compiled = jit_launch()  # compiles; returns the CompiledKernel
        if not check():
            ok = False
        grid_runner = compiled[(1, 1, 1)]
        results[f"{name} (Triton JIT)"] = _best_us(jit_launch, launches, 5)
        results[f"{name} (compiled kernel)"] = _best_us(lambda: grid_runner(*args), launches, 5)
        if not check():
            ok = False
    k = emulator.compile_msl(EMPTY_MSL, "bench_empty")
    a, b = torch.zeros(4), torch.zeros(4)
    results["emulator API"] = _best_us(
        lambda: k.launch(grid=1, threadgroup=32, buffers=[a, b, emulator.Scalar(4, "int")]), launches, 5)
    results["_launcher"] = driver.__file__
    Path(out).write_text(json.dumps({"us": results, "ok": ok}))


_HOOK = '''
import importlib.abc, importlib.machinery, importlib.util, os, sys
_ROOTS = {"triton.backends.apple": os.path.join(%(tree)r, "third_party/apple/backend"),
          "triton.language.extra.apple": os.path.join(%(tree)r, "third_party/apple/language/apple")}
class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname in _ROOTS:
            d = _ROOTS[fullname]
            return importlib.util.spec_from_file_location(fullname, os.path.join(d, "__init__.py"),
                                                          submodule_search_locations=[d])
        parent = fullname.rpartition(".")[0]
        if any(fullname.startswith(r + ".") for r in _ROOTS) and parent in sys.modules:
            return importlib.machinery.PathFinder.find_spec(fullname, sys.modules[parent].__path__)
        return None
sys.meta_path.insert(0, _Finder())
'''


def baseline_tree(rev: str, tmp: Path) -> Path:
    """A copy of this tree's third_party/apple with the launch code of `rev`."""
    tree = tmp / "tree"
    shutil.copytree(REPO / "third_party" / "apple", tree / "third_party" / "apple",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for path in LAUNCH_FILES + ("third_party/apple/backend/driver.c", ):
        got = subprocess.run(["git", "-C", str(REPO), "show", f"{rev}:{path}"], capture_output=True)
        if got.returncode == 0:
            (tree / path).write_bytes(got.stdout)
        elif path.endswith("driver.c"):  # a revision before the native launcher
            (tree / path).unlink(missing_ok=True)
        else:
            raise SystemExit(f"git show {rev}:{path} failed: {got.stderr.decode().strip()}")
    hook = tmp / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(_HOOK % {"tree": str(tree)})
    return hook


def run_side(hook, launches: int, tmp: Path, tag: str) -> dict:
    out = tmp / f"{tag}.json"
    env = dict(os.environ, TRITON_APPLE_DEVICE="emulator")
    if hook is not None:
        env["PYTHONPATH"] = str(hook) + os.pathsep + env.get("PYTHONPATH", "")
    subprocess.run([sys.executable, str(Path(__file__).resolve()), "--worker", str(out), "--launches",
                    str(launches)], env=env, check=True)
    return json.loads(out.read_text())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", default=CTYPES_LAUNCHER, help="git revision of the launch code to compare with")
    ap.add_argument("--rounds", type=int, default=3, help="subprocesses per side, alternating")
    ap.add_argument("--launches", type=int, default=2000, help="launches per timed batch")
    ap.add_argument("--json", default="")
    ap.add_argument("--worker", default="", help=argparse.SUPPRESS)
    opts = ap.parse_args(argv)
    if opts.worker:
        worker(opts.launches, opts.worker)
        return 0
    best = {"this tree": {}, "baseline": {}}
    ok = True
    with tempfile.TemporaryDirectory(prefix="launch_overhead_") as tmp:
        tmp = Path(tmp)
        hook = baseline_tree(opts.baseline, tmp)
        baseline_error = None
        for r in range(opts.rounds):
            for side, h in (("this tree", None), ("baseline", hook)):
                if side == "baseline" and baseline_error:
                    continue
                try:
                    got = run_side(h, opts.launches, tmp, f"{side.replace(' ', '_')}{r}")
                except subprocess.CalledProcessError as e:
                    if side != "baseline":
                        raise
                    # e.g. the runtime's ABI moved on from what the old launch code knows
                    baseline_error = f"the baseline side failed (exit status {e.returncode}; its output is above)"
                    continue
                ok &= got["ok"]
                launcher = got["us"].pop("_launcher")
                if side == "baseline":
                    assert launcher.startswith(str(tmp)), launcher
                for k, v in got["us"].items():
                    best[side][k] = min(v, best[side].get(k, float("inf")))
    if opts.json:
        Path(opts.json).write_text(json.dumps(dict(best, baseline_revision=opts.baseline, baseline_error=baseline_error,
                                                   ok=ok), indent=1))
    load = os.getloadavg()
    print(f"Emulator launch overhead, µs per launch (best of {opts.rounds} x 5 x {opts.launches}); baseline: launch "
          f"code of {opts.baseline}; load average {load[0]:.1f} on {os.cpu_count()} cores")
    rows = [("launch", "this tree", f"baseline {opts.baseline}", "speed-up")]
    for k, v in best["this tree"].items():
        b = best["baseline"].get(k)
        rows.append((k, f"{v:.1f}", f"{b:.1f}" if b else "-", f"{b / v:.2f}x" if b else "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for i, r in enumerate(rows):
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))
        if i == 0:
            print("  ".join("-" * w for w in widths))
    if baseline_error:
        print(baseline_error, file=sys.stderr)
    if not ok:
        print("a kernel's result was wrong", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

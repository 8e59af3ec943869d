"""Long profile of the differential fuzzer (apple backend on the emulator vs Triton's interpreter).

    PYTHONPATH=test python test/fuzz/run_long.py --examples 2000 [--seed 0] [--out DIR] [--layouts 1d,2d]
                                 [--dtypes int8,float32,...] [--depth 3] [--time-budget SECONDS]
                                 [--num-warps 1,2,4,8] [--no-bool-outputs] [-v]

(run from the repository root; the grammar and harness are ``support.fuzz_grammar`` and ``support.fuzz_harness``
in test/support, which ``PYTHONPATH=test`` makes importable as pytest's ``pythonpath`` setting does for the
tests. ``python -m test.fuzz.run_long`` does not work because ``test`` is also the name of a standard-library
package.)

Runs ``--examples`` generated kernels from the grammar in ``support/fuzz_grammar.py`` without stopping at
the first failure and without shrinking; each failing case is written to ``--out`` (default
``$TMPDIR/triton_apple_fuzz_failures``) as ``<n>.py`` (the kernel) and ``<n>.txt`` (shapes, seed, inputs description,
differences), and a summary grouped by failure signature is printed at the end. Exit status 1 if
anything failed. ``--seed`` makes the run reproducible (hypothesis is derandomised with that seed).
Compiled kernels are cached under ``$TRITON_CACHE_DIR`` like any Triton kernel.
"""
import argparse
import collections
import os
import re
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TRITON_APPLE_DEVICE", "emulator")


def signature(res) -> str:
    if res.error:
        text = res.error.splitlines()
        last = [ln for ln in text if ln.strip()][-1] if text else res.error
        sig = res.error.split(":", 1)[0] + ": " + last
    else:
        sig = "mismatch: " + ", ".join(sorted({m.kind for m in res.mismatches}))
    sig = re.sub(r"0x[0-9a-f]+", "0x?", sig)
    sig = re.sub(r"\d+", "N", sig)
    return sig[:200]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--examples", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "triton_apple_fuzz_failures"))
    ap.add_argument("--layouts", default="1d,2d")
    ap.add_argument("--dtypes", default="")
    ap.add_argument("--depth", type=int, default=3)
    ap.add_argument("--num-warps", default="1,2,4,8", help="comma-separated choices")
    ap.add_argument("--no-bool-outputs", action="store_true", help="do not store comparisons to torch.bool")
    ap.add_argument("--time-budget", type=float, default=0.0, help="stop generating after this many seconds")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)

    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed
    from support.fuzz_grammar import IO_TYPES, kernel_specs
    from support.fuzz_harness import report, run_case

    out_dir = Path(args.out)
    dtypes = tuple(args.dtypes.split(",")) if args.dtypes else IO_TYPES
    strategy = kernel_specs(layouts=tuple(args.layouts.split(",")), dtypes=dtypes, max_depth=args.depth,
                            bool_outputs=not args.no_bool_outputs,
                            num_warps=tuple(int(w) for w in args.num_warps.split(",")))
    stats = collections.Counter()
    groups = collections.defaultdict(list)
    t0 = time.time()

    @hseed(args.seed)
    @settings(max_examples=args.examples, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def one(spec):
        if args.time_budget and time.time() - t0 > args.time_budget:
            stats["not run (time budget)"] += 1
            return
        res = run_case(spec)
        stats["run"] += 1
        stats["skipped elements"] += res.skipped
        stats[spec.layout] += 1
        stats["in:" + spec.inputs[0].dtype] += 1
        for o in spec.outputs:
            stats["out:" + o.kind] += 1
        if res.ok:
            stats["passed"] += 1
        else:
            stats["failed"] += 1
            sig = signature(res)
            n = stats["failed"]
            groups[sig].append(n)
            out_dir.mkdir(parents=True, exist_ok=True)
            (out_dir / f"{n}.py").write_text(spec.source)
            (out_dir / f"{n}.txt").write_text(report(spec, res))
            if args.verbose:
                print(f"[{n}] {sig}", flush=True)
        if args.verbose and stats["run"] % 50 == 0:
            print(f"{stats['run']} run, {stats['failed']} failed, {time.time() - t0:.0f} s", flush=True)

    one()
    dt = time.time() - t0
    print(f"\n{stats['run']} kernels in {dt:.0f} s: {stats['passed']} passed, {stats['failed']} failed; "
          f"{stats['skipped elements']} sum elements skipped (possible overflow)")
    print("coverage:", ", ".join(f"{k}={v}" for k, v in sorted(stats.items()) if ":" in k or k in ("1d", "2d")))
    if groups:
        print(f"failures by signature (cases written to {out_dir}/):")
        for sig, cases in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            print(f"  {len(cases):4d}  {sig}   e.g. {cases[:5]}")
    return 1 if groups else 0


if __name__ == "__main__":
    sys.exit(main())

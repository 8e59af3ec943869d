"""Code-generation report: what the apple backend emits for tutorial-style kernels, next to a baseline.

    python -m bench.codegen_report                        # baseline: the previous version of the backend
    python -m bench.codegen_report --baseline <rev>       # any revision git knows (a sha, a tag, HEAD~5)
    python -m bench.codegen_report --baseline bench/codegen_baseline.json   # a stored baseline
    python -m bench.codegen_report --save-baseline out.json                 # store this tree's numbers
    python -m bench.codegen_report --save-baseline bench/codegen_baseline.json --of-revision HEAD

(from the repository root). For each case of bench/cases.py (vector add, softmax, layer norm fwd, cumsum, argmax, fused
bias+GELU, fp16 matmul, flash-attention fwd) it compiles the kernel for GPUTarget("metal", <family>, 32)
with the specialisation Triton's JIT derives from the report-sized arguments, and reads off the MSL (see
bench/msl_stats.py for the exact definitions):

  MSL lines (code lines), helper functions, threadgroup barriers, threadgroup memory bytes
  (metadata.shared), the widest global load / store in bytes and how many load/store ops of tensors only
  access scalars (a load or store of one value, such as a row's mean, is listed apart: it has nothing to
  vectorise), SIMD-group builtin calls vs shuffle call sites, and for dot kernels the simdgroup_matrix
  loads / multiply-accumulates / stores and barriers one simdgroup executes per K step.

The baseline is the same numbers for the backend (`third_party/apple`) of another git revision, by
default the previous version of the backend: HEAD if the working tree changes third_party/apple, else the
parent of the last commit that changed it (`--baseline HEAD~1`, or any revision, to choose). This script
runs again in a subprocess against that revision's backend (bench/revision.py: exported with `git archive`,
its own TRITON_CACHE_DIR). The kernels, the shapes and this script are the working tree's on both sides, so
only the backend differs. A cell shows `now (baseline)` where they differ.

Then every kernel is launched once through the JIT on the active device (the emulator here, MPS on a Mac)
and compared with torch: max |out - expected| / (1 + |expected|) against the case's tolerance. A wrong
result makes the exit status 1; nothing here judges the numbers of the code itself.
"""
from __future__ import annotations

import argparse
import json
import re
import os
import sys
import time
from pathlib import Path

from . import revision

HERE = Path(__file__).resolve().parent
BASELINE_JSON = HERE / "codegen_baseline.json"


def _parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--baseline", default="auto",
                    help="git revision, a JSON file written by --save-baseline, or auto (default): HEAD when "
                    "third_party/apple has uncommitted changes, else the parent of the last commit that changed it")
    ap.add_argument("--no-baseline", action="store_true", help="only this tree's numbers")
    ap.add_argument("--no-run", action="store_true", help="do not launch the kernels (no correctness column)")
    ap.add_argument("--family", default="apple7", help="GPU family of the target compiled for (default apple7)")
    ap.add_argument("--kernels", default="", help="comma-separated subset of kernel names")
    ap.add_argument("--json", default="", help="write this run's numbers (and the baseline's) here")
    ap.add_argument("--save-baseline", default="", help="write this tree's numbers as a baseline JSON here")
    ap.add_argument("--of-revision", default="",
                    help="with --save-baseline: store the numbers of this git revision's backend instead, and exit")
    ap.add_argument("--dump", default="", help="write each kernel's MSL to this directory")
    # internal: the baseline subprocess (run against the revision's backend by bench/revision.py)
    ap.add_argument("--collect-only", action="store_true", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


OPTS = _parse_args(sys.argv[1:]) if __name__ == "__main__" else None
if OPTS is not None and OPTS.collect_only:
    os.environ["TRITON_APPLE_DEVICE"] = "emulator"  # compiling needs no device

import torch  # noqa: E402
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402

from . import cases as tk  # noqa: E402
from . import msl_stats  # noqa: E402
from .cases import compile_like_jit  # noqa: E402
from .msl_stats import global_accesses, msl_sections  # noqa: E402

# a pointer to one value (`device float* v0 = y_ptr + x;`), as opposed to a tensor's array of pointers
_ONE_POINTER = re.compile(r"device (?:const )?\w+\* (\w+) = ")
_DEREF = re.compile(r"(?<![\w)\]])\*([A-Za-z_]\w*)")


def _one_element(msl: str) -> set:
    """(op, where) of the loads/stores that move a single value through a pointer to one value."""
    single = set(_ONE_POINTER.findall(msl))
    out = set()
    for sec in msl_sections(msl):
        if sec.op in ("tt.load", "tt.store"):
            derefs = _DEREF.findall("\n".join(sec.body))
            if derefs and all(d in single for d in derefs):
                out.add((sec.op, sec.where))
    return out

METRICS = ("lines", "code_lines", "functions", "barriers", "smem", "load_bytes", "store_bytes", "scalar_ops",
           "mem_ops", "simd_builtins", "shuffles", "k_loads", "k_mmas", "k_stores", "k_barriers")


def kernel_numbers(case: tk.Case, family: str, dump: str = "") -> dict:
    """The MSL numbers of one kernel compiled like the JIT would for its report-sized arguments."""
    launch = case.launch("cpu", "report")  # tensors only supply dtypes and the divisibility specialisation
    kernel = compile_like_jit(launch.fn, launch.args, launch.constexprs, launch.num_warps,
                              GPUTarget("metal", family, 32))
    msl = kernel.asm["msl"]
    msl = msl.decode() if isinstance(msl, bytes) else msl
    if dump:
        os.makedirs(dump, exist_ok=True)
        Path(dump, case.name.replace(" ", "_").replace("+", "_") + ".msl").write_text(msl)
    st = msl_stats.msl_stats(msl)
    one = _one_element(msl)
    every = global_accesses(msl)
    single_sites = [f"{a.op} {a.where[0]}:{a.where[1]}" for a in every if not a.vector and (a.op, a.where) in one]
    acc = [a for a in every if a.vector or (a.op, a.where) not in one]  # accesses of tensors
    loads = [a.width for a in every if a.op == "tt.load"]
    stores = [a.width for a in every if a.op == "tt.store"]
    k = st.per_k_step
    return dict(lines=st.lines, code_lines=st.code_lines, functions=st.functions, barriers=st.barriers,
                smem=int(kernel.metadata.shared), load_bytes=max(loads, default=0), store_bytes=max(stores, default=0),
                scalar_ops=sum(1 for a in acc if not a.vector), mem_ops=len(acc), simd_builtins=st.simd_builtins,
                shuffles=st.shuffles, k_loads=k.loads if k else None, k_mmas=k.mmas if k else None,
                k_stores=k.stores if k else None, k_barriers=k.barriers if k else None,
                scalar_sites=[f"{a.op} {a.where[0]}:{a.where[1]}" for a in acc if not a.vector],
                single_sites=single_sites)


def collect(cases, family: str, dump: str = "") -> dict:
    out = {}
    for case in cases:
        try:
            out[case.name] = kernel_numbers(case, family, dump)
        except Exception as e:  # noqa: BLE001 (a baseline may not compile a kernel: reported in the table)
            out[case.name] = {"error": tk.describe_error(e)}
        print(f"  compiled {case.name}", file=sys.stderr, flush=True)
    return out


def baseline_from_revision(rev: str, family: str, kernels: str) -> dict:
    """The numbers of git revision `rev`'s backend, compiled in a subprocess against that revision."""
    with revision.export(rev) as base:
        out = base.tmp / "baseline.json"
        args = ["--collect-only", "--json", str(out), "--family", family] + (["--kernels", kernels] if kernels else [])
        base.run("bench.codegen_report", args, capture=True)
        data = json.loads(out.read_text())
        data.update(revision=base.commit, subject=base.subject,
                    same_backend_as_worktree=revision.same_backend_as_worktree(base.commit))
    return data


def check_on_device(case: tk.Case, device) -> tuple:
    """(ok, cell text) of one JIT launch on `device` against torch."""
    try:
        launch = case.launch(device, "report")
        t = time.perf_counter()
        launch.call()
        if device.type == "mps":
            torch.mps.synchronize()
        err = launch.error()
    except Exception as e:  # noqa: BLE001 (a failing kernel is a row of the report)
        return False, f"FAIL {tk.describe_error(e)}"
    ok = err <= launch.tol
    return ok, f"{'ok' if ok else 'FAIL'} {err:.1e} <= {launch.tol:.0e} ({time.perf_counter() - t:.1f}s)"


def _cell(now: dict, base: dict, keys, fmt=lambda *v: "/".join("-" if x is None else str(x) for x in v)) -> str:
    if "error" in now:
        return "error"
    text = fmt(*(now.get(k) for k in keys))
    if base is None:
        return text
    if "error" in base:
        return f"{text} (error)"
    old = fmt(*(base.get(k) for k in keys))
    return text if old == text else f"{text} ({old})"


COLUMNS = [
    ("MSL lines/code", ("lines", "code_lines"), None),
    ("helpers", ("functions", ), None),
    ("barriers", ("barriers", ), None),
    ("tg bytes", ("smem", ), None),
    ("widest ld/st B", ("load_bytes", "store_bytes"), None),
    ("scalar mem ops", ("scalar_ops", "mem_ops"), lambda a, b: f"{a}/{b}"),
    ("SIMD builtins/shuffles", ("simd_builtins", "shuffles"), None),
    ("per K step ld/mma/st, bar", ("k_loads", "k_mmas", "k_stores", "k_barriers"),
     lambda a, b, c, d: "-" if b is None else f"{a}/{b}/{c}, {d}"),
]


def render(now: dict, base: dict, checks: dict) -> str:
    head = ["kernel"] + [c[0] for c in COLUMNS] + (["check vs torch"] if checks else [])
    rows = []
    for name, numbers in now.items():
        b = base.get(name) if base is not None else None
        row = [name]
        for _, keys, fmt in COLUMNS:
            row.append(_cell(numbers, b, keys, fmt) if fmt else _cell(numbers, b, keys))
        if checks:
            row.append(checks.get(name, ""))
        rows.append(row)
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    line = "| " + " | ".join(f"{{:<{w}}}" for w in widths) + " |"
    out = [line.format(*head), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line.format(*r) for r in rows]
    return "\n".join(out)


def main(opts) -> int:
    if opts.save_baseline and opts.of_revision:
        data = baseline_from_revision(opts.of_revision, opts.family, opts.kernels)
        data.pop("same_backend_as_worktree", None)
        Path(opts.save_baseline).write_text(json.dumps(data, indent=1) + "\n")
        print(f"wrote {opts.save_baseline}: {data['revision'][:10]} {data['subject'][:72]}")
        return 0
    cases = tk.CASES
    if opts.kernels:
        wanted = [k.strip() for k in opts.kernels.split(",")]
        cases = [tk.case(k) for k in wanted]
    now = collect(cases, opts.family, opts.dump)
    if opts.collect_only:
        Path(opts.json).write_text(json.dumps({"family": opts.family, "kernels": now}, indent=1))
        return 0

    base, base_desc = None, ""
    if not opts.no_baseline:
        if opts.baseline.endswith(".json"):
            base = json.loads(Path(opts.baseline).read_text())
            base_desc = f"stored baseline {opts.baseline}"
        else:
            rev, why = (revision.previous_backend() if opts.baseline == "auto" else (opts.baseline, ""))
            try:
                base = baseline_from_revision(rev, opts.family, opts.kernels)
                base_desc = f"git {rev}{f' ({why})' if why else ''}"
            except RuntimeError as e:  # e.g. a revision whose backend does not import: report without it
                print(f"no baseline: {e}", file=sys.stderr)
                base, base_desc = None, ""
        if base is not None and base.get("revision"):
            base_desc += f" = {base['revision'][:10]} \"{base.get('subject', '')[:72]}\""
        if base is not None and base.get("same_backend_as_worktree"):
            base_desc += " (its third_party/apple is identical to the working tree's)"

    checks, failures = {}, 0
    device = triton.runtime.driver.active.get_active_torch_device()
    if not opts.no_run:
        for case in cases:
            ok, text = check_on_device(case, device)
            checks[case.name] = text
            failures += not ok

    print(f"Generated MSL, target metal/{opts.family}; triton {triton.__version__}; "
          f"checks on {device.type}{' (emulator)' if device.type == 'cpu' else ''}")
    if base is not None:
        print(f"cells: now (baseline) where they differ; baseline: {base_desc}")
    print(render(now, base["kernels"] if base else None, checks))
    print("\nscalar-only global accesses of tensors (file:line of the op):")
    for name, numbers in now.items():
        if numbers.get("scalar_sites"):
            print(f"  {name}: {', '.join(numbers['scalar_sites'])}")
    print("one-value loads/stores (not counted above: nothing to vectorise):")
    for name, numbers in now.items():
        if numbers.get("single_sites"):
            print(f"  {name}: {', '.join(numbers['single_sites'])}")
        if "error" in numbers:
            print(f"  {name}: compile error: {numbers['error']}")
    if base is not None:
        for name, numbers in base["kernels"].items():
            if "error" in numbers:
                print(f"  baseline {name}: {numbers['error']}")

    if opts.json:
        Path(opts.json).write_text(json.dumps({"now": now, "baseline": base, "checks": checks}, indent=1))
    if opts.save_baseline:
        sha = revision.git("rev-parse", "HEAD", check=False)
        dirty = revision.backend_dirty()
        Path(opts.save_baseline).write_text(json.dumps({
            "revision": sha, "subject": revision.git("log", "-1", "--format=%s", check=False) +
            (" + uncommitted third_party/apple changes" if dirty else ""), "family": opts.family, "kernels": now
        }, indent=1) + "\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(OPTS))

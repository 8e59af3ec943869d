"""Code-generation report: what the apple backend emits for tutorial-style kernels, next to a baseline.

    python bench/codegen_report.py                        # baseline: the previous version of the backend
    python bench/codegen_report.py --baseline <rev>       # any revision git knows (a sha, a tag, HEAD~5)
    python bench/codegen_report.py --baseline bench/codegen_baseline.json   # a stored baseline
    python bench/codegen_report.py --save-baseline out.json                 # store this tree's numbers
    python bench/codegen_report.py --save-baseline bench/codegen_baseline.json --of-revision HEAD

For each kernel of bench/tutorial_kernels.py (vector add, softmax, layer norm fwd, cumsum, argmax, fused
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
parent of the last commit that changed it (`--baseline HEAD~1`, or any revision, to choose). That
revision's `third_party/apple` is extracted with `git archive` into a temporary directory and this script
runs again in a subprocess whose `triton.backends.apple` / `triton.language.extra.apple` imports are
redirected there (fresh TRITON_CACHE_DIR, no network). The kernels, the shapes and this script are the
working tree's on both sides, so only the backend differs. A cell shows `now (baseline)` where they differ.

Then every kernel is launched once through the JIT on the active device (the emulator here, MPS on a Mac)
and compared with torch: max |out - expected| / (1 + |expected|) against the case's tolerance. A wrong
result makes the exit status 1; nothing here judges the numbers of the code itself.
"""
from __future__ import annotations

import argparse
import importlib.abc
import importlib.util
import json
import re
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BASELINE_JSON = HERE / "codegen_baseline.json"
_REDIRECTED = {"triton.backends.apple": "backend", "triton.language.extra.apple": "language/apple"}


class _BackendRedirect(importlib.abc.MetaPathFinder):
    """Imports triton.backends.apple and triton.language.extra.apple (and their submodules) from another
    checkout of third_party/apple, ahead of however the installed backend is found. A module that checkout
    does not have is not found at all (rather than taken from the installed tree)."""

    def __init__(self, apple_root: Path):
        self.roots = {name: apple_root / rel for name, rel in _REDIRECTED.items()}

    def location(self, fullname: str):
        """(claimed, path of the module's file or None) for a module name."""
        for name, root in self.roots.items():
            if fullname == name or fullname.startswith(name + "."):
                base = root.joinpath(*fullname[len(name):].lstrip(".").split(".")) if fullname != name else root
                if (base / "__init__.py").exists():
                    return True, base / "__init__.py"
                return True, base.with_suffix(".py") if base.with_suffix(".py").exists() else None
        return False, None

    def find_spec(self, fullname, path=None, target=None):
        claimed, file = self.location(fullname)
        if not claimed:
            return None
        if file is None:
            raise ModuleNotFoundError(f"{fullname} is not in the baseline revision", name=fullname)
        if file.name == "__init__.py":
            return importlib.util.spec_from_file_location(fullname, file, submodule_search_locations=[str(file.parent)])
        return importlib.util.spec_from_file_location(fullname, file)

    def install(self) -> None:
        """Goes first on sys.meta_path; Triton backends registered (by entry point) under a redirected package
        that the baseline revision does not have are not discovered."""
        import importlib.metadata as md
        sys.meta_path.insert(0, self)
        original = md.entry_points

        def keep(ep) -> bool:
            return ep.group != "triton.backends" or self.location(ep.value) != (True, None)

        class Filtered:  # what entry_points() returns, with select() leaving those backends out

            def __init__(self, inner):
                self.inner = inner

            def select(self, **params):
                return md.EntryPoints(ep for ep in self.inner.select(**params) if keep(ep))

            def __getattr__(self, name):
                return getattr(self.inner, name)

        def entry_points(**params):
            found = original(**params)
            if isinstance(found, md.EntryPoints):
                return md.EntryPoints(ep for ep in found if keep(ep))
            return Filtered(found) if hasattr(found, "select") else found

        md.entry_points = entry_points


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
    # internal: the baseline subprocess
    ap.add_argument("--backend-root", default="", help=argparse.SUPPRESS)
    ap.add_argument("--collect-only", action="store_true", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


OPTS = _parse_args(sys.argv[1:]) if __name__ == "__main__" else None
if OPTS is not None and OPTS.backend_root:
    _BackendRedirect(Path(OPTS.backend_root)).install()
if OPTS is not None and OPTS.collect_only:
    os.environ["TRITON_APPLE_DEVICE"] = "emulator"  # compiling needs no device

import torch  # noqa: E402
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402

sys.path.insert(0, str(HERE))
import msl_stats  # noqa: E402
import tutorial_kernels as tk  # noqa: E402
from mma_report import compile_like_jit, global_accesses, msl_sections  # noqa: E402

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


def _git(*args, check=True) -> str:
    res = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
    if check and res.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {res.stderr.strip()}")
    return res.stdout.strip()


def _backend_dirty() -> bool:
    """Whether the working tree's third_party/apple differs from HEAD's."""
    diff = subprocess.run(["git", "-C", str(ROOT), "diff", "--quiet", "HEAD", "--", "third_party/apple"])
    return diff.returncode != 0


def resolve_baseline(rev: str) -> tuple:
    """(git revision, why it was chosen) for --baseline; `auto` picks the previous version of the backend."""
    if rev != "auto":
        return rev, ""
    if _backend_dirty():
        return "HEAD", "auto: third_party/apple has uncommitted changes"
    last = _git("log", "-1", "--format=%H", "--", "third_party/apple", check=False)
    if last and subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", "-q", last + "~1"],
                               capture_output=True).returncode == 0:
        return last + "~1", f"auto: the parent of {last[:10]}, the last commit that changed third_party/apple"
    return "HEAD~1", "auto: no history of third_party/apple here"


def baseline_from_revision(rev: str, family: str, kernels: str) -> dict:
    sha = _git("rev-parse", "--verify", rev + "^{commit}")
    subject = _git("log", "-1", "--format=%s", sha)
    same = subprocess.run(["git", "-C", str(ROOT), "diff", "--quiet", sha, "--", "third_party/apple"]).returncode == 0
    with tempfile.TemporaryDirectory(prefix="codegen_baseline_") as tmp:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", sha, "third_party/apple"],
                                 capture_output=True)
        if archive.returncode != 0:
            raise RuntimeError(f"git archive {sha} third_party/apple: {archive.stderr.decode().strip()}")
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        out = Path(tmp, "baseline.json")
        env = dict(os.environ, TRITON_CACHE_DIR=str(Path(tmp, "cache")), TRITON_APPLE_DEVICE="emulator")
        cmd = [sys.executable, str(Path(__file__).resolve()), "--collect-only", "--backend-root",
               str(Path(tmp, "third_party", "apple")), "--json", str(out), "--family", family]
        if kernels:
            cmd += ["--kernels", kernels]
        res = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if res.returncode != 0:
            raise RuntimeError(f"baseline run for {sha[:10]} failed:\n{res.stdout}\n{res.stderr}")
        data = json.loads(out.read_text())
    data.update(revision=sha, subject=subject, same_backend_as_worktree=same)
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
            rev, why = resolve_baseline(opts.baseline)
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
        sha = _git("rev-parse", "HEAD", check=False)
        dirty = _backend_dirty()
        Path(opts.save_baseline).write_text(json.dumps({
            "revision": sha, "subject": _git("log", "-1", "--format=%s", check=False) +
            (" + uncommitted third_party/apple changes" if dirty else ""), "family": opts.family, "kernels": now
        }, indent=1) + "\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(OPTS))

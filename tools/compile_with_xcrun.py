"""Apple's Metal compiler on every collected kernel (TRITON_APPLE_COLLECT_MSL=<dir>, lowering/collection.py), and on
the probe of the constructs docs/mac.md lists as unverified (tools/metal_probe.metal).

    python tools/compile_with_xcrun.py <collection dir> --out <report dir>     # exit 1 on any rejection
    python tools/compile_with_xcrun.py --probe tools/metal_probe.metal --out <report dir>

Each collected source is compiled with `xcrun -sdk macosx metal -c` at every MSL version from the oldest `-std=` it
declares (its targets' `msl_std`) to the newest the installed compiler knows, as PyTorch compiles it (safe math:
`-fno-fast-math`) and with `-Werror`: the backend claims its kernels warning-free. A source that fails is compiled
again without `-Werror`, so the report says whether Apple's compiler rejects it or only warns. The report
(`xcrun_report.md`, `xcrun_report.json`, and each failing kernel's source and diagnostics) names the kernel, its
family and MSL version, and Apple's diagnostics verbatim. The probe is compiled at -std=metal3.1 and metal3.2
without -Werror, and each diagnostic is put under the construct (`// probe N: ...`) whose kernel holds its line;
the probe does not fail the run (it holds constructs expected to fail at 3.1): its report is the answer.

Only macOS with Xcode has `xcrun metal` (Xcode 26 and later: `xcodebuild -downloadComponent MetalToolchain`;
Xcode 27: `TOOLCHAINS=Metal`, tried when the plain form is missing). `--metal CMD` replaces the compiler command
(the Linux tests give a stand-in that follows its command line).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

REPO = Path(__file__).resolve().parents[1]
# newest last; compile_with_xcrun keeps those the installed compiler accepts
STDS = ("metal3.1", "metal3.2", "metal4.0")
_DIAG = re.compile(r"^(?P<file>[^:\n]+):(?P<line>\d+):(?P<col>\d+): (?P<sev>error|warning|note|fatal error): (?P<msg>.*)$",
                   re.M)


@dataclass
class Result:
    kernel: str
    digest: str
    targets: List[str]  # "family / MSL version"
    std: str
    status: str  # "ok", "warnings" (fails only with -Werror), "rejected"
    diagnostics: str = ""


def metal_command(override: Optional[str]) -> Tuple[List[str], Dict[str, str]]:
    """The compiler command and the environment it runs in; exits with instructions when there is none."""
    if override:
        return shlex.split(override), dict(os.environ)
    for env in (dict(os.environ), dict(os.environ, TOOLCHAINS="Metal")):
        try:
            found = subprocess.run(["xcrun", "-sdk", "macosx", "--find", "metal"], capture_output=True, text=True,
                                   env=env, timeout=120)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if found.returncode == 0 and found.stdout.strip():
            return ["xcrun", "-sdk", "macosx", "metal"], env
    sys.exit("compile_with_xcrun: no Metal compiler (`xcrun -sdk macosx --find metal` failed, with and without "
             "TOOLCHAINS=Metal). Install Xcode; on Xcode 26 and later also run `xcodebuild -downloadComponent "
             "MetalToolchain`.")


def _compile(cmd: List[str], env: Dict[str, str], source: Path, std: str, werror: bool, tmp: Path) -> Tuple[bool, str]:
    out = tmp / (source.stem + f".{std}.air")
    argv = cmd + [f"-std={std}", "-fno-fast-math", "-ferror-limit=0"] + (["-Werror"] if werror else []) + \
        ["-c", str(source), "-o", str(out)]
    res = subprocess.run(argv, capture_output=True, text=True, env=env)
    return res.returncode == 0, (res.stdout + res.stderr).strip()


def supported_stds(cmd: List[str], env: Dict[str, str], tmp: Path) -> List[str]:
    """The -std values of STDS the installed compiler accepts (an empty kernel compiled at each)."""
    probe = tmp / "empty.metal"
    probe.write_text("#include <metal_stdlib>\nkernel void tt_empty(device int* p [[buffer(0)]]) { p[0] = 0; }\n")
    return [s for s in STDS if _compile(cmd, env, probe, s, False, tmp)[0]]


def compile_collection(directory: str, cmd: List[str], env: Dict[str, str], stds: Sequence[str], tmp: Path,
                       jobs: int) -> List[Result]:
    from triton.backends.apple.lowering.collection import load  # the collection's format has one home
    work = []
    for k in load(directory):
        oldest = min((t.msl_std for t in k.targets), key=STDS.index)
        targets = sorted({f"{t.family} / MSL {t.msl_version}" for t in k.targets})
        for std in stds[stds.index(oldest):] if oldest in stds else []:
            work.append((k, std, targets))

    def one(item) -> Result:
        k, std, targets = item
        ok, text = _compile(cmd, env, k.path, std, True, tmp)
        status = "ok"
        if not ok:
            plain_ok, plain = _compile(cmd, env, k.path, std, False, tmp)
            status = "warnings" if plain_ok else "rejected"
            text = text if plain_ok else plain
        return Result(k.targets[0].kernel, k.digest, targets, std, status, text if status != "ok" else "")

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(one, work))


def probe_report(probe: Path, cmd: List[str], env: Dict[str, str], stds: Sequence[str], tmp: Path) -> Dict[str, Dict]:
    """{std: {construct: [diagnostics]}} for the probe, each diagnostic under the `// probe N:` line above it."""
    lines = probe.read_text().splitlines()
    owner, current = {}, "(before the first probe)"
    for i, line in enumerate(lines, 1):
        if line.startswith("// probe "):
            current = line[len("// "):]
        owner[i] = current
    constructs = [ln[len("// "):] for ln in lines if ln.startswith("// probe ")]
    report = {}
    for std in stds:
        ok, text = _compile(cmd, env, probe, std, False, tmp)
        per = {c: [] for c in constructs}
        for m in _DIAG.finditer(text):
            if os.path.basename(m.group("file")) == probe.name and m.group("sev") != "note":
                per.setdefault(owner.get(int(m.group("line")), "?"), []).append(f"{m.group('sev')}: {m.group('msg')}")
        report[std] = {"compiled": ok, "constructs": per, "output": text}
    return report


def _markdown(results: List[Result], probe: Optional[Dict], stds: Sequence[str]) -> str:
    out = ["# Apple's Metal compiler on the collected kernels", "", f"-std values this compiler has: {', '.join(stds)}", ""]
    if results:
        counts = {s: sum(r.status == s for r in results) for s in ("ok", "warnings", "rejected")}
        out += [f"{len({r.digest for r in results})} sources, {len(results)} compiles: {counts['ok']} clean, "
                f"{counts['warnings']} with warnings (fail under -Werror), {counts['rejected']} rejected", ""]
        for r in results:
            if r.status != "ok":
                out += [f"## {r.status}: kernel `{r.kernel}` at -std={r.std} ({'; '.join(r.targets)}), "
                        f"source {r.digest[:16]}.metal", "", "```", r.diagnostics, "```", ""]
    if probe:
        out += ["# The probe (tools/metal_probe.metal)", "", "| construct | " + " | ".join(probe) + " |",
                "|---|" + "---|" * len(probe)]
        constructs = list(next(iter(probe.values()))["constructs"])
        for c in constructs:
            cells = []
            for std in probe:
                diags = probe[std]["constructs"].get(c, [])
                cells.append("accepted" if not diags else "; ".join(d.replace("|", "\\|") for d in diags))
            out.append(f"| {c} | " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("collection", nargs="?", help="a TRITON_APPLE_COLLECT_MSL directory")
    ap.add_argument("--probe", type=Path, help="compile this probe at -std=metal3.1 and metal3.2")
    ap.add_argument("--out", type=Path, default=Path("xcrun-report"), help="report directory")
    ap.add_argument("--metal", help="the compiler command (default: xcrun -sdk macosx metal)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    args = ap.parse_args(argv)
    if not args.collection and not args.probe:
        ap.error("give a collection directory, --probe, or both")
    cmd, env = metal_command(args.metal)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="xcrun_") as t:
        tmp = Path(t)
        stds = supported_stds(cmd, env, tmp)
        if not stds:
            sys.exit(f"compile_with_xcrun: {' '.join(cmd)} accepts none of {', '.join(STDS)}")
        results = compile_collection(args.collection, cmd, env, stds, tmp, args.jobs) if args.collection else []
        probe = probe_report(args.probe, cmd, env, [s for s in ("metal3.1", "metal3.2") if s in stds], tmp) \
            if args.probe else None
    for r in results:
        if r.status != "ok":
            (args.out / f"{r.status}-{r.kernel}-{r.std}-{r.digest[:12]}.txt").write_text(r.diagnostics + "\n")
            (args.out / f"{r.digest[:12]}.metal").write_text(
                (Path(args.collection) / f"{r.digest}.metal").read_text())
    (args.out / "xcrun_report.json").write_text(json.dumps({"stds": stds, "results": [asdict(r) for r in results],
                                                            "probe": probe}, indent=1) + "\n")
    text = _markdown(results, probe, stds)
    (args.out / "xcrun_report.md").write_text(text)
    print(text)
    bad = [r for r in results if r.status != "ok"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

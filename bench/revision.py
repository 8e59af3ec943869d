"""The apple backend of another git revision, isolated from this tree, for benchmarks that compare against it.

One mechanism for every script: the revision's whole ``third_party/apple`` is exported with ``git archive``
into a temporary directory, and a benchmark module of *this* tree runs in a subprocess in which
``triton.backends.apple`` and ``triton.language.extra.apple`` (compiler, driver and emulator alike) are
imported from that export. Nothing names files inside the export: the revision's own code finds its native
sources, launcher and headers relative to its own modules, whatever layout that revision has.

    with revision.export("HEAD~3") as rev:
        result = rev.run("bench.emulator_micro", ["--json", out, "--quiet"])

In the subprocess, started as ``python -m bench.revision --apple-root DIR MODULE ARGS...`` from the repository
root, an import of a redirected package that the revision lacks fails (it is never taken from this tree), the
Triton backends registered by entry point under a module the revision lacks (e.g. a newer ``cpu`` target) are
left out, and at exit every loaded module of the redirected packages is checked to come from the export.
The subprocess gets its own ``TRITON_CACHE_DIR`` so no compiled artifact is shared with this tree.
"""
from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import runpy
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

REPO = Path(__file__).resolve().parents[1]
# package name -> its directory inside an exported third_party/apple
PACKAGES: Dict[str, str] = {"triton.backends.apple": "backend", "triton.language.extra.apple": "language/apple"}


# ------------------------------------------------------------------------------------------------ git


def git(*args: str, check: bool = True) -> str:
    """stdout of `git -C <repo> args`, stripped; raises RuntimeError with git's message when `check`."""
    res = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True)
    if check and res.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {res.stderr.strip()}")
    return res.stdout.strip()


def commit_of(rev: str) -> str:
    """The full commit id of a revision git knows (a sha, a tag, HEAD~5)."""
    return git("rev-parse", "--verify", rev + "^{commit}")


def backend_dirty() -> bool:
    """Whether the working tree's third_party/apple differs from HEAD's."""
    diff = subprocess.run(["git", "-C", str(REPO), "diff", "--quiet", "HEAD", "--", "third_party/apple"])
    return diff.returncode != 0


def same_backend_as_worktree(commit: str) -> bool:
    return subprocess.run(["git", "-C", str(REPO), "diff", "--quiet", commit, "--",
                           "third_party/apple"]).returncode == 0


def previous_backend() -> Tuple[str, str]:
    """(revision, why it was chosen) of the previous version of the backend: HEAD when the working tree changes
    third_party/apple, else the parent of the last commit that changed it."""
    if backend_dirty():
        return "HEAD", "auto: third_party/apple has uncommitted changes"
    last = git("log", "-1", "--format=%H", "--", "third_party/apple", check=False)
    if last and subprocess.run(["git", "-C", str(REPO), "rev-parse", "--verify", "-q", last + "~1"],
                               capture_output=True).returncode == 0:
        return last + "~1", f"auto: the parent of {last[:10]}, the last commit that changed third_party/apple"
    return "HEAD~1", "auto: no history of third_party/apple here"


# ------------------------------------------------------------------------------------------------ export


class Revision:
    """An exported revision: `commit`, `subject`, `apple_root` (its third_party/apple) and a scratch `tmp`."""

    def __init__(self, rev: str):
        self.rev = rev
        self.commit = commit_of(rev)
        self.subject = git("log", "-1", "--format=%s", self.commit)
        self._tmp = tempfile.TemporaryDirectory(prefix="bench_revision_")
        self.tmp = Path(self._tmp.name)
        archive = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", self.commit, "third_party/apple"],
                                 capture_output=True)
        if archive.returncode != 0:
            raise RuntimeError(f"git archive {self.commit} third_party/apple: {archive.stderr.decode().strip()}")
        tree = self.tmp / "tree"
        tree.mkdir()
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
        self.apple_root = tree / "third_party" / "apple"

    def command(self, module: str, args: Sequence[str]) -> List[str]:
        """The command line running `module` (a module of this tree, e.g. bench.codegen_report) against it."""
        return [sys.executable, "-m", "bench.revision", "--apple-root", str(self.apple_root), module, *args]

    def env(self, extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
        env = dict(os.environ, TRITON_CACHE_DIR=str(self.tmp / "cache"), TRITON_APPLE_DEVICE="emulator")
        env.pop("TRITON_INTERPRET", None)
        env.update(extra or {})
        return env

    def run(self, module: str, args: Sequence[str], capture: bool = False,
            env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
        """Runs `module` with `args` against this revision's backend (from the repository root); raises
        RuntimeError, with its output where captured, if it fails."""
        res = subprocess.run(self.command(module, args), cwd=REPO, env=self.env(env), capture_output=capture,
                             text=True)
        if res.returncode != 0:
            out = f":\n{res.stdout}\n{res.stderr}" if capture else " (its output is above)"
            raise RuntimeError(f"{module} against {self.rev} ({self.commit[:10]}) failed with exit status "
                               f"{res.returncode}{out}")
        return res

    def close(self) -> None:
        self._tmp.cleanup()

    def __enter__(self) -> "Revision":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def export(rev: str) -> Revision:
    """Exports git revision `rev`'s third_party/apple to a temporary directory (removed on close / with-exit)."""
    return Revision(rev)


# ------------------------------------------------------------------------------------------------ imports


class _RevisionFinder(importlib.abc.MetaPathFinder):
    """Resolves the redirected packages and every submodule of them inside the export, ahead of every other
    finder (the editable install's finder would otherwise resolve submodules to this tree)."""

    def __init__(self, apple_root: Path):
        self.roots = {name: apple_root / rel for name, rel in PACKAGES.items()}

    def claims(self, fullname: str) -> Optional[str]:
        """The redirected package `fullname` is or lies in, else None."""
        for name in self.roots:
            if fullname == name or fullname.startswith(name + "."):
                return name
        return None

    def exists(self, fullname: str) -> bool:
        """Whether the export has module `fullname` (a claimed name), without importing anything."""
        name = self.claims(fullname)
        path = self.roots[name].joinpath(*fullname[len(name):].lstrip(".").split(".")) if fullname != name \
            else self.roots[name]
        return (path / "__init__.py").is_file() or path.with_suffix(".py").is_file()

    def find_spec(self, fullname, path=None, target=None):
        name = self.claims(fullname)
        if name is None:
            return None
        if fullname == name:
            root = self.roots[name]
            if not (root / "__init__.py").is_file():
                raise ModuleNotFoundError(f"{fullname} is not in the exported revision", name=fullname)
            return importlib.util.spec_from_file_location(fullname, root / "__init__.py",
                                                          submodule_search_locations=[str(root)])
        parent = sys.modules.get(fullname.rpartition(".")[0])
        spec = importlib.machinery.PathFinder.find_spec(fullname, getattr(parent, "__path__", None) or [])
        if spec is None:  # never fall back to this tree's module of that name
            raise ModuleNotFoundError(f"{fullname} is not in the exported revision", name=fullname)
        return spec


def _filter_entry_points(finder: _RevisionFinder) -> None:
    """Leaves out Triton backends whose module is under a redirected package but missing from the export."""
    md = importlib.metadata
    original = md.entry_points

    def keep(ep) -> bool:
        return ep.group != "triton.backends" or finder.claims(ep.value) is None or finder.exists(ep.value)

    class _Filtered:  # what entry_points() returns, with select() leaving those backends out

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
        return _Filtered(found) if hasattr(found, "select") else found

    md.entry_points = entry_points


def install(apple_root: Path) -> None:
    """Redirects the apple packages to `apple_root` in this process; must run before anything imports Triton."""
    already = [m for m in sys.modules if any(m == n or m.startswith(n + ".") for n in PACKAGES)]
    if already or "triton.backends" in sys.modules:
        raise RuntimeError(f"install() after Triton's backends were imported ({already[:3]})")
    finder = _RevisionFinder(Path(apple_root).resolve())
    sys.meta_path.insert(0, finder)
    _filter_entry_points(finder)


def foreign_modules(apple_root: Path) -> List[str]:
    """Loaded modules of the redirected packages whose file is not inside `apple_root` (should be none)."""
    root = Path(apple_root).resolve()
    bad = []
    for name, mod in list(sys.modules.items()):
        if any(name == n or name.startswith(n + ".") for n in PACKAGES):
            file = getattr(mod, "__file__", None)
            if file and not Path(file).resolve().is_relative_to(root):
                bad.append(f"{name} ({file})")
    return bad


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description="run a module of this tree against an exported apple backend")
    ap.add_argument("--apple-root", required=True, help="an exported revision's third_party/apple")
    ap.add_argument("module", help="module to run as __main__, e.g. bench.codegen_report")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    opts = ap.parse_args(argv)
    install(Path(opts.apple_root))
    sys.argv = [opts.module, *opts.args]
    status: object = 0
    try:
        runpy.run_module(opts.module, run_name="__main__", alter_sys=True)
    except SystemExit as e:
        status = e.code
    bad = foreign_modules(Path(opts.apple_root))
    if bad:
        print(f"bench.revision: modules of this tree were imported instead of the revision's: {bad}", file=sys.stderr)
        return 3
    return status if isinstance(status, int) else (0 if status is None else 1)


if __name__ == "__main__":
    sys.exit(main())

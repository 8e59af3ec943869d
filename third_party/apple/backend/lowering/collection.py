"""The MSL collection: with `TRITON_APPLE_COLLECT_MSL=<dir>`, every kernel the backend lowers leaves its MSL in
`<dir>`, so that Apple's offline compiler can compile each one later (`tools/compile_with_xcrun.py`, the macOS
workflow's offline-compile step) at the MSL version it was lowered for.

The collection is de-duplicated by source: one `<hash>.metal` per distinct MSL text (the hash is the SHA-256 of
the text), and beside it one `<hash>.<family>.<msl version>.json` per target it was lowered for, holding the
kernel's name, its family, the MSL version it was lowered for, the oldest `-std=` it compiles at and whether it
asked for fast math. Every file is written whole under a temporary name and renamed, so processes lowering the
same kernel at once (pytest workers, inductor's compile workers) leave whole files.

Only lowering writes: a kernel Triton serves from its cache is not lowered again, so collect with an empty
`TRITON_CACHE_DIR` to see every kernel of a run.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List

from .. import knobs


@dataclass(frozen=True)
class CollectedTarget:
    """One target a collected source was lowered for."""
    kernel: str
    family: str
    msl_version: str  # the version it was lowered for ("3.2")
    msl_std: str  # the oldest `-std=` it compiles at ("metal3.1")
    fast_math: bool


@dataclass(frozen=True)
class CollectedKernel:
    """One distinct MSL source of a collection and every target it was lowered for."""
    digest: str
    path: Path  # the `.metal` file
    targets: List[CollectedTarget]

    @property
    def source(self) -> str:
        return self.path.read_text()


def digest(source: str) -> str:
    """The name a source is collected under."""
    return hashlib.sha256(source.encode()).hexdigest()


def _write(path: Path, data: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def record(kernel: str, source: str, family: str, msl_version: str, msl_std: str, fast_math: bool) -> None:
    """Leave a lowered kernel's MSL in the collection directory, when TRITON_APPLE_COLLECT_MSL names one."""
    directory = knobs.collect_msl.get()
    if not directory:
        return
    root = Path(directory)
    h = digest(source)
    target = CollectedTarget(kernel, family, msl_version, msl_std, fast_math)
    try:
        root.mkdir(parents=True, exist_ok=True)
        if not (root / f"{h}.metal").is_file():
            _write(root / f"{h}.metal", source)
        _write(root / f"{h}.{family}.{msl_version}.json", json.dumps(target.__dict__, sort_keys=True) + "\n")
    except OSError as e:
        raise OSError(e.errno, f"apple backend: TRITON_APPLE_COLLECT_MSL={directory}: cannot write kernel "
                      f"'{kernel}' there ({e.strerror})") from e


def load(directory: str) -> List[CollectedKernel]:
    """Every source of a collection with its targets, by digest."""
    root = Path(directory)
    targets: Dict[str, List[CollectedTarget]] = {}
    for meta in sorted(root.glob("*.json")):
        h = meta.name.split(".", 1)[0]
        targets.setdefault(h, []).append(CollectedTarget(**json.loads(meta.read_text())))
    kernels = []
    for src in sorted(root.glob("*.metal")):
        h = src.stem
        if h not in targets:
            raise ValueError(f"{src}: a collected source without a target record (<digest>.<family>.<version>.json)")
        kernels.append(CollectedKernel(h, src, targets[h]))
    missing = sorted(set(targets) - {k.digest for k in kernels})
    if missing:
        raise ValueError(f"{root}: target records without their source: {', '.join(m + '.metal' for m in missing)}")
    return kernels

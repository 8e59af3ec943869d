"""The MSL helper library: reads the Metal source files of `lowering/msl/` once and splits them into named
helpers with their requirements (the marker syntax is described in `msl/README.md`). It is the one helper
registry: `KernelContext.require*` and the helper functions of `msl_helpers` / `soft_f64` ask it.

Target facts the library text names as placeholders (`${SIMD_WIDTH}`, `${LOCK_MASK}`) are filled here from
their homes (`backend/target.py`, `backend/abi/lock_table.py`) when the files are read; a helper's own
parameters (`@params`) are filled when it is instantiated."""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import Dict, List, Sequence, Tuple

from ..abi.lock_table import LOCK_WORDS
from ..target import SIMD_WIDTH

LIBRARY_DIR = Path(__file__).with_name("msl")

_MARKER = re.compile(r"^// @helper ([A-Za-z_][A-Za-z0-9_]*)\s*$")
_DIRECTIVE = re.compile(r"^// @(requires|params)((?: [A-Za-z_][A-Za-z0-9_]*)+)\s*$")


def target_facts() -> Dict[str, str]:
    """The placeholder values every helper may use, from the modules that own them."""
    return {"SIMD_WIDTH": str(SIMD_WIDTH), "LOCK_MASK": str(LOCK_WORDS - 1)}


@dataclass(frozen=True)
class Helper:
    """One helper of the library: `text` (target facts filled) is emitted once, after the helpers it requires."""
    name: str
    file: str
    requires: Tuple[str, ...]
    params: Tuple[str, ...]
    text: str

    def instantiate(self, **values: str) -> str:
        """The text with its `@params` filled; every parameter must be given, and no other."""
        if set(values) != set(self.params):
            raise ValueError(f"MSL helper {self.name} takes parameters {self.params}, got {sorted(values)}")
        return Template(self.text).substitute(values) if self.params else self.text


def parse_file(path: Path) -> List[Helper]:
    """The helpers of one library file, in file order. A helper starts at its `// @helper` line and ends before
    the next one (or at the end of the file); directives and `///` documentation right after the marker, and
    trailing blank lines, are not part of its text; what precedes the first marker is the file's header."""
    helpers: List[Helper] = []
    lines = path.read_text().splitlines()
    starts = [i for i, line in enumerate(lines) if _MARKER.match(line)]
    for k, start in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else len(lines)
        name = _MARKER.match(lines[start]).group(1)
        fields: Dict[str, List[str]] = {"requires": [], "params": []}
        i = start + 1
        while i < end and (_DIRECTIVE.match(lines[i]) or lines[i].startswith("///")):
            m = _DIRECTIVE.match(lines[i])
            if m:
                fields[m.group(1)].extend(m.group(2).split())
            i += 1
        body = lines[i:end]
        while body and not body[-1].strip():
            body.pop()
        if not body:
            raise ValueError(f"{path.name}: MSL helper {name} has no text")
        text = "\n".join(body)
        # fill the target facts now, leaving the helper's own parameters for instantiate()
        facts = target_facts()
        text = Template(text).substitute({**facts, **{p: "$" + p for p in fields["params"]}})
        helpers.append(Helper(name, path.name, tuple(fields["requires"]), tuple(fields["params"]), text))
    return helpers


def library_files() -> List[Path]:
    """The library's source files, by name."""
    return sorted(LIBRARY_DIR.glob("*.metal"))


@functools.lru_cache(maxsize=None)
def library() -> Dict[str, Helper]:
    """Every helper of the library by name (read once per process)."""
    out: Dict[str, Helper] = {}
    for path in library_files():
        for h in parse_file(path):
            if h.name in out:
                raise ValueError(f"MSL helper {h.name} is defined in {out[h.name].file} and in {h.file}")
            out[h.name] = h
    return out


def helper(name: str) -> Helper:
    """The library helper `name`."""
    try:
        return library()[name]
    except KeyError:
        raise KeyError(f"no MSL helper {name!r} in {LIBRARY_DIR}") from None


def closure(names: Sequence[str]) -> List[str]:
    """`names` and every helper they require, each once, requirements first (the emission order)."""
    order: List[str] = []

    def add(name: str) -> None:
        for dep in helper(name).requires:
            add(dep)
        if name not in order:
            order.append(name)

    for name in names:
        add(name)
    return order

"""Where each line of a kernel's MSL came from, in both directions across the compile/launch boundary.

The lowering marks the first line of code of every located op with a comment, `// <op> <file>:<line>`
(`location_comment`), and records the same facts, with full paths and columns, in the kernel's metadata
(`msl_locations`). Compilers name MSL lines in their diagnostics: clang on the emulator, Apple's Metal compiler
on a Mac (its runtime compiler calls the source `program_source`), both in clang's `file:line:col: severity:`
form (`diagnostic_blocks`, `error_lines`). `MslLocations` turns those lines back into Triton ops and source
lines, from the metadata where the launcher has it, or from the comments where only the MSL text is at hand
(`AppleUtils.load_binary`, which Triton calls with the kernel's name and bytes alone).

Comments are ASCII whatever the source file is called: PyTorch hands the source to Metal as ASCII text in some
versions (docs/mps_standin.md), so any other character of a file name is escaped as `\\xNN`/`\\uNNNN`, and so
are control characters, which could otherwise end the comment and put the rest of a name into the code.
"""
from __future__ import annotations

import bisect
import re
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

# A diagnostic's first line, as clang and Apple's Metal compiler print it.
DIAGNOSTIC = re.compile(r"^(?P<file>[^\n:]+):(?P<line>\d+):(?P<col>\d+): "
                        r"(?P<sev>fatal error|error|warning|note|remark): (?P<text>.*)$")
# The name Apple's runtime compiler (MTLDevice newLibraryWithSource) gives the source in its diagnostics.
METAL_SOURCE_NAME = "program_source"
# `// <op> <file>:<line>` at the end of a line of code (op names are dialect.name; file names may hold spaces)
_COMMENT = re.compile(r"  // (?P<op>[a-z_]+\.[\w.]+) (?P<where>[^\n]*:\d+)$")


def ascii_safe(text: str) -> str:
    """`text` with every character outside printable ASCII escaped as Python escapes it (`\\xe9`, `\\u4e2d`,
    `\\n`): safe inside an MSL `//` comment and unchanged when it is plain ASCII."""
    if text.isascii() and text.isprintable():
        return text
    return "".join(c if " " <= c <= "~" else ascii(c)[1:-1] for c in text)


def location_comment(op_name: str, file: str, line: int) -> str:
    """The comment ending the first line of code of an op: its name and the base name and line of its source."""
    return f"  // {op_name} {ascii_safe(file.rsplit('/', 1)[-1])}:{int(line)}"


class MslLocations:
    """The map from MSL lines to the op whose code contains them: entries (MSL line of the op's first line of
    code, op name, source location), as the lowering records them in the metadata (`msl_locations`)."""

    def __init__(self, locations: Iterable[Sequence]):
        self._entries = sorted((int(line), op, where) for line, op, where in locations)
        self._lines = [e[0] for e in self._entries]

    @classmethod
    def from_comments(cls, source: str) -> "MslLocations":
        """The map read back from the location comments of an MSL source (base names and lines only)."""
        entries = []
        for n, text in enumerate(source.splitlines(), 1):
            m = _COMMENT.search(text)
            if m:
                entries.append((n, m.group("op"), m.group("where")))
        return cls(entries)

    def __bool__(self) -> bool:
        return bool(self._entries)

    def origin(self, msl_line: int) -> Optional[Tuple[str, str]]:
        """(op name, source location) of the op whose code contains `msl_line`, or None."""
        k = bisect.bisect_right(self._lines, msl_line) - 1
        return self._entries[k][1:] if k >= 0 else None

    def explain(self, message: str, msl_lines: Sequence[int]) -> str:
        """`message` plus, for each MSL line it names, the Triton op and source line it was generated from."""
        notes = []
        for n in msl_lines:
            origin = self.origin(n)
            if origin:
                notes.append(f"  MSL line {n} was generated from {origin[0]} at {origin[1]}")
        return message + ("\n" + "\n".join(notes) if notes else "")


Diagnostic = Tuple[str, str, int]  # (severity, file as printed, line)


def diagnostic_blocks(text: str) -> List[List[Diagnostic]]:
    """The diagnostics of a compiler's output, one block per error/warning/remark with the notes that follow it."""
    blocks: List[List[Diagnostic]] = []
    for raw in text.splitlines():
        m = DIAGNOSTIC.match(raw)
        if not m:
            continue
        entry = (m.group("sev"), m.group("file"), int(m.group("line")))
        if entry[0] in ("error", "fatal error", "warning", "remark"):
            blocks.append([entry])
        elif blocks:
            blocks[-1].append(entry)
    return blocks


def error_lines(text: str, source_names: Sequence[str], other: Optional[Dict[str, Callable[[int], int]]] = None) -> List[int]:
    """The MSL lines the errors of a compiler's output point at. An error located in the MSL itself (a file whose
    base name is one of `source_names`) gives its own line; one located elsewhere (a header, a trampoline) gives
    the MSL line of its first note located in the MSL (the instantiation point, the call), or else what `other`
    maps a line of that file to (`other[base name](line)`)."""
    names = set(source_names)
    other = other or {}

    def base(f: str) -> str:
        return f.replace("\\", "/").rsplit("/", 1)[-1]

    lines: List[int] = []
    for block in diagnostic_blocks(text):
        sev, fname, line = block[0]
        if sev not in ("error", "fatal error"):
            continue
        if base(fname) in names:
            lines.append(line)
            continue
        mapped = other.get(base(fname))
        if mapped is not None:
            lines.append(mapped(line))
            continue
        user = [ln for (_, f, ln) in block[1:] if base(f) in names]
        via = [other[base(f)](ln) for (_, f, ln) in block[1:] if base(f) in other]
        lines.extend(user[:1] if user else via[:1])
    return lines

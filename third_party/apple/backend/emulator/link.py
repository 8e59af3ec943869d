"""The linker command of kernel libraries, learned from the compiler driver, so that a kernel build can link its
object without starting the driver a second time.

A one-call build (``clang++ <flags> entry.cpp -o kernel.so``) costs a driver start for the compile and another
for the link; the link alone, run directly, costs only the linker's own start. The driver prints the commands it
would run under ``-###``: asked once per compiler and flags with a placeholder object and output (a link-only
call), its single job is the linker command, which :func:`link_line` keeps in memory for the process and which
:meth:`LinkLine.command` fills in with a real object and output. The library is the same file the one-call build
writes (the driver builds that link job from the flags alone; the include paths, defines and precompiled header of
the compile do not enter it).

No link line (None) where the driver cannot be trusted to need only that command: macOS, where the driver of a
one-call build with debug information also runs ``dsymutil`` to make the ``.dSYM`` the symbolizer reads (which it
does not do for an object it did not compile), a driver whose link-only call runs more or fewer than one command,
or output that cannot be parsed. Builds then use the one-call path.
"""
from __future__ import annotations

import os
import re
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from .clang import IS_DARWIN, SHLIB_SUFFIX

_PROBE_OBJECT = "probe-object.o"
_PROBE_OUTPUT = "probe-library" + SHLIB_SUFFIX


@dataclass(frozen=True)
class LinkLine:
    """The linker command of one compiler and flag set: `argv` with the object at `object_index` and the output
    at `output_index` (the placeholders' positions)."""
    argv: Tuple[str, ...]
    object_index: int
    output_index: int

    def command(self, obj: str, output: str) -> List[str]:
        """The linker command that links `obj` into `output` (run in the directory the build runs in)."""
        argv = list(self.argv)
        argv[self.object_index] = obj
        argv[self.output_index] = output
        return argv


def parse_link_job(driver_output: str, probe_dir: str) -> Optional[LinkLine]:
    """The link line in the ``-###`` output of a link-only driver call whose object is ``probe_dir/probe-object.o``
    and output ``probe_dir/probe-library<suffix>``; None unless the driver printed exactly one command, and that
    command names the object once, the output once (after ``-o``) and the probe directory nowhere else. (Jobs are
    the lines that start with a quoted program.)"""
    jobs = [line for line in driver_output.splitlines() if line.startswith(' "')]
    if len(jobs) != 1:
        return None
    argv = _split_job(jobs[0])
    if argv is None:
        return None
    obj, out = os.path.join(probe_dir, _PROBE_OBJECT), os.path.join(probe_dir, _PROBE_OUTPUT)
    if not argv or not os.path.isabs(argv[0]) or argv.count(obj) != 1 or argv.count(out) != 1:
        return None
    object_index, output_index = argv.index(obj), argv.index(out)
    if output_index == 0 or argv[output_index - 1] != "-o":
        return None
    others = [a for i, a in enumerate(argv) if i not in (object_index, output_index)]
    if any(probe_dir in a for a in others):  # the driver derived something else from the probe's names
        return None
    return LinkLine(tuple(argv), object_index, output_index)


# One argument of a job line: the driver writes every argument in double quotes, with a backslash before each
# `"`, `\` and `$` in it (llvm::sys::printArg).
_JOB_ARG = re.compile(r' "((?:[^"\\]|\\.)*)"')


def _split_job(line: str) -> Optional[List[str]]:
    """The arguments of a job line, or None if the line is anything but quoted arguments (e.g. a response file)."""
    argv, at = [], 0
    for m in _JOB_ARG.finditer(line):
        if m.start() != at:
            return None
        argv.append(re.sub(r"\\(.)", r"\1", m.group(1)))
        at = m.end()
    return argv if at == len(line) else None


_lines: Dict[Tuple[str, ...], Optional[LinkLine]] = {}
_lock = threading.Lock()


def link_line(before: Sequence[str], after: Sequence[str]) -> Optional[LinkLine]:
    """The linker command the driver would run to link one object into a shared library, for a one-call build
    ``<before> <source> <after> -o <output>`` (`before`: the compiler and its flags without include paths and
    defines; `after`: the link flags, which the driver orders after the input, as written); None where it cannot
    be learned (module docstring), and on macOS. Asked once per process and flag set."""
    if IS_DARWIN:
        return None
    key = (*before, "\0", *after)
    with _lock:
        if key not in _lines:
            _lines[key] = ask_driver(before, after)
        return _lines[key]


def forget(before: Sequence[str], after: Sequence[str]) -> None:
    """Stop using the link line of these flags in this process (it failed where the driver's own link
    succeeded)."""
    with _lock:
        _lines[(*before, "\0", *after)] = None


def ask_driver(before: Sequence[str], after: Sequence[str]) -> Optional[LinkLine]:
    """:func:`link_line` without the platform rule and the memory: asks the driver now (``-###`` with a
    placeholder object in a temporary directory). None also when that cannot be done (no temporary directory,
    the driver does not start or fails)."""
    try:
        with tempfile.TemporaryDirectory(prefix="triton-apple-link-probe-") as probe_dir:
            probe_dir = os.path.realpath(probe_dir)
            obj, out = os.path.join(probe_dir, _PROBE_OBJECT), os.path.join(probe_dir, _PROBE_OUTPUT)
            open(obj, "wb").close()  # the driver drops inputs that do not exist
            res = subprocess.run([*before, obj, *after, "-o", out, "-###"], capture_output=True, text=True,
                                 cwd=probe_dir, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_link_job(res.stderr, probe_dir) if res.returncode == 0 else None


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # a child forked while a thread asked the driver must not wait for that thread


os.register_at_fork(after_in_child=_after_fork_in_child)

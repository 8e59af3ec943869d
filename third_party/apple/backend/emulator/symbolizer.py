"""Faulting instructions of kernel libraries back to MSL lines, with one llvm-symbolizer process per session."""
from __future__ import annotations

import atexit
import errno
import os
import re
import subprocess
import threading
from typing import Dict, List, Optional, Tuple

from .clang import find_symbolizer



class _Symbolizer:
    """One llvm-symbolizer process for the whole session, started on the first fault and fed one query per
    line (``<library> <offset>``): a failing launch costs a pipe round trip, not a process start (~35 ms).
    Answers are cached per (library, offset)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._proc: Optional[subprocess.Popen] = None
        self._cache: Dict[Tuple[str, int], List[Tuple[str, int, int]]] = {}

    def frames(self, module: str, offset: int) -> List[Tuple[str, int, int]]:
        """(file, line, column) of the instruction and the calls it is inlined into, innermost first."""
        key = (module, offset)
        with self._lock:
            if key not in self._cache:
                if len(self._cache) > 4096:
                    self._cache.clear()
                self._cache[key] = self._query(module, offset)
            return self._cache[key]

    def _query(self, module: str, offset: int) -> List[Tuple[str, int, int]]:
        tool = find_symbolizer()
        if not tool or any(c in module for c in "\n\"'"):
            return []
        for _attempt in range(2):  # a symbolizer that died is started again once
            try:
                if self._proc is None or self._proc.poll() is not None:
                    self._proc = subprocess.Popen([tool, "--inlining"], stdin=subprocess.PIPE,
                                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                                  bufsize=1)
                self._proc.stdin.write(f'"{module}" {hex(offset)}\n')
                self._proc.stdin.flush()
                out = []
                while True:
                    line = self._proc.stdout.readline()
                    if not line:
                        raise OSError(errno.EPIPE, "llvm-symbolizer exited")
                    if not line.strip():
                        break
                    out.append(line.strip())
                frames = []
                for text in out:
                    m = re.match(r"^(.*):(\d+):(\d+)$", text)
                    if m:
                        frames.append((os.path.basename(m.group(1)), int(m.group(2)), int(m.group(3))))
                return frames
            except (OSError, ValueError):
                self._proc = None
        return []


    def close(self) -> None:
        """At exit: end the symbolizer without delaying the exit. Closing its input ends it, unless a forked
        child still holds a copy of that pipe (children drop theirs at fork, but a child forked by other means,
        or still starting, may not have): so it gets a moment, then is killed. Never raises."""
        acquired = self._lock.acquire(timeout=0.1)  # a thread stuck in a query must not hold up the exit
        try:
            proc, self._proc = self._proc, None
            if proc is None:
                return
            try:
                proc.stdin.close()  # it exits at the end of its input
                proc.wait(timeout=0.2)
            except Exception:  # noqa: BLE001 (TimeoutExpired, a broken pipe: it is killed below)
                pass
            try:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(timeout=1)
                proc.stdout.close()
            except Exception:  # noqa: BLE001 (exiting: nothing to report it to)
                pass
        finally:
            if acquired:
                self._lock.release()

    def after_fork_in_child(self) -> None:
        """The child must not talk to (or wait for) the parent's symbolizer: it gets its own on its first fault.
        Its copies of the pipes are closed, so that the parent's symbolizer still sees the end of its input when
        the parent closes it."""
        self._lock = threading.Lock()
        proc, self._proc = self._proc, None
        if proc is not None:
            for f in (proc.stdin, proc.stdout):
                try:
                    f.close()  # the child's copy of the descriptor
                except (OSError, ValueError):
                    pass
            proc.returncode = 0  # not ours to wait for: Popen's finaliser must not reap it


_SYMBOLIZER = _Symbolizer()
atexit.register(_SYMBOLIZER.close)
os.register_at_fork(after_in_child=_SYMBOLIZER.after_fork_in_child)


def symbolize(module: str, offset: int, msl_name: str) -> Optional[Tuple[int, int]]:
    """MSL (line, column) of an instruction in a kernel library (None if unknown)."""
    for fname, line, col in _SYMBOLIZER.frames(module, offset):
        if fname == msl_name and line > 0:
            return line, col
    return None

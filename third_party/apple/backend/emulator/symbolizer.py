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
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                self._proc.stdin.close()  # it exits at the end of its input
                self._proc.wait(timeout=5)
                self._proc.stdout.close()
            self._proc = None


_SYMBOLIZER = _Symbolizer()
atexit.register(_SYMBOLIZER.close)


def symbolize(module: str, offset: int, msl_name: str) -> Optional[Tuple[int, int]]:
    """MSL (line, column) of an instruction in a kernel library (None if unknown)."""
    for fname, line, col in _SYMBOLIZER.frames(module, offset):
        if fname == msl_name and line > 0:
            return line, col
    return None

"""Exceptions and warnings raised by the Metal-on-CPU emulator."""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple


class EmulatorError(RuntimeError):
    """Base class of every emulator error."""


class EmulatorCompileError(EmulatorError):
    """The MSL source (or its kernel signature) was rejected.

    ``msl_lines`` lists the 1-based line numbers of the user's MSL source involved in the errors
    (numbered exactly as in the source passed to :func:`compile_msl`), ``diagnostics`` holds the
    compiler output with build paths removed.
    """

    def __init__(self, message: str, msl_lines: Sequence[int] = (), diagnostics: str = "",
                 kernel_name: Optional[str] = None):
        super().__init__(message)
        self.msl_lines: List[int] = sorted(set(int(n) for n in msl_lines))
        self.diagnostics = diagnostics
        self.kernel_name = kernel_name


class EmulatorLaunchError(EmulatorError):
    """A launch failed: bad arguments, out-of-bounds access, divergent barrier, deadlock...

    Attributes (``None`` when not applicable): ``kind`` (e.g. ``"out_of_bounds"``), ``kernel_name``,
    ``param`` (parameter name), ``slot`` (buffer index), ``index`` (element index of the bad
    access), ``is_write``, ``threadgroup`` (x, y, z), ``thread`` (thread_index_in_threadgroup) and
    ``msl_lines`` (1-based lines of the user's MSL source involved).
    """

    def __init__(self, message: str, *, kind: str = "invalid", kernel_name: Optional[str] = None,
                 param: Optional[str] = None, slot: Optional[int] = None, index: Optional[int] = None,
                 is_write: Optional[bool] = None, threadgroup: Optional[Tuple[int, int, int]] = None,
                 thread: Optional[int] = None, msl_lines: Sequence[int] = ()):
        super().__init__(message)
        self.kind, self.kernel_name, self.param, self.slot = kind, kernel_name, param, slot
        self.index, self.is_write, self.threadgroup, self.thread = index, is_write, threadgroup, thread
        self.msl_lines: List[int] = sorted(set(int(n) for n in msl_lines))


class EmulatorCacheError(EmulatorError):
    """The emulator's cache directory cannot be trusted (another user owns it or may write to it)."""


class EmulatorCacheIOError(EmulatorError):
    """A file of the emulator's cache could not be written or was missing (a full disk, a cache removed while a
    build ran). ``errno`` (the OSError's, or None) and ``filename`` say which."""

    def __init__(self, message: str, errno: Optional[int] = None, filename: Optional[str] = None):
        super().__init__(message)
        self.errno, self.filename = errno, filename


class EmulatorCacheWarning(RuntimeWarning):
    """A damaged entry of the emulator's on-disk cache was found (and is being rebuilt)."""


class EmulatorWarning(RuntimeWarning):
    """Undefined behaviour that Metal does not trap on (e.g. integer division by zero) was executed."""


class EmulatorSanitizerWarning(EmulatorWarning):
    """A finding of the emulator's sanitizer (racecheck, initcheck) in a launch that was let succeed
    (TRITON_APPLE_EMULATOR_SANITIZE_REPORT=warn, or ``sanitize(report="warn")``)."""

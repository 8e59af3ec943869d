"""The emulator's runtime library in this process: built and loaded once (RTLD_GLOBAL, where kernels find its
hooks), and the kernel libraries loaded from the cache, at most TRITON_APPLE_EMULATOR_MAX_LOADED of them."""
from __future__ import annotations

import _ctypes
import collections
import ctypes
import os
import threading
from pathlib import Path
from typing import List

from .. import knobs
from . import build
from .errors import EmulatorError

ABI_VERSION = 8  # TT_EMU_ABI_VERSION in emulator_runtime.h

TT_BUF_READONLY = 1
TT_BUF_SCALAR = 2

_lib = None
_lib_lock = threading.Lock()


def runtime_loaded() -> bool:
    """Whether this process has loaded the runtime already."""
    return _lib is not None


def runtime_library() -> ctypes.CDLL:
    """The loaded runtime (built on first use). Loaded RTLD_GLOBAL: kernels resolve their hooks in it."""
    global _lib
    if _lib is not None:
        return _lib
    with _lib_lock:
        if _lib is None:
            so = build.build_runtime()
            lib = ctypes.CDLL(str(so), mode=ctypes.RTLD_GLOBAL)
            lib.tt_emu_abi_version.restype = ctypes.c_int
            lib.tt_emu_bench_switch.argtypes = [ctypes.c_uint32]
            lib.tt_emu_bench_switch.restype = ctypes.c_double
            lib.tt_emu_uses_ucontext.restype = ctypes.c_int
            if lib.tt_emu_abi_version() != ABI_VERSION:
                raise EmulatorError(f"emulator runtime ABI {lib.tt_emu_abi_version()} != {ABI_VERSION}")
            build.build_pch()  # once per machine, like the runtime: not part of any kernel's compile
            _lib = lib
    return _lib


def bench_fiber_switch(n: int = 1_000_000) -> float:
    """Nanoseconds per fiber switch (one direction) of the runtime's context switch."""
    return runtime_library().tt_emu_bench_switch(n)


class _LoadedLibraries:
    """Kernel shared objects loaded in this process: at most ``TRITON_APPLE_EMULATOR_MAX_LOADED`` (least
    recently launched first out). Kernel objects do not hold their library: each launch asks for the entry
    point (loading the library again if it was unloaded) and holds the library until the launch is over, so
    a library is never unloaded while a launch of it runs."""

    def __init__(self):
        self._lock = threading.Lock()
        self._loaded: "collections.OrderedDict[str, list]" = collections.OrderedDict()  # path -> [handle, entry, users]

    def acquire(self, so_path: Path, kernel_name: str) -> int:
        """The entry point of the kernel library `so_path` (loaded now if it is not), held until `release`."""
        path = str(so_path)
        with self._lock:
            rec = self._loaded.get(path)
            if rec is None:
                lib = ctypes.CDLL(path)
                abi = ctypes.c_int.in_dll(lib, "__tt_emu_abi").value
                entry = ctypes.cast(getattr(lib, "__tt_emu_entry"), ctypes.c_void_p).value
                rec = self._loaded[path] = [lib._handle, entry, 0]
                if abi != ABI_VERSION:
                    self._unload(path)
                    raise EmulatorError(f"kernel '{kernel_name}': {path} was built for emulator ABI {abi}, the "
                                        f"runtime has {ABI_VERSION}")
            self._loaded.move_to_end(path)
            rec[2] += 1
            return rec[1]

    def release(self, so_path: Path) -> None:
        with self._lock:
            rec = self._loaded.get(str(so_path))
            if rec is not None:
                rec[2] -= 1
            if len(self._loaded) <= 1:  # never over the limit (at least 1): no need to read it
                return
            excess = len(self._loaded) - max(1, knobs.emulator_max_loaded.get())
            if excess > 0:
                for path in [p for p, r in self._loaded.items() if r[2] == 0][:excess]:
                    self._unload(path)

    def forget(self, path: Path) -> None:
        """Unload `path` if no launch uses it: its file was rebuilt, the next launch must load the new one."""
        with self._lock:
            rec = self._loaded.get(str(path))
            if rec is not None and rec[2] == 0:
                self._unload(str(path))

    def _unload(self, path: str) -> None:
        handle = self._loaded.pop(path)[0]
        _ctypes.dlclose(handle)

    def loaded(self) -> List[str]:
        """Paths of the libraries loaded now, least recently launched first."""
        with self._lock:
            return list(self._loaded)


LOADED_LIBRARIES = _LoadedLibraries()


def _after_fork_in_child() -> None:
    """Fresh locks in a forked child: a lock another thread held at the fork stays held there forever (that
    thread does not exist in the child). The loaded runtime and libraries are the parent's mappings, valid in
    the child; the runtime's own state is reset by its pthread_atfork handler."""
    global _lib_lock
    _lib_lock = threading.Lock()
    LOADED_LIBRARIES._lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)

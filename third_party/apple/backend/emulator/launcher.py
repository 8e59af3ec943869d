"""The native launcher (`native/launcher.c`): compiled on first use with Triton's `compile_so_from_file` into
Triton's cache, as upstream compiles its own launchers, loaded once the file (and every directory above it) passes
the emulator cache's trust rule (`cache.check_trusted`), and bound to the loaded runtime; and the per-launch settings
it takes from the TRITON_APPLE_EMULATOR_* knobs. There is no other launch path: a machine that cannot compile it
(no C compiler, no Python headers) gets an EmulatorError saying what to install."""
from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import os
import shutil
import sys
import sysconfig
import threading
from pathlib import Path
from typing import Optional, Tuple

from .. import knobs
from . import build
from .cache import check_trusted
from .errors import EmulatorError, EmulatorLaunchError
from .library import ABI_VERSION, runtime_library

_UB_MODES = {"warn": 0, "error": 1, "ignore": 2}
_SCHEDULES = {"forward": 0, "reverse": 1, "random": 2}


def _schedule(kernel: str, spec: str) -> Tuple[int, int]:
    """'forward' | 'reverse' | 'random' | 'random:<seed>' -> (TT_SCHED_*, seed)."""
    spec = spec.strip().lower()
    name, _, seed = spec.partition(":")
    if name not in _SCHEDULES or (seed and (name != "random" or not seed.isdigit())):
        raise EmulatorLaunchError(f"kernel '{kernel}': unknown emulator schedule {spec!r}; expected forward, reverse "
                                  "or random[:seed]", kernel_name=kernel)
    return _SCHEDULES[name], int(seed) if seed else 0x5EED

LAUNCHER_SOURCE = build.NATIVE_DIR / "launcher.c"
LAUNCHER_MODULE = "apple_launcher"
_launcher = None
_launcher_lock = threading.Lock()


def _python_include_dir() -> str:
    """Where Triton's build looks for Python.h (triton.runtime.build._build)."""
    scheme = sysconfig.get_default_scheme()
    return sysconfig.get_paths(scheme="posix_prefix" if scheme == "posix_local" else scheme)["include"]


def _why_no_launcher() -> str:
    """What the machine lacks, when the launcher did not compile."""
    from triton import knobs as triton_knobs
    if triton_knobs.build.impl is not None:
        return "triton.knobs.build.impl is set: its build function failed"
    inc = _python_include_dir()
    if not os.path.isfile(os.path.join(inc, "Python.h")):
        return (f"Python's headers are missing ({inc}/Python.h): install them (Debian/Ubuntu: apt-get install "
                "python3-dev for the distribution's Python; pyenv and python.org builds ship them)")
    cc = os.environ.get("CC")
    if cc is not None and not shutil.which(cc):
        return f"CC={cc} is not found"
    if cc is None and not (shutil.which("gcc") or shutil.which("clang")):
        return "no C compiler: install gcc or clang (Debian/Ubuntu: apt-get install gcc), or set CC"
    return "the C compiler failed (its messages are above)"


def _compile_launcher():
    from triton.runtime.build import compile_so_from_file
    inc, _ = build.native_dirs()
    # Triton's cache key covers the source and the flags, not included files: the headers' digest goes in a flag,
    # so that a change of the runtime's ABI header rebuilds the launcher.
    digest = hashlib.sha256()
    for name in ("emulator_runtime.h", "metal_limits.h"):
        digest.update((inc / name).read_bytes())
    flags = [f"-DTT_APPLE_HEADERS_SHA256={digest.hexdigest()[:32]}"]
    if sys.platform == "darwin":  # Python's symbols come from the interpreter that loads the module
        flags += ["-undefined", "dynamic_lookup"]
    try:
        # the path, not the module: it is loaded here, once it passed the cache's trust rule
        path = compile_so_from_file(src_path=str(LAUNCHER_SOURCE), name=LAUNCHER_MODULE, include_dirs=[str(inc)],
                                    ccflags=flags)
    except Exception as e:  # noqa: BLE001 (any failure to build it is the same problem, said once)
        raise EmulatorError(f"the emulator's launcher {LAUNCHER_SOURCE} could not be compiled ({type(e).__name__}: "
                            f"{e}): {_why_no_launcher()}. Emulator launches need it (a C compiler and "
                            "Python's headers, as Triton's own launchers do)") from e
    # Triton's cache may be shared: a library someone else put at the launcher's key would run in this process
    check_trusted(Path(path), "the emulator's native launcher")
    try:
        spec = importlib.util.spec_from_file_location(LAUNCHER_MODULE, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    except Exception as e:  # noqa: BLE001 (no compiler ran: the file in the cache is what failed)
        raise EmulatorError(f"the emulator's launcher {path}, found in Triton's cache, could not be loaded "
                            f"({type(e).__name__}: {e}); remove it to have it compiled again") from e
    return mod


def launcher():
    """The native launcher module, compiled on first use (Triton's cache) and bound to the loaded runtime."""
    global _launcher
    if _launcher is not None:
        return _launcher
    with _launcher_lock:
        if _launcher is None:
            lib = runtime_library()
            mod = _compile_launcher()
            if mod.ABI_VERSION != ABI_VERSION:
                raise EmulatorError(f"the emulator's launcher was compiled for ABI {mod.ABI_VERSION}, this Python "
                                    f"side has {ABI_VERSION}")
            address = lambda f: ctypes.cast(f, ctypes.c_void_p).value  # noqa: E731
            mod.bind_runtime(address(lib.tt_emu_launch_begin), address(lib.tt_emu_launch_wait),
                             address(lib.tt_emu_launch_cancel), address(lib.tt_emu_abi_version))
            mod.set_config_source(tuple(k.env for k in _CONFIG_KNOBS), launch_config)
            _launcher = mod
    return _launcher


def _after_fork_in_child() -> None:
    global _launcher_lock
    _launcher_lock = threading.Lock()  # held by a thread that is not in the child: it would never be released


os.register_at_fork(after_in_child=_after_fork_in_child)

_CONFIG_KNOBS = (knobs.emulator_threads, knobs.emulator_stack_kb, knobs.emulator_schedule, knobs.emulator_ub,
                 knobs.emulator_timeout)


def launch_config(kernel: str, host_threads: Optional[int] = None, stack_kb: Optional[int] = None,
                  schedule: Optional[str] = None, timeout: Optional[float] = None) -> tuple:
    """(host_threads, stack_kb, schedule, seed, ub_mode, timeout_ms) of a launch: the arguments, else the
    TRITON_APPLE_EMULATOR_* knobs. Launches without arguments let the launcher call this only when one of those
    environment variables changed (`set_config_source`)."""
    threads = knobs.emulator_threads.get() if host_threads is None else max(0, host_threads)
    stack = knobs.emulator_stack_kb.get() if stack_kb is None else max(0, stack_kb)
    sched, seed = _schedule(kernel, knobs.emulator_schedule.get() if schedule is None else schedule)
    seconds = knobs.emulator_timeout.get() if timeout is None else timeout
    timeout_ms = 0 if seconds <= 0 else min(max(1, round(seconds * 1000)), 0xFFFFFFFF)
    # masked to the descriptor's field widths, as the ctypes fields they replace did
    return (threads & 0xFFFFFFFF, stack & 0xFFFFFFFF, sched, seed & (2**64 - 1), _UB_MODES[knobs.emulator_ub.get()],
            timeout_ms)

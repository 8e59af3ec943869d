"""Builds of the emulator, each an entry of its cache (`cache.py`): the runtime library, the precompiled compat
header and each kernel's library, from the native sources in `native/`; a failed kernel build becomes an
EmulatorCompileError that points at the user's MSL lines."""
from __future__ import annotations

import errno
import functools
import os
import re
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from .. import compile_log, knobs
from ..abi.msl_locations import error_lines
from .cache import (LOW_SPACE, cache_root, cached_entry, entry_finished, file_mode, free_bytes, hash_parts, tmp_name,
                    unlink_quietly, write_file)
from .clang import (KERNEL_FLAGS, LINE_TABLES, QUICK_KERNEL_FLAGS, RUNTIME_FLAGS, SHLIB_SUFFIX, TOOL_FLAGS, compiler_version,
                    extra_link_flags, find_compiler, host_arch_flags, target_defines)
from .errors import EmulatorCacheIOError, EmulatorCacheWarning, EmulatorCompileError, EmulatorError
from .link import forget as forget_link_line, link_line

NATIVE_DIR = Path(__file__).resolve().parent / "native"  # ships inside the package, in every install


def native_dirs() -> Tuple[Path, Path]:
    """(include dir, source dir) of the emulator's native sources: ``emulator/native/include`` (the compat
    header, the runtime's C ABI, the limits) and ``emulator/native`` (the runtime and the launcher)."""
    inc = NATIVE_DIR / "include"
    if not ((inc / "metal_compat.h").is_file() and (NATIVE_DIR / "emulator_runtime.cpp").is_file()):
        raise EmulatorError(f"Metal emulator native sources not found under {NATIVE_DIR} (an incomplete install?)")
    return inc, NATIVE_DIR


@functools.lru_cache(None)
def native_sources() -> Dict[str, bytes]:
    inc, lib = native_dirs()
    files = {}
    for p in sorted(inc.iterdir()):
        if p.is_file():
            files["include/" + p.name] = p.read_bytes()
    files["emulator_runtime.cpp"] = (lib / "emulator_runtime.cpp").read_bytes()
    return files


def _runtime_defines() -> List[str]:
    return ["-DTT_EMU_UCONTEXT=1"] if knobs.emulator_ucontext.get() else []


def _run(cmd: List[str], cwd: Path) -> subprocess.CompletedProcess:
    """`cmd` in `cwd`, its output captured: by a loaded server of its tool where there is one (fork_server.py),
    else as a subprocess."""
    from . import fork_server
    served = fork_server.run(cmd, cwd)
    return served if served is not None else _run_here(cmd, cwd)


def _run_here(cmd: List[str], cwd: Path) -> subprocess.CompletedProcess:
    """`cmd` in `cwd` as a subprocess, its output captured (what builds the fork server itself uses)."""
    return subprocess.run(cmd, cwd=str(cwd), capture_output=True, text=True)


def _compile_into(cmd: List[str], out: Path, cwd: Path) -> subprocess.CompletedProcess:
    """Run a compile whose output goes to a temporary, then rename it to `out` (executable mode)."""
    return _produce_into(lambda tmp: _run(cmd + ["-o", tmp], cwd), out)


def _produce_into(produce: Callable[[str], subprocess.CompletedProcess], out: Path) -> subprocess.CompletedProcess:
    """Run `produce(temporary output path)`; when it succeeds, give the temporary executable mode and rename it to
    `out`. On macOS clang also writes the debug information next to its output (`<output>.dSYM`, where
    llvm-symbolizer looks for it): that bundle is renamed along."""
    tmp = tmp_name(out.parent, out.name)
    dsym, out_dsym = Path(str(tmp) + ".dSYM"), Path(str(out) + ".dSYM")
    res = produce(str(tmp))
    try:
        if res.returncode == 0:
            os.chmod(tmp, file_mode(executable=True))
            if dsym.is_dir():
                unlink_quietly(out_dsym)
                os.replace(dsym, out_dsym)
            os.replace(tmp, out)
    finally:
        unlink_quietly(tmp)
        unlink_quietly(dsym)
    return res


_CRASH = re.compile(r"No space left on device|Bus error|due to signal|PLEASE submit a bug report|unable to execute "
                    r"command|LLVM ERROR|Stack dump:|error: unable to (open|write) output|I/O error")


def failure_outside_the_source(res: subprocess.CompletedProcess, directory: Path, inputs: List[str],
                               what: str) -> Optional[EmulatorCacheIOError]:
    """When a compile failed for a reason that is not in the source, the error that says so (None otherwise):
    its inputs went missing (the cache entry was removed under the build), or the disk is full. A full disk
    often shows as a crashed compiler or linker (lld maps its output file; writing the mapping on a full disk
    is a SIGBUS, "Bus error"), so a crash or an output error while the disk holding the entry is nearly full is
    reported as the full disk."""
    missing = [name for name in inputs if not (directory / name).is_file()]
    if not directory.is_dir() or missing:
        where = directory / missing[0] if missing and directory.is_dir() else directory
        return EmulatorCacheIOError(
            f"Metal emulator cache: {where} went missing while {what} was being compiled (was the cache directory "
            "removed meanwhile, by a cache cleanup?); run again to rebuild it", errno.ENOENT, str(where))
    free = free_bytes(directory)
    full = "No space left on device" in res.stderr or (free is not None and free < LOW_SPACE and
                                                       (_CRASH.search(res.stderr) or res.returncode < 0))
    if full:
        return EmulatorCacheIOError(
            f"Metal emulator cache: no space left on the device holding {directory} while compiling {what} "
            f"({free if free is not None else 'unknown'} bytes free; the compiler's last words: "
            f"{res.stderr.strip().splitlines()[-1] if res.stderr.strip() else 'none'}): free some space, or set "
            "TRITON_CACHE_DIR to a directory on another disk", errno.ENOSPC, str(directory))
    return None


RUNTIME_LIB = "libtriton_apple_emulator" + SHLIB_SUFFIX
KERNEL_LIB = "kernel" + SHLIB_SUFFIX
PCH = "metal_compat.pch"


def build_runtime() -> Path:
    """Compile (once, cached by content hash) and return the runtime shared library."""
    cxx = find_compiler()
    inc, lib = native_dirs()
    flags = list(RUNTIME_FLAGS) + list(host_arch_flags()) + _runtime_defines()
    srcs = native_sources()
    key = hash_parts("runtime", compiler_version(cxx)[1], flags, srcs["include/emulator_runtime.h"],
                srcs["include/metal_limits.h"], srcs["include/emulator_tools.h"], srcs["emulator_runtime.cpp"])[:32]
    out_dir = cache_root() / f"runtime-{key}"

    def build(directory: Path):
        # the first launch in a fresh cache waits for this: say what is happening, once
        print(f"apple backend: building the Metal-on-CPU emulator runtime (once per cache, a few seconds) in "
              f"{out_dir}", file=sys.stderr, flush=True)
        cmd = [cxx, *flags, "-I", str(inc), str(lib / "emulator_runtime.cpp"), "-ldl"]
        res = _compile_into(cmd, directory / RUNTIME_LIB, directory)
        if res.returncode != 0:
            raise failure_outside_the_source(res, directory, [], "the emulator runtime") or EmulatorError("failed to build the Metal emulator runtime:\n" + " ".join(cmd) + "\n" + res.stderr)

    cached_entry(out_dir, [RUNTIME_LIB], build, "the emulator runtime")
    return out_dir / RUNTIME_LIB


FORK_SERVER_LIB = "libtt_fork_server.so"


def build_fork_server() -> Path:
    """Compile (once, cached by content hash) and return the preload library of `fork_server.py`."""
    cxx = find_compiler()
    source = (NATIVE_DIR / "fork_server.c").read_bytes()
    flags = ["-x", "c", "-O2", "-fPIC", "-shared", "-fvisibility=default", "-w"]
    key = hash_parts("fork-server", compiler_version(cxx)[1], flags, source)[:32]
    out_dir = cache_root() / f"fork-server-{key}"

    def build(directory: Path):
        write_file(directory / "fork_server.c", source)
        cmd = [cxx, *flags, "fork_server.c", "-ldl"]
        res = _produce_into(lambda tmp: _run_here(cmd + ["-o", tmp], directory), directory / FORK_SERVER_LIB)
        if res.returncode != 0:
            raise EmulatorError("failed to build the compiler fork server:\n" + " ".join(cmd) + "\n" + res.stderr)

    cached_entry(out_dir, [FORK_SERVER_LIB, "fork_server.c"], build, "the compiler fork server")
    return out_dir / FORK_SERVER_LIB


def _kernel_flags(quick: bool, lines: bool = False) -> Tuple[str, ...]:
    """The flags of a kernel's library; `lines`: a quick library's twin with line tables (optimised libraries
    always have them)."""
    return (QUICK_KERNEL_FLAGS + ((LINE_TABLES, ) if lines else ())) if quick else KERNEL_FLAGS


def _pch_flags(quick: bool = False) -> List[str]:
    return [f for f in _kernel_flags(quick) if f != "-shared"] + list(target_defines())


# by the target's defines (target_defines, the header depends on them) and the optimisation level (clang refuses
# a PCH built at another one)
_pch_dirs: Dict[Tuple[Tuple[str, ...], bool], Path] = {}
_pch_lock = threading.Lock()


def build_pch(quick: bool = False) -> Optional[Path]:
    """The compat header (``metal_stdlib`` -> ``metal_compat.h`` and what it includes), parsed once into a
    precompiled header with the kernel flags: a cache entry holding a copy of the include directory's files and
    ``metal_compat.pch`` built from that copy (so that edits of the source tree never invalidate it under a
    kernel compile; the key covers the headers' contents). Saves parsing the ~1300 lines of templates in every
    kernel compile. Returns the entry, or None when the compiler cannot build it (kernels then compile
    without it). Remembered for the process: a kernel compile after the cache directory changed (or was
    emptied) still uses it while its files exist."""
    with _pch_lock:
        known = _pch_dirs.get((target_defines(), quick))
        if known is not None and (known / PCH).is_file():
            return known
        cxx = find_compiler()
        srcs = native_sources()
        headers = {k[len("include/"):]: v for k, v in srcs.items() if k.startswith("include/")}
        key = hash_parts("pch", compiler_version(cxx)[1], _pch_flags(quick),
                    *[k.encode() + b"=" + v for k, v in sorted(headers.items())])[:32]
        out_dir = cache_root() / f"pch-{key}"

        def build(directory: Path):
            for name, data in headers.items():
                write_file(directory / name, data)
            cmd = [cxx, *_pch_flags(quick), "-I", str(directory), "-x", "c++-header",
                   str(directory / "metal_compat.h")]
            res = _compile_into(cmd, directory / PCH, directory)
            if res.returncode != 0:
                raise failure_outside_the_source(res, directory, sorted(headers), "the precompiled compat header") \
                    or EmulatorError("failed to precompile the Metal compat header:\n" + " ".join(cmd) + "\n" +
                                     res.stderr)

        try:
            cached_entry(out_dir, [PCH] + sorted(headers), build, "the precompiled compat header")
        except EmulatorCacheIOError:
            raise  # a full disk or a removed cache: kernel builds would fail the same way
        except EmulatorError as e:
            warnings.warn(EmulatorCacheWarning(f"Metal emulator: {e}; kernels are compiled without it"))
            return None
        _pch_dirs[(target_defines(), quick)] = out_dir
        return out_dir


def _after_fork_in_child() -> None:
    global _pch_lock
    _pch_lock = threading.Lock()  # see cache._after_fork_in_child


os.register_at_fork(after_in_child=_after_fork_in_child)


def kernel_key(source: str, kernel_name: str, trampoline: str, tools: bool = False, quick: bool = False,
               lines: bool = False) -> str:
    cxx = find_compiler()
    srcs = native_sources()
    return hash_parts("kernel", compiler_version(cxx)[1], _kernel_flags(quick and not tools, lines), target_defines(),
                      extra_link_flags(),
                      _runtime_defines(), *(TOOL_FLAGS if tools else ()),
                 *[k.encode() + b"=" + v for k, v in sorted(srcs.items())], source, kernel_name, trampoline)[:40]


def kernel_dir(key: str) -> Path:
    """The cache entry of the kernel library with key `key` (:func:`kernel_key`)."""
    return cache_root() / key[:2] / key


def kernel_built(key: str) -> bool:
    """Whether the cache holds the kernel library with key `key` (a look at its manifest, nothing loaded)."""
    return entry_finished(kernel_dir(key))


def build_kernel(source: str, kernel_name: str, trampoline: str, trampoline_lines: Dict[int, int],
                 sig_line: int, original_source: str, tools: bool = False, quick: bool = False,
                 lines: bool = False) -> Tuple[Path, bool]:
    """Compile a kernel; returns (shared object, was_cached). Raises EmulatorCompileError. ``tools``: the build for
    the sanitizer and profiler (clang.TOOL_FLAGS; without the precompiled header, which is built without them).
    ``quick``: at -O0 (clang.QUICK_KERNEL_FLAGS; not for the tools build). ``lines``: the quick build with line
    tables, which locates a fault of the quick library (its precompiled header is the quick one: debug
    information of the header's declarations is not what a fault is mapped to)."""
    cxx = find_compiler()
    inc, _ = native_dirs()
    quick = quick and not tools
    lines = lines and quick
    flags = _kernel_flags(quick, lines)
    key = kernel_key(source, kernel_name, trampoline, tools, quick, lines)
    out_dir = kernel_dir(key)
    msl_name = f"{kernel_name}.metal"

    def build(directory: Path):
        write_file(directory / msl_name, source.encode())
        write_file(directory / "entry.cpp", trampoline.encode())
        # The runtime hooks (__tt_*, __ubsan_*) stay undefined here: they resolve against the runtime, which
        # is always loaded RTLD_GLOBAL before any kernel (no path baked into the kernel's library).
        pch = None if tools else build_pch(quick)
        include = ["-I", str(pch), "-include-pch", str(pch / PCH)] if pch else ["-I", str(inc)]
        build_flags = [*flags, *(TOOL_FLAGS if tools else ())]
        res = _build_library(cxx, build_flags, [*target_defines(), *include], directory)
        if res.returncode != 0 and pch and re.search(r"precompiled header|PCH file|\.pch", res.stderr):
            res = _build_library(cxx, build_flags, [*target_defines(), "-I", str(inc)], directory)  # a PCH problem
        if res.returncode != 0:
            raise failure_outside_the_source(res, directory, [msl_name, "entry.cpp"], f"kernel '{kernel_name}'") or \
                _compile_error(res.stderr, kernel_name, msl_name, directory, inc, trampoline_lines, sig_line,
                               original_source, extra_prefixes=[str(pch)] if pch else [])

    clang = []  # seconds of each clang run of this build (a PCH problem makes two)

    def timed_build(directory: Path):
        started = time.perf_counter()
        try:
            build(directory)
        finally:
            clang.append(time.perf_counter() - started)

    hit = cached_entry(out_dir, [KERNEL_LIB, msl_name, "entry.cpp"], timed_build, f"kernel '{kernel_name}'")
    compile_log.emit(kernel_name, compile_log.LOADED if hit else compile_log.COMPILED, "emulator", sum(clang),
                     str(out_dir) + ((", -O0 with line tables: to locate a fault of the quick library" if lines
                                      else ", -O0: a quick library") if quick else ""))
    return out_dir / KERNEL_LIB, hit


def _build_library(cxx: str, flags: Sequence[str], compile_flags: Sequence[str],
                   directory: Path) -> subprocess.CompletedProcess:
    """Build `directory`/entry.cpp into `directory`/kernel library with the kernel `flags` (those the library
    depends on) and `compile_flags` (defines and include paths, which only the compile reads); returns the
    failing step's result, or the last one's. Compiled to an object (a temporary) and linked by running the
    driver's own link line directly (`link.py`), which saves starting the driver a second time; one driver call
    where no link line is known. When the direct link fails for a reason of its own, the one-call build runs
    instead and is what is reported (so link errors read as the driver reports them), and the link line is not
    used again in this process if the driver's link succeeded."""
    out = directory / KERNEL_LIB
    line = link_line([cxx, *flags], extra_link_flags())
    if line is None:
        return _compile_into([cxx, *flags, *compile_flags, "entry.cpp", *extra_link_flags()], out, directory)
    obj = tmp_name(directory, "kernel.o")
    try:
        res = _run([cxx, *flags, *compile_flags, "-c", "entry.cpp", "-o", str(obj)], directory)
        if res.returncode != 0:
            return res
        res = _produce_into(lambda tmp: _run_linker(line.command(str(obj), tmp), directory), out)
    finally:
        unlink_quietly(obj)
    if res.returncode == 0 or failure_outside_the_source(res, directory, ["entry.cpp"], "a kernel"):
        return res
    res = _compile_into([cxx, *flags, *compile_flags, "entry.cpp", *extra_link_flags()], out, directory)
    if res.returncode == 0:
        forget_link_line([cxx, *flags], extra_link_flags())
    return res


def _run_linker(cmd: List[str], cwd: Path) -> subprocess.CompletedProcess:
    """`_run` of a linker command learned earlier: a linker that cannot be started (removed by a toolchain upgrade
    since) is a failed link, which the one-call build then replaces, not an error of the cache."""
    try:
        return _run(cmd, cwd)
    except OSError as e:
        return subprocess.CompletedProcess(cmd, 127, "", f"{cmd[0]}: {e}")


def _compile_error(stderr: str, kernel_name: str, msl_name: str, out_dir: Path, inc: Path,
                   trampoline_lines: Dict[int, int], sig_line: int, original_source: str,
                   extra_prefixes: List[str] = ()) -> EmulatorCompileError:
    prefixes = [str(out_dir) + os.sep, str(inc) + os.sep, str(out_dir.resolve()) + os.sep,
                str(inc.resolve()) + os.sep]
    for p in extra_prefixes:
        prefixes += [p + os.sep, os.path.realpath(p) + os.sep]
    text = stderr
    for p in sorted(set(prefixes), key=len, reverse=True):
        text = text.replace(p, "")
    # For each error: its own location when it is in the user's MSL; when it is inside the compat header
    # (e.g. a static_assert) or the trampoline, the user-file locations of its notes (instantiation point).
    lines = error_lines(text, [msl_name], {"entry.cpp": lambda line: trampoline_lines.get(line, sig_line)})
    src_lines = original_source.splitlines()
    shown = ""
    if lines:
        shown = "\nMSL source lines involved:" + "".join(
            f"\n  {n:5d} | {src_lines[n - 1] if 0 < n <= len(src_lines) else ''}" for n in sorted(set(lines)))
    text = text.replace("entry.cpp", "<emulator trampoline>")
    msg = f"MSL compile of kernel '{kernel_name}' failed (host clang with the Metal compat header):\n" \
          f"{text.rstrip()}{shown}"
    return EmulatorCompileError(msg, lines, diagnostics=text, kernel_name=kernel_name)

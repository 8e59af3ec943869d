"""Host compiler, native source locations, build flags and the on-disk cache of the emulator.

The cache (``<triton cache dir>/apple_emulator``) holds one directory per build (the runtime, each kernel).
Its rules:

* builds are safe across threads and processes: every file is written under a unique temporary name
  (pid, thread id, random) and renamed into place; a build holds the entry's lock (an in-process lock and a
  ``flock`` on ``<entry>/.lock``), and whoever gets the lock second finds the finished entry;
* ``manifest.json`` is written last and records the size and sha256 of every file of the entry; an entry is
  used only if every file matches. A damaged entry (truncated or garbage library, edited source, broken
  manifest) is rebuilt with one :class:`EmulatorCacheWarning` naming the file; temporaries left by a killed
  build are deleted by the next build of that entry;
* files are created with the user's umask but never group/world-writable; libraries are refused (an
  :class:`EmulatorCacheError`) from a directory that another user owns or that group/others may write to,
  unless ``TRITON_APPLE_EMULATOR_TRUST_CACHE=1``; each directory is checked once per process.
"""
from __future__ import annotations

import atexit
import errno
import fcntl
import functools
import hashlib
import json
import os
import platform
import re
import secrets
import shutil
import stat
import subprocess
import sys
import threading
import warnings
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from .. import knobs
from .errors import EmulatorCacheError, EmulatorCacheWarning, EmulatorCompileError, EmulatorError

IS_DARWIN = sys.platform == "darwin"
IS_X86_64 = platform.machine().lower() in ("x86_64", "amd64")
SHLIB_SUFFIX = ".dylib" if IS_DARWIN else ".so"



def kernel_flags(x86_64: bool = IS_X86_64, darwin: bool = IS_DARWIN) -> Tuple[str, ...]:
    """Flags of kernel translation units for a host: MSL compiled as C++ with Metal's defined behaviour
    where C++ has UB. (The portability tests ask for other hosts' flags.)"""
    flags = [
        "-std=c++17",
        "-O2",
        "-fPIC",
        "-shared",
        "-fwrapv",                          # Metal integer arithmetic wraps
        "-fno-finite-loops",                # a side-effect-free loop is not assumed to end: a spin stays a spin
        "-fno-strict-float-cast-overflow",  # float->int: NaN -> 0, out of range saturates
        "-ffp-contract=off",                # no implicit FMA: same results on x86 and AArch64
        "-fno-math-errno",
        "-fno-strict-aliasing",             # MSL code reinterprets threadgroup bytes freely
        "-fsigned-char",                    # Metal char is signed on every host
        "-flax-vector-conversions=none",    # Metal has no implicit vector conversions
        "-fno-exceptions",
        "-fno-rtti",
        # Report what Metal does not trap on; the runtime provides the sanitizer hooks (no sanitizer runtime).
        "-fsanitize=integer-divide-by-zero,shift-exponent,array-bounds",
        "-fno-sanitize-link-runtime",
        "-gline-tables-only",               # map faulting instructions back to MSL lines
        "-w",
        "-ferror-limit=30",
        "-fno-color-diagnostics",
        "-fdiagnostics-absolute-paths",
    ]
    if darwin:  # kernels call the runtime's hooks, which resolve against the runtime loaded RTLD_GLOBAL
        flags += ["-undefined", "dynamic_lookup"]
    else:  # big frames probe every page, so stack overflows hit the guard page (not supported by Apple clang)
        flags += ["-fstack-clash-protection"]
    if x86_64:  # x86 keeps half/bfloat excess precision across operations unless told otherwise; AArch64
        flags += ["-fexcess-precision=16"]  # rounds after every operation already (and rejects this flag)
    return tuple(flags)


# x86-64 feature levels (psABI): the instructions each needs, as /proc/cpuinfo names them.
_X86_64_V2 = {"cx16", "lahf_lm", "popcnt", "sse4_1", "sse4_2", "ssse3"}
_X86_64_V3 = _X86_64_V2 | {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"}


def host_arch_flags() -> Tuple[str, ...]:
    """``-march`` for the host's x86-64 feature level (v3: AVX2 and F16C, i.e. hardware half <-> float
    conversions instead of library calls, wider vectors for the fragment math), named explicitly rather
    than ``-march=native`` so that the cache key (which includes the flags) tells apart libraries built for
    different machines sharing a cache directory. Never changes results: contraction stays off
    (``-ffp-contract=off``) and half/bfloat are still rounded after every operation. Empty elsewhere."""
    if not IS_X86_64 or IS_DARWIN:
        return ()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    have = set(line.split(":", 1)[1].split())
                    break
            else:
                return ()
    except OSError:
        return ()
    if _X86_64_V3 <= have:
        return ("-march=x86-64-v3", )
    if _X86_64_V2 <= have:
        return ("-march=x86-64-v2", )
    return ()


KERNEL_FLAGS = kernel_flags() + host_arch_flags() + (
    # Kernel libraries export only their entry point and ABI stamp (marked in the trampoline): helpers of
    # the compat header are called directly rather than through the PLT, and dlopen resolves fewer symbols.
    "-fvisibility=hidden", "-fvisibility-inlines-hidden")
RUNTIME_FLAGS: Tuple[str, ...] = ("-std=c++17", "-O2", "-fPIC", "-shared", "-pthread", "-fvisibility=hidden",
                                  "-fno-omit-frame-pointer")
_CANDIDATES = ("clang++-22", "clang++-21", "clang++-20", "clang++-19", "clang++-18", "clang++-17", "clang++") + (
    ("/opt/homebrew/opt/llvm/bin/clang++", "/usr/local/opt/llvm/bin/clang++") if IS_DARWIN else ())
# Apple clang numbers its releases on its own: Apple clang 16 is based on LLVM 17.
_MIN_CLANG, _MIN_APPLE_CLANG = 17, 16


NATIVE_DIR = Path(__file__).resolve().parent / "native"  # ships inside the package, in every install


def native_dirs() -> Tuple[Path, Path]:
    """(include dir, source dir) of the emulator's native sources: ``emulator/native/include`` (the compat
    header, the runtime's C ABI, the limits) and ``emulator/native`` (the runtime and the launcher)."""
    inc = NATIVE_DIR / "include"
    if not ((inc / "metal_compat.h").is_file() and (NATIVE_DIR / "emulator_runtime.cpp").is_file()):
        raise EmulatorError(f"Metal emulator native sources not found under {NATIVE_DIR} (an incomplete install?)")
    return inc, NATIVE_DIR


# -- permissions and trust ------------------------------------------------------------------------------


def _umask() -> int:
    try:  # Linux: read it without changing it (os.umask is process-wide and racy with other threads)
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def _mode(executable: bool = False) -> int:
    """The mode of a new cache file or directory: the user's umask applied, group/others never writable."""
    return (0o777 if executable else 0o666) & ~_umask() & ~0o022


_trusted_dirs: set = set()


def _check_trusted(path: Path) -> None:
    """Refuse a cache directory (or file) that another user owns or that group/others may write to."""
    key = str(path)
    if key in _trusted_dirs or knobs.emulator_trust_cache.get():
        return
    st = os.stat(path)
    owner_ok = st.st_uid in (os.geteuid(), 0)
    if not owner_ok or st.st_mode & 0o022:
        who = "owned by another user (uid %d)" % st.st_uid if not owner_ok else \
            "writable by %s (mode %o)" % ("group and others" if st.st_mode & 0o022 == 0o022 else
                                          "others" if st.st_mode & 0o002 else "group", stat.S_IMODE(st.st_mode))
        raise EmulatorCacheError(
            f"refusing to load Metal emulator libraries from {path}: it is {who}, so another user could put code "
            f"there that would run in this process. Use a private TRITON_CACHE_DIR, or `chmod go-w {path}`, or set "
            "TRITON_APPLE_EMULATOR_TRUST_CACHE=1 if everyone who can write there is trusted.")
    if stat.S_ISDIR(st.st_mode):
        _trusted_dirs.add(key)


def _make_dir(path: Path) -> None:
    """Create `path` (and missing parents) with _mode(); check the ones of the emulator's cache."""
    if not path.is_dir():
        _make_dir(path.parent)
        try:
            os.mkdir(path, _mode(executable=True))
        except FileExistsError:
            pass


def cache_root() -> Path:
    from triton import knobs as triton_knobs  # upstream's knob: TRITON_CACHE_DIR or ~/.triton/cache
    path = Path(triton_knobs.cache.dir) / "apple_emulator"
    _make_dir(path)
    _check_trusted(path)
    return path


# -- compiler --------------------------------------------------------------------------------------------


@functools.lru_cache(None)
def _compiler_version(path: str) -> Tuple[int, str]:
    """(LLVM-equivalent major version, first line of --version)."""
    out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60).stdout
    first = out.splitlines()[0] if out else path
    m = re.search(r"Apple clang version (\d+)", out)
    if m:  # map Apple's numbering onto the LLVM minimum
        return (_MIN_CLANG if int(m.group(1)) >= _MIN_APPLE_CLANG else 0), first
    m = re.search(r"clang version (\d+)", out)
    return (int(m.group(1)) if m else 0), first


@functools.lru_cache(None)
def find_compiler() -> str:
    """clang++ >= 17 (Apple clang >= 16); ``TRITON_APPLE_EMULATOR_CXX`` overrides the search."""
    override = knobs.emulator_cxx.get()
    names = [override] if override else list(_CANDIDATES)
    tried = []
    for name in names:
        path = shutil.which(name) if not os.path.isabs(name) else name
        if not path or not os.path.exists(path):
            tried.append(name)
            continue
        major, _ = _compiler_version(path)
        if major >= _MIN_CLANG:
            return path
        tried.append(f"{name} (version {major or 'unknown'})")
    raise EmulatorError("the Metal emulator needs clang++ >= 17 or Apple clang >= 16 (address spaces, _Float16, "
                        "__bf16); tried: " + ", ".join(tried) + ". Set TRITON_APPLE_EMULATOR_CXX to a clang++ binary.")


@functools.lru_cache(None)
def find_symbolizer() -> Optional[str]:
    cxx = find_compiler()
    m = re.search(r"-(\d+)$", os.path.basename(cxx))
    names = ([f"llvm-symbolizer-{m.group(1)}"] if m else []) + ["llvm-symbolizer"]
    local = os.path.join(os.path.dirname(os.path.realpath(cxx)), "llvm-symbolizer")
    # Xcode has no llvm-symbolizer; Homebrew's LLVM does
    brew = ["/opt/homebrew/opt/llvm/bin/llvm-symbolizer", "/usr/local/opt/llvm/bin/llvm-symbolizer"] if IS_DARWIN else []
    for cand in [local] + [shutil.which(n) for n in names] + brew:
        if cand and os.path.exists(cand):
            return cand
    return None


@functools.lru_cache(None)
def _lld_flags() -> Tuple[str, ...]:
    """``-fuse-ld=lld`` when the compiler has an ld.lld next to it (Linux): linking a kernel takes ~40 ms
    with lld against ~150 ms with GNU ld."""
    if IS_DARWIN:
        return ()
    cxx = find_compiler()
    m = re.search(r"-(\d+)$", os.path.basename(cxx))
    cands = [os.path.join(os.path.dirname(os.path.realpath(cxx)), "ld.lld"),
             shutil.which(f"ld.lld-{m.group(1)}") if m else None]
    return ("-fuse-ld=lld", ) if any(c and os.path.exists(c) for c in cands) else ()


def _extra_link_flags() -> List[str]:
    # compiler-rt provides the half/bfloat conversion helpers (__truncsfbf2, ...); Apple's toolchain always
    # links it. Kernels use no C++ library (no exceptions, no RTTI, no std::).
    return ["-lm"] if IS_DARWIN else [*_lld_flags(), "-nostdlib++", "-rtlib=compiler-rt", "-lm"]


def _hash(*parts) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p if isinstance(p, bytes) else str(p).encode())
        h.update(b"\0")
    return h.hexdigest()


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
    return subprocess.run(cmd, cwd=str(cwd), capture_output=True, text=True)


# -- cache entries ---------------------------------------------------------------------------------------

_MANIFEST = "manifest.json"
_TMP_PREFIX = ".tmp-"
_entry_locks: Dict[str, threading.Lock] = {}
_entry_locks_guard = threading.Lock()
_warned: set = set()


def _tmp_name(directory: Path, name: str) -> Path:
    return directory / f"{_TMP_PREFIX}{os.getpid()}-{threading.get_ident()}-{secrets.token_hex(4)}-{name}"


def _write_file(path: Path, data: bytes, executable: bool = False) -> None:
    """Write `path` atomically (unique temporary + rename) with _mode()."""
    tmp = _tmp_name(path.parent, path.name)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, _mode(executable))
        os.replace(tmp, path)
    except BaseException:
        _unlink(tmp)
        raise


def _unlink(path: Path) -> None:
    """Remove a file, or a directory tree (a macOS .dSYM bundle)."""
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    except FileNotFoundError:
        pass


def _file_record(path: Path) -> Dict[str, object]:
    data = path.read_bytes()
    return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def _verify(directory: Path, required: List[str]) -> Optional[str]:
    """None if the entry is complete and intact; "" if it was never finished (no manifest); otherwise what is
    wrong with it, naming the file."""
    manifest = directory / _MANIFEST
    try:
        raw = manifest.read_bytes()
    except FileNotFoundError:
        return ""
    try:
        files = json.loads(raw.decode())["files"]
        assert isinstance(files, dict) and all(name in files for name in required)
    except Exception:
        return f"{manifest} is not a valid manifest"
    for name, want in files.items():
        path = directory / name
        try:
            _check_trusted(path)
            got = _file_record(path)
        except FileNotFoundError:
            return f"{path} is missing"
        if got["size"] != want.get("size"):
            return f"{path} has {got['size']} bytes, {want.get('size')} were written"
        if got["sha256"] != want.get("sha256"):
            return f"{path} does not have the content that was written (sha256 differs)"
    return None


def _entry_lock(directory: Path) -> threading.Lock:
    with _entry_locks_guard:
        return _entry_locks.setdefault(str(directory), threading.Lock())


def cached_entry(directory: Path, required: List[str], build: Callable[[Path], Dict[str, bytes]]) -> bool:
    """Make sure the cache entry `directory` is complete; returns True if it already was (a cache hit).

    `build(directory)` writes the entry's files (with :func:`_write_file` or :func:`_compile_into`, so that
    a killed build leaves only temporaries) or raises. The manifest is written here, last."""
    _make_dir(directory)
    _check_trusted(directory)
    if _verify(directory, required) is None:
        return True
    with _entry_lock(directory):
        lock_fd = os.open(directory / ".lock", os.O_RDWR | os.O_CREAT, _mode())
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
            problem = _verify(directory, required)
            if problem is None:  # another thread or process built it meanwhile
                return True
            if problem and problem not in _warned:
                _warned.add(problem)
                warnings.warn(EmulatorCacheWarning(f"Metal emulator cache: {problem}; rebuilding it"), stacklevel=4)
            for p in directory.iterdir():  # a damaged entry, and temporaries of killed builds
                if p.name != ".lock" and (p.name.startswith((_TMP_PREFIX, ".build-")) or problem):
                    _unlink(p)
            build(directory)
            files = {name: _file_record(directory / name) for name in sorted(os.listdir(directory))
                     if name not in (".lock", _MANIFEST) and not name.startswith(_TMP_PREFIX)
                     and (directory / name).is_file()}
            _write_file(directory / _MANIFEST, json.dumps({"files": files}, indent=1).encode())
            return False
        finally:
            os.close(lock_fd)  # releases the flock


def _compile_into(cmd: List[str], out: Path, cwd: Path) -> subprocess.CompletedProcess:
    """Run a compile whose output goes to a temporary, then rename it to `out` (executable mode). On macOS
    clang also writes the debug information next to its output (`<output>.dSYM`, where llvm-symbolizer looks
    for it): that bundle is renamed along."""
    tmp = _tmp_name(out.parent, out.name)
    dsym, out_dsym = Path(str(tmp) + ".dSYM"), Path(str(out) + ".dSYM")
    res = _run(cmd + ["-o", str(tmp)], cwd)
    try:
        if res.returncode == 0:
            os.chmod(tmp, _mode(executable=True))
            if dsym.is_dir():
                _unlink(out_dsym)
                os.replace(dsym, out_dsym)
            os.replace(tmp, out)
    finally:
        _unlink(tmp)
        _unlink(dsym)
    return res


# -- builds ----------------------------------------------------------------------------------------------

RUNTIME_LIB = "libtriton_apple_emulator" + SHLIB_SUFFIX
KERNEL_LIB = "kernel" + SHLIB_SUFFIX
PCH = "metal_compat.pch"


def build_runtime() -> Path:
    """Compile (once, cached by content hash) and return the runtime shared library."""
    cxx = find_compiler()
    inc, lib = native_dirs()
    flags = list(RUNTIME_FLAGS) + list(host_arch_flags()) + _runtime_defines()
    srcs = native_sources()
    key = _hash("runtime", _compiler_version(cxx)[1], flags, srcs["include/emulator_runtime.h"],
                srcs["include/metal_limits.h"], srcs["emulator_runtime.cpp"])[:32]
    out_dir = cache_root() / f"runtime-{key}"

    def build(directory: Path):
        # the first launch in a fresh cache waits for this: say what is happening, once
        print(f"apple backend: building the Metal-on-CPU emulator runtime (once per cache, a few seconds) in "
              f"{out_dir}", file=sys.stderr, flush=True)
        cmd = [cxx, *flags, "-I", str(inc), str(lib / "emulator_runtime.cpp"), "-ldl"]
        res = _compile_into(cmd, directory / RUNTIME_LIB, directory)
        if res.returncode != 0:
            raise EmulatorError("failed to build the Metal emulator runtime:\n" + " ".join(cmd) + "\n" + res.stderr)

    cached_entry(out_dir, [RUNTIME_LIB], build)
    return out_dir / RUNTIME_LIB


def _pch_flags() -> List[str]:
    return [f for f in KERNEL_FLAGS if f != "-shared"]


_pch_dir: Optional[Path] = None
_pch_lock = threading.Lock()


def build_pch() -> Optional[Path]:
    """The compat header (``metal_stdlib`` -> ``metal_compat.h`` and what it includes), parsed once into a
    precompiled header with the kernel flags: a cache entry holding a copy of the include directory's files and
    ``metal_compat.pch`` built from that copy (so that edits of the source tree never invalidate it under a
    kernel compile; the key covers the headers' contents). Saves parsing the ~1300 lines of templates in every
    kernel compile. Returns the entry, or None when the compiler cannot build it (kernels then compile
    without it). Remembered for the process: a kernel compile after the cache directory changed (or was
    emptied) still uses it while its files exist."""
    global _pch_dir
    with _pch_lock:
        if _pch_dir is not None and (_pch_dir / PCH).is_file():
            return _pch_dir
        cxx = find_compiler()
        srcs = native_sources()
        headers = {k[len("include/"):]: v for k, v in srcs.items() if k.startswith("include/")}
        key = _hash("pch", _compiler_version(cxx)[1], _pch_flags(),
                    *[k.encode() + b"=" + v for k, v in sorted(headers.items())])[:32]
        out_dir = cache_root() / f"pch-{key}"

        def build(directory: Path):
            for name, data in headers.items():
                _write_file(directory / name, data)
            cmd = [cxx, *_pch_flags(), "-I", str(directory), "-x", "c++-header", str(directory / "metal_compat.h")]
            res = _compile_into(cmd, directory / PCH, directory)
            if res.returncode != 0:
                raise EmulatorError("failed to precompile the Metal compat header:\n" + " ".join(cmd) + "\n" +
                                    res.stderr)

        try:
            cached_entry(out_dir, [PCH] + sorted(headers), build)
        except EmulatorError as e:
            warnings.warn(EmulatorCacheWarning(f"Metal emulator: {e}; kernels are compiled without it"))
            return None
        _pch_dir = out_dir
        return out_dir


def kernel_key(source: str, kernel_name: str, trampoline: str) -> str:
    cxx = find_compiler()
    srcs = native_sources()
    return _hash("kernel", _compiler_version(cxx)[1], KERNEL_FLAGS, _extra_link_flags(), _runtime_defines(),
                 *[k.encode() + b"=" + v for k, v in sorted(srcs.items())], source, kernel_name, trampoline)[:40]


_DIAG_RE = re.compile(r"^(?P<file>[^\n:]+):(?P<line>\d+):(?P<col>\d+): (?P<sev>fatal error|error|warning|note|remark): ")


def build_kernel(source: str, kernel_name: str, trampoline: str, trampoline_lines: Dict[int, int],
                 sig_line: int, original_source: str) -> Tuple[Path, bool]:
    """Compile a kernel; returns (shared object, was_cached). Raises EmulatorCompileError."""
    cxx = find_compiler()
    inc, _ = native_dirs()
    key = kernel_key(source, kernel_name, trampoline)
    out_dir = cache_root() / key[:2] / key
    msl_name = f"{kernel_name}.metal"

    def build(directory: Path):
        _write_file(directory / msl_name, source.encode())
        _write_file(directory / "entry.cpp", trampoline.encode())
        # The runtime hooks (__tt_*, __ubsan_*) stay undefined here: they resolve against the runtime, which
        # is always loaded RTLD_GLOBAL before any kernel (no path baked into the kernel's library).
        pch = build_pch()
        include = ["-I", str(pch), "-include-pch", str(pch / PCH)] if pch else ["-I", str(inc)]
        cmd = [cxx, *KERNEL_FLAGS, *include, "entry.cpp", *_extra_link_flags()]
        res = _compile_into(cmd, directory / KERNEL_LIB, directory)
        if res.returncode != 0 and pch and re.search(r"precompiled header|PCH file|\.pch", res.stderr):
            cmd = [cxx, *KERNEL_FLAGS, "-I", str(inc), "entry.cpp", *_extra_link_flags()]  # a PCH problem
            res = _compile_into(cmd, directory / KERNEL_LIB, directory)
        if res.returncode != 0:
            raise _compile_error(res.stderr, kernel_name, msl_name, directory, inc, trampoline_lines, sig_line,
                                 original_source, extra_prefixes=[str(pch)] if pch else [])

    hit = cached_entry(out_dir, [KERNEL_LIB, msl_name, "entry.cpp"], build)
    return out_dir / KERNEL_LIB, hit


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
    lines: List[int] = []
    blocks: List[List[Tuple[str, str, int]]] = []
    for raw in text.splitlines():
        m = _DIAG_RE.match(raw)
        if not m:
            continue
        sev = m.group("sev")
        entry = (sev, os.path.basename(m.group("file")), int(m.group("line")))
        if sev in ("error", "fatal error", "warning", "remark"):
            blocks.append([entry])
        elif blocks:
            blocks[-1].append(entry)
    for block in blocks:
        sev, fname, line = block[0]
        if sev not in ("error", "fatal error"):
            continue
        if fname == msl_name:
            lines.append(line)
        elif fname == "entry.cpp":
            lines.append(trampoline_lines.get(line, sig_line))
        else:
            user = [ln for (_, f, ln) in block[1:] if f == msl_name]
            tramp = [trampoline_lines.get(ln, sig_line) for (_, f, ln) in block[1:] if f == "entry.cpp"]
            lines.extend(user[:1] if user else tramp[:1])
    src_lines = original_source.splitlines()
    shown = ""
    if lines:
        shown = "\nMSL source lines involved:" + "".join(
            f"\n  {n:5d} | {src_lines[n - 1] if 0 < n <= len(src_lines) else ''}" for n in sorted(set(lines)))
    text = text.replace("entry.cpp", "<emulator trampoline>")
    msg = f"MSL compile of kernel '{kernel_name}' failed (host clang with the Metal compat header):\n" \
          f"{text.rstrip()}{shown}"
    return EmulatorCompileError(msg, lines, diagnostics=text, kernel_name=kernel_name)


# -- symbolizing faults ------------------------------------------------------------------------------------


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

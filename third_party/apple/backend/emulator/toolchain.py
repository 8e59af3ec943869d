"""Host compiler, native source locations, build flags and the on-disk cache of the emulator."""
from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from .errors import EmulatorCompileError, EmulatorError

# Kernel translation units: MSL compiled as C++ with Metal's defined behaviour where C++ has UB.
KERNEL_FLAGS: Tuple[str, ...] = (
    "-std=c++17",
    "-O2",
    "-fPIC",
    "-shared",
    "-fwrapv",                          # Metal integer arithmetic wraps
    "-fexcess-precision=16",            # half / bfloat rounded after every operation
    "-fno-strict-float-cast-overflow",  # float->int: NaN -> 0, out of range saturates
    "-ffp-contract=off",                # no implicit FMA: same results on x86 and AArch64
    "-fno-math-errno",
    "-fno-strict-aliasing",             # MSL code reinterprets threadgroup bytes freely
    "-fsigned-char",                    # Metal char is signed on every host
    "-flax-vector-conversions=none",    # Metal has no implicit vector conversions
    "-fno-exceptions",
    "-fno-rtti",
    "-fstack-clash-protection",         # big frames probe every page: stack overflows hit the guard
    # Report what Metal does not trap on; the runtime provides the sanitizer hooks.
    "-fsanitize=integer-divide-by-zero,shift-exponent,array-bounds",
    "-gline-tables-only",               # map faulting instructions back to MSL lines
    "-w",
    "-ferror-limit=30",
    "-fno-color-diagnostics",
    "-fdiagnostics-absolute-paths",
)
RUNTIME_FLAGS: Tuple[str, ...] = ("-std=c++17", "-O2", "-fPIC", "-shared", "-pthread", "-fvisibility=hidden",
                                  "-fno-omit-frame-pointer")
_CANDIDATES = ("clang++-22", "clang++-21", "clang++-20", "clang++-19", "clang++-18", "clang++-17", "clang++")


def native_dirs() -> Tuple[Path, Path]:
    """(include dir, lib dir) of the native sources: ``<package>/native/{include,lib}`` in an installed
    wheel, else ``third_party/apple/{include,lib}`` next to the backend package in the source tree."""
    pkg = Path(__file__).resolve().parent.parent  # .../backend (the triton.backends.apple package)
    for root in (pkg / "native", pkg.parent):
        inc, lib = root / "include", root / "lib"
        if (inc / "metal_compat.h").is_file() and (lib / "emulator_runtime.cpp").is_file():
            return inc, lib
    raise EmulatorError(f"Metal emulator native sources not found under {pkg / 'native'} or {pkg.parent}")


def cache_root() -> Path:
    base = os.environ.get("TRITON_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".triton", "cache")
    path = Path(base) / "apple_emulator"
    path.mkdir(parents=True, exist_ok=True)
    return path


@functools.lru_cache(None)
def _compiler_version(path: str) -> Tuple[int, str]:
    out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60).stdout
    m = re.search(r"clang version (\d+)", out)
    return (int(m.group(1)) if m else 0), out.splitlines()[0] if out else path


@functools.lru_cache(None)
def find_compiler() -> str:
    """clang++ >= 17 (``TRITON_APPLE_EMULATOR_CXX`` overrides the search)."""
    override = os.environ.get("TRITON_APPLE_EMULATOR_CXX")
    names = [override] if override else list(_CANDIDATES)
    tried = []
    for name in names:
        path = shutil.which(name) if not os.path.isabs(name) else name
        if not path or not os.path.exists(path):
            tried.append(name)
            continue
        major, _ = _compiler_version(path)
        if major >= 17:
            return path
        tried.append(f"{name} (version {major or 'unknown'})")
    raise EmulatorError("the Metal emulator needs clang++ >= 17 (address spaces, _Float16, __bf16); tried: "
                        + ", ".join(tried) + ". Set TRITON_APPLE_EMULATOR_CXX to a clang++ binary.")


@functools.lru_cache(None)
def find_symbolizer() -> Optional[str]:
    cxx = find_compiler()
    m = re.search(r"-(\d+)$", os.path.basename(cxx))
    names = ([f"llvm-symbolizer-{m.group(1)}"] if m else []) + ["llvm-symbolizer"]
    for name in names:
        local = os.path.join(os.path.dirname(os.path.realpath(cxx)), "llvm-symbolizer")
        for cand in (local, shutil.which(name)):
            if cand and os.path.exists(cand):
                return cand
    return None


def _extra_link_flags() -> List[str]:
    # compiler-rt provides the half/bfloat conversion helpers (__truncsfbf2, ...) on every host.
    return ["-rtlib=compiler-rt", "-lm"]


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
    files["lib/emulator_runtime.cpp"] = (lib / "emulator_runtime.cpp").read_bytes()
    return files


def _runtime_defines() -> List[str]:
    return ["-DTT_EMU_UCONTEXT=1"] if os.environ.get("TRITON_APPLE_EMULATOR_UCONTEXT", "") not in ("", "0") else []


def _atomic_write(path: Path, data: bytes):
    fd, tmp = tempfile.mkstemp(dir=str(path.parent), prefix=path.name + ".")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _run(cmd: List[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=str(cwd), capture_output=True, text=True)


def build_runtime() -> Path:
    """Compile (once, cached by content hash) and return the runtime shared library."""
    cxx = find_compiler()
    inc, lib = native_dirs()
    flags = list(RUNTIME_FLAGS) + _runtime_defines()
    srcs = native_sources()
    key = _hash("runtime", _compiler_version(cxx)[1], flags, srcs["include/emulator_runtime.h"],
                srcs["lib/emulator_runtime.cpp"])[:32]
    out_dir = cache_root() / f"runtime-{key}"
    so = out_dir / "libtriton_apple_emulator.so"
    if so.is_file():
        return so
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f".build-{os.getpid()}.so"
    cmd = [cxx, *flags, "-I", str(inc), str(lib / "emulator_runtime.cpp"), "-o", str(tmp), "-ldl"]
    res = _run(cmd, out_dir)
    if res.returncode != 0:
        raise EmulatorError("failed to build the Metal emulator runtime:\n" + " ".join(cmd) + "\n" + res.stderr)
    os.replace(tmp, so)
    return so


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
    so = out_dir / "kernel.so"
    if so.is_file():
        return so, True
    out_dir.mkdir(parents=True, exist_ok=True)
    msl_name = f"{kernel_name}.metal"
    _atomic_write(out_dir / msl_name, source.encode())
    _atomic_write(out_dir / "entry.cpp", trampoline.encode())
    tmp = out_dir / f".build-{os.getpid()}.so"
    # The runtime hooks (__tt_*, __ubsan_*) stay undefined here: they resolve against the runtime, which
    # is always loaded RTLD_GLOBAL before any kernel (no path baked into the kernel's .so).
    cmd = [cxx, *KERNEL_FLAGS, "-I", str(inc), "entry.cpp", "-o", str(tmp), *_extra_link_flags()]
    res = _run(cmd, out_dir)
    if res.returncode != 0:
        raise _compile_error(res.stderr, kernel_name, msl_name, out_dir, inc, trampoline_lines, sig_line,
                             original_source)
    os.replace(tmp, so)
    return so, False


def _compile_error(stderr: str, kernel_name: str, msl_name: str, out_dir: Path, inc: Path,
                   trampoline_lines: Dict[int, int], sig_line: int, original_source: str) -> EmulatorCompileError:
    prefixes = [str(out_dir) + os.sep, str(inc) + os.sep, str(out_dir.resolve()) + os.sep,
                str(inc.resolve()) + os.sep]
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


def symbolize(module: str, offset: int, msl_name: str) -> Optional[Tuple[int, int]]:
    """MSL (line, column) of an instruction in a kernel .so, via llvm-symbolizer (None if unknown)."""
    tool = find_symbolizer()
    if not tool:
        return None
    try:
        out = subprocess.run([tool, "--inlining", "--obj", module, hex(offset)], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in out.splitlines():
        m = re.match(r"^(.*):(\d+):(\d+)$", line.strip())
        if m and os.path.basename(m.group(1)) == msl_name and int(m.group(2)) > 0:
            return int(m.group(2)), int(m.group(3))
    return None

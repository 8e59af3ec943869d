"""The host compiler of the emulator: which clang, and the flags kernels and the runtime are built with."""
from __future__ import annotations

import functools
import os
import platform
import re
import shutil
import subprocess
import sys
from typing import List, Optional, Tuple

from .. import knobs
from ..target import default_msl_version, family, msl_version
from .errors import EmulatorError

IS_DARWIN = sys.platform == "darwin"
IS_X86_64 = platform.machine().lower() in ("x86_64", "amd64")
SHLIB_SUFFIX = ".dylib" if IS_DARWIN else ".so"



LINE_TABLES = "-gline-tables-only"


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
        # clang 22's loop vectorizer miscompiles masked threadgroup indices (`s[(k & 7) ^ c]` for k = 8..15 became
        # `s[k ^ c]`: 30 upstream Gluon cases read out of bounds; a plain C++ reproduction exists). A wrong result is
        # worse than a slower emulator, so kernels are not loop-vectorized.
        "-fno-vectorize",
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
        LINE_TABLES,                        # map faulting instructions back to MSL lines
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


def target_defines() -> Tuple[str, ...]:
    """The -D flags that make the compat header the chosen Metal: the MSL version kernels are compiled for, as
    Apple's compiler defines it (`__METAL_VERSION__`, MSL specification 1.6.2; TRITON_APPLE_MSL_VERSION), and the
    features of the emulated device's GPU family (TRITON_APPLE_FAMILY, the same family kernels are compiled
    for), which include/metal_version.h turns into errors for what that Metal rejects."""
    from ..host import default_family  # the family the driver's target has
    version = msl_version(default_msl_version())
    fam = family(default_family())
    return (f"-D__METAL_VERSION__={version.number}", f"-D__TT_ATOMIC_ULONG_MIN_MAX={int(fam.atomic_ulong_min_max)}")


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
# Kernels built for the emulator's tools (sanitizer and profiler; native/include/emulator_tools.h): clang calls the
# runtime before every load and store left in the optimised code, and the compat header reports atomics and counts
# (TT_EMU_TOOLS). The host vectorisers stay off, so that each traced access is one access of the MSL (a float4 load
# stays a 16-byte load; no loop is widened into accesses the MSL does not make), and so does the recognition of
# loops and store runs as memcpy/memset (-fno-builtin): the copies those become are not traced (a reduction's
# eight stores into threadgroup memory were one memcpy). VectorCombine is off too: it splits a vector load whose
# lanes are only extracted into one load per lane (the `uint4` a run of eight halves is loaded as became four
# 4-byte loads). Ordinary builds never get these.
TOOL_FLAGS: Tuple[str, ...] = ("-fsanitize-coverage=func,trace-loads,trace-stores", "-DTT_EMU_TOOLS=1",
                               "-fno-vectorize", "-fno-slp-vectorize", "-fno-builtin", "-mllvm",
                               "-disable-vector-combine")
# A kernel's first library (tuning.py): the same flags at -O0. About 8x less compile time for a large kernel and the
# same results: the flags above pin every floating-point and integer rule at any level. Without line tables, which
# are a fifth of an -O0 compile: a fault in a quick library is located through the same build with them
# (build.build_kernel's `lines`), whose code is checked to be the same bytes (objfile.py).
QUICK_KERNEL_FLAGS: Tuple[str, ...] = tuple("-O0" if f == "-O2" else f for f in KERNEL_FLAGS if f != LINE_TABLES)
RUNTIME_FLAGS: Tuple[str, ...] = ("-std=c++17", "-O2", "-fPIC", "-shared", "-pthread", "-fvisibility=hidden",
                                  "-fno-omit-frame-pointer")
_CANDIDATES = ("clang++-22", "clang++-21", "clang++-20", "clang++-19", "clang++-18", "clang++-17", "clang++") + (
    ("/opt/homebrew/opt/llvm/bin/clang++", "/usr/local/opt/llvm/bin/clang++") if IS_DARWIN else ())
# Apple clang numbers its releases on its own: Apple clang 16 is based on LLVM 17.
_MIN_CLANG, _MIN_APPLE_CLANG = 17, 16




@functools.lru_cache(None)
def compiler_version(path: str) -> Tuple[int, str]:
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
        major, _ = compiler_version(path)
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


def extra_link_flags() -> List[str]:
    # compiler-rt provides the half/bfloat conversion helpers (__truncsfbf2, ...); Apple's toolchain always
    # links it. Kernels use no C++ library (no exceptions, no RTTI, no std::).
    return ["-lm"] if IS_DARWIN else [*_lld_flags(), "-nostdlib++", "-rtlib=compiler-rt", "-lm"]

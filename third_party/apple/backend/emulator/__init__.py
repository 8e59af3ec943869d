"""Metal-on-CPU emulator for the Apple backend.

MSL source is compiled with clang against a Metal compat header (``native/include/metal_compat.h``) into
a host shared object; the runtime (``native/emulator_runtime.cpp``) runs the kernel over a grid, each
threadgroup on a host thread and each Metal thread on a fiber, with out-of-bounds accesses,
divergent barriers/collectives and deadlocks reported as :class:`EmulatorLaunchError`.
Launches go through the native launcher ``native/launcher.c`` (compiled on first use by Triton's
``compile_so_from_file`` into Triton's cache and loaded once it passes the cache's trust rule;
``launcher.launcher()``), which needs a C compiler and Python's headers.

Modules, by job: ``clang`` (which compiler, which flags), ``cache`` (the on-disk cache: trust, entries),
``build`` (runtime, precompiled header and kernel builds, compile diagnostics), ``symbolizer`` (fault
addresses to MSL lines), ``signature`` (reading MSL kernel signatures, line-preserving rewrites),
``library`` (the loaded runtime and kernel libraries), ``launcher`` (the native launcher and launch
settings), ``scalar`` (scalar values of this API), ``kernel`` (compiled kernels: binding, launching,
errors), ``tools`` (the sanitizer and profiler: which tools a launch runs, its report as findings and a profile),
``roofline`` (a profile's time bound per Apple family and its plot).

What it takes from the rest of the backend, and nothing else: the scalar ABI (``abi.scalars``: type
sizes and the one packer), the MSL location comments (``abi.msl_locations``, for the sanitizer's reports), the target's limits (``target``), its settings (``knobs``), the chip table's peak bandwidths
(``host.PEAK_GBPS``, for the roofline); from Triton: the
cache directory (``triton.knobs.cache``) and ``triton.runtime.build.compile_so_from_file`` for the
launcher.

    from triton.backends.apple.emulator import compile_msl, Scalar
    k = compile_msl(msl_source, "add_kernel")
    k.launch(grid=(n_blocks, 1, 1), threadgroup=(128, 1, 1), buffers={0: x, 1: y, 2: Scalar(n, "int")})

See README.md in this directory for what is emulated and checked.
"""
from .errors import (EmulatorCacheError, EmulatorCacheIOError, EmulatorCacheWarning, EmulatorCompileError, EmulatorError,
                     EmulatorLaunchError, EmulatorSanitizerWarning, EmulatorWarning)
from .signature import KernelParam
from .kernel import EmulatorKernel, clear_memory_cache, compile_msl
from .library import bench_fiber_switch
from .scalar import Scalar
from .tools import ProfileScope, profile, sanitize

__all__ = [
    "compile_msl",
    "EmulatorKernel",
    "KernelParam",
    "Scalar",
    "EmulatorError",
    "EmulatorCompileError",
    "EmulatorLaunchError",
    "EmulatorWarning",
    "EmulatorSanitizerWarning",
    "sanitize",
    "profile",
    "ProfileScope",
    "EmulatorCacheError",
    "EmulatorCacheIOError",
    "EmulatorCacheWarning",
    "bench_fiber_switch",
    "clear_memory_cache",
]

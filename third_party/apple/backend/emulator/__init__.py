"""Metal-on-CPU emulator for the Apple backend.

MSL source is compiled with clang against a Metal compat header (``include/metal_compat.h``) into a
host shared object; the runtime (``lib/emulator_runtime.cpp``) runs the kernel over a grid, each
threadgroup on a host thread and each Metal thread on a fiber, with out-of-bounds accesses,
divergent barriers/collectives and deadlocks reported as :class:`EmulatorLaunchError`.
Launches go through the native launcher ``backend/driver.c`` (compiled on first use by Triton's
``compile_module_from_file`` into Triton's cache; ``runtime.launcher()``), which needs a C compiler and
Python's headers.

    from triton.backends.apple.emulator import compile_msl, Scalar
    k = compile_msl(msl_source, "add_kernel")
    k.launch(grid=(n_blocks, 1, 1), threadgroup=(128, 1, 1), buffers={0: x, 1: y, 2: Scalar(n, "int")})

See README.md in this directory for what is emulated and checked.
"""
from .errors import (EmulatorCacheError, EmulatorCacheWarning, EmulatorCompileError, EmulatorError,
                     EmulatorLaunchError, EmulatorWarning)
from .signature import KernelParam
from .runtime import EmulatorKernel, Scalar, bench_fiber_switch, clear_memory_cache, compile_msl

__all__ = [
    "compile_msl",
    "EmulatorKernel",
    "KernelParam",
    "Scalar",
    "EmulatorError",
    "EmulatorCompileError",
    "EmulatorLaunchError",
    "EmulatorWarning",
    "EmulatorCacheError",
    "EmulatorCacheWarning",
    "bench_fiber_switch",
    "clear_memory_cache",
]

"""The apple backend's errors, one class per kind of failure, so that callers (tests, `@triton.autotune`,
users) can tell a kernel Apple GPUs cannot run from a resource limit and from a bug of ours.

    AppleBackendError
      AppleCompilationError           the kernel cannot be compiled; names the kernel, op and source line
        UnsupportedFeatureError       it uses something the backend or Apple GPUs do not offer
        ResourceLimitError            it needs more of a resource than the GPU has; also Triton's
                                      OutOfResources, which the autotuner catches to skip a config
        InternalCompilerError         the backend itself failed (a bug: please report it)
        MetalCompileError             Apple's Metal compiler (on a Mac) rejected the kernel's MSL
      KernelArgError                  a launch argument does not fit the kernel's parameter
"""
from __future__ import annotations

from triton.runtime.errors import OutOfResources


class AppleBackendError(Exception):
    """Base of every error the apple backend raises on purpose."""


class AppleCompilationError(AppleBackendError):
    """A kernel the apple backend cannot compile; the message names the kernel, the op and the source line."""


class UnsupportedFeatureError(AppleCompilationError):
    """The kernel uses an op, type or option that the apple backend (or Apple hardware) does not support."""


class InvalidOptionError(UnsupportedFeatureError, AssertionError):
    """A compile option outside what Apple GPUs allow (e.g. `num_warps` that is not a power of two). Also an
    `AssertionError`, the type upstream's backends raise for the same options (they assert on them)."""


class InternalCompilerError(AppleCompilationError):
    """The lowering reached a state it should never reach: a bug in the backend, not in the kernel."""


class MetalCompileError(AppleCompilationError):
    """Apple's Metal compiler (`torch.mps.compile_shader`, on a Mac) rejected a kernel's MSL, or Metal could not
    make its pipeline. The message names the kernel, quotes Apple's diagnostics and says which Triton op and
    source line each MSL line it names was generated from; `msl_lines` lists those lines (1-based, numbered as
    in the kernel's MSL), `diagnostics` holds Apple's text."""

    def __init__(self, message: str, kernel_name: str, msl_lines=(), diagnostics: str = ""):
        super().__init__(message)
        self.kernel_name = kernel_name
        self.msl_lines = sorted(set(int(n) for n in msl_lines))
        self.diagnostics = diagnostics

    def __reduce__(self):
        return (type(self), (self.args[0], self.kernel_name, self.msl_lines, self.diagnostics))


class ResourceLimitError(OutOfResources, AppleCompilationError):
    """The kernel needs more of a resource (threadgroup memory, buffer slots, threads) than Apple GPUs have.
    `required`, `limit` and `name` are those of Triton's `OutOfResources`; the message says what to change."""

    def __init__(self, message: str, required: int, limit: int, name: str):
        OutOfResources.__init__(self, required, limit, name)
        self.message = message

    def __str__(self) -> str:
        return self.message

    def __reduce__(self):
        return (type(self), (self.message, self.required, self.limit, self.name))


class KernelArgError(AppleBackendError, TypeError):
    """A launch argument cannot be bound to the kernel parameter it is passed for."""

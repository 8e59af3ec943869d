"""An MPS stand-in: the part of `torch.mps.compile_shader`'s interface that the apple driver uses, run on the
Metal-on-CPU emulator, so that the driver's metal-mode code (`AppleUtils.load_binary`'s metal branch,
`AppleLauncher.__call__` in metal mode, `_dispatch_metal`, debug-buffer readback) runs unmodified in Linux CI.

It encodes only documented behaviour of PyTorch 2.13's `torch.mps.compile_shader` and of Metal's
`dispatchThreads:threadsPerThreadgroup:`; docs/mps_standin.md lists each fact it relies on and its source.
Where PyTorch's behaviour is not something the emulator can reproduce, the stand-in refuses loudly
(`StandinLimit`) rather than guess.

CPU tensors stand in for MPS tensors: `install` sets `driver.METAL_DEVICE` to "cpu" for the test.
"""
from __future__ import annotations

import sys
from typing import Any, List, Optional

import torch

from triton.backends.apple import driver as drv
from triton.backends.apple.emulator import EmulatorCompileError, Scalar, compile_msl

# MTLComputePipelineState.maxTotalThreadsPerThreadgroup: on a Mac the pipeline reports it (lower when a kernel
# needs many registers); the emulator has no register file, so the stand-in reports Metal's maximum.
MAX_THREADS_PER_THREADGROUP = 1024
THREAD_EXECUTION_WIDTH = 32

# arg_casts names (torch/csrc/mps/Module.cpp, OptionalArgCaster) -> the MSL type the value is packed as
_CASTS = {"fp16": "half", "bf16": "bfloat", "int32": "int", "int16": "short", "int8": "char", "uint8": "uchar"}
_INT_BITS = {"int": 32, "short": 16, "char": 8, "uchar": 8, "long": 64}


# Where dispatches are recorded: the stand-in installed for the running test. Triton keeps a kernel's loaded
# function (a KernelFunction) across tests, as on a Mac, so records cannot live in the library that made it.
_installed: "Optional[MPSStandin]" = None


class StandinLimit(NotImplementedError):
    """PyTorch accepts this, but the stand-in cannot reproduce what it does on a Mac."""


def _wrap(value: int, msl: str) -> int:
    """C++ static_cast of an int64 to a narrower integer type: modular (two's complement since C++20)."""
    bits = _INT_BITS[msl]
    value &= (1 << bits) - 1
    if msl != "uchar" and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


def _dims(value: Any, what: str) -> Optional[List[int]]:
    """`threads` / `group_size`: None, an int, or a sequence of 1 to 3 ints (optional_vec_from_pyobject)."""
    if value is None:
        return None
    if isinstance(value, int):
        return [value]
    dims = [int(v) for v in value]
    if not 0 < len(dims) < 4:
        raise RuntimeError(f"{what} must have 1 to 3 dimensions, got {len(dims)}")
    return dims


class Dispatch:
    """What one call encoded: the arguments by buffer index, `dispatchThreads` size and threadgroup size."""

    def __init__(self, kernel: str, args: list, threads: tuple, group: tuple):
        self.kernel, self.args, self.threads, self.group = kernel, args, threads, group

    def __repr__(self):
        return f"Dispatch({self.kernel!r}, threads={self.threads}, group={self.group})"


class KernelFunction:
    """A kernel of a stand-in library (`torch._C._mps_MetalKernel`)."""

    max_threads_per_threadgroup = MAX_THREADS_PER_THREADGROUP
    thread_execution_width = THREAD_EXECUTION_WIDTH

    def __init__(self, name: str, kernel):
        self.name, self._kernel = name, kernel

    def _bind_value(self, idx: int, arg: Any, casts: dict, default_cast: str):
        """A non-tensor argument, as OptionalArgCaster::setValue packs it (setBytes at buffer index idx)."""
        cast = casts.get(idx, default_cast)
        if cast and cast not in _CASTS:
            raise RuntimeError(f"Unsupported cast instruction {cast}")
        if isinstance(arg, (list, tuple)):
            if len(arg) == 0:
                raise RuntimeError("Empty list/tuple can not be an argument to metal kernel")
            first = arg[0]
            if isinstance(first, torch.Tensor):
                raise StandinLimit("a list of tensors binds their GPU addresses (an argument buffer); the "
                                   "emulator has no GPU addresses")
            if isinstance(first, bool) or not isinstance(first, (int, float)):
                raise RuntimeError("Unexpected argument types")
            msl = _CASTS[cast] if cast else ("long" if isinstance(first, int) else "float")
            return b"".join(self._pack(v, msl, isinstance(first, int)) for v in arg)
        if isinstance(arg, float):
            return Scalar(float(arg), _CASTS[cast] if cast else "float")
        if isinstance(arg, int):  # Python bool is an int too (pybind11's isinstance<int_>)
            msl = _CASTS[cast] if cast else "long"
            value = int(arg)
            return Scalar(_wrap(value, msl) if msl in _INT_BITS else value, msl)
        raise RuntimeError("Unsupported argument type")

    @staticmethod
    def _pack(v, msl: str, from_int: bool) -> bytes:
        value = int(v) if from_int else float(v)
        if msl in _INT_BITS and from_int:
            value = _wrap(value, msl)
        return Scalar(value, msl).data

    def __call__(self, *args, threads=None, group_size=None, arg_casts=None):
        threads = _dims(threads, "threads")
        group_size = _dims(group_size, "group_size")
        if arg_casts is None:
            casts, default_cast = {}, ""
        elif isinstance(arg_casts, str):
            casts, default_cast = {}, arg_casts
        elif isinstance(arg_casts, dict):
            casts, default_cast = {int(k): v for k, v in arg_casts.items()}, ""
        else:
            raise RuntimeError(f"Unexpected caster arg type {type(arg_casts).__name__}")
        buffers = {}
        for idx, arg in enumerate(args):  # argument i binds buffer index i
            if isinstance(arg, torch.Tensor):
                buffers[idx] = arg
                if threads is None:
                    threads = [arg.numel()]
                continue
            buffers[idx] = self._bind_value(idx, arg, casts, default_cast)
        if threads is None or len(threads) >= 4:
            raise RuntimeError("Number of threads is undefined or has wrong dimension")
        if group_size is not None and len(group_size) != len(threads):
            raise RuntimeError("size and group_size must have same number of dimensions")
        limit = self.max_threads_per_threadgroup
        if len(threads) == 1:
            group = (group_size[0] if group_size else min(threads[0], limit), 1, 1)
        else:
            g = group_size or []
            group = (g[0] if len(g) > 0 else limit, g[1] if len(g) > 1 else 1, g[2] if len(g) > 2 else 1)
        if group[0] * group[1] * group[2] > limit:
            raise ValueError(f"Threadgroup size exceeds {limit} limit")
        size = tuple(threads) + (1, ) * (3 - len(threads))
        if any(s % g for s, g in zip(size, group)):
            raise StandinLimit(f"dispatchThreads of {size} threads in threadgroups of {group}: Metal runs a "
                               "partial threadgroup at each edge; the emulator runs whole threadgroups only")
        _installed.dispatches.append(Dispatch(self.name, [buffers[i] for i in sorted(buffers)], size, group))
        grid = tuple(s // g for s, g in zip(size, group))
        self._kernel.launch(grid=grid, threadgroup=group, buffers=buffers)


class ShaderLibrary:
    """What `torch.mps.compile_shader(source)` returns (`torch._C._mps_ShaderLibrary`): kernels by name."""

    def __init__(self, source: str):
        self._source = source

    def __getattr__(self, name: str) -> KernelFunction:
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            kernel = compile_msl(self._source, name)
        except EmulatorCompileError as e:
            # PyTorch compiles the library in compile_shader and looks kernels up here; both report with
            # RuntimeError. The emulator compiles one kernel at a time, so both errors come from here.
            raise RuntimeError(f"Failed to create pipeline state for kernel '{name}': {e}") from e
        return KernelFunction(name, kernel)


class MPSStandin:
    """`torch.mps.compile_shader` and `torch.mps.synchronize` on the emulator, with a record of dispatches."""

    def __init__(self):
        self.dispatches: List[Dispatch] = []
        self.synchronizations = 0
        self.sources: List[str] = []

    def compile_shader(self, source: str) -> ShaderLibrary:
        if not isinstance(source, str):  # pybind11 binds `const std::string&`
            raise TypeError(f"compile_shader(): incompatible argument type {type(source).__name__}")
        _installed.sources.append(source)
        return ShaderLibrary(source)

    def synchronize(self) -> None:
        """Emulator launches return when the kernel has finished: nothing to wait for."""
        _installed.synchronizations += 1

    def install(self, monkeypatch) -> "MPSStandin":
        """Replace what the metal path touches, for one test (pytest's monkeypatch undoes it): torch.mps's
        compile_shader and synchronize, and the metal device type (CPU tensors stand in for MPS tensors).
        The caller makes a metal-mode AppleDriver active (the `mps` fixture in test_metal_path.py)."""
        monkeypatch.setattr(sys.modules[__name__], "_installed", self)
        monkeypatch.setattr(torch.mps, "compile_shader", self.compile_shader)
        monkeypatch.setattr(torch.mps, "synchronize", self.synchronize)
        monkeypatch.setattr(drv, "METAL_DEVICE", "cpu")
        return self

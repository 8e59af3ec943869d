"""An MPS stand-in: the part of `torch.mps`'s interface that the apple driver uses, run on the Metal-on-CPU
emulator, so that the driver's metal-mode code (`AppleUtils.load_binary`'s metal branch, `MetalLaunch`, the
debug-buffer readback, the mps device interface and benchmarker) runs unmodified in Linux CI.

It encodes only documented behaviour of PyTorch 2.13's `torch.mps` (its Python source and the C++ behind
`compile_shader` and `torch.mps.Event`) and of Metal's `dispatchThreads:threadsPerThreadgroup:`;
docs/mps_standin.md lists each fact it relies on. Where PyTorch's behaviour is not something the emulator can
reproduce, the stand-in refuses loudly (`StandinLimit`) rather than guess.

CPU tensors stand in for MPS tensors: `install` sets `driver.METAL_DEVICE` to "cpu" for the test.
"""
from __future__ import annotations

import re
import struct
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np
import torch

from triton.backends.apple import driver as drv
from triton.backends.apple.abi import scalars
from triton.backends.apple.emulator import EmulatorCompileError, compile_msl

# MTLComputePipelineState.maxTotalThreadsPerThreadgroup: on a Mac the pipeline reports it (lower when a kernel
# needs many registers); the emulator has no register file, so the stand-in reports Metal's maximum.
MAX_THREADS_PER_THREADGROUP = 1024
THREAD_EXECUTION_WIDTH = 32

# arg_casts names (OptionalArgCaster) -> the MSL type a value is converted to with a C++ static_cast
_CASTS = {"fp16": "half", "bf16": "bfloat", "int32": "int", "int16": "short", "int8": "char", "uint8": "uchar"}
_INT_BITS = {"int": 32, "short": 16, "char": 8, "uchar": 8, "long": 64}
_KERNEL_NAME = re.compile(r"\bkernel\s+void\s+([A-Za-z_]\w*)\s*\(")

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


def _int64(value: int) -> int:
    """pybind11's `cast<int64_t>()` of a Python int: a value outside int64 raises (pybind11's cast_error, which
    reaches Python as RuntimeError)."""
    if not -(1 << 63) <= value < 1 << 63:
        raise RuntimeError("Unable to cast Python instance of type <class 'int'> to C++ type 'long long'")
    return value


def _float32(value: float) -> float:
    """pybind11's `cast<float>()` of a Python float: the C++ double -> float conversion (nearest; inf beyond)."""
    with np.errstate(over="ignore"):
        return float(np.float32(value))


def _scalar_bytes(value: Any, cast: str) -> bytes:
    """The bytes `OptionalArgCaster::setValue` hands `setBytes` for one Python int or float."""
    if isinstance(value, float):
        v = _float32(value)
        if not cast:
            return struct.pack("<f", v)
        msl = _CASTS[cast]
        if msl in _INT_BITS:  # float -> integer static_cast (undefined out of range in C++: refuse to guess)
            if v != v or not -(1 << (_INT_BITS[msl] - 1)) <= int(v) < 1 << _INT_BITS[msl]:
                raise StandinLimit(f"static_cast of {value!r} to {msl} is undefined behaviour in C++")
            return scalars.pack(msl, int(v))
        return scalars.pack(msl, v)  # c10::Half / c10::BFloat16 from float: round to nearest even
    v = _int64(int(value))
    if not cast:
        return struct.pack("<q", v)
    msl = _CASTS[cast]
    if msl in _INT_BITS:
        return scalars.pack(msl, _wrap(v, msl))
    return scalars.pack(msl, _float32(float(v)))  # int64 -> float -> half/bfloat


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


class SetBytes:
    """A non-tensor argument as PyTorch binds it: `setBytes` of `data` at its buffer index. `value` and `cast`
    are what the caller passed."""

    def __init__(self, data: bytes, value: Any, cast: str):
        self.data, self.value, self.cast = data, value, cast

    def __repr__(self):
        return f"SetBytes({self.data.hex()}, value={self.value!r}, cast={self.cast!r})"


class Dispatch:
    """What one call encoded: the arguments by buffer index (tensors, or `SetBytes` for everything else), the
    `dispatchThreads` size and the threadgroup size."""

    def __init__(self, kernel: str, args: list, threads: tuple, group: tuple):
        self.kernel, self.args, self.threads, self.group = kernel, args, threads, group

    def bytes_at(self, index: int) -> bytes:
        """The bytes buffer `index` was bound to (a tensor's view bytes, or what setBytes got)."""
        arg = self.args[index]
        return arg.data if isinstance(arg, SetBytes) else arg.contiguous().view(torch.uint8).numpy().tobytes()

    def __repr__(self):
        return f"Dispatch({self.kernel!r}, threads={self.threads}, group={self.group})"


class KernelFunction:
    """A kernel of a stand-in library (`torch._C._mps_MetalKernel`)."""

    max_threads_per_threadgroup = MAX_THREADS_PER_THREADGROUP
    thread_execution_width = THREAD_EXECUTION_WIDTH

    def __init__(self, name: str, kernel):
        self.name, self._kernel = name, kernel

    @staticmethod
    def _bind_value(idx: int, arg: Any, casts: dict, default_cast: str) -> SetBytes:
        """A non-tensor argument, as OptionalArgCaster::setValue packs it (setBytes at buffer index idx)."""
        cast = casts.get(idx, default_cast)
        if isinstance(arg, (list, tuple)):
            if len(arg) == 0:
                raise RuntimeError("Empty list/tuple can not be an argument to metal kernel")
            first = arg[0]
            if isinstance(first, torch.Tensor):
                raise StandinLimit("a list of tensors binds their GPU addresses (an argument buffer); the "
                                   "emulator has no GPU addresses")
            if not isinstance(first, (int, float)):
                raise RuntimeError("Unexpected argument types")
            # the whole list is cast to the first element's type (cast<std::vector<int64_t | float>>)
            values = [int(v) for v in arg] if isinstance(first, int) else [float(v) for v in arg]
            if cast and cast not in _CASTS:
                raise RuntimeError(f"Unsupported cast instruction {cast}")
            return SetBytes(b"".join(_scalar_bytes(v, cast) for v in values), list(arg), cast)
        if isinstance(arg, (float, int)):  # Python bool is an int too (pybind11's isinstance<int_>)
            if cast and cast not in _CASTS:
                raise RuntimeError(f"Unsupported cast instruction {cast}")
            return SetBytes(_scalar_bytes(arg, cast), arg, cast)
        raise RuntimeError("Unsupported argument type")

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
        buffers: Dict[int, Any] = {}
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
        if any(s >= 1 << 32 for s in size):
            raise StandinLimit(f"dispatchThreads of {size} threads: thread positions in the grid are 32-bit in "
                               "MSL; what Metal does with a larger grid is not documented")
        _installed.dispatches.append(Dispatch(self.name, [buffers[i] for i in sorted(buffers)], size, group))
        grid = tuple(s // g for s, g in zip(size, group))
        binds = {i: (b.data if isinstance(b, SetBytes) else b) for i, b in buffers.items()}
        self._kernel.launch(grid=grid, threadgroup=group, buffers=binds)


class ShaderLibrary:
    """What `torch.mps.compile_shader(source)` returns (`torch._C._mps_ShaderLibrary`): kernels by name. Like
    PyTorch's `DynamicMetalShaderLibrary`, the library is compiled when it is made (here: each `kernel` function
    of the source, by the emulator); looking a kernel up makes its pipeline."""

    def __init__(self, source: str):
        self._source = source
        self._kernels = {}
        for name in dict.fromkeys(_KERNEL_NAME.findall(source)):
            try:
                self._kernels[name] = compile_msl(source, name)
            except EmulatorCompileError as e:
                if not e.diagnostics:  # the emulator's own signature reader refused: not a compiler verdict
                    raise StandinLimit(f"the emulator cannot take kernel '{name}': {e}") from e
                # c10::SyntaxError(localizedDescription of MTLLibraryErrorCompileFailure): Apple's runtime
                # compiler calls the source "program_source"
                text = e.diagnostics.replace(f"{name}.metal:", "program_source:")
                raise SyntaxError(f"Compilation failed: \n\n{text}") from None

    def __dir__(self):
        return list(self._kernels)

    def __getattr__(self, name: str) -> KernelFunction:
        if name.startswith("__"):
            raise AttributeError(name)
        kernel = self.__dict__.get("_kernels", {}).get(name)
        if kernel is None:  # TORCH_CHECK(func, ...) in getLibraryPipelineState
            raise RuntimeError(f"Failed to create function state object for: {name}")
        return KernelFunction(name, kernel)


class StandinEvent:
    """`torch.mps.Event`: its timing rests on completion times PyTorch takes in Metal's host callbacks (shared-event
    listeners, command-buffer completion handlers), which the emulator does not have; the backend must not need
    it, so any use is refused."""

    def __init__(self, *args, **kwargs):
        raise StandinLimit("torch.mps.Event times with Metal's host callbacks, which the stand-in does not have "
                           "(and which fail on short intervals on a Mac: docs/mps_standin.md)")


class _Patcher:
    """pytest's monkeypatch, for callers outside pytest (the self-check): setattr now, undo later."""

    def __init__(self):
        self._undo = []

    def setattr(self, target, name, value):
        self._undo.append((target, name, getattr(target, name)))
        setattr(target, name, value)

    def undo(self):
        while self._undo:
            target, name, value = self._undo.pop()
            setattr(target, name, value)


class MPSStandin:
    """`torch.mps`'s compile_shader, synchronize and memory counters on the emulator, with a record of
    dispatches and synchronisations."""

    def __init__(self):
        self.dispatches: List[Dispatch] = []
        self.synchronizations = 0
        self.sources: List[str] = []
        self._patcher: Optional[_Patcher] = None

    def compile_shader(self, source: str) -> ShaderLibrary:
        if not isinstance(source, str):  # pybind11 binds `const std::string&`
            raise TypeError(f"compile_shader(): incompatible argument type {type(source).__name__}")
        # PyTorch 2.13's compile_shader inlines the headers it ships (torch/include) and drops `#pragma once`
        # lines before compiling: the same function, on the same include directory.
        from torch.utils._cpp_embed_headers import _embed_headers
        source = _embed_headers([line + "\n" for line in source.split("\n")],
                                [Path(torch.__file__).parent / "include"], set())
        if not source.isascii():
            raise StandinLimit("non-ASCII MSL: PyTorch hands Metal the source as an NSString decoded with "
                               "NSASCIIStringEncoding; what Metal then gets is not documented")
        _installed.sources.append(source)
        return ShaderLibrary(source)

    def synchronize(self) -> None:
        """Emulator launches return when the kernel has finished: nothing to wait for."""
        _installed.synchronizations += 1

    @staticmethod
    def current_allocated_memory() -> int:
        """Bytes of the tensors alive now: the CPU tensors standing in for MPS tensors, counted from the garbage
        collector's objects (storages once each), as MPSAllocator counts its live buffers."""
        import gc
        import warnings
        seen, total = set(), 0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # isinstance() on lazily imported modules' objects may warn
            for obj in gc.get_objects():
                if not isinstance(obj, torch.Tensor):
                    continue
                try:
                    if obj.device.type != "cpu":
                        continue
                    storage = obj.untyped_storage()
                    key = storage.data_ptr()
                except (RuntimeError, NotImplementedError):
                    continue
                if key and key not in seen:
                    seen.add(key)
                    total += storage.nbytes()
        return total

    def driver_allocated_memory(self) -> int:
        """What Metal holds for the process: the live tensors, plus what the stand-in's allocator cache holds
        (`cached_bytes`, which a test sets: the emulator has no MPSAllocator pools)."""
        return self.current_allocated_memory() + self.cached_bytes

    cached_bytes = 0

    def install(self, monkeypatch=None) -> "MPSStandin":
        """Replace what the metal path touches (pytest's monkeypatch undoes it; without one, `uninstall` does):
        torch.mps's compile_shader, synchronize, Event and memory counters, and the metal device type (CPU
        tensors stand in for MPS tensors). The caller makes a metal-mode AppleDriver active (the `mps` fixture)."""
        if monkeypatch is None:
            monkeypatch = self._patcher = _Patcher()
        monkeypatch.setattr(sys.modules[__name__], "_installed", self)
        monkeypatch.setattr(torch.mps, "compile_shader", self.compile_shader)
        monkeypatch.setattr(torch.mps, "synchronize", self.synchronize)
        monkeypatch.setattr(torch.mps, "current_allocated_memory", self.current_allocated_memory)
        monkeypatch.setattr(torch.mps, "driver_allocated_memory", self.driver_allocated_memory)
        monkeypatch.setattr(torch.mps, "Event", StandinEvent)
        monkeypatch.setattr(drv, "METAL_DEVICE", "cpu")
        return self

    def uninstall(self) -> None:
        if self._patcher is not None:
            self._patcher.undo()
            self._patcher = None

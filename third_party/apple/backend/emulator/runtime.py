"""ctypes binding of the emulator runtime, kernel objects and argument marshalling."""
from __future__ import annotations

import _ctypes
import collections
import ctypes
import itertools
import math
import os
import re
import struct
import threading
import warnings
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from .. import knobs
from ..target import MAX_THREADS_PER_THREADGROUP
from . import signature as _sig
from . import toolchain
from .errors import EmulatorCompileError, EmulatorError, EmulatorLaunchError, EmulatorWarning

ABI_VERSION = 6  # TT_EMU_ABI_VERSION in emulator_runtime.h
MAX_LINES = 16  # TT_EMU_MAX_LINES
MAX_EVENTS = 16  # TT_EMU_MAX_EVENTS

TT_BUF_READONLY = 1
TT_BUF_SCALAR = 2


class _BufferDesc(ctypes.Structure):
    _fields_ = [("host", ctypes.c_void_p), ("nbytes", ctypes.c_uint64), ("slot", ctypes.c_uint32),
                ("elem_size", ctypes.c_uint32), ("flags", ctypes.c_uint32), ("_pad", ctypes.c_uint32),
                ("name", ctypes.c_char_p)]


class _LaunchDesc(ctypes.Structure):
    _fields_ = [("entry", ctypes.c_void_p), ("kernel_name", ctypes.c_char_p), ("grid", ctypes.c_uint32 * 3),
                ("tg", ctypes.c_uint32 * 3), ("nbuffers", ctypes.c_uint32), ("host_threads", ctypes.c_uint32),
                ("buffers", ctypes.POINTER(_BufferDesc)), ("stack_kb", ctypes.c_uint32),
                ("schedule", ctypes.c_uint32), ("seed", ctypes.c_uint64), ("ub_mode", ctypes.c_uint32),
                ("timeout_ms", ctypes.c_uint32)]


class _Event(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_uint32), ("line", ctypes.c_uint32), ("col", ctypes.c_uint32),
                ("count", ctypes.c_uint32), ("a", ctypes.c_int64), ("b", ctypes.c_int64),
                ("file", ctypes.c_char * 64)]


class _LaunchResult(ctypes.Structure):
    _fields_ = [("status", ctypes.c_int32), ("slot", ctypes.c_int32), ("index", ctypes.c_int64),
                ("is_write", ctypes.c_int32), ("tg", ctypes.c_uint32 * 3), ("thread", ctypes.c_int32),
                ("nlines", ctypes.c_uint32), ("lines", ctypes.c_uint32 * MAX_LINES), ("pc", ctypes.c_uint64),
                ("pc_offset", ctypes.c_uint64), ("pc_module", ctypes.c_char * 256), ("nevents", ctypes.c_uint32),
                ("_pad", ctypes.c_uint32), ("events", _Event * MAX_EVENTS), ("message", ctypes.c_char * 4096)]


_STATUS_KINDS = {
    1: "invalid", 2: "out_of_bounds", 3: "readonly_write", 4: "threadgroup_out_of_bounds", 5: "stack_overflow",
    6: "segfault", 7: "signal", 8: "divergence", 9: "deadlock", 10: "simd", 11: "threadgroup_memory",
    12: "local_out_of_bounds", 13: "undefined_behavior", 14: "internal", 15: "timeout", 16: "interrupted",
}
_INTERRUPTED = 16  # TT_ERR_INTERRUPTED
_PENDING, _BUSY, _DONE = -1, -2, -3  # TT_EMU_PENDING, TT_EMU_BUSY, TT_EMU_DONE
_WAIT_SLICE_MS = 50  # how long the caller waits in C before Python gets to run its signal handlers
_EVENT_TEXT = {
    1: "integer division or remainder by zero (Metal: undefined result; emulator: x/0 = 0, x%0 = x)",
    2: "signed integer division overflow (INT_MIN / -1)",
    3: "shift by a negative count or by >= the bit width (Metal: undefined result)",
}
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

_lib = None
_lib_lock = threading.Lock()


def runtime_library() -> ctypes.CDLL:
    """The loaded runtime (built on first use). Loaded RTLD_GLOBAL: kernels resolve their hooks in it."""
    global _lib
    if _lib is not None:
        return _lib
    with _lib_lock:
        if _lib is None:
            so = toolchain.build_runtime()
            lib = ctypes.CDLL(str(so), mode=ctypes.RTLD_GLOBAL)
            lib.tt_emu_launch_begin.argtypes = [ctypes.POINTER(_LaunchDesc), ctypes.POINTER(_LaunchResult),
                                                ctypes.c_uint32]
            lib.tt_emu_launch_begin.restype = ctypes.c_int
            lib.tt_emu_launch_wait.argtypes = [ctypes.c_uint32]
            lib.tt_emu_launch_wait.restype = ctypes.c_int
            lib.tt_emu_launch_cancel.argtypes = [ctypes.c_int32]
            lib.tt_emu_launch_cancel.restype = None
            lib.tt_emu_abi_version.restype = ctypes.c_int
            lib.tt_emu_bench_switch.argtypes = [ctypes.c_uint32]
            lib.tt_emu_bench_switch.restype = ctypes.c_double
            lib.tt_emu_uses_ucontext.restype = ctypes.c_int
            if lib.tt_emu_abi_version() != ABI_VERSION:
                raise EmulatorError(f"emulator runtime ABI {lib.tt_emu_abi_version()} != {ABI_VERSION}")
            toolchain.build_pch()  # once per machine, like the runtime: not part of any kernel's compile
            _lib = lib
    return _lib


def bench_fiber_switch(n: int = 1_000_000) -> float:
    """Nanoseconds per fiber switch (one direction) of the runtime's context switch."""
    return runtime_library().tt_emu_bench_switch(n)


# ------------------------------------------------------------------------------------------------
# Scalars
# ------------------------------------------------------------------------------------------------

_SCALAR_FORMATS = {
    "bool": "?", "char": "b", "uchar": "B", "short": "h", "ushort": "H", "int": "i", "uint": "I", "long": "q",
    "ulong": "Q", "half": "e", "float": "f", "bfloat": None,
}
_SCALAR_ALIASES = {
    "int8_t": "char", "uint8_t": "uchar", "int16_t": "short", "uint16_t": "ushort", "int32_t": "int",
    "uint32_t": "uint", "int64_t": "long", "uint64_t": "ulong", "size_t": "ulong", "signed char": "char",
    "unsigned char": "uchar", "unsigned short": "ushort", "unsigned int": "uint", "unsigned": "uint",
    "unsigned long": "ulong", "i1": "bool", "i8": "char", "u8": "uchar", "i16": "short", "u16": "ushort",
    "i32": "int", "u32": "uint", "i64": "long", "u64": "ulong", "fp16": "half", "f16": "half", "bf16": "bfloat",
    "fp32": "float", "f32": "float", "float32": "float", "float16": "half", "bfloat16": "bfloat", "int32": "int",
    "uint32": "uint", "int64": "long", "uint64": "ulong", "int16": "short", "uint16": "ushort", "int8": "char",
    "uint8": "uchar",
}
_INTEGER_TYPES = {"bool", "char", "uchar", "short", "ushort", "int", "uint", "long", "ulong"}


def _bfloat_bits(x: float) -> int:
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    if math.isnan(x):
        return ((bits >> 16) | 0x40) & 0xFFFF
    bits += 0x7FFF + ((bits >> 16) & 1)  # round to nearest even
    return (bits >> 16) & 0xFFFF


def _parse_type(type_name: str) -> Tuple[str, int]:
    t = " ".join(type_name.split())
    t = _SCALAR_ALIASES.get(t, t)
    if t in _SCALAR_FORMATS:
        return t, 1
    m = re.fullmatch(r"([a-z]+)([234])", t)
    if m:
        base = _SCALAR_ALIASES.get(m.group(1), m.group(1))
        if base in _SCALAR_FORMATS:
            return base, int(m.group(2))
    raise ValueError(f"unknown Metal scalar type {type_name!r}")


_FLOAT_MAX = {"float": "3.4028235e38", "half": "65504", "bfloat": "3.3895314e38"}


def _pack_scalar(base: str, value) -> bytes:
    """The bytes of `value` as Metal type `base`. Raises ValueError (saying what would fit) for an integer
    outside the type's width (accepted: the signed or the unsigned range of that width, i.e. any bit
    pattern, as Triton passes unsigned values in signed parameters) or a finite float beyond the type."""
    if base == "bool":
        return struct.pack("<?", bool(value))
    fmt = _SCALAR_FORMATS[base]
    if not isinstance(value, (int, float)) and not hasattr(value, "__index__") and not hasattr(value, "__float__"):
        raise ValueError(f"{value!r} ({type(value).__name__}) is not a number")
    if base in _INTEGER_TYPES:
        if isinstance(value, float) and not value.is_integer():
            raise ValueError(f"{value!r} is not an integer")
        value = int(value)
        bits = 8 * struct.calcsize(fmt)
        if not -(1 << (bits - 1)) <= value < (1 << bits):
            raise ValueError(f"{value} does not fit in {bits} bits ({base} takes {-(1 << (bits - 1))} to "
                             f"{(1 << bits) - 1}, negative values and values above the signed maximum as their "
                             f"two's-complement bit pattern)")
        value %= 1 << bits
        return struct.pack("<" + fmt.upper(), value)
    value = float(value)
    try:
        if base == "bfloat":
            if math.isfinite(value) and abs(value) >= 3.3961776e38:  # rounds to inf in bfloat
                raise OverflowError
            return struct.pack("<H", _bfloat_bits(value))
        return struct.pack("<" + fmt, value)
    except OverflowError:
        raise ValueError(f"{value!r} is out of range for {base} (largest finite value {_FLOAT_MAX[base]}); "
                         f"pass a value in range, inf explicitly, or use a wider parameter type") from None


class Scalar:
    """A value for a ``constant T&`` parameter, packed as the Metal type ``type_name``
    (``"int"``, ``"uint"``, ``"long"``, ``"ulong"``, ``"float"``, ``"half"``, ``"bfloat"``, ``"bool"``,
    ``"short"``, ``"ushort"``, ``"char"``, ``"uchar"`` and vectors such as ``"uint3"``/``"float4"``
    with a sequence value; vec3 is padded to 4 elements as in Metal).

    A value that does not fit the type (``Scalar(1e300, "float")``, ``Scalar(2**40, "int")``) is recorded in
    ``problem`` and refused when the scalar is bound to a kernel parameter, so that the error can name the
    kernel and the parameter. An unknown ``type_name`` raises ValueError at once."""

    def __init__(self, value: Any, type_name: str = "int"):
        self.value = value
        self.type_name = type_name
        base, n = _parse_type(type_name)
        self.base = base
        self.width = n
        self.problem: Optional[str] = None
        vals = [value]
        if n > 1:
            vals = list(value) if hasattr(value, "__iter__") else [value] * n
            if len(vals) != n:
                raise ValueError(f"Scalar {type_name} needs {n} values, got {len(vals)}")
            if n == 3:
                vals = vals + [0]
        parts = []
        for v in vals:
            try:
                parts.append(_pack_scalar(base, v))
            except ValueError as e:
                self.problem = self.problem or str(e)
                parts.append(bytes(_sig.type_size(base)))
        self.data = b"".join(parts)

    @property
    def nbytes(self) -> int:
        return len(self.data)

    def __repr__(self):
        return f"Scalar({self.value!r}, {self.type_name!r})"


# ------------------------------------------------------------------------------------------------
# Kernels
# ------------------------------------------------------------------------------------------------

def _dim3(kernel: str, v, what: str, lo: int) -> Tuple[int, int, int]:
    """`grid`/`threadgroup` as 3 integers, each from `lo` to 2^32-1 (Metal's sizes are uint)."""
    dims = (v, ) if isinstance(v, int) else tuple(v) if isinstance(v, (tuple, list)) else None
    if dims is None or not 1 <= len(dims) <= 3 or not all(isinstance(x, int) for x in dims):
        raise EmulatorLaunchError(f"kernel '{kernel}': {what} {v!r} must be an int or a tuple of 1 to 3 ints",
                                  kernel_name=kernel)
    for axis, x in zip("xyz", dims):
        if not lo <= x < 1 << 32:
            raise EmulatorLaunchError(
                f"kernel '{kernel}': {what} {tuple(dims)}: dimension {axis} is {x}; each dimension must be from {lo} "
                f"to {(1 << 32) - 1} (Metal's {what} sizes are 32-bit unsigned)", kernel_name=kernel)
    return tuple(dims) + (1, ) * (3 - len(dims))


class _Bound:
    __slots__ = ("host", "nbytes", "flags", "elem_size", "keep")

    def __init__(self, host, nbytes, flags, elem_size, keep):
        self.host, self.nbytes, self.flags, self.elem_size, self.keep = host, nbytes, flags, elem_size, keep


def _span_bytes(shape, strides_elems, itemsize) -> int:
    if any(s == 0 for s in shape):
        return 0
    return (1 + sum((s - 1) * st for s, st in zip(shape, strides_elems))) * itemsize


_tokens = itertools.count(1)  # launch tokens (tt_emu_launch_begin), unique in this process
_tokens_lock = threading.Lock()


def _run_launch(lib, desc: _LaunchDesc, res: _LaunchResult) -> int:
    """Runs one launch on the runtime's host threads while this thread waits in short slices with the GIL
    released, so that Python can run its signal handlers (Ctrl-C) in between. On KeyboardInterrupt (or any
    other exception raised in between) the launch is cancelled and waited for before the exception goes on:
    no kernel keeps running on buffers the caller is about to free."""
    with _tokens_lock:
        token = next(_tokens)
    try:
        status = _BUSY
        while status == _BUSY:
            status = lib.tt_emu_launch_begin(ctypes.byref(desc), ctypes.byref(res), _WAIT_SLICE_MS, token)
        while status == _PENDING:
            status = lib.tt_emu_launch_wait(token, _WAIT_SLICE_MS)
    except BaseException:
        lib.tt_emu_launch_cancel(token, _INTERRUPTED)
        while True:
            try:
                if lib.tt_emu_launch_wait(token, _WAIT_SLICE_MS) != _PENDING:
                    break
            except KeyboardInterrupt:  # a second Ctrl-C while the launch is being stopped
                continue
        raise
    return res.status if status == _DONE else status


class _LoadedLibraries:
    """Kernel shared objects loaded in this process: at most ``TRITON_APPLE_EMULATOR_MAX_LOADED`` (least
    recently launched first out). Kernel objects do not hold their library: each launch asks for the entry
    point (loading the library again if it was unloaded) and holds the library until the launch is over, so
    a library is never unloaded while a launch of it runs."""

    def __init__(self):
        self._lock = threading.Lock()
        self._loaded: "collections.OrderedDict[str, list]" = collections.OrderedDict()  # path -> [handle, entry, users]

    def acquire(self, kernel: "EmulatorKernel") -> int:
        path = str(kernel.so_path)
        with self._lock:
            rec = self._loaded.get(path)
            if rec is None:
                lib = ctypes.CDLL(path)
                abi = ctypes.c_int.in_dll(lib, "__tt_emu_abi").value
                entry = ctypes.cast(getattr(lib, "__tt_emu_entry"), ctypes.c_void_p).value
                rec = self._loaded[path] = [lib._handle, entry, 0]
                if abi != ABI_VERSION:
                    self._unload(path)
                    raise EmulatorError(f"kernel '{kernel.name}': {path} was built for emulator ABI {abi}, the "
                                        f"runtime has {ABI_VERSION}")
            self._loaded.move_to_end(path)
            rec[2] += 1
            return rec[1]

    def release(self, kernel: "EmulatorKernel") -> None:
        with self._lock:
            rec = self._loaded.get(str(kernel.so_path))
            if rec is not None:
                rec[2] -= 1
            excess = len(self._loaded) - max(1, knobs.emulator_max_loaded.get())
            if excess > 0:
                for path in [p for p, r in self._loaded.items() if r[2] == 0][:excess]:
                    self._unload(path)

    def forget(self, path: Path) -> None:
        """Unload `path` if no launch uses it: its file was rebuilt, the next launch must load the new one."""
        with self._lock:
            rec = self._loaded.get(str(path))
            if rec is not None and rec[2] == 0:
                self._unload(str(path))

    def _unload(self, path: str) -> None:
        handle = self._loaded.pop(path)[0]
        _ctypes.dlclose(handle)

    def loaded(self) -> List[str]:
        """Paths of the libraries loaded now, least recently launched first."""
        with self._lock:
            return list(self._loaded)


_LIBRARIES = _LoadedLibraries()


class EmulatorKernel:
    """A compiled MSL kernel. ``params`` lists every parameter (:class:`KernelParam`)."""

    def __init__(self, name: str, source: str, signature: _sig.KernelSignature, so_path: Path, cache_hit: bool):
        self.name = name
        self.source = source
        self.signature = signature
        self.params = signature.params
        self.so_path = Path(so_path)
        self.cache_hit = cache_hit
        self._lib = runtime_library()
        _LIBRARIES.acquire(self)  # loads it now: a bad library fails at compile time
        _LIBRARIES.release(self)
        self._buffers = signature.buffers
        self._by_slot = {p.index: p for p in self._buffers}
        self._name_b = name.encode()
        self._param_names = {p.index: p.name.encode() for p in self._buffers}
        self._warned = set()
        self._lines = source.splitlines()

    def __repr__(self):
        return f"EmulatorKernel({self.name!r}, params={self.params!r})"

    # -- argument marshalling ------------------------------------------------------------------
    def _bind(self, p: _sig.KernelParam, arg) -> _Bound:
        ro = TT_BUF_READONLY if p.readonly else 0
        if isinstance(arg, Scalar):
            if arg.problem:
                raise EmulatorLaunchError(
                    f"kernel '{self.name}': parameter '{p.name}' ({p.msl_type}): {arg.problem}",
                    kernel_name=self.name, param=p.name, slot=p.index)
            if p.is_reference and p.elem_size and arg.nbytes != p.elem_size:
                raise EmulatorLaunchError(
                    f"kernel '{self.name}': parameter '{p.name}' ({p.msl_type}) takes {p.elem_size} bytes, "
                    f"got {arg!r} ({arg.nbytes} bytes)", kernel_name=self.name, param=p.name, slot=p.index)
            if p.is_reference and p.base_type and _sig.type_size(p.base_type):
                try:
                    want, _ = _parse_type(p.base_type)
                except ValueError:
                    want = None
                if want and want != arg.base and not (want in _INTEGER_TYPES and arg.base in _INTEGER_TYPES):
                    raise EmulatorLaunchError(
                        f"kernel '{self.name}': parameter '{p.name}' is {p.msl_type} but got {arg!r}",
                        kernel_name=self.name, param=p.name, slot=p.index)
            buf = ctypes.create_string_buffer(arg.data, len(arg.data))
            return _Bound(ctypes.addressof(buf), arg.nbytes, ro | TT_BUF_SCALAR, arg.nbytes, buf)
        if isinstance(arg, (bool, int, float)) and p.is_reference:
            try:
                base, n = _parse_type(p.base_type)
            except ValueError:
                raise EmulatorLaunchError(
                    f"kernel '{self.name}': parameter '{p.name}' ({p.msl_type}) needs a Scalar or bytes, "
                    f"got {type(arg).__name__}", kernel_name=self.name, param=p.name, slot=p.index) from None
            return self._bind(p, Scalar(arg, p.base_type))
        if isinstance(arg, (bytes, bytearray, memoryview)):
            mv = memoryview(arg).cast("B")
            n = mv.nbytes
            if isinstance(arg, bytes) or mv.readonly:
                buf = ctypes.create_string_buffer(bytes(mv), max(n, 1))
                return _Bound(ctypes.addressof(buf), n, ro | (TT_BUF_SCALAR if p.is_reference else 0),
                              p.elem_size, buf)
            buf = (ctypes.c_char * max(n, 1)).from_buffer(mv) if n else ctypes.create_string_buffer(1)
            return _Bound(ctypes.addressof(buf), n, ro, p.elem_size, (buf, mv))
        mod = type(arg).__module__
        if mod.startswith("torch") and hasattr(arg, "data_ptr"):
            if arg.device.type != "cpu":
                raise EmulatorLaunchError(
                    f"kernel '{self.name}': parameter '{p.name}' got a tensor on {arg.device}; the emulator "
                    "runs on CPU tensors", kernel_name=self.name, param=p.name, slot=p.index)
            nbytes = _span_bytes(arg.shape, arg.stride(), arg.element_size())
            if any(st < 0 for st in arg.stride()):
                raise EmulatorLaunchError(f"kernel '{self.name}': negative strides are not supported",
                                          kernel_name=self.name, param=p.name, slot=p.index)
            return _Bound(arg.data_ptr(), nbytes, ro, p.elem_size or arg.element_size(), arg)
        if hasattr(arg, "__array_interface__"):
            ai = arg.__array_interface__
            ptr, readonly = ai["data"]
            itemsize = int(ai["typestr"][2:])
            shape = tuple(ai["shape"])
            strides = ai.get("strides")
            if strides is None:
                nbytes = itemsize
                for s in shape:
                    nbytes *= s
            else:
                if any(st < 0 or st % itemsize for st in strides):
                    raise EmulatorLaunchError(
                        f"kernel '{self.name}': parameter '{p.name}': arrays with negative or unaligned strides "
                        "are not supported (use numpy.ascontiguousarray)", kernel_name=self.name, param=p.name,
                        slot=p.index)
                nbytes = _span_bytes(shape, [st // itemsize for st in strides], itemsize)
            flags = ro | (TT_BUF_READONLY if readonly else 0)
            return _Bound(ptr, nbytes, flags, p.elem_size or itemsize, arg)
        raise EmulatorLaunchError(
            f"kernel '{self.name}': cannot bind {type(arg).__name__} to parameter '{p.name}' ({p.msl_type}); "
            "use a CPU torch tensor, a numpy array, an emulator.Scalar or bytes",
            kernel_name=self.name, param=p.name, slot=p.index)

    # -- launching -------------------------------------------------------------------------------
    def launch(self, grid=(1, 1, 1), threadgroup=(1, 1, 1),
               buffers: Union[Mapping[int, Any], Sequence[Any], None] = None, *,
               host_threads: Optional[int] = None, stack_kb: Optional[int] = None,
               schedule: Optional[str] = None, timeout: Optional[float] = None) -> None:
        """Run the kernel over ``grid`` threadgroups of ``threadgroup`` threads.

        ``buffers`` maps buffer slots to arguments (or is a list in slot order). Raises
        :class:`EmulatorLaunchError` on any failure; buffers are written back only on success.
        ``host_threads``, ``stack_kb``, ``schedule`` (``"forward"``, ``"reverse"``,
        ``"random[:seed]"``: the order threads run in between barriers) and ``timeout`` (seconds, 0: none)
        default to the ``TRITON_APPLE_EMULATOR_{THREADS,STACK_KB,SCHEDULE,TIMEOUT}`` knobs. Ctrl-C during
        the launch stops it and raises KeyboardInterrupt; the process stays usable.
        """
        grid3 = _dim3(self.name, grid, "grid", 0)
        tg3 = _dim3(self.name, threadgroup, "threadgroup", 1)
        nthreads = tg3[0] * tg3[1] * tg3[2]
        if nthreads > MAX_THREADS_PER_THREADGROUP:
            raise EmulatorLaunchError(
                f"kernel '{self.name}': threadgroup {tg3} has {nthreads} threads; Metal allows 1 to "
                f"{MAX_THREADS_PER_THREADGROUP}", kernel_name=self.name)
        if buffers is None:
            binds: Dict[int, Any] = {}
        elif isinstance(buffers, Mapping):
            binds = dict(buffers)
        else:
            binds = dict(enumerate(buffers))
        extra = sorted(set(binds) - set(self._by_slot))
        if extra:
            raise EmulatorLaunchError(
                f"kernel '{self.name}': buffer slot(s) {extra} are not parameters of the kernel (slots: "
                f"{sorted(self._by_slot)})", kernel_name=self.name)
        n = len(self._buffers)
        descs = (_BufferDesc * max(n, 1))()
        keep = []
        for i, p in enumerate(self._buffers):
            if p.index not in binds:
                raise EmulatorLaunchError(
                    f"kernel '{self.name}': parameter '{p.name}' [[buffer({p.index})]] is not bound",
                    kernel_name=self.name, param=p.name, slot=p.index)
            b = self._bind(p, binds[p.index])
            keep.append(b.keep)
            d = descs[i]
            d.host = b.host
            d.nbytes = b.nbytes
            d.slot = p.index
            d.elem_size = b.elem_size
            d.flags = b.flags
            d.name = self._param_names[p.index]
        desc = _LaunchDesc()
        desc.kernel_name = self._name_b
        desc.grid[:] = grid3
        desc.tg[:] = tg3
        desc.nbuffers = n
        desc.host_threads = knobs.emulator_threads.get() if host_threads is None else max(0, host_threads)
        desc.buffers = descs
        desc.stack_kb = knobs.emulator_stack_kb.get() if stack_kb is None else max(0, stack_kb)
        desc.schedule, desc.seed = _schedule(self.name, knobs.emulator_schedule.get() if schedule is None else schedule)
        desc.ub_mode = _UB_MODES[knobs.emulator_ub.get()]
        seconds = knobs.emulator_timeout.get() if timeout is None else timeout
        desc.timeout_ms = 0 if seconds <= 0 else min(max(1, round(seconds * 1000)), 0xFFFFFFFF)
        res = _LaunchResult()
        desc.entry = _LIBRARIES.acquire(self)
        try:
            status = _run_launch(self._lib, desc, res)
        finally:
            _LIBRARIES.release(self)
        del keep
        if res.nevents:
            self._warn_events(res)
        if status != 0:
            raise self._launch_error(res)

    # -- reporting -------------------------------------------------------------------------------
    def _source_line(self, n: int) -> str:
        return self._lines[n - 1].strip() if 0 < n <= len(self._lines) else ""

    def _warn_events(self, res: _LaunchResult):
        msl_name = f"{self.name}.metal"
        for i in range(res.nevents):
            e = res.events[i]
            file = e.file.decode(errors="replace")
            key = (e.kind, file, e.line, e.col)
            if key in self._warned:
                continue
            self._warned.add(key)
            where = f"MSL line {e.line}:{e.col}" if file == msl_name else f"{file}:{e.line}"
            src = f": {self._source_line(e.line)}" if file == msl_name else ""
            warnings.warn(EmulatorWarning(
                f"kernel '{self.name}': {_EVENT_TEXT.get(e.kind, 'undefined behaviour')} at {where}{src} "
                f"({e.count} time(s) in this launch, first with operands {e.a}, {e.b}). "
                "Set TRITON_APPLE_EMULATOR_UB=error to make this fatal."), stacklevel=3)

    def _launch_error(self, res: _LaunchResult) -> EmulatorLaunchError:
        msg = res.message.decode(errors="replace")
        kind = _STATUS_KINDS.get(res.status, "internal")
        lines = [res.lines[i] for i in range(res.nlines)]
        module = res.pc_module.decode(errors="replace")
        if res.pc and module and os.path.realpath(module) == os.path.realpath(str(self.so_path)):
            loc = toolchain.symbolize(str(self.so_path), res.pc_offset, f"{self.name}.metal")
            if loc:
                lines.append(loc[0])
                msg += f"\n  at MSL line {loc[0]}:{loc[1]}: {self._source_line(loc[0])}"
        elif lines:
            msg += "".join(f"\n  MSL line {n}: {self._source_line(n)}" for n in sorted(set(lines)))
        param = None
        slot = res.slot if res.slot >= 0 else None
        if slot is not None and slot in self._by_slot:
            param = self._by_slot[slot].name
        return EmulatorLaunchError(
            msg, kind=kind, kernel_name=self.name, param=param, slot=slot,
            index=res.index if kind in ("out_of_bounds", "readonly_write") else None,
            is_write=None if res.is_write < 0 else bool(res.is_write),
            threadgroup=tuple(res.tg) if res.status != 1 and res.tg[0] != 0xFFFFFFFF else None,
            thread=res.thread if res.thread >= 0 else None, msl_lines=lines)


# ------------------------------------------------------------------------------------------------
# Compilation
# ------------------------------------------------------------------------------------------------

_memory_cache: "collections.OrderedDict[str, EmulatorKernel]" = collections.OrderedDict()
_compile_lock = threading.Lock()


def clear_memory_cache() -> None:
    """Forget kernels compiled in this process (the on-disk cache is kept)."""
    with _compile_lock:
        _memory_cache.clear()


def compile_msl(source: Union[str, bytes], kernel_name: str) -> EmulatorKernel:
    """Compile ``kernel_name`` from MSL ``source`` for the emulator (cached on disk under
    ``<triton cache dir>/apple_emulator``; the compiled kernels of this process are also kept in memory, at
    most ``TRITON_APPLE_EMULATOR_MAX_LOADED`` of them)."""
    if isinstance(source, (bytes, bytearray)):
        try:
            source = bytes(source).decode()
        except UnicodeDecodeError as e:
            raise EmulatorCompileError(
                f"MSL source of kernel '{kernel_name}' is not UTF-8 text (byte 0x{source[e.start]:02x} at offset "
                f"{e.start}); a damaged cached .msl file?", kernel_name=kernel_name) from None
    elif not isinstance(source, str):
        raise EmulatorCompileError(f"MSL source of kernel '{kernel_name}' must be str or bytes, got "
                                   f"{type(source).__name__}", kernel_name=kernel_name)
    sig = _sig.parse_signature(source, kernel_name)
    rewritten = _sig.rewrite_source(source)
    msl_name = f"{kernel_name}.metal"
    trampoline, tramp_lines = _sig.make_trampoline(sig, msl_name)
    key = toolchain.kernel_key(rewritten, kernel_name, trampoline)
    with _compile_lock:
        k = _memory_cache.get(key)
        if k is not None and k.so_path.is_file():
            _memory_cache.move_to_end(key)
            return k
    runtime_library()  # built and loaded (RTLD_GLOBAL) before any kernel
    so, hit = toolchain.build_kernel(rewritten, kernel_name, trampoline, tramp_lines, sig.line, source)
    if not hit:
        _LIBRARIES.forget(so)
    k = EmulatorKernel(kernel_name, source, sig, so, hit)
    with _compile_lock:
        _memory_cache[key] = k
        while len(_memory_cache) > max(1, knobs.emulator_max_loaded.get()):
            _memory_cache.popitem(last=False)
    return k

"""Compiled emulator kernels: compiling MSL (through the cache), binding arguments to buffer slots, launching
through the native launcher, and turning the launch result into warnings and EmulatorLaunchError."""
from __future__ import annotations

import collections
import ctypes
import operator
import os
import sys
import threading
import warnings
import weakref
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

from .. import knobs
from ..target import MAX_THREADS_PER_THREADGROUP
from . import build, objfile
from . import signature as _sig
from . import tools as _tools
from .errors import EmulatorCompileError, EmulatorError, EmulatorLaunchError, EmulatorSanitizerWarning, EmulatorWarning
from .launcher import launch_config, launcher
from .library import LOADED_LIBRARIES, TT_BUF_READONLY, TT_BUF_SCALAR, runtime_library
from .scalar import Scalar, _is_integer, _parse_type
from .stack_usage import explain_stack_overflow
from .symbolizer import symbolize

class LaunchResult(NamedTuple):
    """What the launcher returns for a launch that failed or reported events (tt_launch_result)."""
    status: int
    slot: int
    index: int
    is_write: int
    tg: Tuple[int, int, int]
    thread: int
    lines: List[int]
    pc: int
    pc_offset: int
    pc_module: bytes
    events: List[Tuple[int, int, int, int, int, int, bytes]]  # (kind, line, col, count, a, b, file)
    message: bytes


_STATUS_KINDS = {
    1: "invalid", 2: "out_of_bounds", 3: "readonly_write", 4: "threadgroup_out_of_bounds", 5: "stack_overflow",
    6: "segfault", 7: "signal", 8: "divergence", 9: "deadlock", 10: "simd", 11: "threadgroup_memory",
    12: "local_out_of_bounds", 13: "undefined_behavior", 14: "internal", 15: "timeout", 16: "interrupted",
    17: "race", 18: "uninitialized",
}
_EVENT_TEXT = {
    1: "integer division or remainder by zero (Metal: undefined result; emulator: x/0 = 0, x%0 = x)",
    2: "signed integer division overflow (INT_MIN / -1)",
    3: "shift by a negative count or by >= the bit width (Metal: undefined result)",
}


def _dim3(kernel: str, v, what: str, lo: int) -> Tuple[int, int, int]:
    """`grid`/`threadgroup` as 3 integers, each from `lo` to 2^32-1 (Metal's sizes are uint)."""
    # any integer with __index__ (numpy integers, 0-d integer tensors), as upstream's launchers take grids
    dims = tuple(v) if isinstance(v, (tuple, list)) else (v, )
    try:
        if not 1 <= len(dims) <= 3:
            raise TypeError
        dims = tuple(operator.index(x) for x in dims)
    except TypeError:
        raise EmulatorLaunchError(f"kernel '{kernel}': {what} {v!r} must be an integer or a tuple of 1 to 3 "
                                  "integers", kernel_name=kernel) from None
    for axis, x in zip("xyz", dims):
        if not lo <= x < 1 << 32:
            raise EmulatorLaunchError(
                f"kernel '{kernel}': {what} {tuple(dims)}: dimension {axis} is {x}; each dimension must be from {lo} "
                f"to {(1 << 32) - 1} (Metal's {what} sizes are 32-bit unsigned)", kernel_name=kernel)
    return tuple(dims) + (1, ) * (3 - len(dims))


def _weak_hook(kernel: "EmulatorKernel", convert):
    """The launcher's hook for `kernel`: binds in Python what the launcher does not bind itself (after
    `convert(slot, value)`, when given). Holds the kernel weakly: a launch runs on a live kernel."""
    ref = weakref.ref(kernel)

    def hook(i: int, value) -> tuple:
        k = ref()
        p = k._buffers[i]
        b = k._bind(p, value if convert is None else convert(p.index, value))
        return (b.host, b.nbytes, b.flags, b.elem_size, b.keep)

    return hook


def _tensor_type():
    """torch.Tensor, once torch is imported (the launcher binds its instances itself), else None."""
    torch = sys.modules.get("torch")
    return getattr(torch, "Tensor", None)


def _is_torch_tensor(arg) -> bool:
    tensor_type = _tensor_type()
    if tensor_type is not None and isinstance(arg, tensor_type):
        return True
    return type(arg).__module__.startswith("torch") and hasattr(arg, "data_ptr")


class _Bound:
    __slots__ = ("host", "nbytes", "flags", "elem_size", "keep")

    def __init__(self, host, nbytes, flags, elem_size, keep):
        self.host, self.nbytes, self.flags, self.elem_size, self.keep = host, nbytes, flags, elem_size, keep


def _span_bytes(shape, strides_elems, itemsize) -> int:
    if any(s == 0 for s in shape):
        return 0
    return (1 + sum((s - 1) * st for s, st in zip(shape, strides_elems))) * itemsize


def _storage_problem(t, nbytes: int) -> Optional[str]:
    """Why the `nbytes` from CPU tensor `t`'s data pointer are not all inside its storage, or None. The runtime
    copies those bytes in and, after a successful launch, back out: past a freed or shrunk storage (with
    `untyped_storage().resize_`) that would read garbage and write over memory the tensor no longer owns. (The
    native launcher makes the same check on its fast path and leaves such tensors to this one.)"""
    if nbytes == 0:
        return None
    storage = t.untyped_storage()
    base, size = storage.data_ptr(), storage.nbytes()
    if base == 0 or size == 0:
        return (f"the tensor's storage was freed (it holds 0 bytes; the view spans {nbytes} bytes), e.g. by "
                "untyped_storage().resize_(0)")
    start = t.data_ptr() - base
    if start < 0 or start + nbytes > size:
        return (f"the tensor's view spans bytes {start} to {start + nbytes} of its storage, which holds only "
                f"{size} bytes (shrunk by untyped_storage().resize_?)")
    return None


class EmulatorKernel:
    """A compiled MSL kernel. ``params`` lists every parameter (:class:`KernelParam`)."""

    def __init__(self, name: str, source: str, signature: _sig.KernelSignature, so_path: Path, cache_hit: bool,
                 rebuild: Optional[Callable[[], Tuple[Path, bool]]] = None,
                 build_tools: Optional[Callable[[], Tuple[Path, bool]]] = None, quick: bool = False,
                 build_lines: Optional[Callable[[], Tuple[Path, bool]]] = None):
        self.name = name
        self._rebuild = rebuild  # builds the cache entry again when its library went away (_entry_point)
        # the sanitizer and profiler: the tools the knobs asked for when the kernel was compiled, and the build of
        # its library for them (made on the first launch that runs a tool; tools.py)
        self._tools = _tools.knob_tools()
        self._build_tools = build_tools
        self._tools_so: Optional[Path] = None
        self._tools_lock = threading.Lock()
        self._locations = None
        self.source = source
        self.signature = signature
        self.params = signature.params
        self.so_path = Path(so_path)
        self.cache_hit = cache_hit
        self.quick = quick  # built at -O0, without line tables: a kernel's first library (tuning.py)
        self._build_lines = build_lines  # a quick library's build with line tables, made when a fault needs a line
        self._lib = runtime_library()
        self._launcher = launcher()  # compiled (or found in Triton's cache) now: a machine without one fails here
        LOADED_LIBRARIES.acquire(self.so_path, self.name)  # loads it now: a bad library fails at compile time
        LOADED_LIBRARIES.release(self.so_path)
        self._buffers = signature.buffers
        self._by_slot = {p.index: p for p in self._buffers}
        self._any_plan = None
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
                if want and want != arg.base and not (_is_integer(want) and _is_integer(arg.base)):
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
        if _is_torch_tensor(arg):
            if arg.device.type != "cpu":
                raise EmulatorLaunchError(
                    f"kernel '{self.name}': parameter '{p.name}' got a tensor on {arg.device}; the emulator "
                    "runs on CPU tensors", kernel_name=self.name, param=p.name, slot=p.index)
            nbytes = _span_bytes(arg.shape, arg.stride(), arg.element_size())
            if any(st < 0 for st in arg.stride()):
                raise EmulatorLaunchError(f"kernel '{self.name}': negative strides are not supported",
                                          kernel_name=self.name, param=p.name, slot=p.index)
            problem = _storage_problem(arg, nbytes)
            if problem:
                raise EmulatorLaunchError(f"kernel '{self.name}': parameter '{p.name}': {problem}",
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
        self._check_slots(binds)
        tensor_type = _tensor_type()
        if self._any_plan is None or self._any_plan[0] is not tensor_type:  # torch imported since
            slots = [(i, p.index, self._launcher.KIND_ANY, 0, p.elem_size, p.readonly, p.name)
                     for i, p in enumerate(self._buffers)]
            self._any_plan = (tensor_type, self._launcher.make_plan(self.name, slots, tensor_type,
                                                                    _weak_hook(self, None)))
        overrides = (host_threads, stack_kb, schedule, timeout)
        config = None if overrides == (None, None, None, None) else launch_config(self.name, *overrides)
        self.run(self._any_plan[1], grid3, tg3, tuple(binds[p.index] for p in self._buffers), config=config)

    def _check_slots(self, bound_slots) -> None:
        """Every buffer parameter bound, and nothing else."""
        extra = sorted(set(bound_slots) - set(self._by_slot))
        if extra:
            raise EmulatorLaunchError(
                f"kernel '{self.name}': buffer slot(s) {extra} are not parameters of the kernel (slots: "
                f"{sorted(self._by_slot)})", kernel_name=self.name)
        for p in self._buffers:
            if p.index not in bound_slots:
                raise EmulatorLaunchError(
                    f"kernel '{self.name}': parameter '{p.name}' [[buffer({p.index})]] is not bound",
                    kernel_name=self.name, param=p.name, slot=p.index)

    def plan(self, sources: Sequence[Tuple[int, str, str]], convert) -> Any:
        """A binding plan for launches whose arguments come positionally, as Triton's launcher gets them.

        ``sources[slot] = (pos, kind, msl_type)``: buffer slot ``slot`` takes launch argument ``pos`` (-1 - k:
        item k of :meth:`run`'s ``extra``), a tensor when ``kind`` is ``"pointer"``, else a Python number of the
        MSL scalar type ``msl_type``. The launcher binds CPU torch tensors and numbers itself; any other value,
        and any number it refuses, goes to ``convert(slot, value)``, which returns what to bind (a tensor, an
        :class:`Scalar`) or raises the error that names the argument."""
        mod = self._launcher
        self._check_slots(range(len(sources)))
        slots = []
        for p in self._buffers:
            pos, kind, msl_type = sources[p.index]
            scalar = 0
            if kind == "pointer":
                k = mod.KIND_POINTER
            elif msl_type in mod.SCALAR_TYPES and self._scalar_fits(p, msl_type):
                k, scalar = mod.KIND_SCALAR, mod.SCALAR_TYPES[msl_type]
            else:  # every launch through `convert` and _bind, which say what is wrong
                k = mod.KIND_HOOK
            slots.append((pos, p.index, k, scalar, p.elem_size, p.readonly, p.name))

        # The plan holds the hook; the hook must not hold the kernel (a plan is no garbage-collected container,
        # so the cycle kernel -> plan -> hook -> kernel would never be freed), nor should `convert` hold its owner.
        return mod.make_plan(self.name, slots, _tensor_type(), _weak_hook(self, convert))

    @staticmethod
    def _scalar_fits(p: _sig.KernelParam, msl_type: str) -> bool:
        """Whether a Scalar of `msl_type` passes _bind's type checks for `p` (they depend on types only)."""
        size = _sig.type_size(msl_type)
        if p.is_reference and p.elem_size and size != p.elem_size:
            return False
        if p.is_reference and p.base_type and _sig.type_size(p.base_type):
            try:
                want, _ = _parse_type(p.base_type)
            except ValueError:
                return True
            return want == msl_type or (_is_integer(want) and _is_integer(msl_type))
        return True

    def run(self, plan, grid: Tuple[int, int, int], threadgroup: Tuple[int, int, int], args: tuple,
            extra: tuple = (), enter_hook=None, metadata=None, config: Optional[tuple] = None) -> None:
        """One launch with a plan (:meth:`plan`): grid and threadgroup checked 3-tuples, ``args`` the launch
        arguments, ``extra`` the buffers the plan binds by negative positions, ``enter_hook(metadata)`` called
        once the arguments are bound, just before the kernel starts.
        ``config``: :func:`launch_config`'s tuple, or None for the knobs' settings. Raises
        :class:`EmulatorLaunchError` on any failure; buffers are written back only on success."""
        if self._tools or _tools.SCOPED:  # the tools' launch path; plain launches pay these two tests only
            bits, collectors = _tools.scoped() if _tools.SCOPED else (0, [])
            bits |= self._tools & ~(_tools.WARN if bits & (_tools.RACE | _tools.INIT) else 0)
            if bits & (_tools.RACE | _tools.INIT | _tools.PROFILE):
                return self._run_with_tools(bits, collectors, plan, grid, threadgroup, args, extra, enter_hook,
                                            metadata, config)
        entry = self._entry_point()
        try:
            result = self._launcher.launch(plan, entry, grid, threadgroup, config, args, extra, enter_hook, metadata)
        finally:
            LOADED_LIBRARIES.release(self.so_path)
        if result is not None:
            res = LaunchResult(*result)
            if res.events:
                self._warn_events(res)
            if res.status != 0:
                raise self._launch_error(res, threadgroup)

    def _tools_library(self) -> Path:
        """The kernel's library built for the tools (clang.TOOL_FLAGS), built on first use."""
        if self._build_tools is None:
            raise EmulatorError(f"kernel '{self.name}': no build for the emulator's tools")
        if self._tools_so is None or not self._tools_so.is_file():
            so, hit = self._build_tools()
            if not hit:
                LOADED_LIBRARIES.forget(so)
            self._tools_so = Path(so)
        return self._tools_so

    def _run_with_tools(self, bits: int, collectors: list, plan, grid, threadgroup, args, extra, enter_hook,
                        metadata, config) -> None:
        """`run` with the sanitizer and/or profiler (`bits`: tools.RACE, INIT, PROFILE, WARN): the tools build of the
        library, armed for this launch, its report read afterwards. Launches of one kernel with tools take turns
        (the report belongs to the launch that was armed)."""
        so = self._tools_library()
        with self._tools_lock:
            entry = LOADED_LIBRARIES.acquire(so, self.name)
            try:
                armed = _tools.Armed(self._lib, entry, bits)
                try:
                    result = self._launcher.launch(plan, entry, grid, threadgroup, config, args, extra, enter_hook,
                                                   metadata)
                finally:
                    filled = armed.done()
            finally:
                LOADED_LIBRARIES.release(so)
        report = armed.report
        found = []
        if filled and (report.nhazards or report.nconflicts) and self._locations is None:
            from ..abi.msl_locations import MslLocations
            self._locations = MslLocations.from_comments(self.source)
        if filled and report.nhazards:
            found = _tools.findings(report, str(so), self.name, self._lines, self._locations,
                                    {p.index: p.name for p in self._buffers})
        res = LaunchResult(*result) if result is not None else None
        if res is not None and res.events:
            self._warn_events(res)
        if res is not None and res.status != 0:
            err = self._launch_error(res, threadgroup, so)
            if res.status in (_tools.STATUS_RACE, _tools.STATUS_UNINIT) and found:
                lines = sorted({n for f in found for n in f.msl_lines})
                first = found[0]
                err = EmulatorLaunchError(_tools.summary(report, found, self.name), kind=err.kind,
                                          kernel_name=self.name, param=first.param, slot=first.slot,
                                          threadgroup=first.threadgroup, thread=first.second.thread, msl_lines=lines)
                err.findings = found
            elif found:
                err.args = (str(err) + "\n(the sanitizer had found before: " +
                            _tools.summary(report, found, self.name) + ")", )
                err.findings = found
            raise err
        if found:  # warn mode
            warnings.warn(EmulatorSanitizerWarning(_tools.summary(report, found, self.name)), stacklevel=4)
        if bits & _tools.PROFILE and filled:
            conflicts = _tools.conflict_lines(report, str(so), self.name, self._lines, self._locations) \
                if report.nconflicts else []
            d = _tools.profile_dict(report, self.name, grid, threadgroup, conflicts)
            for c in collectors:
                c.launches.append(d)
            if bits & _tools._PRINT:
                _tools.print_profile_line(d)

    def _entry_point(self) -> int:
        """The kernel's entry point, its library held until LOADED_LIBRARIES.release. A library unloaded by the
        limit on loaded libraries is loaded again from the cache; when its cache entry was removed meanwhile (a
        cache cleanup), the entry is built again first, as a first launch would."""
        try:
            return LOADED_LIBRARIES.acquire(self.so_path, self.name)
        except OSError as e:
            if self.so_path.is_file() or self._rebuild is None:
                raise EmulatorError(f"kernel '{self.name}': its library {self.so_path} cannot be loaded: {e}") from e
        so, _ = self._rebuild()
        LOADED_LIBRARIES.forget(so)
        self.so_path = Path(so)
        return LOADED_LIBRARIES.acquire(self.so_path, self.name)

    # -- reporting -------------------------------------------------------------------------------
    def _source_line(self, n: int) -> str:
        return self._lines[n - 1].strip() if 0 < n <= len(self._lines) else ""

    def _warn_events(self, res: LaunchResult):
        msl_name = f"{self.name}.metal"
        for kind, line, col, count, a, b, file_b in res.events:
            file = file_b.decode(errors="replace")
            key = (kind, file, line, col)
            if key in self._warned:
                continue
            self._warned.add(key)
            where = f"MSL line {line}:{col}" if file == msl_name else f"{file}:{line}"
            src = f": {self._source_line(line)}" if file == msl_name else ""
            warnings.warn(EmulatorWarning(
                f"kernel '{self.name}': {_EVENT_TEXT.get(kind, 'undefined behaviour')} at {where}{src} "
                f"({count} time(s) in this launch, first with operands {a}, {b}). "
                "Set TRITON_APPLE_EMULATOR_UB=error to make this fatal."), stacklevel=4)

    def _with_line_tables(self, so_path: Path) -> Optional[Path]:
        """The library to look a faulting instruction of `so_path` up in: itself, or for this kernel's quick library
        (built without line tables) the same build with them, where its code is the same bytes at the same
        addresses (objfile.py; else None: no line is better than a wrong one)."""
        if not (self.quick and self._build_lines is not None and Path(so_path) == self.so_path):
            return so_path
        try:
            twin, _ = self._build_lines()
        except Exception as e:  # noqa: BLE001 (the fault is what gets reported; its line is a bonus)
            warnings.warn(EmulatorWarning(f"kernel '{self.name}': its fault could not be located on an MSL line "
                                          f"(the build with line tables failed: {e})"), stacklevel=3)
            return None
        return twin if objfile.same_code(so_path, twin) else None

    def _launch_error(self, res: LaunchResult, threadgroup: Tuple[int, int, int],
                      so_path: Optional[Path] = None) -> EmulatorLaunchError:
        """The error of a failed launch; `so_path`: the library that ran (default: the kernel's own; the tools
        build's when it ran under them)."""
        so_path = self.so_path if so_path is None else so_path
        msg = res.message.decode(errors="replace")
        kind = _STATUS_KINDS.get(res.status, "internal")
        lines = list(res.lines)
        if kind == "stack_overflow":
            text, array_lines = explain_stack_overflow(self._lines, threadgroup[0] * threadgroup[1] * threadgroup[2])
            msg += text
            lines += array_lines
        module = res.pc_module.decode(errors="replace")
        if res.pc and module and os.path.realpath(module) == os.path.realpath(str(so_path)):
            with_lines = self._with_line_tables(so_path)
            loc = symbolize(str(with_lines), res.pc_offset, f"{self.name}.metal") if with_lines else None
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


def _after_fork_in_child() -> None:
    global _compile_lock
    _compile_lock = threading.Lock()  # see cache._after_fork_in_child


os.register_at_fork(after_in_child=_after_fork_in_child)


def clear_memory_cache() -> None:
    """Forget kernels compiled in this process (the on-disk cache is kept)."""
    with _compile_lock:
        _memory_cache.clear()


def _in_memory(key: str) -> Optional[EmulatorKernel]:
    """The kernel this process compiled with library key `key`, while its library file exists (most recently used
    from now on)."""
    with _compile_lock:
        k = _memory_cache.get(key)
        if k is None or not k.so_path.is_file():
            return None
        _memory_cache.move_to_end(key)
        return k


def compile_msl(source: Union[str, bytes], kernel_name: str, quick: Optional[bool] = False) -> EmulatorKernel:
    """Compile ``kernel_name`` from MSL ``source`` for the emulator (cached on disk under
    ``<triton cache dir>/apple_emulator``; the compiled kernels of this process are also kept in memory, at
    most ``TRITON_APPLE_EMULATOR_MAX_LOADED`` of them). ``quick``: True, the quick library (-O0,
    ``clang.QUICK_KERNEL_FLAGS``); False, the optimised one; None, the optimised one if this process or the
    cache has it already, else the quick one (a kernel's first library, tuning.py). The kernel's ``quick``
    attribute says which it is."""
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
    key = build.kernel_key(rewritten, kernel_name, trampoline, quick=bool(quick))
    k = _in_memory(key)
    if quick is None:  # `key` is the optimised library's: that one if it exists, else the quick one
        quick = k is None and not build.kernel_built(key)
        if quick:
            key = build.kernel_key(rewritten, kernel_name, trampoline, quick=True)
            k = _in_memory(key)
    if k is not None:
        k._tools = _tools.knob_tools()  # the tools knobs as they are at this compile
        return k
    from . import background
    background.prepare_runtime()  # built beside this kernel's library (a first launch needs both)

    def rebuild() -> Tuple[Path, bool]:
        return build.build_kernel(rewritten, kernel_name, trampoline, tramp_lines, sig.line, source, quick=quick)

    def build_tools() -> Tuple[Path, bool]:
        return build.build_kernel(rewritten, kernel_name, trampoline, tramp_lines, sig.line, source, tools=True)

    def build_lines() -> Tuple[Path, bool]:
        return build.build_kernel(rewritten, kernel_name, trampoline, tramp_lines, sig.line, source, quick=True,
                                  lines=True)

    so, hit = rebuild()
    if not hit:
        LOADED_LIBRARIES.forget(so)
    runtime_library()  # built and loaded (RTLD_GLOBAL) before any kernel library is loaded
    k = EmulatorKernel(kernel_name, source, sig, so, hit, rebuild, build_tools, quick,
                       build_lines if quick else None)
    with _compile_lock:
        _memory_cache[key] = k
        while len(_memory_cache) > max(1, knobs.emulator_max_loaded.get()):
            _memory_cache.popitem(last=False)
    return k

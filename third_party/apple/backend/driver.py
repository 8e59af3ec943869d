"""AppleDriver: launches compiled MSL kernels on an Apple GPU (through PyTorch MPS) or on the
Metal-on-CPU emulator.

Which one runs is decided once per process:
- macOS with an MPS device: the GPU ("metal" mode). MSL is compiled by `torch.mps.compile_shader` and
  dispatched on PyTorch's current MPS stream. Off a Mac this code runs in the tests on an MPS stand-in
  (test/support/mps_standin.py; docs/mps_standin.md says which documented behaviour it encodes).
- anywhere else: the emulator ("emulator" mode), on torch CPU tensors. It is the active driver only when
  no other Triton driver (CUDA, ROCm) is active, so GPU machines keep working exactly as before.
`TRITON_APPLE_DEVICE=emulator|metal|off` overrides the choice (`off`: this driver is never active).

The target this driver reports is named after the torch device type the kernels run on, as upstream's are
(docs/conventions.md): `GPUTarget("mps", family, 32)` on a Mac, `GPUTarget("cpu", family, 32)` on the emulator
(`metal` when another installed backend owns the `cpu` name).
"""
from __future__ import annotations

import functools
import json
import operator
import os
import struct
import time
import warnings
from typing import Any, List, Optional, Sequence, Tuple, Union

from triton.backends.compiler import GPUTarget
from triton.backends.driver import DriverBase

from . import knobs, mps_host
from .abi import debug_buffer
from .abi.arguments import plan_arguments, scalar_bytes, tensor_argument, view_bytes
from .abi.msl_locations import METAL_SOURCE_NAME, MslLocations, error_lines
from .abi.scalars import msl_of_signature, msl_scalar
from .abi.slots import ADDED_BUFFERS, PACKED_SCALARS, POINTER, BufferSlot, slots_from_json
from .errors import KernelArgError, MetalCompileError
from .host import default_family, mac_peak_bandwidth, mps_available, mps_gpu_cores
from .target import (MAX_GRID_THREADS, MAX_REGS_PER_THREAD, MAX_THREADGROUP_MEMORY, MAX_THREADS_PER_THREADGROUP,
                     SIMD_WIDTH, dispatch_threads, family, threads_per_threadgroup)

# The torch device type of Metal-mode tensors. A constant, not a literal at each use, only so that the MPS
# stand-in of the tests (test/support/mps_standin.py, docs/mps_standin.md) can run this metal-mode code
# unmodified on CPU tensors; nothing else changes it.
METAL_DEVICE = "mps"


@functools.lru_cache(None)
def _other_driver_active() -> bool:
    from triton.backends import backends
    for name, backend in backends.items():
        if name == "apple":
            continue
        try:
            if backend.driver.is_active():
                return True
        except Exception:  # a broken foreign backend must not take ours down
            continue
    return False


def device_mode() -> str:
    """'metal', 'emulator' or 'off'."""
    knob = knobs.device.get()
    if knob:
        return knob
    if mps_available():
        return "metal"
    return "off" if _other_driver_active() else "emulator"


def target_name(mode: str) -> str:
    """The backend name of the target: the torch device type the kernels run on (`mps` or `cpu`), or `metal`
    on the emulator when Triton's `cpu` name is not ours (a foreign `cpu` backend is installed and wins, or
    the `cpu` entry point is not registered, as in an in-tree build)."""
    if mode == "metal":
        return "mps"
    from triton.backends import backends
    from .compiler import AppleBackend
    cpu = backends.get("cpu")
    return "cpu" if cpu is not None and issubclass(cpu.compiler, AppleBackend) else "metal"


# ------------------------------------------------------------------------------------------------
# Emulator device


class _EmulatorEvent:

    def __init__(self, enable_timing: bool = False):
        self.timing = enable_timing
        self.t = None

    def record(self, *_stream) -> None:
        self.t = time.perf_counter()

    def synchronize(self) -> None:
        """Nothing to wait for: emulator launches return when the kernel has finished."""

    def elapsed_time(self, end: "_EmulatorEvent") -> float:
        if not (self.timing and end.timing):
            raise RuntimeError("elapsed_time needs both events created with enable_timing=True")
        return (end.t - self.t) * 1000.0


MPS_INTERFACE = mps_host.MpsDeviceInterface()


class EmulatorDeviceInterface:
    """The subset of `torch.cuda`'s interface that `triton.testing.do_bench` uses; emulator launches are
    synchronous, so events are host timestamps."""
    Event = _EmulatorEvent

    @staticmethod
    def synchronize(device=None):
        pass

    @staticmethod
    def current_device():
        return 0

    @staticmethod
    def device_count():
        return 1


class EmulatorFunction:
    """What `load_binary` returns on the emulator: the kernel's MSL, compiled by clang on first launch, where
    the launcher can map compiler errors back to Triton ops through the kernel's location map. Which of its two
    libraries (quick or optimised) a launch runs is emulator/tuning.py's rule, kept here."""

    def __init__(self, name: str, source: Union[str, bytes], build_now: bool = False):
        from .emulator import tuning
        self.name = name
        self.source = source
        self._kernel = None
        self._build = None
        self._quick = tuning.first_library()  # compile_msl's `quick` for the first library
        self._optimised = None  # the optimised library's build, started while the quick one serves launches
        self._optimising = True  # False once that build failed: the quick library keeps serving
        self._quick_seconds = 0.0  # time spent running the quick library (outside autotune timing)
        if build_now:  # started in the background, joined at the first launch (emulator/background.py)
            from .emulator import background
            self._build = background.start(source, name, self._quick)

    @property
    def is_compiled(self) -> bool:
        return self._kernel is not None

    def compiled(self, locations: MslLocations):
        """The library to launch now (tuning.py): the quick one while autotune configs are timed; outside that,
        the optimised one as soon as it is built, which starts once the kernel has run long enough on the quick
        one (or at once, when the knob says every kernel runs optimised)."""
        from .emulator import background, tuning
        if self._kernel is not None and self._kernel.quick and not tuning.quick_builds() and self._optimising:
            after = tuning.optimise_after()
            if not background.started_here(self._optimised):
                self._optimised = None  # not started, or by the process this one was forked from: start it here
            if after is None:
                self.optimise()
            elif self._optimised is not None and self._optimised.done():
                if self._optimised.exception() is None:
                    self.optimise()
                else:  # a kernel that runs must not start failing: say so once, keep the quick library
                    self._optimising = False
                    warnings.warn(f"apple backend: kernel '{self.name}': its optimised emulator library did not "
                                  f"build ({self._optimised.exception()}); it keeps running on its quick (-O0) "
                                  "library, which computes the same results", UserWarning, stacklevel=2)
                    self._optimised = None
            elif self._optimised is None and self._quick_seconds >= after:
                try:
                    self._optimised = background.start(self.source, self.name, False)
                except RuntimeError:  # the interpreter is shutting down: no new builds
                    self._optimising = False
        if self._kernel is None:
            from .emulator import EmulatorCompileError
            try:
                self._kernel = background.result(self._build, self.source, self.name, self._quick)
                self._build = None
            except EmulatorCompileError as e:
                raise EmulatorCompileError(locations.explain(str(e), e.msl_lines), e.msl_lines, e.diagnostics,
                                           e.kernel_name) from None
        return self._kernel

    def ran(self, kernel, seconds: float) -> None:
        """A launch of `kernel` (one of this function's libraries) ran for `seconds`."""
        from .emulator import tuning
        if kernel.quick and not tuning.quick_builds():
            self._quick_seconds += seconds

    def optimise(self) -> None:
        """Launch the optimised library from now on: built (or loaded from the cache, or joined where its build
        runs in the background) at the next launch."""
        self._kernel, self._build, self._quick, self._optimised = None, self._optimised, False, None


def registers_per_thread(max_threads: int, fam: str) -> int:
    """Registers a kernel uses per thread, at most: Metal reports no register count, but a pipeline's
    `maxTotalThreadsPerThreadgroup` drops below 1024 when its threads need more registers than one core's
    register file holds for 1024 of them. So the count is bounded by register file / max threads, and by the
    128 registers one thread can address. This bound is what `CompiledKernel.n_regs` reports (never 0)."""
    return max(1, min(MAX_REGS_PER_THREAD, family(fam).regs_per_core // max(1, max_threads)))


def device_properties(mode: str, fam: str) -> dict:
    """What `driver.active.utils.get_device_properties` reports, in the units upstream's CUDA driver uses.

    On a Mac: the Metal limits of every Apple family (target.py) and the family's facts from target.py's
    Family table, with the GPU core count read from the machine. On the emulator (its documented profile,
    docs/conventions.md): the emulated family's limits and clocks, so that code sizing tiles or computing
    rooflines sees the Mac it compiles for; but `multiprocessor_count` is the number of host threads the
    emulator spreads threadgroups over, which is what runs concurrently here (persistent kernels size their
    grid with it). On a Mac whose chip is in `host.PEAK_GBPS`, `mem_bus_width` is the width at which
    `triton.testing.get_dram_gbps()` (clock x width x 2) gives the chip's peak bandwidth: Apple publishes
    bandwidths, not bus widths."""
    fam_ = family(fam)
    bus_bits = fam_.mem_bus_bits
    if mode == "metal":
        cores = mps_gpu_cores() or fam_.gpu_cores
        peak, _ = mac_peak_bandwidth()
        if peak:  # Apple publishes bandwidth, not bus widths: the width at which get_dram_gbps() gives the peak
            bus_bits = max(1, round(peak * 1e9 * 8 / (2 * fam_.mem_clock_mhz * 1e6)))
    else:
        cores = knobs.emulator_threads.get() or os.cpu_count() or 1
    return {
        "multiprocessor_count": cores,  # NVIDIA: SMs; Apple: GPU cores
        "max_shared_mem": MAX_THREADGROUP_MEMORY,  # bytes of threadgroup memory per threadgroup
        "max_num_regs": fam_.regs_per_core,  # 32-bit registers per core (NVIDIA: per SM)
        "warpSize": SIMD_WIDTH,
        "sm_clock_rate": fam_.gpu_clock_mhz * 1000,  # kHz, as CUDA's clockRate
        "mem_clock_rate": fam_.mem_clock_mhz * 1000,  # kHz: I/O clock, two transfers per cycle
        "mem_bus_width": bus_bits,  # bits
        "max_threads_per_threadgroup": MAX_THREADS_PER_THREADGROUP,
        "family": fam,
    }


def compile_metal(name: str, source: str):
    """(library, kernel function) of kernel `name`'s MSL, compiled by Apple's Metal compiler through
    `torch.mps.compile_shader`. Apple's diagnostics (a `SyntaxError` from PyTorch) become a `MetalCompileError`
    that names the kernel and, for each MSL line they point at, the Triton op and source line it came from (read
    from the MSL's location comments: Triton hands `load_binary` nothing but the kernel's name and bytes)."""
    import torch
    if not source.isascii():
        n = next(i for i, text in enumerate(source.splitlines(), 1) if not text.isascii())
        raise MetalCompileError(f"apple backend: the MSL of kernel '{name}' has non-ASCII text at line {n}; the "
                                "lowering emits ASCII only and PyTorch hands Metal the source as ASCII text. A "
                                "damaged file in Triton's cache? Remove it and run again", name, [n])
    try:
        lib = torch.mps.compile_shader(source)
    except SyntaxError as e:  # c10::SyntaxError: Metal's MTLLibraryErrorCompileFailure
        text = str(e)
        lines = error_lines(text, [METAL_SOURCE_NAME])
        shown = source.splitlines()
        quoted = "".join(f"\n  {n:5d} | {shown[n - 1] if 0 < n <= len(shown) else ''}" for n in sorted(set(lines)))
        message = (f"apple backend: Apple's Metal compiler rejected the MSL of kernel '{name}' "
                   f"(torch.mps.compile_shader):\n{text.rstrip()}" + (f"\nMSL source lines involved:{quoted}" if quoted else ""))
        raise MetalCompileError(MslLocations.from_comments(source).explain(message, sorted(set(lines))), name, lines,
                                text) from None
    except RuntimeError as e:  # no library for another reason (PyTorch: "Failed to create metal library")
        raise MetalCompileError(f"apple backend: Metal made no library of kernel '{name}': {e}", name) from None
    try:
        fn = getattr(lib, name)  # PyTorch makes the kernel's pipeline here
    except RuntimeError as e:
        raise MetalCompileError(f"apple backend: Metal made no pipeline for kernel '{name}': {e}", name) from None
    return lib, fn


class AppleUtils:
    """Module loading and device properties (`driver.active.utils`)."""

    def __init__(self, mode: str):
        self.mode = mode

    def load_binary(self, name: str, kernel: bytes, shared: int, device: int):
        """(module, function, n_regs, n_spills, max threads per threadgroup). n_regs is the upper bound of
        `registers_per_thread`; n_spills is 0 (Metal reports no spills)."""
        fam = default_family()
        if self.mode == "metal":
            try:
                source = kernel.decode() if isinstance(kernel, (bytes, bytearray)) else kernel
            except UnicodeDecodeError as e:
                raise KernelArgError(f"apple backend: the MSL of kernel '{name}' is not UTF-8 text (offset "
                                     f"{e.start}); a damaged file in Triton's cache? Remove it and run again") from None
            lib, fn = compile_metal(name, source)
            max_threads = int(getattr(fn, "max_threads_per_threadgroup", MAX_THREADS_PER_THREADGROUP))
            return lib, fn, registers_per_thread(max_threads, fam), 0, max_threads
        fn = EmulatorFunction(name, kernel, build_now=True)  # compile_msl checks the bytes, names the kernel if damaged
        return fn, fn, registers_per_thread(MAX_THREADS_PER_THREADGROUP, fam), 0, MAX_THREADS_PER_THREADGROUP

    def unload_module(self, module) -> None:
        pass

    def get_device_properties(self, device) -> dict:
        return device_properties(self.mode, default_family())


def _time_configs_on_the_emulator(fn, rep: float = 5.0, grad_to_none=None, quantiles=None,
                                  return_mode: str = "mean"):
    """What the autotuner times a config with on the emulator, with `triton.testing.do_bench`'s parameters and
    results (`mps_host.summarize`). Each sample is a call's launches as the launcher timed them (the kernel's
    run: not the config's hooks, compile, library build or load), the first call's included, so calls are made
    until `rep` milliseconds are spent (a long kernel is launched once). The
    kernels they load are built quickly (emulator/tuning.py); the run's configs compile ahead of their timing, two
    at a time, and a config that compiled to a kernel already timed in the run gets that timing
    (emulator/lookahead.py). Launches on the emulator are synchronous host calls; upstream's estimate, warm-up
    and cache-clearing calls (eight launches at least) would only repeat the same CPU work."""
    from .emulator import lookahead, tuning
    times: List[float] = []
    with tuning.timing_configs() as launches:
        try:
            lookahead.before_timing(fn)  # the run's configs compile ahead, two at a time; this one is compiled now
            repeated = lookahead.earlier_timing(fn)
            if repeated is not None:  # its kernel was timed already in this run, with the same arguments
                return repeated
            times.append(_timed_call(fn, launches))  # its compile and load were before its launch
            while sum(times) < rep:
                for x in grad_to_none or ():
                    x.grad = None
                times.append(_timed_call(fn, launches))
        except BaseException:
            lookahead.stop(fn)
            raise
    timing = mps_host.summarize(times, quantiles, return_mode)
    lookahead.record_timing(fn, timing)
    return timing


def _timed_call(fn, launches) -> float:
    """Milliseconds of one call of `fn`: its launches' own time as the launcher measured it (the kernel's run: not
    the config's hooks, compile, library build or load), or the whole call's where it launched nothing through
    this backend."""
    launches.reset()
    started = time.perf_counter()
    fn()
    if launches.count:
        return launches.seconds * 1000.0
    return (time.perf_counter() - started) * 1000.0


@functools.lru_cache(None)
def _warn_soft_f64(kernel: str) -> None:
    """Once per kernel and process, when its launcher is made (compiled now or found in Triton's cache)."""
    warnings.warn(f"apple backend: kernel '{kernel}' computes float64 in software (IEEE binary64 on 64-bit "
                  "integers; Metal has no double): correct, but slow. allow_fp64_demotion=True computes float64 "
                  "values in float32 instead", UserWarning, stacklevel=3)


def _emulator_converter(kernel: str, plan: List[Tuple[int, BufferSlot]]):
    """What the native launcher calls for an argument it does not bind itself (anything but a CPU torch tensor
    or a Python number it packs): the checks of `check_arguments`, which raise `KernelArgError` naming the
    argument, or the value to bind (a `triton.reinterpret` view's tensor, a scalar's bytes). A closure over
    data, not a launcher method: the plan that holds it is held by the launcher."""

    def convert(slot: int, value: Any) -> Any:
        if slot >= len(plan):  # a buffer the backend adds (debug buffer, lock table)
            return value
        _, p = plan[slot]
        if p.kind == POINTER:
            return tensor_argument(kernel, p, value, "cpu")
        return scalar_bytes(kernel, p, value)

    return convert


def _grid_integers(kernel: str, grid: Tuple[Any, Any, Any]) -> Tuple[int, int, int]:
    """The grid as Python ints. Upstream's launchers parse it with PyArg_ParseTuple's integer formats, which take
    any object with `__index__` (numpy integers, 0-d integer tensors); so does this, and it names the kernel when
    a dimension is not an integer."""
    try:
        return tuple(operator.index(g) for g in grid)
    except TypeError:
        raise KernelArgError(f"apple backend: kernel '{kernel}': grid {tuple(grid)!r} must be integers (int, or "
                             "any integer with __index__, such as numpy integers and 0-d integer tensors)") from None


def _grid_refusal(kernel: str, grid: Tuple[int, int, int], threads: int, dispatch: Tuple[int, int, int]) -> str:
    axis = next(i for i, d in enumerate(dispatch) if not 0 < d <= MAX_GRID_THREADS)
    what = f"{grid[0]} programs x {threads} threads = {dispatch[0]} threads" if axis == 0 else f"{grid[axis]} programs"
    return (f"apple backend: kernel '{kernel}': grid {grid} does not fit Metal's dispatch: dimension "
            f"{'xyz'[axis]} has {what}; each dimension takes 1 to {MAX_GRID_THREADS} threads (MSL numbers grid "
            "positions with 32-bit uints). Use fewer, larger programs (a loop inside the kernel) or another axis")


# What a kernel that reads addresses from memory (a pointer table, as Triton's tutorial 08 builds with
# data_ptr()) meets on a Mac: MPS tensors' data_ptr() values are not addresses a kernel can use, and Metal only
# makes the buffers bound to a dispatch resident, which compile_shader's call cannot change.
_POINTER_TABLE_REFUSAL = (
    "apple backend: kernel '{kernel}' turns integers it loads or is given into pointers (tt.int_to_ptr: a "
    "pointer table built from data_ptr() values, as in Triton's grouped GEMM tutorial). On a Mac this cannot "
    "work: an MPS tensor's data_ptr() is the address of its MTLBuffer object, not a GPU address, and Metal makes "
    "only the buffers bound to a dispatch resident, which torch.mps.compile_shader's call cannot extend. Pass "
    "the tensors themselves (a tuple of tensors is one pointer parameter each), or run the kernel on the "
    "emulator (TRITON_APPLE_DEVICE=emulator, CPU tensors), where pointer tables work")


class StagedArguments:
    """The pointer arguments of one launch of a kernel that asserts, moved onto copies: the kernel runs on the
    copies, and `commit` writes them back once the launch is known to have succeeded (no failed
    `tl.device_assert`). That is the one copy-back rule of every launch path: a failed launch leaves its
    arguments as they were. On the emulator the runtime keeps it for its own errors; an assertion is only known
    once the debug buffer is read, after the runtime has copied results back, and on a GPU kernels write the
    caller's memory directly, so kernels with assertions run on these copies instead.

    Views of one storage get one copy of the bytes they reach together, with their offsets and strides: what
    one argument writes, another that aliases it reads, as it would in place."""

    def __init__(self, kernel: str, plan: List[Tuple[int, BufferSlot]], args: tuple, device: str):
        import torch
        self._commits = []
        views = []
        groups: dict = {}  # storage address -> [storage, first byte, end byte]
        for pos, p in plan:
            if p.kind != POINTER or _is_packed_buffer(p):
                continue
            t = tensor_argument(kernel, p, args[pos], device)  # the storage checks, naming the argument
            span = view_bytes(t)
            if span is None:
                continue
            storage = t.untyped_storage()
            g = groups.setdefault(storage.data_ptr(), [storage, span[0], span[1]])
            g[1], g[2] = min(g[1], span[0]), max(g[2], span[1])
            views.append((pos, t, storage.data_ptr()))
        copies = {}
        for key, (storage, lo, hi) in groups.items():
            lo -= lo % 16  # the copy keeps each view's alignment modulo 16 (kernels may rely on it)
            original = torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage, lo, (hi - lo, ))
            copy = original.clone()
            copies[key] = (copy, lo)
            self._commits.append((original, copy))
        staged = list(args)
        for pos, t, key in views:
            copy, lo = copies[key]
            offset = (t.storage_offset() * t.element_size() - lo) // t.element_size()
            staged[pos] = torch.empty(0, dtype=t.dtype, device=t.device).set_(copy.untyped_storage(), offset, t.shape,
                                                                              t.stride())
        self.args = tuple(staged)

    def commit(self) -> None:
        for original, copy in self._commits:
            original.copy_(copy)


class AppleLauncher:
    """Binds Triton's launch arguments to the kernel's buffer slots and dispatches one grid.

    Where the kernel runs follows the function `load_binary` gave: an `EmulatorFunction` runs on the emulator
    (the `cpu` driver on a Mac too), anything else is a Metal function. The launch path is chosen at the first
    launch and kept (`EmulatorLaunch`, `MetalLaunch`)."""

    def __init__(self, src, metadata):
        self.name = metadata.name
        self.threads = threads_per_threadgroup(metadata.num_warps)
        slots = slots_from_json(metadata.kernel_signature)
        signature = dict(getattr(src, "signature", {}) or {})
        if not signature:  # kernels built from IR text: runtime arguments are the MSL parameters
            signature = {p.name: p.triton_type for p in slots if not p.is_added}
        self.arguments = plan_arguments(self.name, signature, slots)
        self.plan = self.arguments.slots
        self.added = [p for p in slots if p.is_added]  # the buffers the backend adds, in slot order
        self.locations = MslLocations(json.loads(getattr(metadata, "msl_locations", "[]") or "[]"))
        self.debug_formats = json.loads(getattr(metadata, "debug_formats", "[]") or "[]")
        # kernels that assert run on copies of their pointer arguments (StagedArguments)
        self.asserts = any(f.get("kind") == "assert" for f in self.debug_formats)
        # the kernel turns integers it did not make from pointers into pointers (pointer tables: docs/mac.md)
        self.reads_addresses = bool(getattr(metadata, "reads_addresses", False))
        if getattr(metadata, "soft_f64", False):
            _warn_soft_f64(self.name)
        self._launch = None  # EmulatorLaunch or MetalLaunch, chosen at the first launch

    def check_arguments(self, args: Sequence[Any]) -> None:
        """Raise the KernelArgError naming the first prepared launch argument (`ArgumentPlan.prepare`) that does
        not fit its parameter."""
        for pos, p in self.plan:
            if p.kind == POINTER:
                tensor_argument(self.name, p, args[pos], "cpu")
            else:
                scalar_bytes(self.name, p, args[pos])

    def added_buffers(self, device: str) -> dict:
        """Fresh buffers for the slots the backend adds after the arguments (kind -> tensor, in slot order)."""
        return {p.kind: ADDED_BUFFERS[p.kind].new(device) for p in self.added}

    def __call__(self, gridX, gridY, gridZ, _stream, function, _packed_metadata, launch_metadata, enter_hook,
                 exit_hook, *args):
        if not (type(gridX) is int and type(gridY) is int and type(gridZ) is int):
            gridX, gridY, gridZ = _grid_integers(self.name, (gridX, gridY, gridZ))
        if gridX * gridY * gridZ == 0:
            return
        dispatch = dispatch_threads((gridX, gridY, gridZ), self.threads)
        if not all(0 < d <= MAX_GRID_THREADS for d in dispatch):
            raise KernelArgError(_grid_refusal(self.name, (gridX, gridY, gridZ), self.threads, dispatch))
        launch = self._launch
        if launch is None:
            launch = self._launch = (EmulatorLaunch if isinstance(function, EmulatorFunction) else MetalLaunch)(self)
        debug, staged = launch(function, (gridX, gridY, gridZ), args, enter_hook, launch_metadata)
        if debug is not None:
            words = debug.cpu().tolist()
            if staged is not None and debug_buffer.decode(words, self.debug_formats, self.name)[1] is None:
                staged.commit()
            debug_buffer.report(words, self.debug_formats, self.name)  # raises for a failed assertion
        if exit_hook is not None:
            exit_hook(launch_metadata)


class EmulatorLaunch:
    """Launches of one kernel on the emulator, through its native launcher (`emulator/native/launcher.c`)."""

    def __init__(self, launcher: AppleLauncher):
        self.launcher = launcher
        self._plan = None  # (EmulatorKernel, its native binding plan)

    def __call__(self, function: "EmulatorFunction", grid, args, enter_hook, launch_metadata):
        """Binds `args` by the kernel's plan, calls `enter_hook` and runs the kernel. Returns the debug buffer (if
        the kernel has one) and the StagedArguments to commit (if the kernel asserts)."""
        la = self.launcher
        args = la.arguments.prepare(args, "cpu")
        if not function.is_compiled:  # first launch: a bad argument is reported before clang compiles the MSL
            la.check_arguments(args)
        staged = StagedArguments(la.name, la.plan, args, "cpu") if la.asserts else None
        if staged is not None:
            args = staged.args
        kernel = function.compiled(la.locations)
        plan = self._native_plan(kernel)
        if not (0 <= grid[0] <= 0xFFFFFFFF and 0 <= grid[1] <= 0xFFFFFFFF and 0 <= grid[2] <= 0xFFFFFFFF):
            from .emulator.kernel import _dim3
            _dim3(la.name, grid, "grid", 0)  # raises, saying which dimension
        added = la.added_buffers("cpu")
        from .emulator import tuning
        try:
            try:
                started = time.perf_counter()
                kernel.run(plan, grid, (la.threads, 1, 1), args, tuple(added.values()), enter_hook, launch_metadata)
                ran = time.perf_counter() - started
                function.ran(kernel, ran)
                tuning.launched(ran)
            except Exception as e:
                if not (kernel.quick and getattr(e, "kind", None) == "stack_overflow"):
                    raise
                # an -O0 library's frames are larger than the optimised one's: later launches run on that
                function.optimise()
                if not tuning.quick_builds():
                    # threads that ran before the overflow may have stored already, and running the launch again
                    # could apply their writes twice: this launch reports the overflow
                    e.args = (f"{e.args[0] if e.args else e}\n(on the kernel's quick -O0 library, whose frames are "
                              "larger than the optimised library's; its next launch runs on the optimised one. "
                              "TRITON_APPLE_EMULATOR_OPTIMISE_AFTER_MS=0 builds every kernel optimised for its "
                              "first launch)", )
                    raise
                # while configs are timed: time this one on the optimised library (the autotuner's own call that
                # follows the timing is what the caller's result comes from, with its reset hooks)
                kernel = function.compiled(la.locations)
                kernel.run(self._native_plan(kernel), grid, (la.threads, 1, 1), args, tuple(added.values()),
                           enter_hook, launch_metadata)
        except Exception as e:
            from .emulator import EmulatorLaunchError
            if isinstance(e, EmulatorLaunchError):
                e.args = (la.locations.explain(str(e), e.msl_lines), )
            raise
        return added.get("debug"), staged

    def _native_plan(self, kernel):
        """The native launcher's binding plan for `kernel` (made on its first launch): buffer slot k takes
        runtime argument k (constexprs skipped), the buffers the backend adds the last slots."""
        cached = self._plan
        if cached is not None and cached[0] is kernel:
            return cached[1]
        from .emulator import EmulatorLaunchError
        la = self.launcher
        if la.threads > MAX_THREADS_PER_THREADGROUP:
            raise EmulatorLaunchError(f"kernel '{la.name}': threadgroup {(la.threads, 1, 1)} has {la.threads} "
                                      f"threads; Metal allows 1 to {MAX_THREADS_PER_THREADGROUP}", kernel_name=la.name)
        sources = [(pos, p.kind, p.msl_type) for pos, p in la.plan]
        sources += [(-1 - k, POINTER, p.msl_type) for k, p in enumerate(la.added)]
        plan = kernel.plan(sources, _emulator_converter(la.name, la.plan))
        self._plan = (kernel, plan)
        return plan


def _is_packed_buffer(p: BufferSlot) -> bool:
    return p.name == PACKED_SCALARS.name


# arg_casts of compile_shader's call for a scalar of each size: PyTorch binds a Python int as an int64 and these
# casts are C++ static_casts of it, so the bytes a kernel reads are those of the signed integer given.
_METAL_INT_CAST = {1: "int8", 2: "int16", 4: "int32"}


def metal_scalar(data: bytes) -> int:
    """The Python int `compile_shader`'s call turns into exactly `data` (1, 2, 4 or 8 bytes, little-endian, as
    `abi.scalars.pack` gives them) with the cast `_METAL_INT_CAST` names for its size: the bits read as a signed
    integer, which int64 and every cast hold without rounding (floats, unsigned values above the signed maximum
    and float64's 8 bytes alike)."""
    return int.from_bytes(data, "little", signed=True)


def _packed_words(data: bytes) -> List[int]:
    """The packed-scalars buffer as the list of int32 words compile_shader's call binds with setBytes (PyTorch
    casts a list of ints to `std::vector<int32_t>` under the `int32` cast): no tensor per launch."""
    return list(struct.unpack(f"<{len(data) // 4}i", data))


class MetalLaunch:
    """Launches of one kernel on the GPU, through `torch.mps.compile_shader`'s dispatch on PyTorch's current MPS
    stream. Tensors bind as their MTLBuffers; scalars (and the packed-scalars buffer) bind as Python ints that
    PyTorch passes by value (`setBytes`) with the `arg_casts` of their size, computed once per kernel: no tensor
    and no copy per scalar and launch."""

    def __init__(self, launcher: AppleLauncher):
        self.launcher = launcher
        casts = {}
        for idx, (_, p) in enumerate(launcher.plan):  # argument i of the call binds buffer index i
            if _is_packed_buffer(p):
                casts[idx] = "int32"
            elif p.kind != POINTER:
                cast = _METAL_INT_CAST.get(msl_scalar(p.msl_type).nbytes)
                if cast:
                    casts[idx] = cast
        self.arg_casts = casts

    def __call__(self, function, grid, args, enter_hook, launch_metadata):
        la = self.launcher
        args = la.arguments.prepare(args, METAL_DEVICE, packed=_packed_words)
        staged = StagedArguments(la.name, la.plan, args, METAL_DEVICE) if la.asserts else None
        if staged is not None:
            args = staged.args
        buffers = []
        for pos, p in la.plan:
            if p.kind != POINTER:
                buffers.append(metal_scalar(scalar_bytes(la.name, p, args[pos])))
            elif _is_packed_buffer(p):
                buffers.append(args[pos])
            else:
                t = tensor_argument(la.name, p, args[pos], METAL_DEVICE)
                if t.device.type != METAL_DEVICE:
                    raise KernelArgError(f"apple backend: kernel '{la.name}' argument '{p.name}' is on {t.device}; "
                                         "the Metal device needs mps tensors")
                buffers.append(t)
        if la.reads_addresses:
            raise KernelArgError(_POINTER_TABLE_REFUSAL.format(kernel=la.name))
        added = la.added_buffers(METAL_DEVICE)
        buffers += added.values()
        if enter_hook is not None:
            enter_hook(launch_metadata)
        if mps_host.tracking_memory():
            mps_host.sample_memory()
        threads = la.threads
        function(*buffers, threads=list(dispatch_threads(grid, threads)), group_size=[threads, 1, 1],
                 arg_casts=self.arg_casts)
        debug = added.get("debug")
        if debug is not None:
            import torch
            torch.mps.synchronize()
        return debug, staged


class AppleDriver(DriverBase):

    def __init__(self, mode: Optional[str] = None):
        super().__init__()
        self.mode = mode or device_mode()
        if self.mode == "off":  # made active explicitly (TRITON_DEFAULT_BACKEND=apple): run on the emulator
            self.mode = "emulator"
        self.utils = AppleUtils(self.mode)
        if self.mode == "emulator":  # the first launch needs the runtime: build it while kernels are lowered
            from .emulator import background
            background.prepare_runtime()
        self.launcher_cls = AppleLauncher

    @staticmethod
    def is_active() -> bool:
        return device_mode() != "off"

    def map_python_to_cpp_type(self, ty: str) -> str:
        if ty.startswith("*"):
            return "device void*"
        return msl_of_signature(ty)

    def get_current_target(self) -> GPUTarget:
        return GPUTarget(target_name(self.mode), default_family(), SIMD_WIDTH)

    def get_active_torch_device(self):
        import torch
        return torch.device(METAL_DEVICE if self.mode == "metal" else "cpu")

    def get_current_device(self) -> int:
        return 0

    def set_current_device(self, device) -> None:
        pass

    def get_current_stream(self, device=None):
        return 0

    def get_device_interface(self):
        """torch.cuda's interface for the device: on a Mac one whose events time by synchronising with the MPS
        stream (mps_host.py: torch.mps.Event's host-callback timing fails on short intervals), with peak-memory
        statistics; on the emulator host timestamps (its launches are synchronous)."""
        if self.mode == "metal":
            return MPS_INTERFACE
        return EmulatorDeviceInterface

    def get_benchmarker(self):
        """What `@triton.autotune` times configs with: on a Mac `mps_host.do_bench` (batches of calls between
        synchronisations); on the emulator a short timing per config (`TRITON_APPLE_EMULATOR_AUTOTUNE_MS`) on
        libraries built at -O0 (emulator/tuning.py): the ranking it produces is of CPU emulation, which picks a
        config for the emulator's own runs and predicts nothing about a GPU, so upstream's do_bench (125 ms and
        eight launches at least per config, each after clearing the cache) and optimised builds of configs never
        launched again bought only a slower first call."""
        if self.mode == "metal":
            return mps_host.do_bench
        return functools.partial(_time_configs_on_the_emulator, rep=knobs.emulator_autotune_ms.get())

    def get_empty_cache_for_benchmark(self):
        import torch
        return torch.empty(1 << 20, dtype=torch.int32, device=self.get_active_torch_device())

    def clear_cache(self, cache) -> None:
        cache.zero_()


# Not device_mode(): Triton is still discovering its backends while this module is imported.
if knobs.inductor_mps.get() and knobs.device.get() in ("", "metal") and mps_available():  # pragma: no cover
    # Runs at import, only where PyTorch reports an MPS device: a Mac. The tests' MPS stand-in starts after
    # import and does not pretend that the machine has an MPS device.
    from .inductor import enable_mps_when_inductor_loads
    enable_mps_when_inductor_loads()

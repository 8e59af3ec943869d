"""AppleDriver: launches compiled MSL kernels on an Apple GPU (through PyTorch MPS) or on the
Metal-on-CPU emulator.

Which one runs is decided once per process:
- macOS with an MPS device: the GPU ("metal" mode). MSL is compiled by `torch.mps.compile_shader` and
  dispatched on PyTorch's current MPS stream. This path cannot run on our Linux machines; it is kept
  small and its argument packing is shared with the emulator path, which is tested here.
- anywhere else: the emulator ("emulator" mode), on torch CPU tensors. It is the active driver only when
  no other Triton driver (CUDA, ROCm) is active, so GPU machines keep working exactly as before.
`TRITON_APPLE_DEVICE=emulator|metal|off` overrides the choice (`off`: this driver is never active).
"""
from __future__ import annotations

import functools
import json
import os
import platform
import time
from typing import Any, List, Sequence

from triton.backends.compiler import GPUTarget
from triton.backends.driver import DriverBase

from .compiler import SUPPORTED_FAMILIES

_KNOB = "TRITON_APPLE_DEVICE"
MAX_THREADS_PER_THREADGROUP = 1024
MAX_THREADGROUP_MEMORY = 32 * 1024


def _mps_available() -> bool:
    if platform.system() != "Darwin":
        return False
    try:
        import torch
        return bool(torch.backends.mps.is_available())
    except ImportError:
        return False


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
    knob = os.environ.get(_KNOB, "").strip().lower()
    if knob in ("emulator", "metal", "off"):
        return knob
    if knob:
        raise ValueError(f"{_KNOB}={knob!r}: expected one of emulator, metal, off")
    if _mps_available():
        return "metal"
    return "off" if _other_driver_active() else "emulator"


def default_family() -> str:
    fam = os.environ.get("TRITON_APPLE_FAMILY", "apple7")
    if fam not in SUPPORTED_FAMILIES:
        raise ValueError(f"TRITON_APPLE_FAMILY={fam!r}: expected one of {SUPPORTED_FAMILIES}")
    return fam


# ------------------------------------------------------------------------------------------------
# Arguments


_SCALAR_CTYPES = {
    "i1": "bool", "i8": "char", "i16": "short", "i32": "int", "i64": "long", "u1": "bool", "u8": "uchar",
    "u16": "ushort", "u32": "uint", "u64": "ulong", "fp16": "half", "bf16": "bfloat", "fp32": "float",
    "f32": "float", "f16": "half"
}
_TORCH_DTYPES = {
    "bool": "bool", "char": "int8", "short": "int16", "int": "int32", "long": "int64", "uchar": "uint8",
    "ushort": "uint16", "uint": "uint32", "ulong": "uint64", "half": "float16", "bfloat": "bfloat16",
    "float": "float32"
}


class KernelArgError(TypeError):
    pass


def plan_arguments(kernel_name: str, signature: dict, params: List[dict]) -> List[tuple]:
    """For each runtime argument position, what the kernel expects: ('pointer' | 'scalar', param dict).
    Constexpr arguments are not bound (they were folded into the MSL)."""
    plan, runtime = [], []
    params = [p for p in params if p["kind"] != "debug"]
    for pos, (name, ty) in enumerate(signature.items()):
        if ty == "constexpr":
            continue
        if isinstance(ty, tuple) or ty.startswith("tensordesc"):
            raise KernelArgError(f"apple backend: kernel '{kernel_name}' argument '{name}' of type {ty} is not "
                                 "supported yet (tuples and host tensor descriptors)")
        runtime.append((pos, name, ty))
    if len(runtime) != len(params):
        raise KernelArgError(f"apple backend: kernel '{kernel_name}' has {len(params)} MSL parameters but "
                             f"{len(runtime)} runtime arguments")
    for (pos, name, ty), p in zip(runtime, params):
        plan.append((pos, p))
    return plan


def _check_scalar(kernel: str, p: dict, value: Any) -> Any:
    if p["msl_type"] in ("float", "half", "bfloat"):
        if not isinstance(value, (int, float)):
            raise KernelArgError(f"apple backend: kernel '{kernel}' argument '{p['name']}' expects a float, got "
                                 f"{type(value).__name__}")
        return float(value)
    if isinstance(value, bool) or p["msl_type"] == "bool":
        return bool(value)
    if not isinstance(value, int):
        raise KernelArgError(f"apple backend: kernel '{kernel}' argument '{p['name']}' expects an integer, got "
                             f"{type(value).__name__}")
    return int(value)


# ------------------------------------------------------------------------------------------------
# Emulator device


class _EmulatorEvent:

    def __init__(self, enable_timing: bool = True):
        self.t = None

    def record(self, stream=None):
        self.t = time.perf_counter()

    def synchronize(self):
        pass

    def elapsed_time(self, end: "_EmulatorEvent") -> float:
        return (end.t - self.t) * 1000.0


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


class AppleUtils:
    """Module loading and device properties (`driver.active.utils`)."""

    def __init__(self, mode: str):
        self.mode = mode

    def load_binary(self, name: str, kernel: bytes, shared: int, device: int):
        source = kernel.decode() if isinstance(kernel, (bytes, bytearray)) else kernel
        if self.mode == "metal":
            import torch
            lib = torch.mps.compile_shader(source)
            fn = getattr(lib, name)
            max_threads = int(getattr(fn, "max_threads_per_threadgroup", MAX_THREADS_PER_THREADGROUP))
            return lib, fn, 0, 0, max_threads
        from .emulator import EmulatorCompileError, compile_msl
        try:
            k = compile_msl(source, name)
        except EmulatorCompileError as e:
            raise EmulatorCompileError(explain_msl_error(str(e), source, e.msl_lines), e.msl_lines, e.diagnostics,
                                       e.kernel_name) from None
        return k, k, 0, 0, MAX_THREADS_PER_THREADGROUP

    def unload_module(self, module) -> None:
        pass

    def get_device_properties(self, device) -> dict:
        return {
            "max_shared_mem": MAX_THREADGROUP_MEMORY, "multiprocessor_count": os.cpu_count() or 1,
            "warpSize": 32, "max_num_regs": 0, "sm_clock_rate": 0, "mem_clock_rate": 0, "mem_bus_width": 0,
            "max_threads_per_threadgroup": MAX_THREADS_PER_THREADGROUP
        }


def explain_msl_error(message: str, source: str, msl_lines: Sequence[int]) -> str:
    """Add, for each MSL line an error names, the Triton op and source line it was generated from (the
    lowering writes `// <op> <file>:<line>` before each op's MSL)."""
    lines = source.splitlines()
    notes = []
    for n in msl_lines:
        origin = None
        for k in range(min(n, len(lines)) - 1, -1, -1):
            text = lines[k].strip()
            if text.startswith("// ") and ":" in text:
                origin = text[3:]
                break
            if text.startswith("kernel void") or text.startswith("static"):
                break
        if origin:
            op, _, where = origin.partition(" ")
            notes.append(f"  MSL line {n} was generated from {op} at {where}")
    return message + ("\n" + "\n".join(notes) if notes else "")


class AppleLauncher:
    """Binds Triton's launch arguments to the kernel's buffer slots and dispatches one grid."""

    def __init__(self, src, metadata):
        self.name = metadata.name
        self.num_warps = metadata.num_warps
        params = json.loads(metadata.kernel_signature)
        self.params = params
        signature = dict(getattr(src, "signature", {}) or {})
        if not signature:  # kernels built from IR text: runtime arguments are the MSL parameters
            signature = {p["name"]: p["triton_type"] for p in params}
        self.plan = plan_arguments(self.name, signature, params)
        self.mode = device_mode()
        self.debug_formats = json.loads(getattr(metadata, "debug_formats", "[]") or "[]")
        self.has_debug = any(p["kind"] == "debug" for p in params)

    def bind(self, args: Sequence[Any]) -> List[Any]:
        """Python launch arguments -> per-slot buffers (tensors or typed scalars)."""
        from . import emulator
        bound = []
        for pos, p in self.plan:
            value = args[pos]
            if p["kind"] == "pointer":
                if value is None or not hasattr(value, "data_ptr"):
                    raise KernelArgError(f"apple backend: kernel '{self.name}' argument '{p['name']}' expects a "
                                         f"tensor, got {type(value).__name__}")
                bound.append(value)
            else:
                v = _check_scalar(self.name, p, value)
                bound.append(v if self.mode == "metal" else emulator.Scalar(v, p["msl_type"]))
        return bound

    def __call__(self, gridX, gridY, gridZ, stream, function, packed_metadata, launch_metadata, enter_hook,
                 exit_hook, *args):
        if gridX * gridY * gridZ == 0:
            return
        bound = self.bind(args)
        debug = None
        if self.has_debug:
            import torch
            from .lowering.debug_ops import DEBUG_BUFFER_WORDS
            dev = "mps" if self.mode == "metal" else "cpu"
            debug = torch.zeros(DEBUG_BUFFER_WORDS, dtype=torch.int32, device=dev)
            bound.append(debug)
        if enter_hook is not None:
            enter_hook(launch_metadata)
        threads = self.num_warps * 32
        if self.mode == "metal":
            self._dispatch_metal(function, bound, (gridX, gridY, gridZ), threads)
        else:
            from .emulator import EmulatorLaunchError
            try:
                function.launch(grid=(gridX, gridY, gridZ), threadgroup=(threads, 1, 1), buffers=bound)
            except EmulatorLaunchError as e:
                e.args = (explain_msl_error(str(e), function.source, e.msl_lines), )
                raise
        if debug is not None:
            from .debug_buffer import report
            if self.mode == "metal":  # pragma: no cover - needs a Mac
                import torch
                torch.mps.synchronize()
            report(debug.cpu().tolist(), self.debug_formats, self.name)
        if exit_hook is not None:
            exit_hook(launch_metadata)

    def _dispatch_metal(self, fn, bound, grid, threads):  # pragma: no cover - needs a Mac
        import torch
        args = []
        plan = self.plan + ([(None, {"kind": "pointer", "name": "tt_debug"})] if self.has_debug else [])
        for (pos, p), v in zip(plan, bound):
            if p["kind"] == "pointer":
                if v.device.type != "mps":
                    raise KernelArgError(f"apple backend: kernel '{self.name}' argument '{p['name']}' is on "
                                         f"{v.device}; the Metal device needs mps tensors")
                args.append(v)
            else:
                args.append(torch.tensor([v], dtype=getattr(torch, _TORCH_DTYPES[p["msl_type"]]), device="mps"))
        fn(*args, threads=[grid[0] * threads, grid[1], grid[2]], group_size=[threads, 1, 1])


class AppleDriver(DriverBase):

    def __init__(self):
        super().__init__()
        self.mode = device_mode()
        self.utils = AppleUtils(self.mode)
        self.launcher_cls = AppleLauncher

    @classmethod
    def is_active(cls) -> bool:
        return device_mode() != "off"

    def map_python_to_cpp_type(self, ty: str) -> str:
        if ty.startswith("*"):
            return "device void*"
        return _SCALAR_CTYPES.get(ty, ty)

    def get_current_target(self) -> GPUTarget:
        return GPUTarget("metal", default_family(), 32)

    def get_active_torch_device(self):
        import torch
        return torch.device("mps" if self.mode == "metal" else "cpu")

    def get_current_device(self) -> int:
        return 0

    def set_current_device(self, device) -> None:
        pass

    def get_current_stream(self, device=None):
        return 0

    def get_device_interface(self):
        if self.mode == "metal":  # pragma: no cover - needs a Mac
            import torch
            return torch.mps
        return EmulatorDeviceInterface

    def get_benchmarker(self):
        from triton.testing import do_bench
        return do_bench

    def get_empty_cache_for_benchmark(self):
        import torch
        return torch.empty(1 << 20, dtype=torch.int32, device=self.get_active_torch_device())

    def clear_cache(self, cache) -> None:
        cache.zero_()

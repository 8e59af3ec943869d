"""How Triton's launch arguments become the kernel's buffer slots.

Triton hands a launcher the kernel's arguments as the user passed them, constexprs included. The kernel's
MSL parameters (the `kernel_signature` the lowering records, `lowering/module.py`) are flatter:
- a tuple argument is one parameter per element (constexpr elements dropped), as Triton's frontend flattens
  it into the TTIR function;
- a host `TensorDescriptor` is the pointer, shape, strides, padding and rounding flags Triton's
  `rewrite_tensor_descriptor_to_pointer` pass expands it to, in the order of Triton's `decompose_descriptor`
  (backends without tensor-memory accelerators get them so);
- scalars of a kernel with more arguments than Metal's 31 buffer slots are packed into one buffer of 32-bit
  words (kind "packed"), which `ArgumentPlan.prepare` fills.
`plan_arguments` works out, once per kernel, which launch value each buffer slot takes; `check_scalar` and
`tensor_argument` check one value against its parameter, naming the kernel and the argument when it is wrong.
"""
from __future__ import annotations

import functools
import struct
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence, Tuple

from . import atomic_locks, debug_buffer
from .errors import KernelArgError

# The parameter of the packed-scalars buffer, as launchers bind it: a tensor of 32-bit words.
# The buffers the backend adds after a kernel's arguments, by slot kind, and how a launch makes each (on a
# torch device type): the debug buffer of tl.device_print/device_assert and the lock table of 64-bit atomics
ADDED_BUFFERS = {"debug": debug_buffer.new_buffer, "locks": atomic_locks.new_lock_table}
PACKED_PARAM = {"name": "tt_scalars", "kind": "pointer", "msl_type": "constant uint*", "triton_type": "*u32"}


@dataclass
class ArgumentPlan:
    """Which launch value each buffer slot of one kernel takes."""
    kernel: str
    # (position in the prepared arguments, MSL parameter) for each buffer slot but the ADDED_BUFFERS, in slot order
    slots: List[Tuple[int, dict]]
    # the scalars packed into the PACKED_PARAM buffer (its slot is in `slots`, taking the last prepared argument)
    packed: List[Tuple[int, dict]]
    # tuples and host tensor descriptors -> one value per kernel argument; None when the arguments are flat
    flatten: Optional[Callable[[Sequence[Any]], List[Any]]]

    def prepare(self, args: tuple, device: str) -> tuple:
        """The launch arguments the slots' positions refer to: flattened, plus the packed scalars' buffer (a
        tensor on `device`) when the kernel has one."""
        if self.flatten is not None:
            args = tuple(self.flatten(args))
        if not self.packed:
            return args
        return (*args, pack_scalars(self.kernel, [(p, args[pos]) for pos, p in self.packed], device))


def plan_arguments(kernel_name: str, signature: dict, params: List[dict]) -> ArgumentPlan:
    """The plan of a kernel whose Triton signature is `signature` (name -> type, as `src.signature`) and whose
    MSL parameters are `params`, listed in argument order."""
    params = [p for p in params if p["kind"] not in ADDED_BUFFERS]
    items = list(signature.items())
    if any(isinstance(ty, tuple) or _is_descriptor(ty) for _, ty in items):
        count = len(_flat_types([ty for _, ty in items]))
        positions = list(range(count))
        flatten = functools.partial(_flatten_arguments, kernel_name, items)
    else:
        count = len(items)
        positions = [pos for pos, (_, ty) in enumerate(items) if ty != "constexpr"]
        flatten = None
    if len(positions) != len(params):
        raise KernelArgError(f"apple backend: kernel '{kernel_name}' has {len(params)} MSL parameters but "
                             f"{len(positions)} runtime arguments")
    by_argument = list(zip(positions, params))
    slots = sorted(((pos, p) for pos, p in by_argument if p["kind"] != "packed"), key=lambda s: s[1]["slot"])
    packed = [(pos, p) for pos, p in by_argument if p["kind"] == "packed"]
    if packed:  # the buffer's slot follows the pointers' (lowering/module.py)
        slots.append((count, dict(PACKED_PARAM, slot=packed[0][1]["slot"])))
    return ArgumentPlan(kernel_name, slots, packed, flatten)


def _is_descriptor(ty: Any) -> bool:
    return isinstance(ty, str) and ty.startswith("tensordesc")


def _flat_types(types: Sequence[Any]) -> List[str]:
    """The kernel's runtime argument types: descriptors expanded as Triton expands them for backends without
    tensor-memory accelerators, tuples flattened, constexprs dropped."""
    from triton.backends.driver import expand_signature
    out: List[str] = []

    def visit(ty):
        if isinstance(ty, tuple):
            for t in ty:
                visit(t)
        elif ty != "constexpr":
            out.append(ty)

    for ty in expand_signature(types, None, "tensordesc"):
        visit(ty)
    return out


def _flatten_arguments(kernel: str, items: List[Tuple[str, Any]], args: Sequence[Any]) -> List[Any]:
    from triton.backends.driver import decompose_descriptor
    out: List[Any] = []

    def visit(name: str, ty: Any, value: Any) -> None:
        if ty == "constexpr":
            return
        if isinstance(ty, tuple):
            if not isinstance(value, (tuple, list)) or len(value) != len(ty):
                raise KernelArgError(f"apple backend: kernel '{kernel}' argument '{name}' expects a tuple of "
                                     f"{len(ty)}, got {type(value).__name__}")
            for i, (t, v) in enumerate(zip(ty, value)):
                visit(f"{name}[{i}]", t, v)
        elif _is_descriptor(ty):
            if not all(hasattr(value, a) for a in ("base", "shape", "strides", "padding")):
                raise KernelArgError(f"apple backend: kernel '{kernel}' argument '{name}' ({ty}) expects a "
                                     f"triton.tools.tensor_descriptor.TensorDescriptor, got {type(value).__name__}")
            out.extend(decompose_descriptor(value))
        else:
            out.append(value)

    for (name, ty), value in zip(items, args):
        visit(name, ty, value)
    return out


# ------------------------------------------------------------------------------------------------
# One value against its parameter

_INT_RANGES = {"bool": (0, 1), "char": (-2**7, 2**7 - 1), "short": (-2**15, 2**15 - 1), "int": (-2**31, 2**31 - 1),
               "long": (-2**63, 2**63 - 1)}
_FLOAT_MAX = {"float": 3.4028234663852886e38, "half": 65504.0, "bfloat": 3.3895313892515355e38}


def check_scalar(kernel: str, p: dict, value: Any) -> Any:
    """A scalar launch argument, checked against the MSL type of its parameter."""
    where = f"apple backend: kernel '{kernel}' argument '{p['name']}' ({p['triton_type']})"
    msl = p["msl_type"]
    if msl == "tt_double":
        raise KernelArgError(f"{where}: float64 scalar arguments are not supported (the kernel computes float64 "
                             "in software, but scalars are passed as 32-bit values); pass a float32 or a "
                             "one-element float64 tensor")
    if msl in _FLOAT_MAX:
        if not isinstance(value, (int, float)):
            raise KernelArgError(f"{where} expects a float, got {type(value).__name__}")
        value = float(value)
        if abs(value) > _FLOAT_MAX[msl] and value == value and abs(value) != float("inf"):
            raise KernelArgError(f"{where}: {value!r} does not fit in {msl} (largest finite value "
                                 f"{_FLOAT_MAX[msl]:g}); it would become infinity")
        return value
    if not isinstance(value, int):
        raise KernelArgError(f"{where} expects an integer, got {type(value).__name__}")
    lo, hi = _INT_RANGES[msl]
    # Triton passes unsigned values in the signed type of the same width: accept the unsigned range too.
    if not lo <= value <= hi and not (msl != "bool" and 0 <= value <= 2 * hi + 1):
        raise KernelArgError(f"{where}: {value} does not fit in {msl} ({lo} to {hi})")
    return bool(value) if msl == "bool" else int(value)


def tensor_argument(kernel: str, p: dict, value: Any) -> Any:
    """The tensor behind a pointer argument. `triton.reinterpret` views (TensorWrapper) bind their base
    tensor: the kernel already reads the memory as the pointer's element type."""
    where = f"apple backend: kernel '{kernel}' argument '{p['name']}' ({p['triton_type']})"
    while value is not None and not is_torch_tensor(value) and hasattr(value, "base") and hasattr(value, "data_ptr"):
        value = value.base
    if isinstance(value, int) and not isinstance(value, bool):
        # Triton's CUDA and HIP launchers take a raw device address (`x.data_ptr()`) for a pointer; Metal binds
        # buffers, and the emulator needs each buffer's extent to check the kernel's accesses
        raise KernelArgError(f"{where} expects a tensor, got an int: a raw address cannot be bound (Metal binds "
                             "buffers, not addresses); pass the tensor itself")
    if value is None or not hasattr(value, "data_ptr"):
        raise KernelArgError(f"{where} expects a tensor, got {type(value).__name__}")
    return value


def is_torch_tensor(value: Any) -> bool:
    import torch
    return isinstance(value, torch.Tensor)


# ------------------------------------------------------------------------------------------------
# Packed scalars

_INT_BYTES = {"bool": 1, "char": 1, "uchar": 1, "short": 2, "ushort": 2, "int": 4, "uint": 4, "long": 8, "ulong": 8}


def _scalar_bytes(msl: str, value: Any) -> bytes:
    """The little-endian bytes of a checked scalar (integers in two's complement of their width)."""
    if msl in _INT_BYTES:
        n = _INT_BYTES[msl]
        return (int(value) & ((1 << 8 * n) - 1)).to_bytes(n, "little")
    if msl == "float":
        return struct.pack("<f", value)
    if msl == "half":
        return struct.pack("<e", value)
    # bfloat: float32 bits rounded to nearest even on the upper half (NaN stays a quiet NaN)
    bits = struct.unpack("<I", struct.pack("<f", value))[0]
    if value != value:
        return struct.pack("<H", 0x7FC0 | (bits >> 16 & 0x8000))
    return struct.pack("<H", (bits + 0x7FFF + (bits >> 16 & 1)) >> 16 & 0xFFFF)


def pack_scalars(kernel: str, values: List[Tuple[dict, Any]], device: str):
    """One int32 tensor on `device` holding each (parameter, value) at its parameter's word, as the kernel
    unpacks them (lowering/module.py `_unpack_scalar`)."""
    import torch
    words = max(p["word"] + (2 if p["msl_type"] in ("long", "ulong") else 1) for p, _ in values)
    buf = bytearray(4 * words)
    for p, value in values:
        data = _scalar_bytes(p["msl_type"], check_scalar(kernel, p, value))
        buf[4 * p["word"]:4 * p["word"] + len(data)] = data
    packed = torch.frombuffer(buf, dtype=torch.int32)
    return packed if device == "cpu" else packed.to(device)

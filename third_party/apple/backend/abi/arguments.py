"""How Triton's launch arguments become the kernel's buffer slots.

Triton hands a launcher the kernel's arguments as the user passed them, constexprs included. The kernel's
MSL parameters (its `BufferSlot`s, `abi/slots.py`) are flatter:
- a tuple argument is one parameter per element (constexpr elements dropped), as Triton's frontend flattens
  it into the TTIR function;
- a host `TensorDescriptor` is the pointer, shape, strides, padding and rounding flags Triton's
  `rewrite_tensor_descriptor_to_pointer` pass expands it to, in the order of Triton's `decompose_descriptor`
  (backends without tensor-memory accelerators get them so);
- scalars of a kernel with more arguments than Metal's 31 buffer slots live in the packed-scalars buffer,
  which `ArgumentPlan.prepare` fills.
`plan_arguments` works out, once per kernel, which launch value each buffer slot takes; `scalar_bytes` and
`tensor_argument` check one value against its parameter, naming the kernel and the argument when it is wrong.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence, Tuple

from ..errors import KernelArgError
from . import scalars
from .slots import PACKED, PACKED_SCALARS, POINTER, BufferSlot, pack_words


@dataclass
class ArgumentPlan:
    """Which launch value each buffer slot of one kernel takes."""
    kernel: str
    # (position in the prepared arguments, slot) for each buffer slot but the added buffers, in slot order
    slots: List[Tuple[int, BufferSlot]]
    # the scalars packed into the PACKED_SCALARS buffer (its slot is in `slots`, taking the last prepared argument)
    packed: List[Tuple[int, BufferSlot]]
    # tuples and host tensor descriptors -> one value per kernel argument; None when the arguments are flat
    flatten: Optional[Callable[[Sequence[Any]], List[Any]]]

    def prepare(self, args: tuple, device: str, packed: Optional[Callable[[bytes], Any]] = None) -> tuple:
        """The launch arguments the slots' positions refer to: flattened, plus the packed scalars' buffer when the
        kernel has one: a tensor on `device`, or what `packed` makes of the buffer's bytes."""
        if self.flatten is not None:
            args = tuple(self.flatten(args))
        if not self.packed:
            return args
        data = pack_words([(s, scalar_bytes(self.kernel, s, args[pos])) for pos, s in self.packed])
        return (*args, packed(data) if packed is not None else bytes_tensor(data, device))


def plan_arguments(kernel_name: str, signature: dict, params: Sequence[BufferSlot]) -> ArgumentPlan:
    """The plan of a kernel whose Triton signature is `signature` (name -> type, as `src.signature`) and whose
    MSL parameters are `params`, listed in argument order."""
    params = [p for p in params if not p.is_added]
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
    slots = sorted(((pos, p) for pos, p in by_argument if p.kind != PACKED), key=lambda s: s[1].slot)
    packed = [(pos, p) for pos, p in by_argument if p.kind == PACKED]
    if packed:  # the buffer's slot follows the pointers' (lowering/module.py)
        buf = PACKED_SCALARS
        slots.append((count, BufferSlot(buf.name, packed[0][1].slot, POINTER, buf.msl_type, buf.triton_type)))
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


def _where(kernel: str, p: BufferSlot) -> str:
    return f"apple backend: kernel '{kernel}' argument '{p.name}' ({p.triton_type})"


def scalar_bytes(kernel: str, p: BufferSlot, value: Any) -> bytes:
    """The bytes of a scalar launch argument as the MSL type of its parameter (`abi.scalars.pack`), or a
    KernelArgError naming the kernel and the argument."""
    try:
        return scalars.pack(p.msl_type, value)
    except scalars.ScalarValueError as e:
        text = str(e)
        raise KernelArgError(f"{_where(kernel, p)}{' ' if text.startswith('expects') else ': '}{text}") from None


def bytes_tensor(data: bytes, device: str, msl_type: str = ""):
    """A tensor on torch device type `device` holding `data`, the bytes of a scalar of `msl_type` or of the
    packed-scalars buffer. Of the scalar's own torch dtype where every torch device has it, so that a debugger
    shows the value; of the signed integer type of its size for float64 (MPS has no float64) and the unsigned
    types (MPS has few); int32 words for the packed buffer."""
    import torch
    name = scalars.msl_scalar(msl_type).torch if msl_type else ""
    if name in ("float64", "uint16", "uint32", "uint64") or not name:
        name = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}.get(len(data), "int32" if len(data) % 4 == 0 else "uint8")
    t = torch.frombuffer(bytearray(data), dtype=getattr(torch, name))
    return t if device == "cpu" else t.to(device)


def tensor_argument(kernel: str, p: BufferSlot, value: Any, device: str) -> Any:
    """The tensor behind a pointer argument, for a launch on torch device type `device`.

    `triton.reinterpret` views (TensorWrapper) bind their base tensor: the kernel already reads the memory as
    the pointer's element type. An integer is an address, as Triton's CUDA and HIP launchers take
    `x.data_ptr()` for a pointer: it binds the bytes from that address to the end of the live tensor storage on
    `device` that holds it (`address_view`), so the emulator still checks every access against that storage."""
    where = _where(kernel, p)
    while value is not None and not is_torch_tensor(value) and hasattr(value, "base") and hasattr(value, "data_ptr"):
        value = value.base
    if isinstance(value, int) and not isinstance(value, bool):
        return address_view(where, value, device)
    if value is None or not hasattr(value, "data_ptr"):
        raise KernelArgError(f"{where} expects a tensor, got {type(value).__name__}")
    problem = storage_problem(value)
    if problem:
        raise KernelArgError(f"{where}: {problem}")
    return value


def view_bytes(t: Any) -> Optional[Tuple[int, int]]:
    """[first, end) byte offsets, within its storage, of the elements tensor `t` can reach (None: it has none)."""
    if t.numel() == 0:
        return None
    lo = hi = t.storage_offset()
    for size, stride in zip(t.shape, t.stride()):
        if stride < 0:
            lo += (size - 1) * stride
        else:
            hi += (size - 1) * stride
    return lo * t.element_size(), (hi + 1) * t.element_size()


def storage_problem(t: Any) -> Optional[str]:
    """Why tensor `t`'s view does not lie inside its storage (freed with `untyped_storage().resize_(0)`, shrunk
    below the view's extent), or None. A launch binds the view's bytes and copies results back into them: a view
    past its storage would read and write memory the tensor no longer owns."""
    if t.device.type == "meta":  # no memory to bind: the launch path refuses the device, saying so
        return None
    span = view_bytes(t)
    if span is None:
        return None
    try:
        storage = t.untyped_storage()
        base, nbytes = storage.data_ptr(), storage.nbytes()
    except (RuntimeError, NotImplementedError):  # no storage of its own (fake or meta tensors): nothing to bind
        return None
    lo, hi = span
    if base == 0 or nbytes == 0:
        return (f"its storage was freed (it holds 0 bytes; the view spans {hi - lo} bytes), e.g. by "
                "untyped_storage().resize_(0): pass a tensor whose storage is alive")
    if lo < 0 or hi > nbytes:
        return (f"its view spans bytes {lo} to {hi} of its storage, which holds only {nbytes} bytes (shrunk by "
                "untyped_storage().resize_?): the launch would read and write past the storage")
    return None


def address_view(where: str, address: int, device: str):
    """A uint8 tensor over the bytes from `address` to the end of the storage of a live tensor on `device`
    that holds it. Metal binds buffers, not addresses, and the emulator checks accesses against each buffer's
    extent: an address is only as good as the storage it points into. The storages are found among the
    objects Python's garbage collector tracks (torch tensors are), which costs tens of milliseconds a launch:
    the price of an address where a tensor would do."""
    import gc
    import warnings

    import torch
    if address <= 0:
        raise KernelArgError(f"{where} got the address {address}: a pointer argument needs a tensor or the address "
                             "of one (x.data_ptr())")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # attribute reads of lazily imported modules may warn
        for obj in gc.get_objects():
            if not issubclass(type(obj), torch.Tensor):
                continue
            try:  # tensors without memory of their own (meta, fake, functional ones) have no storage to bind
                if obj.device.type != device:
                    continue
                storage = obj.untyped_storage()
                start, nbytes = storage.data_ptr(), storage.nbytes()
            except (RuntimeError, NotImplementedError):
                continue
            if start <= address < start + nbytes:
                view = torch.empty(0, dtype=torch.uint8, device=obj.device)
                return view.set_(storage, address - start, (start + nbytes - address, ))
    raise KernelArgError(f"{where} got the address 0x{address:x}, which is not inside any live {device} tensor: pass "
                         f"the tensor itself, or the data_ptr() of a {device} tensor that is alive during the launch")


def is_torch_tensor(value: Any) -> bool:
    import torch
    return isinstance(value, torch.Tensor)

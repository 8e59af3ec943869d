"""Which kernel argument a pointer value points into, read off the IR: the base that lets the lowering name an
element by its index instead of its address.

MSL reinterprets the bits of scalars and vectors (`as_type`), not of pointers (specification 2.21), and no
Metal source we know converts a pointer to an integer and back. So where the lowering needs what an address
would tell (which half of its 32-bit word a 16-bit element is, which lock a 64-bit element takes, a pointer
moved between threads), it uses the element's index `p - base` from the kernel argument `base` the pointer was
computed from (`tt.addptr` chains from a `tt.splat` of the argument, through shape ops and selects between
such pointers), and `base + index` to rebuild a moved pointer. Pointers it cannot trace (loop-carried ones,
`tt.int_to_ptr`, arguments of `noinline` functions) keep the address forms, which are listed as unverified in
docs/mac.md ("The Metal surface").
"""
from __future__ import annotations

from typing import Optional

from ..ir import Function, Op, Value
from ..ir.types import PointerType, TensorType

# ops whose every result element is an element of their first operand (pointer or pointer tensor)
_SAME_ELEMENTS = ("tt.splat", "tt.broadcast", "tt.expand_dims", "tt.reshape", "ttg.convert_layout", "tt.trans")
# ops whose result elements are elements of these operands: all must come from the one base
_FROM_OPERANDS = {"arith.select": slice(1, 3), "tt.join": slice(0, 2), "tt.cat": slice(0, 2)}


def kernel_argument(kernel: Function, v: Value) -> Optional[Value]:
    """The argument of `kernel` every element of pointer (tensor) value `v` points into, or None."""
    for _ in range(10_000):  # a chain in a well-formed function ends at an argument or an untraceable op
        if any(v is a for a in kernel.args):
            return v if isinstance(v.type, PointerType) else None
        op = v.owner
        if not isinstance(op, Op):
            return None  # a block argument: loop-carried, or a callee's parameter
        if op.name == "tt.addptr" or op.name in _SAME_ELEMENTS:
            v = op.operands[0]
        elif op.name in _FROM_OPERANDS:
            bases = {id(b) for b in (kernel_argument(kernel, x) for x in op.operands[_FROM_OPERANDS[op.name]])}
            first = kernel_argument(kernel, op.operands[_FROM_OPERANDS[op.name]][0])
            return first if len(bases) == 1 else None
        else:
            return None
    return None


def argument_alignment(kernel: Function, arg: Value) -> int:
    """The bytes the argument's address is known to be a multiple of (Triton's `tt.divisibility`: 16 when the
    tensor's data pointer was, else 1)."""
    for a, attrs in zip(kernel.args, kernel.arg_attrs or [{}] * len(kernel.args)):
        if a is arg:
            return int((attrs or {}).get("tt.divisibility", 1))
    return 1


def pointee_bytes(v: Value) -> int:
    """The size of what pointer (tensor) value `v` points to."""
    ty = v.type.element if isinstance(v.type, TensorType) else v.type
    return ty.pointee.nbytes

"""Whether a kernel makes pointers out of integers it did not get from pointers: a pointer table (Triton's
grouped GEMM tutorial loads `data_ptr()` values and casts them with `.to(tl.pointer_type(...))`), or an integer
argument used as an address. Such a kernel runs on the emulator, where a CPU tensor's `data_ptr()` is an address
the kernel can use, but not on a Mac, where an MPS tensor's `data_ptr()` is not a GPU address and only the
buffers bound to a dispatch are resident (docs/mac.md). The launcher refuses it there, naming the kernel.

An integer that comes from a `tt.ptr_to_int` of a pointer the kernel holds (pointer arithmetic done on
integers, then cast back) is an address of a bound buffer and is fine anywhere.
"""
from __future__ import annotations

from typing import Iterable, List, Set

from ..ir import Module, Op, Value


def _sources(value: Value) -> List[Value]:
    """The values `value` is computed from: an op result's operands, or, for a block argument (a loop-carried
    value, a branch target's argument), every operand of the op that owns the block's region."""
    owner = value.owner
    if isinstance(owner, Op):
        return list(owner.operands)
    region = getattr(owner, "parent", None)
    op = getattr(region, "parent", None)
    return list(op.operands) if isinstance(op, Op) else []


def _from_a_pointer(value: Value, seen: Set[int]) -> bool:
    """Whether `value`'s backward slice holds a `tt.ptr_to_int` (it is derived from an address the kernel holds)."""
    stack = [value]
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        if isinstance(v.owner, Op) and v.owner.name == "tt.ptr_to_int":
            return True
        stack.extend(_sources(v))
    return False


def int_to_ptr_ops(ops: Iterable[Op]) -> List[Op]:
    return [op for op in ops if op.name == "tt.int_to_ptr"]


def reads_addresses(module: Module) -> bool:
    """True when some `tt.int_to_ptr` of the module casts an integer that no `tt.ptr_to_int` leads to."""
    for fn in module.functions:
        for op in int_to_ptr_ops(fn.walk()):
            if not _from_a_pointer(op.operands[0], set()):
                return True
    return False

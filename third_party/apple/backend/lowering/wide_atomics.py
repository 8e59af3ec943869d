"""How each 64-bit atomic of a kernel is made atomic (the lowering is in atomic_ops.py, the helpers' text in
msl/atomics.metal and msl/atomics64_locked.metal, the family gate in target_info.py).

Metal has no 64-bit atomic that returns the old value; its only 64-bit atomics are unsigned min/max on
Apple9. Three forms:
- "words": add/and/or/xor whose result is unused, on the two 32-bit halves (the carry out of the low word
  is added to the high one): exact final values when every update of the element is of that one kind;
- "native": unsigned min/max whose result is unused, on families with 64-bit atomic min/max;
- "locked": everything else (old values, compare-and-swap, exchange, float64 add, signed min/max, min/max
  before Apple9), a read-modify-write of both halves under a lock of the kernel's lock table
  (backend/abi/lock_table.py).
The halves of a "words" update change at different times, so another kind of update in between (a locked
one, a native one, or a "words" update of another kind) would see or leave a value no order of the updates
gives. So the choice is made per kernel: either its 64-bit atomics are all "native" or all "words" of one
kind, or every one of them takes the lock.
"""
from __future__ import annotations

from typing import Optional, Set

from ..ir import Module, Op, Value
from .pointer_base import kernel_argument
from .target_info import MetalTargetInfo

WORD_KINDS = ("add", "and", "or", "xor")
NATIVE_KINDS = ("umax", "umin")
# `tt.atomic_poll` of a 64-bit element reads both halves under the lock, so that it sees only whole values of the
# kernel's other 64-bit atomics: a kernel that polls one takes the lock for all of them
WIDE_OPS = ("tt.atomic_rmw", "tt.atomic_cas", "tt.atomic_poll")


def is_wide(op: Op) -> bool:
    """Whether `op` (tt.atomic_rmw / tt.atomic_cas / tt.atomic_poll) is on 64-bit elements."""
    return op.operands[1].type.scalar.name in ("i64", "f64")


def kind(op: Op) -> str:
    """The read-modify-write kind of `op` ("cas" for tt.atomic_cas, "poll" for tt.atomic_poll)."""
    if op.name == "tt.atomic_poll":
        return "poll"
    return "cas" if op.name == "tt.atomic_cas" else str(op.attrs["atomic_rmw_op"])


def _lock_free_form(op: Op, target: MetalTargetInfo, used_values: Set[int]) -> str:
    """"words" or "native" when `op` alone could do without a lock, else "locked"."""
    if op.results and id(op.result) in used_values:
        return "locked"
    if kind(op) in WORD_KINDS and op.operands[1].type.scalar.name == "i64":
        return "words"
    if kind(op) in NATIVE_KINDS and target.has_atomic64_min_max:
        return "native"
    return "locked"


def kernel_needs_locks(module: Module, target: MetalTargetInfo, used_values: Set[int]) -> bool:
    """Whether the module's 64-bit atomics take the lock (then all of them do)."""
    forms = {(_lock_free_form(op, target, used_values), kind(op))
             for f in module.functions for op in f.walk()
             if op.name in WIDE_OPS and is_wide(op)}
    word_kinds = {k for form, k in forms if form == "words"}
    native = any(form == "native" for form, _ in forms)
    return any(form == "locked" for form, _ in forms) or len(word_kinds) > 1 or bool(word_kinds and native)


def form(op: Op, target: MetalTargetInfo, used_values: Set[int], kernel_locked: bool) -> str:
    """The form of 64-bit atomic `op` in a kernel that takes locks (`kernel_locked`) or not."""
    return "locked" if kernel_locked else _lock_free_form(op, target, used_values)


def lock_base(module: Module) -> Optional[Value]:
    """The kernel argument every 64-bit atomic of the module points into, if there is one: then an element's
    lock is chosen by its index from that argument (pointer_base.py), else by its address."""
    kernel = module.kernel
    bases = set()
    found = None
    for f in module.functions:
        for op in f.walk():
            if op.name in WIDE_OPS and is_wide(op):
                arg = kernel_argument(kernel, op.operands[0]) if f is kernel else None
                if arg is None:
                    return None
                bases.add(id(arg))
                found = arg
    return found if len(bases) == 1 else None

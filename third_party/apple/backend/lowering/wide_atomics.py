"""How each 64-bit atomic of a kernel is made atomic (the lowering is in atomic_ops.py).

Metal has no 64-bit atomic that returns the old value; its only 64-bit atomics are unsigned min/max on
Apple9. Three forms, chosen per kernel:
- "words": add/and/or/xor whose result is unused, on the two 32-bit halves (the carry out of the low word
  is added to the high one): exact final values under any contention, no old value;
- "native": unsigned min/max whose result is unused, on families with 64-bit atomic min/max;
- "locked": everything else (old values, compare-and-swap, exchange, float64 add, signed min/max, min/max
  before Apple9), a read-modify-write of both halves under a lock of the kernel's lock table
  (backend/atomic_locks.py).
A locked update writes both halves, so a lock-free update of the same element in between would be lost: in
a kernel with any locked 64-bit atomic, every 64-bit atomic takes the lock.
"""
from __future__ import annotations

from typing import Set

from ..ir import Module, Op
from ..target import Family

WORD_KINDS = ("add", "and", "or", "xor")
NATIVE_KINDS = ("umax", "umin")
LOCKED_KINDS = ("add", "and", "or", "xor", "max", "min", "umax", "umin", "exch", "xchg", "fadd", "cas")


def is_wide(op: Op) -> bool:
    """Whether `op` (tt.atomic_rmw / tt.atomic_cas) updates 64-bit elements."""
    return op.operands[1].type.scalar.name in ("i64", "f64")


def _kind(op: Op) -> str:
    return "cas" if op.name == "tt.atomic_cas" else str(op.attrs["atomic_rmw_op"])


def lock_free_form(op: Op, fam: Family, used_values: Set[int]) -> str:
    """"words" or "native" when `op` alone can do without a lock, else "locked"."""
    if op.results and id(op.result) in used_values:
        return "locked"
    kind = _kind(op)
    if kind in WORD_KINDS and op.operands[1].type.scalar.name == "i64":
        return "words"
    if kind in NATIVE_KINDS and fam.atomic_ulong_min_max:
        return "native"
    return "locked"


def kernel_needs_locks(module: Module, fam: Family, used_values: Set[int]) -> bool:
    """Whether some 64-bit atomic of the module needs a lock (then all of them take one)."""
    return any(
        op.name in ("tt.atomic_rmw", "tt.atomic_cas") and is_wide(op) and lock_free_form(op, fam, used_values) ==
        "locked" for f in module.functions for op in f.walk())

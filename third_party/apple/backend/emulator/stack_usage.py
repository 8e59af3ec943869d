"""What a stack overflow of an emulated thread is made of: the per-thread arrays the kernel's MSL declares.

Each emulated thread runs on a stack of its own (`TRITON_APPLE_EMULATOR_STACK_KB`), and the per-thread arrays of
a kernel (a tensor's elements held by one thread, `float x[8192];`) live in that frame. On an Apple GPU the same
values live in registers, and a kernel that holds too many spills them to memory: slow, not an error. So the
emulator's report names the arrays that filled the stack, with their MSL lines (which the driver maps back to
the kernel's source lines), and says whose limit it hit.
"""
from __future__ import annotations

import re
from typing import List, NamedTuple, Sequence

from . import signature as _sig

# `float x_1[8192];`, `device float* x_0[8192];`, `half2 v[4];` at the start of a statement. Threadgroup and
# constant arrays are not on the stack.
_ARRAY = re.compile(r"^\s*(?!threadgroup\b|constant\b|static\b|return\b)((?:device |thread )?[A-Za-z_]\w*"
                    r"(?:\s*\*)?)\s+([A-Za-z_]\w*)\[(\d+)\];")


class PerThreadArray(NamedTuple):
    name: str
    msl_type: str
    count: int
    nbytes: int
    msl_line: int  # 1-based


def per_thread_arrays(msl_lines: Sequence[str]) -> List[PerThreadArray]:
    """The per-thread arrays `msl_lines` declares, largest first."""
    found = []
    for n, text in enumerate(msl_lines, 1):
        m = _ARRAY.match(text)
        if not m:
            continue
        msl_type, name, count = " ".join(m.group(1).split()), m.group(2), int(m.group(3))
        size = 8 if msl_type.endswith("*") else _sig.type_size(msl_type.removeprefix("thread ").strip())
        if size:
            found.append(PerThreadArray(name, msl_type, count, size * count, n))
    return sorted(found, key=lambda a: (-a.nbytes, a.msl_line))


def explain_stack_overflow(msl_lines: Sequence[str], threads: int, largest: int = 3):
    """(text, MSL lines) to append to a stack overflow report: the kernel's per-thread arrays and whose limit
    the overflow is. `threads`: the threads of one threadgroup (num_warps * 32)."""
    arrays = per_thread_arrays(msl_lines)
    total = sum(a.nbytes for a in arrays)
    lines = [a.msl_line for a in arrays[:largest]]
    text = "\n  The stack size is the emulator's limit, not Metal's."
    if arrays:
        big = "; ".join(f"'{a.name}' {a.msl_type}[{a.count}] = {_kb(a.nbytes)} (MSL line {a.msl_line})"
                        for a in arrays[:largest])
        text += (f"\n  The kernel's per-thread arrays declare {_kb(total)} per thread; the largest: {big}."
                 f"\n  On an Apple GPU these values live in registers, and this many per thread spill to memory "
                 f"(slow, not an error). More warps than {threads // 32} (num_warps) or a smaller block spread "
                 "a tensor over more threads.")
    return text, lines


def _kb(n: int) -> str:
    return f"{n / 1024:.0f} KB" if n >= 1024 else f"{n} B"

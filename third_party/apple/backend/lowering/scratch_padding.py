"""Row padding of the threadgroup buffer a layout conversion goes through (`relayout.through_scratch`): the row
stride that makes the simdgroups' stores into it and loads from it take the fewest bank cycles under the target's
bank model (`target.THREADGROUP_BANKS`).

A conversion writes every element at its row-major index and reads it back from there. When a row is a multiple of
128 bytes long, a simdgroup whose lanes hold one column of several rows finds all of them in one bank: the
conversion of a dot's accumulator before its store, 8 rows of 64 floats per instruction, took 8 cycles where 1
would do. Padding each innermost row by a few elements moves consecutive rows to other banks. Each candidate pad is
scored by counting what the emulator's profiler counts: per SIMD-wide store and load of the conversion (a register
index, in simdgroup 0), the words its active lanes touch, and per bank the distinct ones; the most in one bank is
the instruction's cycles. The fewest cycles in all win; on a tie, the smaller pad.
"""
from __future__ import annotations

import functools
from typing import Dict, List, Sequence, Tuple

from ..analysis.padded_rows import row_strides
from ..layouts import LinearLayout
from ..target import THREADGROUP_BANKS
from .shared_memory import row_major_strides, vector_run

# Pads of the innermost rows, in bytes (0: row-major): whole words, up to 32 bytes (a quarter of the banks' row).
PAD_BYTES = tuple(range(0, 33, 4))


def padded_strides(shape: Sequence[int], pad: int) -> List[int]:
    """Element strides of `shape` stored row-major with `pad` elements after every innermost row."""
    if len(shape) < 2 or not pad:
        return row_major_strides(shape)
    return row_strides(shape, shape[-1] + pad)


def scratch_bytes(shape: Sequence[int], strides: Sequence[int], elem_bytes: int) -> int:
    """Bytes a buffer of `shape` at these strides spans."""
    return (sum((n - 1) * s for n, s in zip(shape, strides)) + 1) * elem_bytes


def _coords(bases: Sequence[Tuple[int, ...]], n: int, rank: int) -> List[Tuple[int, ...]]:
    out = []
    for i in range(n):
        c = [0] * rank
        for k, b in enumerate(bases):
            if i >> k & 1:
                c = [x ^ y for x, y in zip(c, b)]
        out.append(tuple(c))
    return out


@functools.lru_cache(maxsize=256)
def _accesses(lay: LinearLayout, owners_only: bool, run: int = 1) -> Tuple[Tuple[Tuple[int, int], ...], ...]:
    """Per SIMD-wide access of simdgroup 0 to its elements of `lay` (one per run of `run` register indices, as
    `store_registers` stores them; `owners_only`: one holder of each element, as stores write them, else every
    lane, as loads read), each active lane's elements as (row, column): the row-major index among the innermost
    rows, and the index in the row. The other simdgroups' accesses differ from these by a translation in the layouts
    the compiler makes (their warp bases do not overlap the lane and register bits), which keeps each one's
    cycles."""
    rank = lay.rank
    rows = row_major_strides(lay.shape[:-1])
    reg_mask, lane_mask = (lay.free_reg_mask(), lay.free_lane_mask()) if owners_only else (0, 0)
    regs = [c for i, c in enumerate(_coords(lay.reg, lay.num_regs, rank)) if not i & reg_mask]
    lanes = [c for i, c in enumerate(_coords(lay.lane, 1 << len(lay.lane), rank)) if not i & lane_mask]
    out = []
    for first in range(0, len(regs), run):
        elems = []
        for base in regs[first:first + run]:
            for lane in lanes:
                c = [b ^ x for b, x in zip(base, lane)]
                elems.append((sum(x * s for x, s in zip(c[:-1], rows)), c[-1]))
        out.append(tuple(elems))
    return tuple(out)


@functools.lru_cache(maxsize=4096)  # a kernel asks the same of each conversion's layouts, and so do its configs
def bank_cycles(lay: LinearLayout, row_elems: int, elem_bytes: int, owners_only: bool, run: int = 1) -> int:
    """Bank cycles of those accesses (`_accesses`) with innermost rows `row_elems` elements apart: per access, the
    most distinct words its lanes touch in one bank."""
    banks, bank_bytes = THREADGROUP_BANKS["banks"], THREADGROUP_BANKS["bank_bytes"]
    total = 0
    for elems in _accesses(lay, owners_only, run):
        per_bank: Dict[int, int] = {}
        for word in {w for row, col in elems
                     for w in range((row * row_elems + col) * elem_bytes // bank_bytes,
                                    ((row * row_elems + col + 1) * elem_bytes - 1) // bank_bytes + 1)}:
            per_bank[word % banks] = per_bank.get(word % banks, 0) + 1
        total += max(per_bank.values())
    return total


def conversion_strides(src: LinearLayout, dst: LinearLayout, shape: Sequence[int], elem_bytes: int,
                       ctype: str = "") -> List[int]:
    """The strides, among pads of `PAD_BYTES`, at which storing `src` and loading `dst` (in runs of registers where
    `vector_run` allows them, for elements of MSL type `ctype` in a 16-byte aligned buffer) take the fewest bank
    cycles."""
    if len(shape) < 2:
        return row_major_strides(shape)
    best: Tuple[int, int] = (-1, 0)
    for pad in sorted({b // elem_bytes for b in PAD_BYTES if b % elem_bytes == 0}):
        row = shape[-1] + pad
        strides = padded_strides(shape, pad)
        cycles = bank_cycles(src, row, elem_bytes, True, vector_run(src, strides, ctype, 16)) + \
            bank_cycles(dst, row, elem_bytes, False, vector_run(dst, strides, ctype, 16, store=False))
        if best[0] < 0 or cycles < best[0]:
            best = (cycles, pad)
    return padded_strides(shape, best[1])

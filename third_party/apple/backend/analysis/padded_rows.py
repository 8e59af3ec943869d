"""Padded rows of the threadgroup buffers that `simdgroup_load` reads dot fragments from: the rule, and the size
and element strides of a buffer laid out by it.

A fragment load reads 8 rows of 8 elements (16 bytes of half or bfloat, 32 of float). Threadgroup memory is banked
(32 banks of 4 bytes, 128 bytes across, on the target's model: `target.THREADGROUP_BANKS`); when a row's
length is an even multiple of 16 bytes the 8 rows start at no more than 4 distinct offsets modulo 128 bytes and
their accesses conflict (8-way for half rows of 128 bytes). Making such rows 16 bytes longer starts the 8 rows at
8 distinct 16-byte offsets modulo 128: no conflict for 16-bit fragments, and the fewest bank cycles its bytes need
for 32-bit ones. MLX's GEMM pads its threadgroup tiles by the same 16 bytes.

Who uses it: `passes/accelerate_matmul.py` marks the buffers only dots read (`PAD_ATTR`), the allocator
(`passes/allocate_shared_memory.py`) sizes them padded and drops the mark again when the kernel would not fit in
threadgroup memory, and the lowering addresses them by `padded_strides` (`lowering/local_memory_ops.py`) and pads
the slabs a dot stages itself (`lowering/dot_ops.py`).
"""
from __future__ import annotations

from typing import List, Sequence

from ..ir import Op

PAD_BYTES = 16
# a `ttg.local_alloc` attribute: its rows are padded (set by accelerate_matmul, kept or dropped by the allocator)
PAD_ATTR = "apple.padded_rows"


def padded_row(row: int, elem_bytes: int) -> int:
    """The length, in elements, that a row of `row` elements of `elem_bytes` each is stored with."""
    return row + PAD_BYTES // elem_bytes if (row * elem_bytes // PAD_BYTES) % 2 == 0 else row


def row_strides(shape: Sequence[int], row: int) -> List[int]:
    """Element strides of a buffer of `shape` stored row-major with innermost rows `row` elements long (at least
    `shape[-1]`: the rest of each row is padding)."""
    strides, extent = [1], row
    for d in reversed(shape[:-1]):
        strides.insert(0, extent)
        extent *= d
    return strides


def padded_strides(shape: Sequence[int], elem_bytes: int) -> List[int]:
    """Element strides of a row-major buffer of `shape` whose innermost rows are padded."""
    return row_strides(shape, padded_row(shape[-1], elem_bytes))


def padded_bytes(shape: Sequence[int], elem_bytes: int) -> int:
    strides = padded_strides(shape, elem_bytes)
    return (strides[0] * shape[0] if len(shape) > 1 else shape[0]) * elem_bytes


def buffer_bytes(alloc: Op) -> int:
    """Bytes a `ttg.local_alloc` buffer occupies: its tensor, with padded rows where the allocator kept them."""
    ty = alloc.result.type
    return padded_bytes(ty.shape, ty.element.nbytes) if alloc.attrs.get(PAD_ATTR) else ty.nbytes

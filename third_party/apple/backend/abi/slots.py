"""The buffer slots of a compiled kernel: what the lowering declares and every launcher binds.

A kernel's MSL parameters are `[[buffer(N)]]` slots, described by one `BufferSlot` each in the kernel's
metadata (`kernel_signature`, a JSON list). Kinds:
- `pointer`: a Triton pointer argument, `device T*`;
- `scalar`: a Triton scalar argument, `constant T&`, the bytes `abi.scalars.pack` gives;
- `packed`: a scalar of a kernel whose arguments would not fit Metal's 31 slots: it lives in the one
  packed-scalars buffer (`PACKED_SCALARS`, the slot after the pointers) at 32-bit word `word`;
- an added buffer (`ADDED_BUFFERS`): buffers the backend binds after the arguments, made fresh for every
  launch: the debug buffer of `tl.device_print`/`tl.device_assert` and the lock table of 64-bit atomics.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, List, Sequence, Tuple

from . import scalars

POINTER, SCALAR, PACKED = "pointer", "scalar", "packed"


@dataclass(frozen=True)
class BufferSlot:
    """How one MSL parameter of a kernel is bound: its `[[buffer(slot)]]`, kind and types."""
    name: str
    slot: int
    kind: str  # POINTER | SCALAR | PACKED | a key of ADDED_BUFFERS
    msl_type: str
    triton_type: str
    word: int = 0  # PACKED: its first 32-bit word in the packed-scalars buffer

    @property
    def is_added(self) -> bool:
        return self.kind in ADDED_BUFFERS


def slots_to_json(slots: Sequence[BufferSlot]) -> str:
    return json.dumps([asdict(s) for s in slots])


def slots_from_json(text: str) -> List[BufferSlot]:
    return [BufferSlot(**d) for d in json.loads(text)]


# ------------------------------------------------------------------------------------------------
# The packed-scalars buffer


@dataclass(frozen=True)
class PackedScalarsBuffer:
    """The buffer of 32-bit words the scalars of a kernel over Metal's buffer slots live in."""
    name: str = "tt_scalars"
    msl_type: str = "constant uint*"
    triton_type: str = "*u32"


PACKED_SCALARS = PackedScalarsBuffer()


def packed_words(msl_type: str) -> int:
    """32-bit words a scalar of `msl_type` takes in the packed buffer (8-byte scalars take two)."""
    return 2 if scalars.msl_scalar(msl_type).nbytes == 8 else 1


def packed_layout(msl_types: Sequence[str]) -> List[int]:
    """The first word of each scalar, in argument order: one word each (8- and 16-bit values in its low bits),
    8-byte values two words starting at an even word."""
    words, out = 0, []
    for ct in msl_types:
        if packed_words(ct) == 2:
            words += words % 2
        out.append(words)
        words += packed_words(ct)
    return out


def pack_words(values: Sequence[Tuple[BufferSlot, bytes]]) -> bytes:
    """The packed buffer's bytes, given each packed slot and its value's bytes (`abi.scalars.pack`)."""
    words = max(s.word + packed_words(s.msl_type) for s, _ in values)
    buf = bytearray(4 * words)
    for s, data in values:
        buf[4 * s.word:4 * s.word + len(data)] = data
    return bytes(buf)


# ------------------------------------------------------------------------------------------------
# Buffers the backend adds


@dataclass(frozen=True)
class AddedBuffer:
    """A buffer bound after the kernel's arguments, made zeroed for every launch."""
    kind: str
    name: str  # the MSL parameter's name (every MSL function of the kernel receives it)
    msl_type: str
    purpose: str
    words: int  # 32-bit words

    def new(self, device: str):
        """A zeroed int32 torch tensor of this buffer for one launch on torch device type `device`."""
        import torch
        return torch.zeros(self.words, dtype=torch.int32, device=device)


def _added_buffers() -> Dict[str, AddedBuffer]:
    from . import debug_buffer, lock_table
    return {
        "debug": AddedBuffer("debug", "tt_debug", "device uint*", "tl.device_print/device_assert's buffer",
                             debug_buffer.BUFFER_WORDS),
        "locks": AddedBuffer("locks", "tt_locks", "device atomic_uint*", "the lock table of 64-bit atomics",
                             lock_table.LOCK_WORDS),
    }


ADDED_BUFFERS: Dict[str, AddedBuffer] = _added_buffers()

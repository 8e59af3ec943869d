"""The lock table of 64-bit atomics, shared by the lowering (whose helpers take and release locks:
`lowering/wide_atomics.py` chooses which atomics do, `lowering/msl/atomics64_locked.metal` holds the helpers)
and the launchers (which bind a zeroed table, `abi.slots.ADDED_BUFFERS["locks"]`, to every launch of a kernel
that takes locks).

Metal's only 64-bit atomics are unsigned min/max on Apple9, and they return nothing. A 64-bit
read-modify-write whose old value is used, a compare-and-swap, an exchange, a float64 add, or a min/max the
family lacks is made atomic with a lock: the kernel gets one more buffer of LOCK_WORDS 32-bit words, and
the word at `(address >> 3) % LOCK_WORDS` guards a 64-bit element (0: free, 1: taken). Each launch gets a
zeroed table of its own, like the debug buffer, so a launch that stopped while a lock was taken (a fault, a
timeout) leaves nothing behind for the next one.
"""
from __future__ import annotations

LOCK_WORDS = 1 << 12  # 16 KB: contention on distinct elements that share a lock stays rare
assert LOCK_WORDS & (LOCK_WORDS - 1) == 0, "the lowering takes the address modulo LOCK_WORDS with a mask"


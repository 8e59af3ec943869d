"""The lock table of 64-bit atomics, shared by the lowering (which takes and releases locks,
`lowering/wide_atomics.py`) and the launcher (which binds the table).

Metal's only 64-bit atomics are unsigned min/max on Apple9, and they return nothing. A 64-bit
read-modify-write whose old value is used, a compare-and-swap, an exchange, a float64 add, or a min/max the
family lacks is made atomic with a lock: the kernel gets one more buffer of LOCK_WORDS 32-bit words, and
the word at `(address >> 3) % LOCK_WORDS` guards a 64-bit element. Every lock is free (0) before and after
each launch (a kernel releases each lock it takes before it ends), so one zeroed table per device serves
every launch and every kernel.
"""
from __future__ import annotations

import threading
from typing import Dict

LOCK_WORDS = 1 << 12  # 16 KB: contention on distinct elements that share a lock stays rare

_tables: Dict[str, object] = {}
_guard = threading.Lock()


def lock_table(device: str):
    """The zeroed lock table (an int32 torch tensor) for launches on torch device type `device`."""
    with _guard:
        table = _tables.get(device)
        if table is None:
            import torch
            table = _tables[device] = torch.zeros(LOCK_WORDS, dtype=torch.int32, device=device)
        return table

"""When each explicit threadgroup-memory buffer (`ttg.local_alloc`) may still be read or written.

Positions are pre-order indices of the ops of a module. A buffer is live from its allocation to its last
use, a use through any view of it (`ttg.memdesc_*`) counting as a use of the buffer; a buffer used inside
a loop that does not contain its allocation stays live to the end of that loop, since the next iteration
reads it again. Both the shared-memory allocator (`passes/allocate_shared_memory.py`) and the lowering's
scratch placement (`lowering/context.py`) read these ranges.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List

from ..ir import Module, Op
from ..ir.types import MemDescType


@dataclass
class BufferRange:
    alloc: Op
    start: int
    end: int


def op_positions(module: Module) -> Dict[int, int]:
    """Pre-order position of every op of `module`, by `id(op)`."""
    return {id(o): i for i, o in enumerate(o for f in module.functions for o in f.walk())}


def buffer_live_ranges(module: Module) -> List[BufferRange]:
    order = [o for f in module.functions for o in f.walk()]
    pos = {id(o): i for i, o in enumerate(order)}
    span = {}
    for o in order:
        if o.regions:
            inner = [pos[id(x)] for x in o.walk()]
            span[id(o)] = (min(inner), max(inner))
    loops = [o for o in order if o.name in ("scf.for", "scf.while")]
    # every memdesc value derived from a buffer (views of views included) -> that buffer's allocation
    owner_of: Dict[int, Op] = {}
    for o in order:
        if o.name == "ttg.local_alloc":
            owner_of[id(o.result)] = o
            continue
        src = next((owner_of[id(v)] for v in o.operands if id(v) in owner_of), None)
        if src is not None:
            for r in o.results:
                if isinstance(r.type, MemDescType):
                    owner_of[id(r)] = src
    ranges: Dict[int, BufferRange] = {}
    for o in order:
        if o.name == "ttg.local_alloc":
            ranges[id(o)] = BufferRange(o, pos[id(o)], pos[id(o)])
    for user in order:
        for v in user.operands:
            alloc = owner_of.get(id(v))
            if alloc is None:
                continue
            rng = ranges[id(alloc)]
            p = pos[id(user)]
            rng.end = max(rng.end, p)
            for loop in loops:
                lo, hi = span[id(loop)]
                if lo <= p <= hi and not lo <= rng.start <= hi:
                    rng.end = max(rng.end, hi)
    return list(ranges.values())

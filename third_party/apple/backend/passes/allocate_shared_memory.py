"""Apple pass: place threadgroup memory again after the Apple passes changed what needs it.

Upstream's `allocate_shared_memory` ran on the TTGIR: every `ttg.local_alloc` buffer and every op that needs
scratch (layout conversions, cross-simdgroup reductions, ...) carries an `allocation.offset` (scratch also an
`allocation.size`), and the module a `ttg.shared` total. Our passes then removed buffers (operands now kept
in registers) and changed layouts, so those offsets can leave holes: a buffer that upstream placed after
one that no longer exists still sits at its old offset. Buffers without any offset (hand-written TTGIR
compiled from a file skips upstream's allocator) are placed here too.

This pass first moves each buffer made from a register value down to right before its first reader, then
packs the same intervals again: buffers live over `analysis.buffer_liveness` ranges, scratch for
the one op that uses it, and two of them may share bytes only when they are never live at once. Largest
first, each at the lowest 16-byte aligned offset free for its whole range. Where that would need more than
upstream's placement (greedy packing is not optimal) and upstream's placement still keeps apart what is live
at once under our liveness, upstream's placement stays; otherwise ours is used even when it is larger.
Scratch that upstream sized beyond what Apple GPUs have (a layout conversion or gather of a 64 KB tensor) loses
its allocation: the lowering then moves it in rounds through the room left at its op (`KernelContext.scratch_room`).
Modules with calls keep upstream's placement (a callee's buffers are placed relative to its call site), so
`accelerate_matmul` does not extend a buffer's liveness there.
"""
from __future__ import annotations

from typing import List, Tuple

from ..analysis.buffer_liveness import buffer_live_ranges, op_positions
from ..analysis.padded_rows import PAD_ATTR, buffer_bytes
from ..ir import Module, Op
from ..target import MAX_THREADGROUP_MEMORY

_ALIGN = 16



def _fill_late(fn) -> None:
    """Move each buffer made from a register value (`ttg.local_alloc %x`, immutable) down to right before its
    first reader in the same block: upstream hoists loads early, and a buffer filled long before it is read
    holds threadgroup memory the whole time (the value waits in registers instead)."""
    for block in [b for o in fn.walk() for r in o.regions for b in r.blocks] + list(fn.body.blocks):
        for alloc in [o for o in block.ops if o.name == "ttg.local_alloc" and o.operands]:
            first = None
            for i, o in enumerate(block.ops):
                if any(v is alloc.result for x in o.walk() for v in x.operands):
                    first = i
                    break
            here = block.ops.index(alloc)
            if first is None or first <= here + 1:
                continue
            block.ops.remove(alloc)
            block.ops.insert(first - 1, alloc)


def allocate_shared_memory(module: Module) -> int:
    """Re-place every buffer and scratch region of `module`; returns the new `ttg.shared` total."""
    upstream_total = int(module.attrs.get("ttg.shared", 0))
    ops = [o for f in module.functions for o in f.walk()]
    if any(o.name == "tt.call" for o in ops) or len(module.functions) != 1:
        return _place_unallocated(module, ops, upstream_total)
    for fn in module.functions:
        _fill_late(fn)
    padded = [o for o in ops if o.attrs.get(PAD_ATTR)]
    plan = _plan(module, ops, upstream_total)
    if padded and plan[0] > MAX_THREADGROUP_MEMORY:  # padded rows are a speed-up, never a reason not to fit
        for o in padded:
            del o.attrs[PAD_ATTR]
        plan = _plan(module, ops, upstream_total)
    total, offsets, in_rounds = plan
    if offsets is None:
        return upstream_total
    for op in in_rounds:
        del op.attrs["allocation.offset"], op.attrs["allocation.size"]
    for op, offset in offsets:
        op.attrs["allocation.offset"] = offset
    module.attrs["ttg.shared"] = total
    return total


def _plan(module: Module, ops: List[Op], upstream_total: int):
    """(total, [(op, offset)], scratch ops left to rounds), or (upstream's total, None, []) where upstream's
    placement stays. Changes nothing."""
    pos = op_positions(module)
    items: List[Tuple[int, int, int, Op]] = []  # (size, start, end, op)
    for rng in buffer_live_ranges(module):
        items.append((buffer_bytes(rng.alloc), rng.start, rng.end, rng.alloc))
    for o in ops:
        if o.name != "ttg.local_alloc" and "allocation.offset" in o.attrs and "allocation.size" in o.attrs:
            items.append((int(o.attrs["allocation.size"]), pos[id(o)], pos[id(o)], o))
    placed: List[Tuple[int, int, int, int]] = []  # (offset, size, start, end)
    offsets = []
    in_rounds = []  # scratch the lowering moves in rounds through the room left at its op
    for size, start, end, op in sorted(items, key=lambda t: (-t[0], t[1])):
        clashes = sorted((off, sz) for off, sz, s, e in placed if s <= end and start <= e)
        offset = 0
        for off, sz in clashes:
            if offset + size <= off:
                break
            offset = max(offset, (off + sz + _ALIGN - 1) // _ALIGN * _ALIGN)
        if op.name != "ttg.local_alloc" and offset + size > MAX_THREADGROUP_MEMORY:
            in_rounds.append(op)
            continue
        placed.append((offset, size, start, end))
        offsets.append((op, offset))
    total = max((off + sz for off, sz, _, _ in placed), default=0)
    if not in_rounds and total >= upstream_total and _upstream_placement_holds(items, upstream_total):
        return upstream_total, None, []
    return total, offsets, in_rounds


def _upstream_placement_holds(items: List[Tuple[int, int, int, Op]], upstream_total: int) -> bool:
    """Whether upstream's offsets still keep apart everything that is live at once. Upstream placed them for
    its own liveness; ours differs (a dot reading its operand's buffer in place keeps the buffer live up to
    the dot, where upstream's `local_load` ended it), so its placement can overlap a live buffer with another
    op's scratch."""
    spans = []
    for size, start, end, op in items:
        if "allocation.offset" not in op.attrs:
            return False
        spans.append((int(op.attrs["allocation.offset"]), size, start, end))
        if spans[-1][0] + size > upstream_total:  # a buffer that grew (padded rows) past upstream's end
            return False
    for i, (o1, n1, s1, e1) in enumerate(spans):
        for o2, n2, s2, e2 in spans[i + 1:]:
            if s1 <= e2 and s2 <= e1 and o1 < o2 + n2 and o2 < o1 + n1:
                return False
    return True


def _place_unallocated(module: Module, ops: List[Op], upstream_total: int) -> int:
    """Buffers that came without an `allocation.offset` (hand-written TTGIR compiled from a file skips
    upstream's allocator) each get bytes of their own behind everything else; the rest stays where it is."""
    end = upstream_total
    for o in ops:
        if o.name == "ttg.local_alloc" and "allocation.offset" not in o.attrs:
            end = (end + _ALIGN - 1) // _ALIGN * _ALIGN
            o.attrs["allocation.offset"] = end
            end += o.result.type.nbytes
    if end != upstream_total:
        module.attrs["ttg.shared"] = end
    return end


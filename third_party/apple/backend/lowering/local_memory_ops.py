"""Lowering of explicit threadgroup-memory buffers: `ttg.local_alloc/load/store/dealloc` (upstream's
MemoryOpToLLVM).

A `!ttg.memdesc` lowers to a `threadgroup T*` at the offset upstream's `allocate_shared_memory` assigned
(or our `passes/allocate_shared_memory` re-assigned). Hand-written TTGIR compiled from a `.ttgir` file never
ran upstream's allocation, so its buffers may carry no `allocation.offset`: those get places of their own,
one after another behind everything else the module allocated (`_place_unallocated`), each for the whole
kernel (no reuse between them, as upstream's allocator would do). Elements are stored row-major whatever the shared encoding says, because this backend both writes and
reads every such buffer. Writes are fenced by barriers on both sides, so a buffer is never read while
another thread is still writing it, and never rewritten while another thread still reads it.
"""
from __future__ import annotations

from ..ir import Op
from ..ir.types import MemDescType
from .emitter import FunctionEmitter, Lowered
from .msl_types import elem_bytes
from .registry import OpFamily
from .shared_memory import load_registers, row_major_strides, store_registers

FAMILY = OpFamily("local_memory")


_ALIGN = 16


def _buffer_bytes(op: Op) -> int:
    ty: MemDescType = op.result.type
    return ty.numel * elem_bytes(ty.element)


def _place_unallocated(em: FunctionEmitter) -> None:
    """Give every `ttg.local_alloc` of the module that has no `allocation.offset` one, behind the bytes the
    module already allocates, and grow the module's total to match. Runs once per module, at the first
    buffer the lowering meets, before any scratch is placed behind the buffers (scratch goes behind them
    only while a buffer is live, i.e. after an allocation)."""
    ctx = em.ctx
    if getattr(ctx, "_unallocated_placed", False):
        return
    ctx._unallocated_placed = True
    end = (ctx.upstream_shared + _ALIGN - 1) // _ALIGN * _ALIGN
    placed = False
    for fn in ctx.module.functions:
        for o in fn.walk():
            if o.name == "ttg.local_alloc" and "allocation.offset" not in o.attrs:
                o.attrs["allocation.offset"] = end
                end = (end + _buffer_bytes(o) + _ALIGN - 1) // _ALIGN * _ALIGN
                placed = True
    if placed:
        ctx.upstream_shared = end


def _buffer(em: FunctionEmitter, op: Op) -> Lowered:
    ty: MemDescType = op.result.type
    ct = em.ctype(ty.element)
    if "allocation.offset" not in op.attrs:
        _place_unallocated(em)
    offset = int(op.attrs["allocation.offset"])
    need = offset + _buffer_bytes(op)
    if need > em.ctx.upstream_shared:
        raise em.internal(f"shared buffer needs {need} bytes but the module allocates {em.ctx.upstream_shared}")
    em.ctx.uses_smem = True
    return em.bind(op.result, Lowered(em.tg_view(ct, offset, op.result.name), ct))


def _write(em: FunctionEmitter, buf: Lowered, src_v, shape) -> None:
    em.barrier()
    store_registers(em, em.get(src_v), buf.name, row_major_strides(shape))
    em.barrier()


@FAMILY.lowers("ttg.local_alloc")
def _local_alloc(em: FunctionEmitter, op: Op) -> None:
    buf = _buffer(em, op)
    if op.operands:
        _write(em, buf, op.operands[0], op.result.type.shape)


@FAMILY.lowers("ttg.local_store")
def _local_store(em: FunctionEmitter, op: Op) -> None:
    src_v, dst_v = op.operands
    _write(em, em.get(dst_v), src_v, dst_v.type.shape)


@FAMILY.lowers("ttg.local_load")
def _local_load(em: FunctionEmitter, op: Op) -> None:
    buf = em.get(op.operands[0])
    load_registers(em, em.declare(op.result), buf.name, row_major_strides(op.operands[0].type.shape))


@FAMILY.lowers("ttg.local_dealloc")
def _local_dealloc(em: FunctionEmitter, op: Op) -> None:
    """Nothing to do: threadgroup memory is one static array, carved at compile time."""

"""Lowering of explicit threadgroup-memory buffers: `ttg.local_alloc/load/store/dealloc` (upstream's
MemoryOpToLLVM).

A `!ttg.memdesc` lowers to a `threadgroup T*` at the offset `passes/allocate_shared_memory.py` left it
(upstream's, or placed again after our passes; buffers of hand-written TTGIR compiled from a `.ttgir` file,
which never ran upstream's allocator, are placed there too). Elements are stored row-major whatever the shared encoding says, because this backend both writes and
reads every such buffer. Writes are fenced by barriers on both sides, so a buffer is never read while
another thread is still writing it, and never rewritten while another thread still reads it.
"""
from __future__ import annotations

from ..ir import Op
from ..ir.types import MemDescType
from .emitter import FunctionEmitter, Lowered
from .registry import OpFamily
from .shared_memory import load_registers, row_major_strides, store_registers

FAMILY = OpFamily("local_memory")


def _buffer(em: FunctionEmitter, op: Op) -> Lowered:
    ty: MemDescType = op.result.type
    ct = em.ctype(ty.element)
    if "allocation.offset" not in op.attrs:  # passes/allocate_shared_memory.py places every buffer
        raise em.internal("shared memory buffer without an allocation offset")
    offset = int(op.attrs["allocation.offset"])
    need = offset + ty.nbytes
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

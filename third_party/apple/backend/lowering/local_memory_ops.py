"""Lowering of explicit threadgroup-memory buffers: `ttg.local_alloc/load/store/dealloc`.

A `!ttg.memdesc` lowers to a `threadgroup T*` at the offset upstream's `allocate_shared_memory` assigned;
elements are stored row-major whatever the shared encoding says, because this backend both writes and
reads every such buffer. Writes are fenced by barriers on both sides, so a buffer is never read while
another thread is still writing it, and never rewritten while another thread still reads it.
"""
from __future__ import annotations

from ..ir import Op
from ..ir.types import MemDescType
from .core import FunctionEmitter, Lowered, lowers
from .tensor_ops import index_expr, row_major_strides, smem_ctype, store_registers


def _buffer(em: FunctionEmitter, op: Op) -> Lowered:
    ty: MemDescType = op.result.type
    ct = smem_ctype(em, ty.element)
    if "allocation.offset" not in op.attrs:
        raise em.error("shared memory buffer without an allocation offset")
    offset = int(op.attrs["allocation.offset"])
    need = offset + ty.numel * em.ctx.elem_bytes(ty.element)
    em.ctx.uses_smem = True
    name = em.fresh(op.result.name)
    em.emit(f"threadgroup {ct}* {name} = (threadgroup {ct}*)(tt_smem + {offset});")
    if need > em.ctx.upstream_shared:
        raise em.error(f"shared buffer needs {need} bytes but the module allocates {em.ctx.upstream_shared}")
    return em.bind(op.result, Lowered(name, ct))


def _write(em: FunctionEmitter, buf: Lowered, src_v, shape) -> None:
    src = em.get(src_v)
    em.emit("threadgroup_barrier(mem_flags::mem_threadgroup);")
    store_registers(em, src, buf.name, row_major_strides(shape))
    em.emit("threadgroup_barrier(mem_flags::mem_threadgroup);")


@lowers("ttg.local_alloc")
def _local_alloc(em: FunctionEmitter, op: Op) -> None:
    ty: MemDescType = op.result.type
    buf = _buffer(em, op)
    if op.operands:
        _write(em, buf, op.operands[0], ty.shape)


@lowers("ttg.local_store")
def _local_store(em: FunctionEmitter, op: Op) -> None:
    src_v, dst_v = op.operands
    _write(em, em.get(dst_v), src_v, dst_v.type.shape)


@lowers("ttg.local_load")
def _local_load(em: FunctionEmitter, op: Op) -> None:
    buf = em.get(op.operands[0])
    shape = op.operands[0].type.shape
    out = em.declare(op.result)
    strides = row_major_strides(shape)
    with em.for_regs(out.regs) as r:
        em.emit(f"{out.at(r)} = {buf.name}[{index_expr(em, out.layout, r, strides)}];")


@lowers("ttg.local_dealloc")
def _local_dealloc(em: FunctionEmitter, op: Op) -> None:
    pass

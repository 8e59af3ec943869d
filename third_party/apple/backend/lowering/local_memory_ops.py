"""Lowering of explicit threadgroup-memory buffers: `ttg.local_alloc/load/store/dealloc` and the views of them
`ttg.memdesc_subslice`, `ttg.memdesc_index`, `ttg.memdesc_trans` and `ttg.memdesc_reshape` (upstream's
MemoryOpToLLVM and the memdesc view ops).

A `!ttg.memdesc` lowers to a `threadgroup T*` at the offset `passes/allocate_shared_memory.py` left it
(upstream's, or placed again after our passes; buffers of hand-written TTGIR compiled from a `.ttgir` file,
which never ran upstream's allocator, are placed there too). Elements are stored row-major whatever the shared
encoding says, because this backend both writes and reads every such buffer; a buffer that only dots read may
have its rows padded (`analysis/padded_rows.py`), which its strides say. Writes are fenced by barriers on both sides, so a buffer is never read while
another thread is still writing it, and never rewritten while another thread still reads it.

A view is a pointer into its buffer plus the element strides of its dimensions (`Lowered.strides`; None: the
row-major strides of its own shape): a subslice moves the pointer by its offsets and keeps the buffer's strides,
an index drops the first dimension, a transposition permutes the strides. Views address elements by their
logical coordinates, so every encoding (swizzled, padded, `#ttg.shared_linear`, NVIDIA's) has the same placement
here.
"""
from __future__ import annotations

from typing import List, Sequence

from ..analysis.padded_rows import PAD_ATTR, buffer_bytes, padded_strides
from ..ir import Op, Value
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
    need = offset + buffer_bytes(op)
    if need > em.ctx.upstream_shared:
        raise em.internal(f"shared buffer needs {need} bytes but the module allocates {em.ctx.upstream_shared}")
    em.ctx.uses_smem = True
    strides = None
    if op.attrs.get(PAD_ATTR):  # rows padded for the dots that read it (analysis/padded_rows.py)
        strides = tuple(padded_strides(ty.shape, ty.element.nbytes))
    return em.bind(op.result, Lowered(em.tg_view(ct, offset, op.result.name), ct, strides=strides))


def _strides(em: FunctionEmitter, v: Value) -> List[int]:
    """The element strides of memdesc `v`'s dimensions in threadgroup memory."""
    low = em.get(v)
    return list(low.strides) if low.strides is not None else row_major_strides(v.type.shape)


def _view(em: FunctionEmitter, op: Op, elements: str, strides: Sequence[int]) -> None:
    """Bind `op`'s result to the view `elements` past its source's pointer, with `strides`."""
    src = em.get(op.operands[0])
    name = em.tg_offset_view(src.name, src.ctype, elements, op.result.name)
    row_major = list(strides) == row_major_strides(op.result.type.shape)
    em.bind(op.result, Lowered(name, src.ctype, strides=None if row_major else tuple(strides)))


def _write(em: FunctionEmitter, buf: Lowered, src_v, dst_v: Value) -> None:
    em.barrier()
    store_registers(em, em.get(src_v), buf.name, _strides(em, dst_v))
    em.barrier()


@FAMILY.lowers("ttg.local_alloc")
def _local_alloc(em: FunctionEmitter, op: Op) -> None:
    buf = _buffer(em, op)
    if op.operands:
        _write(em, buf, op.operands[0], op.result)


@FAMILY.lowers("ttg.local_store")
def _local_store(em: FunctionEmitter, op: Op) -> None:
    src_v, dst_v = op.operands
    _write(em, em.get(dst_v), src_v, dst_v)


@FAMILY.lowers("ttg.local_load")
def _local_load(em: FunctionEmitter, op: Op) -> None:
    buf = em.get(op.operands[0])
    load_registers(em, em.declare(op.result), buf.name, _strides(em, op.operands[0]))


@FAMILY.lowers("ttg.local_dealloc")
def _local_dealloc(em: FunctionEmitter, op: Op) -> None:
    """Nothing to do: threadgroup memory is one static array, carved at compile time."""


@FAMILY.lowers("ttg.memdesc_subslice")
def _memdesc_subslice(em: FunctionEmitter, op: Op) -> None:
    strides = _strides(em, op.operands[0])
    offsets = [int(o) for o in op.attrs["offsets"]]
    _view(em, op, " + ".join(f"{o * s}" for o, s in zip(offsets, strides) if o) or "0", strides)


@FAMILY.lowers("ttg.memdesc_index")
def _memdesc_index(em: FunctionEmitter, op: Op) -> None:
    """The buffer's `index`-th slab along its first dimension (a stage of a multi-buffered allocation)."""
    strides = _strides(em, op.operands[0])
    index = em.get(op.operands[1]).at(0)
    _view(em, op, f"int({index}) * {strides[0]}", strides[1:])


@FAMILY.lowers("ttg.memdesc_trans")
def _memdesc_trans(em: FunctionEmitter, op: Op) -> None:
    """Dimension `i` of the result is dimension `order[i]` of the source."""
    strides = _strides(em, op.operands[0])
    _view(em, op, "0", [strides[d] for d in op.attrs["order"]])


@FAMILY.lowers("ttg.memdesc_reshape")
def _memdesc_reshape(em: FunctionEmitter, op: Op) -> None:
    src_v = op.operands[0]
    if _strides(em, src_v) != row_major_strides(src_v.type.shape):
        raise em.unsupported("ttg.memdesc_reshape of a transposed or sliced view of a shared buffer is not supported: "
                             "reshape the buffer itself, or load the view and reshape the tensor")
    _view(em, op, "0", row_major_strides(op.result.type.shape))

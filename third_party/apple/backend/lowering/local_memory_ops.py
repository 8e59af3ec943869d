"""Lowering of explicit threadgroup-memory buffers: `ttg.local_alloc/load/store/dealloc`, their gathers and
scatters along an axis (`ttg.local_gather`, `ttg.local_scatter`, `ttg.local_atomic_scatter_rmw`), and the views of
them `ttg.memdesc_subslice`, `ttg.memdesc_index`, `ttg.memdesc_trans`, `ttg.memdesc_reshape` and
`ttg.memdesc_reinterpret` (upstream's MemoryOpToLLVM and the memdesc view ops).

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

A gather reads, for each element of its indices tensor, the buffer element at the same coordinates except along
the axis, where the index says; a scatter writes each element of its values there, once (by the thread that owns
it); an atomic scatter applies its operation there with threadgroup atomics (32-bit integers natively, float32 add
and exchange on the float's bits, float16/bfloat16 add on the containing 32-bit word) and returns the old values
(0 where the mask is off, as `tt.atomic_rmw` does). Their operands are read in the order the op prints them:
`%buf[%indices], %values, %mask`. A reinterpretation reads the same bytes as another element type or shape, which
are the bytes of upstream's placement only when both placements are row-major (`SharedEncoding.row_major`).
"""
from __future__ import annotations

from typing import List, Sequence

from ..analysis.padded_rows import PAD_ATTR, buffer_bytes, padded_strides
from ..ir import Op, Value
from ..ir.types import MemDescType, SharedEncoding
from .atomic_ops import per_owned_element
from .emitter import FunctionEmitter, Lowered, elem_type
from .registry import OpFamily
from .shared_memory import index_expr, load_registers, row_major_strides, store_registers

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


@FAMILY.lowers("ttg.memdesc_reinterpret")
def _memdesc_reinterpret(em: FunctionEmitter, op: Op) -> None:
    """The buffer's bytes as another element type and shape (`shared_memory_descriptor.reinterpret`)."""
    src_v = op.operands[0]
    src_ty, dst_ty = src_v.type, op.result.type
    if _strides(em, src_v) != row_major_strides(src_ty.shape):
        raise em.unsupported("ttg.memdesc_reinterpret of a sliced, transposed or padded view of a shared buffer is not "
                             "supported: reinterpret the buffer itself")
    for ty in (src_ty, dst_ty):
        if not (isinstance(ty.encoding, SharedEncoding) and ty.encoding.row_major):
            raise em.unsupported(f"ttg.memdesc_reinterpret of a shared buffer with layout {ty.encoding} is not "
                                 "supported: this backend keeps every shared buffer row-major, which are upstream's "
                                 "bytes only for unswizzled, unpadded row-major layouts (SwizzledSharedLayout with "
                                 "max_phase=1 and order [rank-1, ..., 0], or the matching SharedLinearLayout)")
    if dst_ty.numel * dst_ty.element.nbytes > src_ty.numel * src_ty.element.nbytes:
        raise em.unsupported(f"ttg.memdesc_reinterpret to {dst_ty} is larger than its source {src_ty}")
    ct = em.ctype(dst_ty.element)
    em.bind(op.result, Lowered(em.tg_cast_view(em.get(src_v).name, ct, op.result.name), ct))


def _along_axis(em: FunctionEmitter, lay, r: str, strides: Sequence[int], axis: int, index: str) -> str:
    """The buffer index of this thread's element in register `r` of layout `lay`, with its coordinate along `axis`
    replaced by `index` (an MSL expression)."""
    rest = index_expr(em, lay, r, [0 if d == axis else s for d, s in enumerate(strides)])
    along = f"int({index})" if strides[axis] == 1 else f"int({index}) * {strides[axis]}"
    return along if rest == "0" else f"{rest} + {along}"


def _same_layouts(em: FunctionEmitter, op: Op, values: Sequence[Value]) -> None:
    lays = {em.layout(v.type) for v in values}
    if len(lays) != 1:  # the frontend broadcasts indices, values and mask to one type
        raise em.internal(f"{op.name}: indices, values and mask in different layouts")


@FAMILY.lowers("ttg.local_gather")
def _local_gather(em: FunctionEmitter, op: Op) -> None:
    buf_v, idx_v = op.operands
    strides, axis = _strides(em, buf_v), int(op.attrs["axis"])
    buf, idx = em.get(buf_v), em.get(idx_v)
    out = em.declare(op.result)
    with em.for_regs(out.regs) as r:
        at = _along_axis(em, out.layout, r, strides, axis, idx.at(r))
        em.emit(f"{out.at(r)} = {em.tg_load(buf.name, at, out.ctype)};")


@FAMILY.lowers("ttg.local_scatter")
def _local_scatter(em: FunctionEmitter, op: Op) -> None:
    buf_v, idx_v, val_v = op.operands
    _same_layouts(em, op, (idx_v, val_v))
    strides, axis = _strides(em, buf_v), int(op.attrs["axis"])
    buf, idx, val = em.get(buf_v), em.get(idx_v), em.get(val_v)
    em.barrier()
    with em.owned_regs(val.layout) as r:
        em.emit(em.tg_store(buf.name, _along_axis(em, val.layout, r, strides, axis, idx.at(r)), val.at(r), val.ctype))
    em.barrier()


def _threadgroup_atomic(em: FunctionEmitter, kind: str, ty, element: str, value: str) -> str:
    """The MSL expression of atomic `kind` of `value` on the threadgroup element `element` (an lvalue), whose value
    is the element's old value."""
    t = em.target
    if ty.name == "i32" and t.has_atomic_rmw(kind) and kind != "fadd":
        vt = "uint" if kind in ("umax", "umin") else "int"
        return f"int({t.atomic_rmw(kind, f'(threadgroup {t.atomic_type(vt)}*)&{element}', f'{vt}({value})')})"
    if ty.name == "f32" and kind == "fadd":
        return f"{em.ctx.require('tt_tg_atomic_fadd32')}((threadgroup atomic_uint*)&{element}, {value})"
    if ty.name == "f32" and kind in ("exch", "xchg"):
        old = t.atomic_rmw(kind, f"(threadgroup {t.atomic_type('uint')}*)&{element}", f"as_type<uint>({value})")
        return f"as_type<float>({old})"
    if ty.name in ("f16", "bf16") and kind == "fadd":
        em.ctx.require("tt_tg_atomic_add16")
        return f"tt_tg_atomic_add16(tt_smem, ulong((threadgroup uchar*)&{element} - tt_smem), {value})"
    raise em.unsupported(f"atomic scatter {kind} on {ty.name} in shared memory is not supported: Metal's threadgroup "
                         "atomics are 32-bit integer ones (float32 add and exchange, and float16/bfloat16 add, are "
                         "built from them)")


@FAMILY.lowers("ttg.local_atomic_scatter_rmw")
def _local_atomic_scatter_rmw(em: FunctionEmitter, op: Op) -> None:
    buf_v, idx_v, val_v = op.operands[:3]
    mask_v = op.operands[3] if len(op.operands) > 3 else None
    _same_layouts(em, op, [v for v in (idx_v, val_v, mask_v) if v is not None])
    kind, ty = str(op.attrs["atomic_rmw_op"]), elem_type(val_v)
    strides, axis = _strides(em, buf_v), int(op.attrs["axis"])
    buf, idx, val = em.get(buf_v), em.get(idx_v), em.get(val_v)
    mask = em.get(mask_v) if mask_v is not None else None
    em.ctx.uses_smem = True  # tt_smem: the 16-bit form finds the element's word from its byte offset in it

    def body(r, out):
        element = f"{buf.name}[{_along_axis(em, val.layout, r, strides, axis, idx.at(r))}]"
        call = _threadgroup_atomic(em, kind, ty, element, val.at(r))
        if mask is not None:
            em.open(f"if ({mask.at(r)})")
        em.emit(f"{out.at(r)} = {call};" if out is not None else f"{call};")
        if mask is not None:
            if out is not None:
                em.else_()
                em.emit(f"{out.at(r)} = {out.ctype}(0);")
            em.close()

    em.barrier()
    per_owned_element(em, op, body, like=val_v)
    em.barrier()

"""Tensors in threadgroup memory: every buffer this backend writes holds its tensor row-major, so the
element at coordinate c lives at index sum(c[d] * stride[d]). Used by layout conversions through memory,
reductions and scans across simdgroups, dot operand staging, explicit shared buffers and atomics.

The words for this memory, one rule for the backend's Python:
- "shared" is the TTGIR level, as upstream says it: `ttg.local_alloc` buffers ("shared buffers"), `#ttg.*_shared`
  encodings, the module's `ttg.shared` size, `allocation.offset`, the allocator pass
  (`passes/allocate_shared_memory.py`) and this module, which lays those buffers out;
- "threadgroup memory" is the MSL level: the one `threadgroup` array a kernel declares and everything the
  lowering reads and writes in it (`em.tg_view`, `tg_store`, `tg_load`; `tg_` abbreviates it), its barriers and
  its size limit;
- "scratch" is threadgroup memory the lowering takes for one op (`em.scratch`, `ctx.scratch_offset`), as opposed
  to the shared buffers the allocator placed;
- "local" appears only in upstream's op names (`ttg.local_*`, hence `local_memory_ops.py`) and "smem" only in
  emitted MSL identifiers (`tt_smem`, scratch view names such as `t_red_smem3`), which stay as they are.
"""
from __future__ import annotations

from typing import List, Sequence

from ..layouts import LinearLayout
from .emitter import FunctionEmitter, Lowered


def row_major_strides(shape: Sequence[int]) -> List[int]:
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= n
    return list(reversed(strides))


def index_expr(em: FunctionEmitter, lay: LinearLayout, reg: str, strides: Sequence[int]) -> str:
    """MSL expression of `sum(coord[d] * strides[d])` for the element in register `reg` of this thread."""
    terms = []
    for d, s in enumerate(strides):
        if s == 0 or lay.shape[d] == 1:
            continue
        c = em.coord_expr(lay, d, reg)
        if c == "0":
            continue
        terms.append(f"({c})" if s == 1 else f"({c}) * {s}")
    return " + ".join(terms) if terms else "0"


def store_registers(em: FunctionEmitter, src: Lowered, buf: str, strides: Sequence[int]) -> None:
    """Every element of `src` written once to `buf` at its row-major index."""
    with em.owned_regs(src.layout) as r:
        em.emit(em.tg_store(buf, index_expr(em, src.layout, r, strides), src.at(r), src.ctype))


def load_registers(em: FunctionEmitter, out: Lowered, buf: str, strides: Sequence[int]) -> None:
    """Every register of `out` read from `buf` at its element's row-major index."""
    with em.for_regs(out.regs) as r:
        em.emit(f"{out.at(r)} = {em.tg_load(buf, index_expr(em, out.layout, r, strides), out.ctype)};")

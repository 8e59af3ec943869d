"""Tensors in threadgroup memory: every buffer this backend writes holds its tensor row-major, its innermost rows
possibly padded (analysis/padded_rows.py for dot operands, scratch_padding.py for conversions), so the element at
coordinate c lives at index sum(c[d] * stride[d]). A thread's run of registers that are consecutive there moves as
one vector access (`vector_run`). Used by layout conversions through memory, reductions and scans across
simdgroups, dot operand staging, explicit shared buffers and atomics.

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
from .msl_helpers import PACKED, VECTOR_TYPES, vector_access_type


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


def vector_run(lay: LinearLayout, strides: Sequence[int], ctype: str, base_align: int, store: bool = True) -> int:
    """Registers one threadgroup store (or load) moves: the widest power of two V, up to 16 bytes (4 elements of 32
    or 64 bits, 8 or 16 of 16 or 8 bits as words), such that registers r..r+V-1 (r a multiple of V) are V
    consecutive elements of the innermost dimension, at stride 1 from an index that is a multiple of V in a buffer
    whose base is aligned to `base_align` bytes, and (stores) none of the run's register bits marks copies of other
    registers."""
    if ctype not in VECTOR_TYPES or not strides or strides[-1] != 1 or lay.rank == 0:
        return 1
    elem_bytes = VECTOR_TYPES[ctype]
    unit = tuple(0 for _ in lay.shape[:-1])
    k = 0
    while k < len(lay.reg) and lay.reg[k] == unit + (1 << k, ):
        k += 1
    v = min(1 << k, 16 // elem_bytes if ctype in PACKED else 4, max(1, base_align // elem_bytes))
    while v > 1:
        others = lay.reg[v.bit_length() - 1:] + lay.lane + lay.warp
        if not (store and lay.free_reg_mask() & (v - 1)) and all(b[-1] % v == 0 for b in others) and \
                all(s % v == 0 for s in strides[:-1]):
            return v
        v //= 2
    return 1


def store_registers(em: FunctionEmitter, src: Lowered, buf: str, strides: Sequence[int]) -> None:
    """Every element of `src` written once to `buf` at its index sum(c[d] * strides[d]); runs of registers that are
    consecutive elements there as one vector store each (`vector_run`, at the alignment of `buf`)."""
    v = 1 if src.uniform or src.layout is None else vector_run(src.layout, strides, src.ctype,
                                                                em.tg_alignment(buf))
    if v == 1:
        with em.owned_regs(src.layout) as r:
            em.emit(em.tg_store(buf, index_expr(em, src.layout, r, strides), src.at(r), src.ctype))
        return
    from .load_store_ops import require_vector_helpers
    at = vector_access_type(src.ctype, v)
    pack = require_vector_helpers(em, src.ctype, v)[1]
    own = em.owner_predicate(src.layout)
    free = src.layout.free_reg_mask()
    if own:
        em.open(f"if ({own})")
    r = em.loop_var("r")
    em.open(f"for (uint {r} = 0; {r} < {src.regs}; {r} += {v})")
    if free:
        em.open(f"if (({r} & {free}) == 0)")
    index = index_expr(em, src.layout, r, strides)
    em.emit(f"*({em.target.threadgroup_pointer(at)})({buf} + {index}) = {pack}({src.name} + {r});")
    if free:
        em.close()
    em.close()
    if own:
        em.close()


def load_registers(em: FunctionEmitter, out: Lowered, buf: str, strides: Sequence[int]) -> None:
    """Every register of `out` read from `buf` at its element's index sum(c[d] * strides[d]); runs of registers that
    are consecutive elements there as one vector load each (`vector_run`, at the alignment of `buf`)."""
    v = vector_run(out.layout, strides, out.ctype, em.tg_alignment(buf), store=False) if out.layout else 1
    if v == 1:
        with em.for_regs(out.regs) as r:
            em.emit(f"{out.at(r)} = {em.tg_load(buf, index_expr(em, out.layout, r, strides), out.ctype)};")
        return
    from .load_store_ops import require_vector_helpers
    at = vector_access_type(out.ctype, v)
    unpack = require_vector_helpers(em, out.ctype, v)[0]
    r = em.loop_var("r")
    em.open(f"for (uint {r} = 0; {r} < {out.regs}; {r} += {v})")
    index = index_expr(em, out.layout, r, strides)
    em.emit(f"{unpack}({out.name} + {r}, *({em.target.threadgroup_pointer(at)})({buf} + {index}));")
    em.close()

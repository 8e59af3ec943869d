"""Lowering of global memory ops: `tt.addptr`, `tt.load`, `tt.store`.

A masked-off lane never touches memory (the emulator's bounds check would report it, and on the GPU
it could fault). Stores of elements that the layout replicates over registers, lanes or warps are done
by exactly one owner, so a store never races with itself. When axis info proves that a thread's run of
V registers is V consecutive, aligned elements under one mask value, the run moves as one vector access
(up to 16 bytes, e.g. `float4`).
"""
from __future__ import annotations

from typing import Tuple

from ..analysis.axis_info import vector_width
from ..ir import Op
from .emitter import FunctionEmitter, Lowered, elem_type, elementwise, is_tensor
from .msl_helpers import PACKED, VECTOR_TYPES, vector_access_type, vector_register_helpers
from .registry import OpFamily

FAMILY = OpFamily("load_store")

def access_width(em: FunctionEmitter, op: Op, mask_index: int) -> Tuple[int, bool]:
    """(V, whole): the vector width for the tensor access `op` (1 when nothing wider is provably safe), and
    whether the mask is provably one value over each run of V registers. When it is not (a masked tail
    whose bound axis info cannot place), each run checks its V mask values and moves as a vector when all
    are set, else element by element. 16-bit and 8-bit elements move up to 16 bytes at once as 32-bit words
    (Metal's vectors have at most 4 elements)."""
    ptr_v = op.operands[0]
    ptr = em.get(ptr_v)
    if not ptr.is_tensor or ptr.uniform or em.axis is None:
        return 1, True
    ct = em.ctype(elem_type(ptr_v).pointee)
    if ct not in VECTOR_TYPES:
        return 1, True
    mask_v = op.operands[mask_index] if len(op.operands) > mask_index else None
    nbytes = elem_type(ptr_v).pointee.nbytes
    max_elems = 16 // nbytes if ct in PACKED else 4
    if op.name == "tt.store" and em.get(op.operands[1]).uniform:
        max_elems = 4  # a splat value has no registers to pack
    v = vector_width(em.axis, ptr_v, None, ptr.layout, nbytes, max_elems=max_elems)
    if v == 1 or ptr.regs % v:
        return 1, True
    if mask_v is None or em.get(mask_v).uniform:
        return v, True
    return v, vector_width(em.axis, ptr_v, mask_v, ptr.layout, nbytes, max_elems=max_elems) >= v


@FAMILY.lowers("tt.addptr")
def _addptr(em: FunctionEmitter, op: Op) -> None:
    elementwise(em, op, lambda a: f"{a[0]} + {a[1]}")


def _scalar_load(ptr: str, ct: str) -> str:
    return f"tt_f64_from_bits(*{ptr})" if ct == "tt_double" else f"*{ptr}"  # software float64 is its bits


@FAMILY.lowers("tt.load")
def _load(em: FunctionEmitter, op: Op) -> None:
    mask = op.operands[1] if len(op.operands) > 1 else None
    other = op.operands[2] if len(op.operands) > 2 else None
    ct = em.ctype(elem_type(op.result))
    default = f"{ct}(0)"
    width, whole = access_width(em, op, 1)
    if width > 1:
        _vector_load(em, op, width, whole, ct)
        return

    def make(a):
        value = _scalar_load(a[0], ct)
        if mask is None:
            return value
        fallback = a[2] if other is not None else default
        return f"{a[1]} ? {value} : {fallback}"

    elementwise(em, op, make)


def _all_set(mask: Lowered, r: str, width: int) -> str:
    return " && ".join(mask.at(f"{r} + {j}" if j else r) for j in range(width))


def _vector_load(em: FunctionEmitter, op: Op, width: int, whole: bool, ct: str) -> None:
    """Runs of `width` registers as one vector load each, written to the registers by `tt_unpack`:
    `mask ? *(device const float4*)p : other` when the mask is one value over the run; otherwise (a mask
    checked bit by bit, or a run moved as words) the vector load under the mask and the masked-off elements
    one by one. A masked-off element never reads memory."""
    ptr = em.get(op.operands[0])
    mask = em.get(op.operands[1]) if len(op.operands) > 1 else None
    other = em.get(op.operands[2]) if len(op.operands) > 2 else None
    out = em.declare(op.result)
    at = vector_access_type(ct, width)
    unpack, pack = require_vector_helpers(em, ct, width)
    r = _open_vector_runs(em, out.regs, width)
    loaded = f"*(device const {at}*){ptr.at(r)}"
    if mask is None:
        em.emit(f"{unpack}({out.name} + {r}, {loaded});")
    elif whole and width <= 4:
        if other is None:
            fallback = f"{at}(0)"
        elif other.uniform or not other.is_tensor:
            fallback = f"{at}({other.at(r)})"
        else:
            fallback = f"{pack}({other.name} + {r})"
        em.emit(f"{unpack}({out.name} + {r}, {mask.at(r)} ? {loaded} : {fallback});")
    else:
        em.open(f"if ({mask.at(r) if whole else _all_set(mask, r, width)})")
        em.emit(f"{unpack}({out.name} + {r}, {loaded});")
        em.else_()
        with em.for_regs(width, "j") as j:
            e = f"{r} + {j}"
            fb = other.at(e) if other is not None else f"{ct}(0)"
            em.emit(f"{out.name}[{e}] = {mask.at(e)} ? {_scalar_load(ptr.at(e), ct)} : {fb};" if not whole else
                    f"{out.name}[{e}] = {fb};")
        em.close()
    em.close()


def require_vector_helpers(em: FunctionEmitter, ct: str, width: int) -> Tuple[str, str]:
    """The names of `tt_unpack` and `tt_pack<width>` for element type `ct`, emitted once per kernel."""
    names = []
    for key, name, text in vector_register_helpers(ct, width, vector_access_type(ct, width)):
        em.ctx.helpers.setdefault(key, text)
        names.append(name)
    return names[0], names[1]


def _open_vector_runs(em: FunctionEmitter, regs: int, width: int) -> str:
    """Open a loop over the runs of `width` registers; returns the name of the run's first register."""
    r = em.loop_var("r")
    em.open(f"for (uint {r} = 0; {r} < {regs}; {r} += {width})")
    return r


@FAMILY.lowers("tt.store")
def _store(em: FunctionEmitter, op: Op) -> None:
    ptr = em.get(op.operands[0])
    val = em.get(op.operands[1])
    mask = em.get(op.operands[2]) if len(op.operands) > 2 else None
    masked = (lambda r: mask.at(r)) if mask is not None else None
    bits = ".bits" if val.ctype == "tt_double" else ""  # software float64 is stored as its bits
    lay = em.layout(op.operands[0].type) if is_tensor(op.operands[0]) else None
    width, whole = access_width(em, op, 2) if lay is not None else (1, True)
    if width == 1:
        with em.owned_regs(lay, masked) as r:
            em.emit(f"*{ptr.at(r)} = {val.at(r)}{bits};")
        return
    # runs of `width` registers: the run's first register carries the ownership (and the mask, when it is
    # one value over the run)
    own = em.owner_predicate(lay)
    free = lay.free_reg_mask()
    if own:
        em.open(f"if ({own})")
    ct = em.ctype(elem_type(op.operands[1]))
    vt = vector_access_type(ct, width)
    r = _open_vector_runs(em, lay.num_regs, width)
    if val.uniform:
        packed = f"{vt}({val.at(r)})"
    else:
        packed = f"{require_vector_helpers(em, ct, width)[1]}({val.name} + {r})"
    conds = ([f"({r} & {free}) == 0"] if free else []) + ([mask.at(r) if whole else _all_set(mask, r, width)]
                                                           if mask is not None else [])
    if conds:
        em.open(f"if ({' && '.join(conds)})")
    em.emit(f"*(device {vt}*){ptr.at(r)} = {packed};")
    if mask is not None and not whole:
        em.else_()
        if free:
            em.open(f"if (({r} & {free}) == 0)")
        with em.for_regs(width, "j") as j:
            e = f"{r} + {j}"
            em.open(f"if ({mask.at(e)})")
            em.emit(f"*{ptr.at(e)} = {val.at(e)};")
            em.close()
        if free:
            em.close()
    if conds:
        em.close()
    em.close()
    if own:
        em.close()

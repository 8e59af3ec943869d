"""Lowering of global memory ops: `tt.addptr`, `tt.load`, `tt.store`.

A masked-off lane never touches memory (the emulator's bounds check would report it, and on the GPU
it could fault). Stores of elements that the layout replicates over registers, lanes or warps are done
by exactly one owner, so a store never races with itself. When axis info proves that a thread's run of
V registers is V consecutive, aligned elements under one mask value, the run moves as one vector access
(up to 16 bytes, e.g. `float4`).
"""
from __future__ import annotations

from ..analysis.axis_info import vector_width
from ..ir import Op
from .elementwise_ops import elementwise
from .emitter import FunctionEmitter, elem_type, is_tensor
from .msl_types import elem_bytes
from .registry import OpFamily

FAMILY = OpFamily("load_store")

_VECTOR_TYPES = {"float", "half", "bfloat", "int", "uint", "short", "ushort", "char", "uchar", "long", "ulong"}


def access_width(em: FunctionEmitter, op: Op, mask_index: int) -> int:
    """Vector width for the tensor access `op` (1 when nothing wider is provably safe)."""
    ptr_v = op.operands[0]
    ptr = em.get(ptr_v)
    if not ptr.is_tensor or ptr.uniform or em.axis is None:
        return 1
    ct = em.ctype(elem_type(ptr_v).pointee)
    if ct not in _VECTOR_TYPES:
        return 1
    mask_v = op.operands[mask_index] if len(op.operands) > mask_index else None
    v = vector_width(em.axis, ptr_v, mask_v, ptr.layout, elem_bytes(elem_type(ptr_v).pointee))
    return v if ptr.regs % v == 0 else 1


@FAMILY.lowers("tt.addptr")
def _addptr(em: FunctionEmitter, op: Op) -> None:
    elementwise(em, op, lambda a: f"{a[0]} + {a[1]}")


@FAMILY.lowers("tt.load")
def _load(em: FunctionEmitter, op: Op) -> None:
    mask = op.operands[1] if len(op.operands) > 1 else None
    other = op.operands[2] if len(op.operands) > 2 else None
    ct = em.ctype(elem_type(op.result))
    default = f"{ct}(0)"
    width = access_width(em, op, 1)
    if width > 1:
        _vector_load(em, op, width, ct)
        return

    soft_f64 = ct == "tt_double"  # software float64 is stored as its bits (a ulong)

    def make(a):
        value = f"tt_f64_from_bits(*{a[0]})" if soft_f64 else f"*{a[0]}"
        if mask is None:
            return value
        fallback = a[2] if other is not None else default
        return f"{a[1]} ? {value} : {fallback}"

    elementwise(em, op, make)


def _vector_load(em: FunctionEmitter, op: Op, width: int, ct: str) -> None:
    ptr = em.get(op.operands[0])
    mask = em.get(op.operands[1]) if len(op.operands) > 1 else None
    other = em.get(op.operands[2]) if len(op.operands) > 2 else None
    out = em.declare(op.result)
    vt = f"{ct}{width}"
    r = _open_vector_runs(em, out.regs, width)
    if mask is not None:
        em.open(f"if ({mask.at(r)})")
    vec = em.temp("vec")
    em.emit(f"const {vt} {vec} = *(device const {vt}*){ptr.at(r)};")
    with _lanes_of_vector(em, width) as j:
        em.emit(f"{out.name}[{r} + {j}] = {vec}[{j}];")
    if mask is not None:
        em.else_()
        with _lanes_of_vector(em, width) as j:
            em.emit(f"{out.name}[{r} + {j}] = {other.at(f'{r} + {j}') if other is not None else f'{ct}(0)'};")
        em.close()
    em.close()


def _open_vector_runs(em: FunctionEmitter, regs: int, width: int) -> str:
    """Open a loop over the runs of `width` registers; returns the name of the run's first register."""
    g, r = em.loop_var("g"), em.loop_var("r")
    em.open(f"for (uint {g} = 0; {g} < {regs // width}; ++{g})")
    em.emit(f"const uint {r} = {width} * {g};")
    return r


def _lanes_of_vector(em: FunctionEmitter, width: int):
    return em.for_regs(width, "j")


@FAMILY.lowers("tt.store")
def _store(em: FunctionEmitter, op: Op) -> None:
    ptr = em.get(op.operands[0])
    val = em.get(op.operands[1])
    mask = em.get(op.operands[2]) if len(op.operands) > 2 else None
    masked = (lambda r: mask.at(r)) if mask is not None else None
    bits = ".bits" if val.ctype == "tt_double" else ""  # software float64 is stored as its bits
    lay = em.layout(op.operands[0].type) if is_tensor(op.operands[0]) else None
    width = access_width(em, op, 2) if lay is not None else 1
    if width == 1:
        with em.owned_regs(lay, masked) as r:
            em.emit(f"*{ptr.at(r)} = {val.at(r)}{bits};")
        return
    # runs of `width` registers: the run's first register carries the ownership and the mask
    own = em.owner_predicate(lay)
    free = lay.free_reg_mask()
    if own:
        em.open(f"if ({own})")
    ct = em.ctype(elem_type(op.operands[1]))
    vt = f"{ct}{width}"
    r = _open_vector_runs(em, lay.num_regs, width)
    conds = ([f"({r} & {free}) == 0"] if free else []) + ([mask.at(r)] if mask is not None else [])
    if conds:
        em.open(f"if ({' && '.join(conds)})")
    vec = em.temp("vec")
    em.emit(f"{vt} {vec};")
    with _lanes_of_vector(em, width) as j:
        em.emit(f"{vec}[{j}] = {val.at(f'{r} + {j}')};")
    em.emit(f"*(device {vt}*){ptr.at(r)} = {vec};")
    if conds:
        em.close()
    em.close()
    if own:
        em.close()

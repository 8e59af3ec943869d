"""Lowering of `tt.dot`.

simdgroup_matrix path (result in `AppleMmaEncoding`, chosen by `passes/accelerate_matmul.py`): the
operands are staged row-major in threadgroup memory (rows padded against bank conflicts:
`analysis/padded_rows.py`), each simdgroup loads its 8x8 fragments with `simdgroup_load` and accumulates with
`simdgroup_multiply_accumulate`; the accumulator lives in registers (the fragment layout is the encoding's
linear layout), so across a K loop it never touches threadgroup memory. Operands too large for the room left are staged in rounds, a slab of K at a time.

Operands in `DotOperandEncoding(parent=AppleMmaEncoding)` are already in registers as the fragments a
simdgroup multiplies (`layouts.mma_operand_layout`): they fill `thread_elements()` directly, without
threadgroup memory (attention's Q, hoisted out of its loop, and P, which a dot with one simdgroup column
produces in that very layout).

FMA path (everything else: int8, fp8, odd shapes): every thread computes its result elements as a
K-long chain of fused multiply-adds over operand registers that already hold whole rows of A and
columns of B. Products and sums are computed in float (int32 for integer dots) and rounded to the
accumulator type after each step, like upstream's FMA path.

`input_precision` is ignored on both paths: Metal has no tf32, so every dot is an IEEE dot.
"""
from __future__ import annotations

from typing import List

from ..analysis.padded_rows import padded_row
from ..ir import Op
from ..ir.types import AppleMmaEncoding, DotOperandEncoding, MemDescType, TensorType
from ..layouts import LinearLayout
from .conversions import fp8_to_float
from .emitter import FunctionEmitter, elem_type, linear_expr
from .registry import OpFamily
from .shared_memory import index_expr, row_major_strides, store_registers

FAMILY = OpFamily("dot")


def _reg_index(lay: LinearLayout, coord) -> int:
    for r in range(lay.num_regs):
        if lay.reg_coord(r) == tuple(coord):
            return r
    raise KeyError(coord)


@FAMILY.lowers("tt.dot")
def _dot(em: FunctionEmitter, op: Op) -> None:
    if isinstance(op.result.type.encoding, AppleMmaEncoding):
        _dot_simdgroup(em, op)
    else:
        _dot_fma(em, op)


_FRAGMENT = {"f16": "half", "bf16": "bfloat", "f32": "float"}


def _log2(n: int) -> int:
    return n.bit_length() - 1


def _holds_fragments(v, enc: AppleMmaEncoding) -> bool:
    """Whether operand `v` is already in registers as the fragments this dot multiplies
    (`layouts.mma_operand_layout`)."""
    e = v.type.encoding if isinstance(v.type, TensorType) else None
    return isinstance(e, DotOperandEncoding) and isinstance(e.parent, AppleMmaEncoding) and e.parent == enc


def _dot_simdgroup(em: FunctionEmitter, op: Op) -> None:
    a_v, b_v, c_v = op.operands[:3]
    res_ty: TensorType = op.result.type
    enc: AppleMmaEncoding = res_ty.encoding
    rank = len(res_ty.shape)
    M, N = res_ty.shape[-2], res_ty.shape[-1]
    K = a_v.type.shape[-1]
    batch = res_ty.shape[0] if rank == 3 else 1
    wm, wn = enc.warps_per_cta
    fm, fn_ = M // wm // 8, N // wn // 8
    in_t = _FRAGMENT[elem_type(a_v).name]
    # A 16-bit result accumulates in float fragments over this dot's K and is rounded once at its end: at
    # least as accurate as NVIDIA's MMA, which rounds a 16-bit accumulator after every 16 of K (rounding after
    # every 8-deep multiply_accumulate put test_matmul's fp16 results outside upstream's tolerance)
    acc_t = "float"
    lay = em.layout(res_ty)
    # 1. operands: fragments already in registers are used as they are; shared buffers are read in place;
    #    other register layouts are staged row-major in threadgroup memory: whole, or in rounds over K when
    #    they do not fit in the room left (each round a slab of Kc columns of A and rows of B)
    in_regs = {id(v): _holds_fragments(v, enc) for v in (a_v, b_v)}
    staged = [v for v in (a_v, b_v) if not isinstance(v.type, MemDescType) and not in_regs[id(v)]]
    elem_bytes = a_v.type.element.nbytes
    room = em.ctx.scratch_room(op) if staged else 0
    rounds, pad = _staging_plan([(v, v is a_v) for v in staged], K, N, elem_bytes, room)
    kc = K // rounds
    # the row length (elements) fragments are loaded with: a staged slab's (padded) rows, a shared buffer's own
    lds = {id(a_v): _padded(kc, elem_bytes, pad), id(b_v): _padded(N, elem_bytes, pad)}
    views = em.scratch(op, [(in_t, _slab_bytes(v, v is a_v, kc, lds[id(v)], elem_bytes)) for v in staged],
                       "operand_smem") if staged else []
    bufs = {id(v): view for v, view in zip(staged, views)}
    if rounds == 1:
        for v in staged:
            store_registers(em, em.get(v), bufs[id(v)], _slab_strides(v, v is a_v, K, lds[id(v)]))
        if staged:
            em.barrier()
    for v in (a_v, b_v):
        if isinstance(v.type, MemDescType):
            buf = em.get(v)
            strides = buf.strides or row_major_strides(v.type.shape)
            if strides[-1] != 1 or (len(strides) == 3 and strides[0] != strides[1] * v.type.shape[1]):
                raise em.internal(f"dot operand {v.name}: a shared view with strides {list(strides)} (simdgroup_load "
                                  "reads rows of contiguous elements, batches one after another)")
            bufs[id(v)] = buf.name
            lds[id(v)] = strides[-2]
    a_ld, b_ld = lds[id(a_v)], lds[id(b_v)]
    a_s, b_s = bufs.get(id(a_v)), bufs.get(id(b_v))
    # 2. this simdgroup's tile origin
    wrow, wcol = em.temp("warp_row"), em.temp("warp_col")
    if a_s is not None:
        em.emit(f"const uint {wrow} = {linear_expr('tt_warp', [b[rank - 2] for b in lay.warp])};")
    if b_s is not None:
        em.emit(f"const uint {wcol} = {linear_expr('tt_warp', [b[rank - 1] for b in lay.warp])};")
    c = em.get(c_v)
    out = em.declare(op.result)
    nfrag = fm * fn_
    log_fn = fn_.bit_length() - 1
    frag_reg = lambda f: f"(((({f}) % {fn_}) << 1) | ((({f}) / {fn_}) << {1 + log_fn}))"  # noqa: E731
    rnd = em.loop_var("round") if rounds > 1 else None
    if rnd is not None:  # the accumulator goes round by round through the result's registers
        with em.for_regs(out.regs) as r:
            em.emit(f"{out.at(r)} = {out.ctype}({c.at(r)});")
        c = out
        em.open(f"for (uint {rnd} = 0; {rnd} < {rounds}; ++{rnd})")
        for v in staged:
            _store_round(em, v, bufs[id(v)], v is a_v, kc, rnd, lds[id(v)])
        em.barrier()
    bt, f, kk, i, j = (em.loop_var(n) for n in ("bt", "f", "kk", "i", "j"))
    em.open(f"for (uint {bt} = 0; {bt} < {batch}; ++{bt})")
    breg = f"({bt} << {1 + log_fn + (fm.bit_length() - 1)})" if batch > 1 else "0"
    acc = em.temp("acc_frag")
    em.emit(f"simdgroup_matrix<{acc_t}, 8, 8> {acc}[{nfrag}];")
    em.open(f"for (uint {f} = 0; {f} < {nfrag}; ++{f})")
    for e in range(2):
        em.emit(f"{acc}[{f}].thread_elements()[{e}] = {acc_t}({c.at(f'{breg} | {frag_reg(f)} | {e}')});")
    em.close()
    em.open(f"for (uint {kk} = 0; {kk} < {kc // 8}; ++{kk})")
    af, bf = em.temp("a_frag"), em.temp("b_frag")
    em.emit(f"simdgroup_matrix<{in_t}, 8, 8> {af}[{fm}];")
    em.emit(f"simdgroup_matrix<{in_t}, 8, 8> {bf}[{fn_}];")
    # fragment i of this K step: from registers (register index: element, then the fragment's column,
    # then its row, then the batch) or with simdgroup_load from threadgroup memory (a round's slab holds
    # only its Kc columns of A / rows of B)
    step = kk if rnd is None else f"({rnd} * {kc // 8} + {kk})"
    a_round = kk if a_v in staged and rnd is not None else step
    b_k, b_round = (kc, kk) if b_v in staged and rnd is not None else (K, step)
    a_regs = f"({bt} << {1 + _log2(K // 8) + _log2(fm)}) | ({i} << {1 + _log2(K // 8)}) | ({step} << 1)"
    a_tg = f"{a_s} + {bt} * {M * a_ld} + ({wrow} + 8 * {i}) * {a_ld} + 8 * {a_round}, {a_ld}"
    _load_fragments(em, af, i, fm, in_t, a_v, a_s is None, a_regs, a_tg)
    b_regs = f"({bt} << {1 + _log2(fn_) + _log2(K // 8)}) | ({step} << {1 + _log2(fn_)}) | ({j} << 1)"
    b_tg = f"{b_s} + {bt} * {b_k * b_ld} + 8 * {b_round} * {b_ld} + {wcol} + 8 * {j}, {b_ld}"
    _load_fragments(em, bf, j, fn_, in_t, b_v, b_s is None, b_regs, b_tg)
    em.open(f"for (uint {i} = 0; {i} < {fm}; ++{i})")
    em.open(f"for (uint {j} = 0; {j} < {fn_}; ++{j})")
    em.emit(f"simdgroup_multiply_accumulate({acc}[{i} * {fn_} + {j}], {af}[{i}], {bf}[{j}], "
            f"{acc}[{i} * {fn_} + {j}]);")
    em.close()
    em.close()
    em.close()
    em.open(f"for (uint {f} = 0; {f} < {nfrag}; ++{f})")
    for e in range(2):
        em.emit(f"{out.name}[{breg} | {frag_reg(f)} | {e}] = {out.ctype}({acc}[{f}].thread_elements()[{e}]);")
    em.close()
    em.close()
    if rnd is not None:
        em.barrier()  # every simdgroup is done with this round's slabs before the next round writes them
        em.close()


def _padded(row: int, elem_bytes: int, pad: bool) -> int:
    """The row length, in elements, of a staged slab whose rows hold `row` elements: padded as the buffers dots
    read are (`analysis/padded_rows.py`) where that costs no extra round over K (each round is two barriers)."""
    return padded_row(row, elem_bytes) if pad else row


def _slab_rows(v, is_a: bool, kc: int) -> int:
    """Rows per batch of operand `v`'s slab of one round: A's M, B's Kc."""
    return v.type.shape[-2] if is_a else kc


def _slab_bytes(v, is_a: bool, kc: int, ld: int, elem_bytes: int) -> int:
    """Bytes of operand `v`'s slab of one round: A [batch, M, ld] (ld >= Kc), B [batch, Kc, ld] (ld >= N)."""
    shape = v.type.shape
    batch = shape[0] if len(shape) == 3 else 1
    return batch * _slab_rows(v, is_a, kc) * ld * elem_bytes


def _staging_plan(staged, K: int, N: int, elem_bytes: int, room: int):
    """(rounds, padded) for the operands `staged` ((value, is A) pairs): the fewest rounds over K whose slabs
    fit in `room` bytes (halving Kc while it stays a multiple of 16), with padded rows where they still fit."""
    def nbytes(rounds: int, pad: bool) -> int:
        kc = K // rounds
        return sum(_slab_bytes(v, is_a, kc, _padded(kc if is_a else N, elem_bytes, pad), elem_bytes)
                   for v, is_a in staged)

    rounds = 1
    while staged and nbytes(rounds, False) > room and (K // rounds) % 16 == 0:
        rounds *= 2
    return rounds, bool(staged) and nbytes(rounds, True) <= room


def _slab_strides(v, is_a: bool, kc: int, ld: int) -> List[int]:
    """Element strides of operand `v`'s slab (A [..., M, Kc], B [..., Kc, N]) whose rows are `ld` long."""
    rows = _slab_rows(v, is_a, kc)
    return ([rows * ld] if len(v.type.shape) == 3 else []) + [ld, 1]


def _store_round(em: FunctionEmitter, v, buf: str, is_a: bool, kc: int, rnd: str, ld: int) -> None:
    """Write the registers of operand `v` (A: [..., M, K], B: [..., K, N]) whose K index falls in round
    `rnd` to its slab `buf` (A: [..., M, Kc], B: [..., Kc, N], rows `ld` elements long)."""
    src = em.get(v)
    shape = list(v.type.shape)
    kdim = len(shape) - 1 if is_a else len(shape) - 2
    only_k = [1 if d == kdim else 0 for d in range(len(shape))]
    strides = _slab_strides(v, is_a, kc, ld)
    with em.owned_regs(src.layout) as r:
        k = em.temp("k")
        em.emit(f"const uint {k} = {index_expr(em, src.layout, r, only_k)};")
        em.open(f"if ({k} / {kc} == {rnd})")
        idx = f"{index_expr(em, src.layout, r, strides)} - {rnd} * {kc * strides[kdim]}"
        em.emit(em.tg_store(buf, idx, src.at(r), src.ctype))
        em.close()


def _load_fragments(em: FunctionEmitter, frags: str, idx: str, count: int, in_t: str, v, in_regs: bool,
                    reg_base: str, tg_args: str) -> None:
    em.open(f"for (uint {idx} = 0; {idx} < {count}; ++{idx})")
    if in_regs:
        regs = em.get(v)
        for e in range(2):
            em.emit(f"{frags}[{idx}].thread_elements()[{e}] = {in_t}({regs.at(f'{reg_base} | {e}')});")
    else:
        em.emit(f"simdgroup_load({frags}[{idx}], {tg_args});")
    em.close()


def _dot_fma(em: FunctionEmitter, op: Op) -> None:
    a_v, b_v, c_v = op.operands[:3]
    a_ty: TensorType = a_v.type
    b_ty: TensorType = b_v.type
    c_ty: TensorType = c_v.type
    for v, idx in ((a_v, 0), (b_v, 1)):
        enc = v.type.encoding
        if not (isinstance(enc, DotOperandEncoding) and enc.op_idx == idx and enc.parent == c_ty.encoding):
            raise em.unsupported(f"dot operand {idx} has layout {enc}; the FMA path needs a dot operand layout "
                                 "whose parent is the result's layout")
    a, b, c = (em.get(v) for v in (a_v, b_v, c_v))
    la, lb, lc = em.layout(a_ty), em.layout(b_ty), em.layout(c_ty)
    rank = len(c_ty.shape)
    K = a_ty.shape[-1]
    # For each result register bit: the A and B registers holding the same (batch, m) / (batch, n).
    a_map: List[int] = []
    b_map: List[int] = []
    for basis in lc.reg:
        ca = list(basis)
        ca[rank - 1] = 0
        cb = list(basis)
        cb[rank - 2] = 0
        a_map.append(_reg_index(la, ca) if any(ca) else 0)
        b_map.append(_reg_index(lb, cb) if any(cb) else 0)
    a_k = [_reg_index(la, [0] * (rank - 1) + [1 << i]) for i in range(K.bit_length() - 1)]
    b_k = [_reg_index(lb, [0] * (rank - 2) + [1 << i, 0]) for i in range(K.bit_length() - 1)]
    acc_t = elem_type(op.result)
    a_elem, b_elem = elem_type(a_v), elem_type(b_v)
    out = em.declare(op.result)
    integer = acc_t.is_int
    soft_f64 = out.ctype == "tt_double"  # float64 in software: fused multiply-adds in binary64
    work = "int" if integer else "tt_double" if soft_f64 else "float"
    with em.for_regs(out.regs) as r:
        ra = linear_expr(r, a_map) if out.regs > 1 else "0"
        rb = linear_expr(r, b_map) if out.regs > 1 else "0"
        acc = em.temp("acc")
        em.emit(f"{work} {acc} = {work}({c.at(r)});")
        k = em.loop_var("k")
        em.open(f"for (uint {k} = 0; {k} < {K}; ++{k})")
        ia = f"({ra}) ^ ({linear_expr(k, a_k)})" if K > 1 else ra
        ib = f"({rb}) ^ ({linear_expr(k, b_k)})" if K > 1 else rb
        if integer:
            em.emit(f"{acc} = {acc} + int({a.at(ia)}) * int({b.at(ib)});")
        elif soft_f64:
            em.emit(f"{acc} = tt_f64_fma({a.at(ia)}, {b.at(ib)}, {acc});")
        else:
            # fp8 operands are held as their bytes: decode them (float(uchar) would be the byte's value)
            # (a 16-bit result is rounded once, after the dot's K, as on the simdgroup_matrix path)
            em.emit(f"{acc} = fma({fp8_to_float(em, a_elem, a.at(ia))}, {fp8_to_float(em, b_elem, b.at(ib))}, {acc});")
        em.close()
        em.emit(f"{out.at(r)} = {out.ctype}({acc});")

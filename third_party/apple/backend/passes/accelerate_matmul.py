"""Apple matmul pass: moves `tt.dot`s whose types allow it onto the `simdgroup_matrix` encoding.

For each eligible dot the accumulator and result take `AppleMmaEncoding`; conversions from and to the
original layout are inserted around it. When the accumulator is carried by an `scf.for` (the
`acc += tl.dot(a, b)` pattern), the loop-carried value itself takes the MMA encoding, so the conversions
sit outside the loop and the accumulator stays in fragments across iterations.

Eligible: f16, bf16 or f32 operands of one type, an f32 accumulator (or f16 with f16 operands), and
tiles that split into 8x8 fragments per simdgroup. Everything else keeps its layout and lowers on the
FMA path (int8, fp8, f64, odd shapes).
"""
from __future__ import annotations

from typing import Optional, Tuple

from ..analysis.padded_rows import PAD_ATTR
from ..ir import Block, Function, Module, Op
from ..ir.types import AppleMmaEncoding, TensorType
from ..target import MAX_THREADGROUP_MEMORY
from .operands_in_registers import chained_dots, operands_in_registers
from .rewrite import convert_layout, insert_after, insert_before, replace_uses, scope, uses

_OPERAND_TYPES = ("f16", "bf16", "f32")


def choose_warps(m: int, n: int, num_warps: int, whole_rows: bool = False) -> Optional[Tuple[int, int]]:
    """Split `num_warps` simdgroups over an (m, n) tile, N first, keeping tiles square-ish; simdgroups
    beyond the number of 8x8 fragments become replicas. `whole_rows`: one simdgroup column (each simdgroup
    owns whole rows), so that the result is already the A operand of a following dot."""
    if m % 8 or n % 8:
        return None
    if whole_rows:
        wm = 1
        while wm * 2 <= num_warps and m % (8 * wm * 2) == 0:
            wm *= 2
        return (wm, 1)
    frags = (m // 8) * (n // 8)
    usable = 1
    while usable * 2 <= min(num_warps, frags):
        usable *= 2
    best = None
    wm = 1
    while wm <= usable:
        wn = usable // wm
        if m % (8 * wm) == 0 and n % (8 * wn) == 0:
            score = abs((m // wm) - (n // wn))
            if best is None or score < best[0]:
                best = (score, (wm, wn))
        wm *= 2
    return best[1] if best else None


def _eligible(op: Op, num_warps: int, whole_rows: bool = False) -> Optional[AppleMmaEncoding]:
    a, b, c = op.operands[:3]
    res = op.result.type
    if not isinstance(res, TensorType) or len(res.shape) not in (2, 3):
        return None
    if not isinstance(a.type, TensorType) or not isinstance(b.type, TensorType):
        return None
    ta, tb, tc = a.type.element.name, b.type.element.name, res.element.name
    if ta != tb or ta not in _OPERAND_TYPES:
        return None
    if not (tc == "f32" or (tc == "f16" and ta == "f16")):
        return None
    k = a.type.shape[-1]
    if k % 8:
        return None
    warps = choose_warps(res.shape[-2], res.shape[-1], num_warps, whole_rows)
    return AppleMmaEncoding(warps) if warps else None


_RESCALE_OPS = ("arith.mulf", "arith.addf", "arith.subf", "arith.divf")


def _row_broadcast(v):
    """(expand_dims op, broadcast op) when `v` is `broadcast(expand_dims(x))` of a 1-D-per-row value."""
    bc = v.owner
    if not isinstance(bc, Op) or bc.name != "tt.broadcast":
        return None
    ex = bc.operands[0].owner
    while isinstance(ex, Op) and ex.name == "ttg.convert_layout":  # layout hops between the two
        ex = ex.operands[0].owner
    if not isinstance(ex, Op) or ex.name != "tt.expand_dims":
        return None
    return ex, bc


def _loop_carrier(op: Op):
    """If the accumulator is an scf.for iter_arg that reaches this dot only through elementwise rescaling by
    row-broadcast values (`acc = acc * alpha[:, None]` in attention), and the dot's result is yielded back
    into the same slot, return (for_op, slot, rescale ops from the iter_arg to the dot)."""
    chain = []
    v = op.operands[2]
    while True:
        owner = v.owner
        if isinstance(owner, Block):
            break
        if not isinstance(owner, Op) or owner.name not in _RESCALE_OPS:
            return None
        through = [x for x in owner.operands if not _row_broadcast(x)]
        if len(through) != 1:
            return None
        chain.append(owner)
        v = through[0]
    acc, block = v, v.owner
    if block.parent is None or block.parent.parent is None:
        return None
    loop = block.parent.parent
    if loop.name != "scf.for" or acc not in block.args[1:]:
        return None
    slot = block.args.index(acc) - 1
    consumers = list(reversed(chain)) + [op]
    value = acc
    for consumer in consumers:  # each link of the chain is read once, by the next link
        if [u for u, _ in uses(block.ops, value)] != [consumer]:
            return None
        value = consumer.result
    yield_op = block.ops[-1] if block.ops else None
    if yield_op is None or yield_op.name != "scf.yield" or yield_op.operands[slot] is not op.result:
        return None
    if [u for u, _ in uses(block.ops, op.result)] != [yield_op]:
        return None
    return loop, slot, list(reversed(chain))


def _move_rescale_to_mma(chain, mma: AppleMmaEncoding) -> None:
    """Give the rescale ops the MMA layout; their row-broadcast operands are rebuilt from the 1-D value
    converted to the MMA rows' slice layout, so only that vector moves between layouts. (Not
    operands_in_registers._Rebuilder: it would also recompute the vector's elementwise producers, e.g.
    attention's exp2(m_i - m_new), in the slice layout, converting each of their operands instead of the one
    result.)"""
    from ..ir.types import SliceEncoding
    for link in chain:
        res_ty: TensorType = link.result.type
        link.result.type = TensorType(res_ty.shape, res_ty.element, mma)
        for i, x in enumerate(link.operands):
            rb = _row_broadcast(x)
            if rb is None:
                continue
            ex, bc = rb
            axis = int(ex.attrs["axis"])
            row = ex.operands[0]
            slice_ty = TensorType(row.type.shape, row.type.element, SliceEncoding(axis, mma))
            cvt = convert_layout(row, slice_ty, link.loc, f"{row.name}_mma_rows")
            ex_ty, bc_ty = ex.result.type, bc.result.type
            new_ex = Op("tt.expand_dims", [cvt.result], [
                type(ex.result)(f"{ex.result.name}_mma", TensorType(ex_ty.shape, ex_ty.element, mma), None, 0,
                                link.loc)
            ], dict(ex.attrs), [], link.loc)
            new_bc = Op("tt.broadcast", [new_ex.result], [
                type(bc.result)(f"{bc.result.name}_mma", TensorType(bc_ty.shape, bc_ty.element, mma), None, 0,
                                link.loc)
            ], {}, [], link.loc)
            for new in (cvt, new_ex, new_bc):
                insert_before(link, new)
            link.operands[i] = new_bc.result


def _fold_following_converts(cvt: Op) -> None:
    """When everything that reads `cvt`'s result converts it again, convert once, from the source."""
    readers = list(uses(scope(cvt.result), cvt.result))
    if readers and all(u.name == "ttg.convert_layout" for u, _ in readers):
        for u, i in readers:
            u.operands[i] = cvt.operands[0]
        cvt.parent.ops.remove(cvt)


def _rewrite(op: Op, mma: AppleMmaEncoding) -> None:
    res = op.result
    orig: TensorType = res.type
    mma_ty = TensorType(orig.shape, orig.element, mma)
    carrier = _loop_carrier(op)
    if carrier is not None:
        loop, slot, chain = carrier
        init = loop.operands[3 + slot]
        cvt_in = convert_layout(init, mma_ty, loop.loc, f"{init.name}_mma")
        insert_before(loop, cvt_in)
        loop.operands[3 + slot] = cvt_in.result
        loop.regions[0].entry.args[1 + slot].type = mma_ty
        _move_rescale_to_mma(chain, mma)
        res.type = mma_ty
        out = loop.results[slot]
        out.type = mma_ty
        cvt_out = convert_layout(out, orig, loop.loc, f"{out.name}_blocked")
        insert_after(loop, cvt_out)
        replace_uses(scope(out), out, cvt_out.result, skip=cvt_out)
        _fold_following_converts(cvt_out)
        return
    cvt_in = convert_layout(op.operands[2], mma_ty, op.loc, f"{op.operands[2].name}_mma")
    insert_before(op, cvt_in)
    op.operands[2] = cvt_in.result
    res.type = mma_ty
    cvt_out = convert_layout(res, orig, op.loc, f"{res.name}_blocked")
    insert_after(op, cvt_out)
    replace_uses(scope(res), res, cvt_out.result, skip=cvt_out)
    _fold_following_converts(cvt_out)


def _read_operands_from_shared(op: Op) -> None:
    """An operand that is only a `ttg.local_load` of a shared buffer is read by `simdgroup_load` straight
    from that buffer: the dot takes the memdesc and the register copy disappears."""
    for idx in (0, 1):
        src = op.operands[idx]
        load = src.owner
        if not isinstance(load, Op) or load.name != "ttg.local_load":
            continue
        if [u for u, _ in uses(scope(src), src)] != [op]:
            continue
        op.operands[idx] = load.operands[0]
        load.parent.ops.remove(load)


def _stage_large_operands_in_rounds(op: Op) -> None:
    """Operand buffers that together exceed threadgroup memory (`local_alloc` of a register value, read once
    by a `local_load` for this dot) go: the dot reads the register values and stages them itself, in rounds
    over K through the room left (lowering/dot_ops.py)."""
    total = sum(v.type.nbytes for v in op.operands[:2])
    if total <= MAX_THREADGROUP_MEMORY:
        return
    for idx in (0, 1):
        load = op.operands[idx].owner
        if not isinstance(load, Op) or load.name != "ttg.local_load":
            continue
        alloc = load.operands[0].owner
        if not isinstance(alloc, Op) or alloc.name != "ttg.local_alloc" or not alloc.operands:
            continue
        if [u for u, _ in uses(scope(load.result), load.result)] != [op] or \
                [u for u, _ in uses(scope(alloc.result), alloc.result)] != [load]:
            continue
        op.operands[idx] = alloc.operands[0]
        load.parent.ops.remove(load)
        alloc.parent.ops.remove(alloc)


def accelerate_matmul(module: Module) -> int:
    """Rewrite every eligible dot of `module`; returns how many were moved onto simdgroup_matrix. Dots
    chained through elementwise ops (attention) get one simdgroup column, and `operands_in_registers`
    then keeps the operands that need no shared buffer in registers."""
    count = 0
    chains = {}
    for fn in module.functions:
        pairs = chained_dots(fn)
        in_chain = {id(d) for pair in pairs for d in pair}
        encs = {}
        for op in [o for o in fn.walk() if o.name == "tt.dot"]:
            mma = _eligible(op, module.num_warps, whole_rows=id(op) in in_chain)
            if mma is not None:
                encs[id(op)] = mma
                _rewrite(op, mma)
                if len(module.functions) == 1:  # only there are buffers placed again for the longer liveness
                    _stage_large_operands_in_rounds(op)
                    _read_operands_from_shared(op)
                count += 1
        chains[fn.name] = [(p, c) for p, c in pairs if id(p) in encs and id(c) in encs]
    operands_in_registers(module, chains)
    if len(module.functions) == 1:  # only there are buffers placed again, so only there can they grow
        for fn in module.functions:
            _pad_fragment_buffers(fn)
    return count


def _pad_fragment_buffers(fn: Function) -> None:
    """Mark the buffers that only simdgroup_matrix dots read (made from a register value, so written once, by
    the backend) for padded rows (`analysis/padded_rows.py`); the allocator keeps the mark where it fits."""
    for alloc in [o for o in fn.walk() if o.name == "ttg.local_alloc" and o.operands]:
        readers = [u for u, _ in uses(scope(alloc.result), alloc.result)]
        if readers and all(u.name == "tt.dot" and isinstance(u.result.type.encoding, AppleMmaEncoding)
                           for u in readers):
            alloc.attrs[PAD_ATTR] = 1

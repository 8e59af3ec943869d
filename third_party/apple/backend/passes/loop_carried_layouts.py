"""Apple pass: carry a loop's row vectors in the MMA rows' layout.

`accelerate_matmul` puts a loop-carried accumulator on the simdgroup_matrix layout, but leaves the 1-D
vectors carried next to it (attention's running max `m_i` and sum `l_i`) in the blocked layout upstream
chose. Each step then moves them between the two: the row reductions of the MMA tile arrive in the MMA rows'
slice layout and are converted to the blocked one, and the rescale factor goes back the other way, each
conversion two barriers through threadgroup memory.

For every 1-D tensor carried by a loop that also carries an MMA-layout tensor, this pass computes the value it
yields in that MMA's slice layout instead, when it can be without converting anything: from the carried values
themselves, from values converted out of that layout, and from splats and constants, through elementwise
ops. Such vectors whose old-layout values nothing else reads (an address computation, a store, a branch would
need a conversion back on every step) are carried in the slice layout; the conversions of them in the body
read the new values, and what the old ones fed becomes dead and goes. Users after the loop get one
conversion back.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Set, Tuple

from ..ir import Function, Module, Op, Value
from ..ir.types import AppleMmaEncoding, BlockedEncoding, Encoding, SliceEncoding, TensorType
from .operands_in_registers import is_elementwise
from .rewrite import convert_layout, drop_unread, insert_after, insert_before, replace_uses, scope, uses

_REBUILT = ("tt.splat", "arith.constant")  # cloned in the new layout wherever they are defined
_PURE = ("ttg.convert_layout", "tt.expand_dims", "tt.broadcast", "tt.splat", "arith.constant", "tt.make_range")


def loop_carried_layouts(module: Module) -> None:
    for fn in module.functions:
        _drop_dead(fn)  # the old-layout twins earlier passes left behind are not uses
        for loop in [o for o in fn.walk() if o.name == "scf.for"]:
            _retype_loop(fn, loop)


def _slots(loop: Op) -> Dict[int, Encoding]:
    """Iter slots carrying a 1-D slice of a blocked layout, with the MMA slice layout each would take."""
    mmas = {a.type.encoding for a in loop.regions[0].entry.args[1:]
            if isinstance(a.type, TensorType) and isinstance(a.type.encoding, AppleMmaEncoding)}
    if len(mmas) != 1:
        return {}
    mma = next(iter(mmas))
    out = {}
    for slot, a in enumerate(loop.regions[0].entry.args[1:]):
        enc = a.type.encoding if isinstance(a.type, TensorType) else None
        if isinstance(enc, SliceEncoding) and len(a.type.shape) == 1 and isinstance(enc.parent, BlockedEncoding):
            out[slot] = SliceEncoding(enc.dim, mma)
    return out


def _in_new_layout(body: List[Op], carried: Dict[int, Value],
                   targets: Set[Encoding]) -> Tuple[Set[int], Dict[int, Set[int]]]:
    """Which values of the loop body (by id) can be had in a target layout without converting: the carried
    ones, what a conversion from a target layout produced, and elementwise ops of such values, splats and
    constants; and, for each, the carried slots it is computed from."""
    known: Set[int] = {id(v) for v in carried.values()}
    deps: Dict[int, Set[int]] = {id(v): {slot} for slot, v in carried.items()}
    for op in body:
        if op.name == "ttg.convert_layout" and op.operands[0].type.encoding in targets:
            known.add(id(op.result))
            deps[id(op.result)] = set()
        elif is_elementwise(op) and len(op.result.type.shape) == 1 and \
                any(id(x) in known for x in op.operands) and \
                all(id(x) in known or not isinstance(x.type, TensorType) or _rebuildable(x) for x in op.operands):
            known.add(id(op.result))
            deps[id(op.result)] = set().union(*(deps.get(id(x), set()) for x in op.operands))
    return known, deps


def _worth_moving(body: List[Op], yield_op: Op, slots: Dict[int, Encoding], carried: Dict[int, Value],
                  known: Set[int], deps: Dict[int, Set[int]]) -> Set[int]:
    """The slots whose old-layout values (the carried value and what is computed from it) are read only where
    the new layout serves: by elementwise ops that get twins, conversions into the new layout, and the yield. A
    slot read elsewhere (an address computation, a store, a nested region) would need a conversion back on
    every step, which is worse than leaving it."""
    bad: Set[int] = set()
    targets = set(slots.values())
    for v in list(carried.values()) + [r for op in body for r in op.results]:
        if id(v) not in known or not deps.get(id(v)):
            continue
        for user, idx in uses(body, v):
            fine = (is_elementwise(user) and id(user.result) in known) or \
                (user.name == "ttg.convert_layout" and user.result.type.encoding in targets) or \
                (user is yield_op and idx in slots)
            if not fine:
                bad |= deps[id(v)]
    return set(slots) - bad


def _rebuildable(v: Value) -> bool:
    return isinstance(v.owner, Op) and v.owner.name in _REBUILT


def _retype_loop(fn: Function, loop: Op) -> None:
    slots = _slots(loop)
    if not slots:
        return
    body_block = loop.regions[0].entry
    body = body_block.ops
    yield_op = body[-1]
    args = body_block.args[1:]
    # keep the slots whose yielded value the others (and splats, constants) make in the new layout, and whose
    # old-layout values nothing else reads
    while slots:
        carried = {s: args[s] for s in slots}
        known, deps = _in_new_layout(body, carried, set(slots.values()))
        worth = _worth_moving(body, yield_op, slots, carried, known, deps)
        keep = {s: t for s, t in slots.items() if id(yield_op.operands[s]) in known and s in worth}
        if keep == slots:
            break
        slots = keep
    if not slots:
        return
    # the carried values take the new layout; their old users read a conversion back (dead, most often)
    new_of: Dict[int, Value] = {}
    for slot, target in slots.items():
        arg, init, res = args[slot], loop.operands[3 + slot], loop.results[slot]
        old_ty: TensorType = arg.type
        new_ty = TensorType(old_ty.shape, old_ty.element, target)
        cvt_in = convert_layout(init, new_ty, loop.loc, f"{init.name}_rows")
        insert_before(loop, cvt_in)
        loop.operands[3 + slot] = cvt_in.result
        arg.type = new_ty
        back = convert_layout(arg, old_ty, arg.loc, f"{arg.name}_blocked")
        body.insert(0, back)
        back.parent = body_block
        replace_uses(body[1:], arg, back.result)
        new_of[id(back.result)] = arg
        res.type = new_ty
        res_back = convert_layout(res, old_ty, loop.loc, f"{res.name}_blocked")
        insert_after(loop, res_back)
        replace_uses(scope(res), res, res_back.result, skip=res_back)
        new_of[id(res_back.result)] = res
    targets = set(slots.values())
    _propagate(body, new_of, targets)
    for slot, target in slots.items():
        y = yield_op.operands[slot]
        twin = new_of.get(id(y))
        if twin is None or twin.type.encoding != target:  # the analysis says it is there; converting is the
            cvt = convert_layout(y, args[slot].type, yield_op.loc, f"{y.name}_rows")  # safe way if not
            insert_before(yield_op, cvt)
            twin = cvt.result
        yield_op.operands[slot] = twin
    after = loop.parent.ops[loop.parent.ops.index(loop) + 1:]
    _propagate(after, new_of, targets)
    _drop_dead(fn)


def _propagate(ops: List[Op], new_of: Dict[int, Value], targets: Set[Encoding]) -> None:
    """Walk `ops` in order: conversions into a target layout of a value that has a new-layout twin read the
    twin instead; elementwise ops of twins (and splats, constants) get twins of their own, cloned right after
    them; conversions out of a target layout make their source the twin of their result."""
    for op in list(ops):
        if op.name == "ttg.convert_layout":
            src = op.operands[0]
            if op.result.type.encoding in targets and id(src) in new_of and \
                    new_of[id(src)].type == op.result.type:
                for u, i in list(uses(ops, op.result)):
                    u.operands[i] = new_of[id(src)]
            elif src.type.encoding in targets:
                new_of[id(op.result)] = src
            continue
        if not (is_elementwise(op) and len(op.result.type.shape) == 1 and any(id(x) in new_of for x in op.operands)):
            continue
        target = next(new_of[id(x)].type.encoding for x in op.operands if id(x) in new_of)
        operands = []
        for x in op.operands:
            twin = new_of.get(id(x)) if id(x) in new_of else _rebuild(x, target, new_of)
            if twin is None or isinstance(twin.type, TensorType) and twin.type.encoding != target:
                break
            operands.append(twin)
        else:
            ty: TensorType = op.result.type
            clone = Op(op.name, operands, [Value(f"{op.result.name}_rows", TensorType(ty.shape, ty.element, target),
                                                 None, 0, op.loc)], dict(op.attrs), [], op.loc)
            insert_after(op, clone)
            new_of[id(op.result)] = clone.result


def _rebuild(v: Value, target: Encoding, new_of: Dict[int, Value]) -> Optional[Value]:
    """A scalar as it is; a splat or constant cloned in `target` next to its original (once)."""
    if not isinstance(v.type, TensorType):
        return v
    op = v.owner
    if not _rebuildable(v):
        return None
    ty: TensorType = v.type
    clone = Op(op.name, list(op.operands), [Value(f"{v.name}_rows", TensorType(ty.shape, ty.element, target), None,
                                                  0, op.loc)], dict(op.attrs), [], op.loc)
    insert_after(op, clone)
    new_of[id(v)] = clone.result
    return clone.result


def _drop_dead(fn: Function) -> None:
    """Side-effect-free ops whose results nobody reads go (the old-layout twins)."""
    drop_unread(fn, lambda o: o.name in _PURE or is_elementwise(o))

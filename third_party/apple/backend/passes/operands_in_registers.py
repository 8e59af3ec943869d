"""Apple pass: `simdgroup_matrix` dot operands that need not go through threadgroup memory stay in registers.

Runs after `accelerate_matmul`, which gives each eligible dot an `AppleMmaEncoding` and lets it read operands
straight from the shared buffers upstream allocated for them. Two kinds of operand do not need such a buffer:

- **Chained dots** (attention: `P = softmax(Q K^T)` then `P V`): when the first dot's simdgroups each own
  whole rows (`warps_per_cta = [wm, 1]`, which `accelerate_matmul` picks for such chains), its result is
  already laid out as the second dot's A fragments (`layouts.mma_operand_layout`). The conversion back to
  the original layout after the first dot is sunk past the elementwise ops and row reductions between the
  two dots (they run on the MMA layout; their other operands are rebuilt there: splats, constants, ranges and
  row/column broadcasts are recomputed, anything else is converted), and the shared buffer for P
  disappears.
- **Loop-invariant operands** (attention's Q): a buffer filled once before the loop that a dot inside the
  loop reads every iteration becomes registers holding the fragments, converted once before the loop, when
  that costs at most `MAX_OPERAND_REGS` elements per thread.

`allocate_shared_memory` then packs what is left.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from ..ir import Block, Function, Module, Op, Value
from ..ir.types import AppleMmaEncoding, DotOperandEncoding, Encoding, MemDescType, SliceEncoding, TensorType
from .rewrite import convert_layout, drop_unread, insert_after, insert_before, scope, uses

MAX_OPERAND_REGS = 128  # fragment elements per thread an operand may keep in registers across a loop

_ELEMENTWISE_PREFIXES = ("arith.", "math.")
_ELEMENTWISE_OPS = ("tt.precise_sqrt", "tt.precise_divf", "tt.fp_to_fp", "tt.clampf", "tt.mulhiui")
_NOT_ELEMENTWISE = ("arith.constant", )


def is_elementwise(op: Op) -> bool:
    """Ops that compute each result element from the operands' elements at the same coordinate."""
    if op.name in _NOT_ELEMENTWISE or op.regions or len(op.results) != 1:
        return False
    if not (op.name.startswith(_ELEMENTWISE_PREFIXES) or op.name in _ELEMENTWISE_OPS):
        return False
    shape = getattr(op.result.type, "shape", None)
    return isinstance(op.result.type, TensorType) and all(
        not isinstance(v.type, (TensorType, MemDescType)) or (isinstance(v.type, TensorType) and v.type.shape == shape)
        for v in op.operands)


def chained_dots(fn: Function) -> List[Tuple[Op, Op]]:
    """(producer, consumer) pairs of dots in one block where the producer's result reaches the consumer's
    A operand through elementwise ops, casts, layout conversions and a shared buffer only, with matching
    extents (the producer's (M, N) is the consumer's (M, K))."""
    pairs = []
    for dot in [o for o in fn.walk() if o.name == "tt.dot"]:
        producer = _dot_upstream_of(dot.operands[0], 16)
        if producer is not None and producer.parent is dot.parent and \
                tuple(dot.operands[0].type.shape) == tuple(producer.result.type.shape):
            pairs.append((producer, dot))
    return pairs


def _dot_upstream_of(v: Value, depth: int) -> Optional[Op]:
    owner = v.owner
    if depth == 0 or not isinstance(owner, Op):
        return None
    if owner.name == "tt.dot":
        return owner
    if owner.name in ("ttg.local_alloc", "ttg.local_load", "ttg.convert_layout") and owner.operands:
        return _dot_upstream_of(owner.operands[0], depth - 1)
    if is_elementwise(owner):
        for x in owner.operands:
            if isinstance(x.type, TensorType) and not _is_broadcast(x):
                found = _dot_upstream_of(x, depth - 1)
                if found is not None:
                    return found
    return None


def _is_broadcast(v: Value) -> bool:
    return isinstance(v.owner, Op) and v.owner.name in ("tt.broadcast", "tt.splat", "arith.constant")


class _Rebuilder:
    """Recomputes a value in another layout: splats, constants, ranges, dimension expansions, broadcasts
    and elementwise ops of those are cloned (each clone named after its original); anything else is
    converted with `ttg.convert_layout` right after its definition."""

    def __init__(self, fn: Function):
        self.fn = fn
        self.cache: Dict[Tuple[int, Encoding], Value] = {}

    def get(self, v: Value, enc: Encoding, before: Op) -> Value:
        if not isinstance(v.type, TensorType) or v.type.encoding == enc:
            return v
        key = (id(v), enc)
        if key not in self.cache:
            self.cache[key] = self._build(v, enc, before)
        return self.cache[key]

    def _typed(self, v: Value, enc: Encoding, suffix: str) -> Value:
        return Value(f"{v.name}_{suffix}", TensorType(v.type.shape, v.type.element, enc), None, 0, v.loc)

    def _build(self, v: Value, enc: Encoding, before: Op) -> Value:
        op = v.owner
        suffix = "mma" if not isinstance(enc, SliceEncoding) else f"mma{enc.dim}"
        if isinstance(op, Op):
            if op.name == "ttg.convert_layout" and op.operands[0].type.encoding == enc:
                return op.operands[0]  # a conversion back from where we are going
            operands = None
            if op.name in ("tt.splat", "arith.constant", "tt.make_range"):
                operands = list(op.operands)
            elif op.name == "tt.expand_dims":
                axis = int(op.attrs["axis"])
                operands = [self.get(op.operands[0], SliceEncoding(axis, enc), op)]
            elif op.name == "tt.broadcast" or is_elementwise(op):
                operands = [self.get(x, enc, op) for x in op.operands]
            if operands is not None:
                # right before the original: its operands are defined there, and it dominates `before`
                clone = Op(op.name, operands, [self._typed(v, enc, suffix)], dict(op.attrs), [], op.loc)
                insert_before(op, clone)
                return clone.result
        cvt = convert_layout(v, TensorType(v.type.shape, v.type.element, enc), v.loc, f"{v.name}_{suffix}")
        insert_before(before, cvt)
        return cvt.result


def _cheap(v: Value, enc: Encoding, depth: int = 8) -> bool:
    """Whether `_Rebuilder` makes `v` in `enc` without moving a 2-D tile between threads."""
    if not isinstance(v.type, TensorType) or v.type.encoding == enc or len(v.type.shape) < 2:
        return True
    op = v.owner
    if depth == 0 or not isinstance(op, Op):
        return False
    if op.name in ("tt.splat", "arith.constant", "tt.expand_dims"):
        return True
    if op.name == "ttg.convert_layout":
        return op.operands[0].type.encoding == enc
    if op.name == "tt.broadcast" or is_elementwise(op):
        return all(_cheap(x, enc, depth - 1) for x in op.operands)
    return False


def _sink(fn: Function, cvt: Op, consumers: Dict[int, Op], rebuild: _Rebuilder, cheap_only: bool = False) -> None:
    """Move `cvt` (MMA layout -> another layout) past the elementwise ops and reductions that read it;
    a shared buffer of the result that only `consumers` read as their A operand becomes registers.
    `cheap_only`: only past ops whose other operands are rebuilt without moving a 2-D tile (the sinking is
    then never worse than the one conversion it replaces)."""
    block = cvt.parent
    work = [cvt]
    while work:
        c = work.pop()
        src, dst = c.operands[0], c.result
        mma: AppleMmaEncoding = src.type.encoding
        for user, idx in list(uses(block.ops, dst)):
            if user.parent is not block:
                continue
            if is_elementwise(user) and user.result.type.shape == src.type.shape and \
                    (not cheap_only or all(x is dst or _cheap(x, mma) for x in user.operands)):
                for i, x in enumerate(user.operands):
                    user.operands[i] = src if x is dst else rebuild.get(x, mma, user)
                old_ty = user.result.type
                user.result.type = TensorType(old_ty.shape, old_ty.element, mma)
                back = convert_layout(user.result, old_ty, user.loc, f"{user.result.name}_back")
                insert_after(user, back)
                for u, i in list(uses(block.ops, user.result)):
                    if u is not back:
                        u.operands[i] = back.result
                work.append(back)
            elif user.name == "tt.reduce" and len(user.operands) == 1:
                axis = int(user.attrs["axis"])
                user.operands[0] = src
                old_ty = user.result.type
                user.result.type = TensorType(old_ty.shape, old_ty.element, SliceEncoding(axis, mma))
                back = convert_layout(user.result, old_ty, user.loc, f"{user.result.name}_back")
                insert_after(user, back)
                for u, i in list(uses(block.ops, user.result)):
                    if u is not back:
                        u.operands[i] = back.result
            elif user.name == "ttg.local_alloc" and _feeds_only(user, consumers, mma):
                frag = DotOperandEncoding(0, mma)
                regs = convert_layout(src, TensorType(src.type.shape, src.type.element, frag), user.loc,
                                      f"{user.result.name}_frags")
                insert_before(user, regs)
                for u, i in list(uses(scope(user.result), user.result)):
                    u.operands[i] = regs.result
                block.ops.remove(user)
    _drop_unused_converts(fn)


def _feeds_only(alloc: Op, consumers: Dict[int, Op], mma: AppleMmaEncoding) -> bool:
    readers = list(uses(scope(alloc.result), alloc.result))
    return bool(readers) and all(
        i == 0 and id(u) in consumers and u.result.type.encoding == mma for u, i in readers)


def _drop_unused_converts(fn: Function) -> None:
    """Conversions of conversions convert once, from the first source (or not at all when that already has
    the layout); conversions nobody reads go."""
    for op in [o for o in fn.walk() if o.name == "ttg.convert_layout"]:
        inner = op.operands[0].owner
        if isinstance(inner, Op) and inner.name == "ttg.convert_layout":
            first = inner.operands[0]
            if first.type == op.result.type:
                for u, i in list(uses(scope(op.result), op.result)):
                    u.operands[i] = first
            else:
                op.operands[0] = first
    drop_unread(fn, lambda o: o.name == "ttg.convert_layout")


def _loop_of(op: Op) -> Optional[Op]:
    block: Block = op.parent
    while block is not None and block.parent is not None and block.parent.parent is not None:
        owner = block.parent.parent
        if isinstance(owner, Op) and owner.name in ("scf.for", "scf.while"):
            return owner
        block = owner.parent if isinstance(owner, Op) else None
    return None


def _inside(op: Op, loop: Op) -> bool:
    return any(o is op for o in loop.walk())


def _fragment_regs(ty: MemDescType, idx: int, mma: AppleMmaEncoding) -> int:
    wm, wn = mma.warps_per_cta
    rows, cols = ty.shape[-2], ty.shape[-1]
    per_warp = rows * cols // (wm if idx == 0 else wn)
    batch = ty.shape[0] if len(ty.shape) == 3 else 1
    return batch * per_warp // 32


def _hoist_invariant_operands(fn: Function) -> None:
    """A shared buffer filled before the loops whose dots read it (as the same operand, with the same
    encoding) becomes the fragments in registers, converted once where the buffer was filled."""
    for alloc in [o for o in fn.walk() if o.name == "ttg.local_alloc" and o.operands]:
        readers = list(uses(scope(alloc.result), alloc.result))
        if not readers or any(u.name != "tt.dot" or not isinstance(u.result.type.encoding, AppleMmaEncoding)
                              for u, _ in readers):
            continue
        idxs = {i for _, i in readers}
        encs = {u.result.type.encoding for u, _ in readers}
        if len(idxs) != 1 or len(encs) != 1:
            continue
        idx, mma = idxs.pop(), encs.pop()
        loops = [_loop_of(u) for u, _ in readers]
        if any(loop is None or _inside(alloc, loop) for loop in loops):
            continue  # read where it is written: registers would be staged again each time
        if _fragment_regs(alloc.result.type, idx, mma) > MAX_OPERAND_REGS:
            continue
        src = alloc.operands[0]
        regs = convert_layout(src, TensorType(src.type.shape, src.type.element, DotOperandEncoding(idx, mma)),
                              alloc.loc, f"{alloc.result.name}_frags")
        insert_before(alloc, regs)
        for u, i in readers:
            u.operands[i] = regs.result
        alloc.parent.ops.remove(alloc)


def operands_in_registers(module: Module, chains: Dict[str, List[Tuple[Op, Op]]]) -> None:
    """`chains`: per function name, the chained dots `accelerate_matmul` gave one simdgroup column."""
    for fn in module.functions:
        rebuild = _Rebuilder(fn)
        for producer, consumer in chains.get(fn.name, []):
            enc = producer.result.type.encoding
            if not isinstance(enc, AppleMmaEncoding) or consumer.result.type.encoding != enc:
                continue
            if enc.warps_per_cta[1] != 1:
                continue
            readers = [u for u, _ in uses(scope(producer.result), producer.result)]
            if len(readers) != 1 or readers[0].name != "ttg.convert_layout":
                continue
            _sink(fn, readers[0], {id(consumer): consumer}, rebuild)
        # accumulators leaving their loop (attention's output, a GEMM's C): convert after the epilogue's
        # elementwise ops, e.g. after the narrowing to the output type, when that moves nothing else
        for loop in [o for o in fn.walk() if o.name == "scf.for"]:
            for res in loop.results:
                if not isinstance(res.type, TensorType) or not isinstance(res.type.encoding, AppleMmaEncoding):
                    continue
                readers = [u for u, _ in uses(scope(res), res)]
                if len(readers) == 1 and readers[0].name == "ttg.convert_layout" and readers[0].parent is loop.parent:
                    _sink(fn, readers[0], {}, rebuild, cheap_only=True)
        _hoist_invariant_operands(fn)

"""Apple pass: load a tensor in the layout its only use converts it to, when that layout gives each thread
longer runs of contiguous elements.

Upstream's coalescing gives a 1-D load of as many elements as the kernel has threads one element per thread
(on NVIDIA, 128 threads reading 4 bytes each is one coalesced transaction), and RemoveLayoutConversions
keeps the `ttg.convert_layout` that follows (it does not rematerialize loads of that size). A per-column bias
broadcast over the rows of a tile is the common case: `tl.load(b_ptr + rn)` in a 1-element-per-thread layout,
then a conversion through threadgroup memory (two barriers) to the slice of the tile's layout, where each
thread holds 4 contiguous elements. On Apple GPUs loading directly in the slice layout is one 16-byte access
per thread and no conversion; the elements the slice replicates over simdgroups are read again from cache.

The rewrite recomputes the load's pointer, mask and `other` in the new layout when they are built only from
cheap ops (splats, ranges, constants, elementwise integer and pointer arithmetic, comparisons); each clone
is placed right after its original, so values hoisted out of loops stay hoisted. It applies only to blocked
and slice layouts, with at most `MAX_REPLICATION` copies of each element over the threadgroup and at most
`MAX_REGS` registers per thread.
"""
from __future__ import annotations

from typing import Dict, Optional

from ..ir import Function, Module, Op, Value
from ..ir.types import BlockedEncoding, SliceEncoding, TensorType
from ..layouts import LayoutService, LinearLayout
from ..target import SIMD_WIDTH
from .rewrite import insert_after, insert_before, scope, uses

MAX_REPLICATION = 4
MAX_REGS = 16

# ops recomputed in the new layout (besides tt.splat, tt.make_range and splat constants)
_ELEMENTWISE = {"arith.addi", "arith.subi", "arith.muli", "arith.andi", "arith.ori", "arith.xori", "arith.shli",
                "arith.shrsi", "arith.shrui", "arith.divsi", "arith.divui", "arith.remsi", "arith.remui",
                "arith.maxsi", "arith.minsi", "arith.cmpi", "arith.extsi", "arith.extui", "arith.trunci",
                "arith.select", "tt.addptr"}


def _contiguous_run(lay: LinearLayout) -> int:
    """Elements per thread that are consecutive along the dimension of the first register basis."""
    if not lay.reg:
        return 1
    first = lay.reg[0]
    dims = [d for d, x in enumerate(first) if x]
    if len(dims) != 1 or first[dims[0]] != 1:
        return 1
    d, run = dims[0], 0
    while run < len(lay.reg) and lay.reg[run] == tuple((1 << run) if k == d else 0 for k in range(len(first))):
        run += 1
    return 1 << run


def _fits(enc) -> bool:
    return isinstance(enc, BlockedEncoding) or (isinstance(enc, SliceEncoding) and _fits(enc.parent))


class _Rewriter:

    def __init__(self, fn: Function, layouts: LayoutService, threads: int):
        self.fn, self.layouts, self.threads = fn, layouts, threads
        self.names = {v.name for op in fn.walk() for v in op.results}
        self.names.update(a.name for a in fn.args)
        self.count = 0

    def fresh(self, base: str) -> str:
        k, name = 1, f"{base}_u"
        while name in self.names:
            k += 1
            name = f"{base}_u{k}"
        self.names.add(name)
        return name

    def remat(self, v: Value, enc, memo: Dict[int, Value], pending: list) -> Optional[Value]:
        """`v` recomputed in encoding `enc` (clones collected in `pending`), or None when it cannot be."""
        if not isinstance(v.type, TensorType):
            return v
        if v.type.encoding == enc:
            return v
        if id(v) in memo:
            return memo[id(v)]
        op = v.owner
        if not isinstance(op, Op) or len(op.results) != 1 or op.regions:
            return None
        if op.name == "arith.constant":
            if not str(op.attrs.get("value", "")).strip().startswith("dense<") or "[" in str(op.attrs["value"]):
                return None
        elif op.name not in _ELEMENTWISE | {"tt.splat", "tt.make_range"}:
            return None
        if op.name == "tt.make_range" and not isinstance(enc, (BlockedEncoding, SliceEncoding)):
            return None
        operands = []
        for o in op.operands:
            n = self.remat(o, enc, memo, pending)
            if n is None:
                return None
            operands.append(n)
        res = Value(self.fresh(v.name), TensorType(v.type.shape, v.type.element, enc), None, 0, v.loc)
        clone = Op(op.name, operands, [res], dict(op.attrs), [], op.loc)
        pending.append((op, clone))
        memo[id(v)] = res
        return res

    def try_load(self, load: Op) -> bool:
        res = load.result
        if not isinstance(res.type, TensorType) or load.attrs.get("isVolatile") in (True, "true"):
            return False
        users = list(uses(scope(res), res))
        if len(users) != 1 or users[0][0].name != "ttg.convert_layout":
            return False
        cvt = users[0][0]
        src_enc, dst_enc = res.type.encoding, cvt.result.type.encoding
        if not (_fits(src_enc) and _fits(dst_enc)) or cvt.parent is not load.parent:
            return False
        try:
            src, dst = self.layouts.of(res.type), self.layouts.of(cvt.result.type)
        except (NotImplementedError, ValueError):
            return False
        if _contiguous_run(dst) <= _contiguous_run(src) or dst.num_regs > MAX_REGS:
            return False
        numel = 1
        for d in res.type.shape:
            numel *= d
        if dst.num_regs * self.threads > MAX_REPLICATION * numel:
            return False
        memo: Dict[int, Value] = {}
        pending: list = []
        operands = [self.remat(o, dst_enc, memo, pending) for o in load.operands]
        if any(o is None for o in operands):
            return False
        for orig, clone in pending:
            insert_after(orig, clone)
        new = Op("tt.load", operands, [cvt.result], dict(load.attrs), [], load.loc)
        insert_before(load, new)
        load.parent.ops.remove(load)
        cvt.parent.ops.remove(cvt)
        self.count += 1
        return True


def loads_in_use_layout(module: Module) -> int:
    """Apply the rewrite to every function of `module`; returns how many loads changed layout."""
    layouts = LayoutService(module.num_warps)
    threads = module.num_warps * SIMD_WIDTH
    count = 0
    for fn in module.functions:
        rw = _Rewriter(fn, layouts, threads)
        for load in [o for o in fn.walk() if o.name == "tt.load"]:
            rw.try_load(load)
        count += rw.count
    return count

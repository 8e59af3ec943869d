"""Lowering of `tt.reduce` with any combine region, on any axis, with any number of operands.

The linear layout of the operand says where the reduced axis lives: register bits whose basis points
along the axis are combined inside each thread, lane bits by a Metal SIMD reduction (`simd_sum`,
`simd_max`, ... when the combine is one such op; float max/min run on integer order keys with a NaN flag
reduced beside them, so NaN and signed zeros follow the combine exactly; lines that share a simdgroup take
turns, the other lanes contributing the identity) or `simd_shuffle_xor` butterflies, and warp bits through
threadgroup memory. The combine region becomes an MSL function called at every step. Which combines and
types have a SIMD reduction is the target's (`em.target.simd_reduction`, `simd_float_extremum`).
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

from ..ir import Op
from ..ir.types import TensorType
from ..layouts import LinearLayout, local_register_map
from .combine import emit_combine_function, operand_scratch, single_combine_op
from .emitter import FunctionEmitter, Lowered, linear_expr
from .registry import OpFamily
from .shared_memory import index_expr, row_major_strides
from .target_info import MetalTargetInfo

FAMILY = OpFamily("reduce")

# Lines of a reduction sharing one simdgroup each take a turn at the builtin, as long as there are no more
# turns than the shuffle butterfly has steps (one shuffle and one combine per lane bit along the axis):
# whether a builtin costs one step or five on Apple GPUs is not documented, so the builtin never costs more
# calls than the butterfly.


def _simd_builtin(target: MetalTargetInfo, op: Op, ctypes: List[str]) -> Optional[Tuple[str, str]]:
    """(Metal SIMD reduction, cast to apply first or "") when `op`'s combine region is exactly one op Metal
    reduces natively, on a type Metal's SIMD functions take; else None. Integer sums and products run
    unsigned, where overflow wraps as Triton's do."""
    if len(ctypes) != 1:
        return None
    combine = single_combine_op(op)
    return None if combine is None else target.simd_reduction(combine.name, ctypes[0])


def _float_extremum(target: MetalTargetInfo, op: Op, ctypes: List[str]) -> Optional[Tuple[str, str, str]]:
    """The target's NaN-exact simdgroup form of a float max/min reduction, or None."""
    if len(ctypes) != 1:
        return None
    combine = single_combine_op(op)
    return None if combine is None else target.simd_float_extremum(combine.name, ctypes[0])


def _reduce_float_extremum(em: FunctionEmitter, extremum: Tuple[str, str, str], ct: str, acc: str, seg: str,
                           off_lanes: List[int]) -> None:
    """acc = the max (or min) over the lanes of this lane's line, NaN and signed zeros exactly as the combine
    defines them: the builtin runs on the order keys, NaN lanes contributing the key of the value that never wins
    (-inf for max), and a second reduction of the lanes' NaN flags says whether the result is NaN (any lane's for
    maximum/minimum, every lane's for maxnum/minnum)."""
    fn, key_type, nan_rule = extremum
    to_key = em.ctx.require("tt_float_order_key")
    nan = em.temp("isnan")
    em.emit(f"const bool {nan} = isnan({acc});")
    never_wins = "-INFINITY" if fn == "simd_max" else "INFINITY"
    key = em.temp("key")
    em.emit(f"{key_type} {key} = {to_key}({nan} ? {ct}({never_wins}) : {acc});")
    nans = em.temp("nans")
    em.emit(f"uint {nans} = uint({nan});")
    flag_fn = "simd_max" if nan_rule == "any" else "simd_min"
    if off_lanes:
        _reduce_in_turns(em, fn, key_type, key_type, key, key, seg, off_lanes)
        _reduce_in_turns(em, flag_fn, "uint", "uint", nans, nans, seg, off_lanes)
    else:
        em.emit(f"{key} = {fn}({key});")
        em.emit(f"{nans} = {flag_fn}({nans});")
    em.emit(f"{acc} = {nans} ? {ct}(NAN) : tt_float_from_order_key({key});")


def _reduce_in_turns(em: FunctionEmitter, fn: str, rt: str, ct: str, acc: str, value: str, seg: str,
                     off_lanes: List[int]) -> None:
    """acc = the builtin `fn` (run in MSL type `rt`) over the lanes of this lane's line: every line takes a
    turn, the lanes of the other lines contributing the identity."""
    identity = em.target.simd_reduction_identity(fn, rt)
    mine = em.temp("red")
    em.emit(f"const {rt} {mine} = {value};")
    for turn in range(1 << len(off_lanes)):
        sv = sum(1 << b for j, b in enumerate(off_lanes) if turn >> j & 1)
        p = em.temp("turn")
        em.emit(f"const {rt} {p} = {fn}({seg} == {sv} ? {mine} : {identity});")
        em.emit(f"{acc} = {seg} == {sv} ? {ct}({p}) : {acc};" if rt != ct else f"{acc} = {seg} == {sv} ? {p} : {acc};")


def _scaled_index(slot: str, n: int, idx: str) -> str:
    """`slot * n + idx`, without the factor 1 and the term 0."""
    scaled = slot if n == 1 else f"{slot} * {n}"
    return scaled if idx == "0" else f"{scaled} + {idx}"


def _classify(bases: Sequence[Tuple[int, ...]], axis: int, what: str, em: FunctionEmitter) -> Tuple[List[int], List[int]]:
    """Split basis indices into those along `axis` (reduced) and those off it (kept)."""
    along, off = [], []
    for i, b in enumerate(bases):
        others = any(x for d, x in enumerate(b) if d != axis)
        if b[axis] and others:
            raise em.unsupported(f"reduction over a layout whose {what} bit {i} mixes the reduced axis with another "
                           "dimension is not supported")
        (along if b[axis] else off).append(i)
    return along, off


def _slot_layout(lay: LinearLayout, axis: int, out_shape: List[int], keep_regs: List[int], red_lanes: List[int],
                 red_warps: List[int]) -> LinearLayout:
    """Where each thread's partial results go in the cross-simdgroup scratch: the result's shape with one more
    dimension, the slot of the simdgroup's position along the axis. Threads it maps to one place hold copies."""
    def drop(c: Tuple[int, ...]) -> Tuple[int, ...]:
        return tuple(c[:axis]) + tuple(c[axis + 1:])

    zero = tuple(0 for _ in range(len(out_shape) + 1))
    slot_bit = {bit: j for j, bit in enumerate(red_warps)}
    return LinearLayout(
        tuple(out_shape) + (1 << len(red_warps), ),
        tuple(drop(lay.reg[b]) + (0, ) for b in keep_regs),
        tuple(zero if j in red_lanes else drop(b) + (0, ) for j, b in enumerate(lay.lane)),
        tuple(zero[:-1] + (1 << slot_bit[j], ) if j in slot_bit else drop(b) + (0, ) for j, b in enumerate(lay.warp)))


@FAMILY.lowers("tt.reduce")
def _reduce(em: FunctionEmitter, op: Op) -> None:
    axis = int(op.attrs["axis"])
    srcs = [em.get(v) for v in op.operands]
    src_ty: TensorType = op.operands[0].type
    lay: LinearLayout = em.layout(src_ty)
    combine = []  # the combine region as an MSL function, emitted when a step calls it

    n = len(srcs)

    red_regs, keep_regs = _classify(lay.reg, axis, "register", em)
    red_lanes, _ = _classify(lay.lane, axis, "lane", em)
    red_warps, _ = _classify(lay.warp, axis, "warp", em)
    K = 1 << len(keep_regs)
    G = 1 << len(red_regs)
    ctypes = [s.ctype for s in srcs]

    accs = [em.temp(f"{op.results[0].name}_acc") for _ in range(n)]
    for a, ct in zip(accs, ctypes):
        em.emit(f"{ct} {a}[{K}];")

    def call(k: str, others: List[str]) -> str:
        if not combine:
            combine.append(emit_combine_function(em, op, op.results[0].name))
        return combine[0].call([f"{a}[{k}]" for a in accs], others)

    # 1. within each thread
    with em.for_regs(K, "k") as k:
        base = linear_expr(k, [1 << b for b in keep_regs]) if K > 1 else "0"
        for a, s in zip(accs, srcs):
            em.emit(f"{a}[{k}] = {s.at(base)};")
        if G > 1:
            j = em.loop_var("j")
            em.open(f"for (uint {j} = 1; {j} < {G}; ++{j})")
            spread = linear_expr(j, [1 << b for b in red_regs])
            idx = f"({base}) ^ ({spread})" if base != "0" else spread
            em.emit(call(k, [s.at(idx) for s in srcs]))
            em.close()
    # 2. across the lanes of a simdgroup: a Metal SIMD reduction when the combine is one op Metal reduces
    # natively (lines that share the simdgroup take turns at it, the other lanes contributing the identity),
    # else a simd_shuffle_xor butterfly over the lane bits along the axis
    off_lanes = [b for b in range(len(lay.lane)) if b not in red_lanes]
    turns = 1 << len(off_lanes)
    # the NaN-exact float max/min costs two builtins per turn
    extremum = _float_extremum(em.target, op, ctypes) if red_lanes and 2 * turns <= len(red_lanes) else None
    builtin = None
    if not extremum and red_lanes and turns <= max(1, len(red_lanes)):
        builtin = _simd_builtin(em.target, op, ctypes)
    seg = ""
    if (extremum or builtin) and off_lanes:
        seg = em.temp("line")
        em.emit(f"const uint {seg} = tt_lane & {sum(1 << b for b in off_lanes)};")
    if extremum:
        with em.for_regs(K, "k") as k:
            _reduce_float_extremum(em, extremum, ctypes[0], f"{accs[0]}[{k}]", seg, off_lanes)
    elif builtin:
        fn, cast = builtin
        ct = ctypes[0]
        with em.for_regs(K, "k") as k:
            acc = f"{accs[0]}[{k}]"
            value = f"{cast}({acc})" if cast else acc
            if not off_lanes:
                em.emit(f"{acc} = {ct}({fn}({value}));" if cast else f"{acc} = {fn}({acc});")
            else:
                _reduce_in_turns(em, fn, cast or ct, ct, acc, value, seg, off_lanes)
    elif red_lanes:
        shuffles = [em.ctx.require_shuffle(em.target.shuffle_builtin("xor"), ct) for ct in ctypes]
        with em.for_regs(K, "k") as k:
            for bit in red_lanes:
                others = []
                for a, ct, fn in zip(accs, ctypes, shuffles):
                    o = em.temp("shfl")
                    em.emit(f"{ct} {o} = {fn}({a}[{k}], ushort({1 << bit}));")
                    others.append(o)
                em.emit(call(k, others))
    # 3. across simdgroups, through threadgroup memory
    out_shape = src_ty.shape[:axis] + src_ty.shape[axis + 1:]
    out_numel = 1
    for d in out_shape:
        out_numel *= d
    if red_warps:
        W = 1 << len(red_warps)
        bufs = operand_scratch(em, ctypes, op, W * out_numel, "red_smem")
        slot = em.temp("warp_slot")
        wvals = [0] * len(lay.warp)
        for j, bit in enumerate(red_warps):
            wvals[bit] = 1 << j
        em.emit(f"const uint {slot} = {linear_expr('tt_warp', wvals)};")
        out_strides = row_major_strides(out_shape)
        strides = out_strides[:axis] + [0] + out_strides[axis:]
        # One writer per slot: the lanes along the axis, and the threads the layout replicates, hold the same
        # partial result only when the combine is commutative (argmax meeting a NaN is not), so any other
        # lane's store would race with a different value.
        own = em.owner_predicate(_slot_layout(lay, axis, out_shape, keep_regs, red_lanes, red_warps))
        if own:
            em.open(f"if ({own})")
        with em.for_regs(K, "k") as k:
            base = linear_expr(k, [1 << b for b in keep_regs]) if K > 1 else "0"
            idx = index_expr(em, lay, f"({base})", strides)
            for a, b, ct in zip(accs, bufs, ctypes):
                em.emit(em.tg_store(b, _scaled_index(slot, out_numel, idx), f"{a}[{k}]", ct))
        if own:
            em.close()
        em.barrier()
        with em.for_regs(K, "k") as k:
            base = linear_expr(k, [1 << b for b in keep_regs]) if K > 1 else "0"
            idx = index_expr(em, lay, f"({base})", strides)
            for a, b, ct in zip(accs, bufs, ctypes):
                em.emit(f"{a}[{k}] = {em.tg_load(b, idx, ct)};")
            w = em.loop_var("w")
            em.open(f"for (uint {w} = 1; {w} < {W}; ++{w})")
            em.emit(call(k, [em.tg_load(b, _scaled_index(w, out_numel, idx), ct) for b, ct in zip(bufs, ctypes)]))
            em.close()
    # 4. results
    for i, res in enumerate(op.results):
        if not isinstance(res.type, TensorType):
            name = em.fresh(res.name)
            em.emit(f"const {ctypes[i]} {name} = {accs[i]}[0];")
            em.bind(res, Lowered(name, ctypes[i]))
            continue
        dst = em.layout(res.type)

        def drop(c):
            return c[:axis] + c[axis + 1:]

        zero = tuple(0 for _ in out_shape)
        acc_layout = LinearLayout(
            tuple(out_shape), tuple(drop(lay.reg[b]) for b in keep_regs),
            tuple(zero if j in red_lanes else drop(b) for j, b in enumerate(lay.lane)),
            tuple(zero if j in red_warps else drop(b) for j, b in enumerate(lay.warp)))
        mapping = local_register_map(dst, acc_layout, lambda c: c)
        if mapping is None:
            raise em.internal(f"reduce result layout {res.type} does not match its operand layout")
        if mapping == [1 << b for b in range(len(mapping))] and dst.num_regs == K:
            em.bind(res, Lowered(accs[i], ctypes[i], K, False, dst))
            continue
        out = em.declare(res)
        with em.for_regs(out.regs) as r:
            em.emit(f"{out.at(r)} = {accs[i]}[{linear_expr(r, mapping) if out.regs > 1 else '0'}];")

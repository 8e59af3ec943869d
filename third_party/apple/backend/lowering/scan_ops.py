"""Lowering of `tt.scan` (inclusive prefix scans with any combine region, any axis, `reverse`).

When the layout keeps every line along the scan axis inside one thread, the scan is a sequential pass over
registers in coordinate order. Otherwise, when the scan axis is split in the usual order (a thread's run of
registers, then lanes, then simdgroups, then register repeats of the whole tile), the scan runs in levels,
as upstream's ScanOpToLLVM does:

  1. each thread scans its runs of registers sequentially;
  2. across the lanes of a line, the thread totals get an exclusive prefix: Metal's `simd_prefix_exclusive_sum`
     / `_product` when the combine is one add or multiply on a type Metal's SIMD functions take (lines that
     share the simdgroup take turns, the others contributing the identity, when there are few; a reverse
     scan mirrors the lanes with `simd_shuffle_xor`), else a `simd_shuffle_up`/`down` Hillis-Steele ladder
     calling the combine function;
     each register is combined with its lane prefix;
  3. across simdgroups and register repeats, the block totals go through threadgroup memory once (one
     barrier), and every thread combines the totals of the blocks before its own, in order.

Layouts that fit none of these use a Hillis-Steele ladder over threadgroup memory: log2(length) steps, each
combining every element with the one `d` positions earlier. Every path preserves the operand order the
combine region sees (earlier element first), so non-commutative combines scan correctly. Which combines and
types have a SIMD prefix builtin is the target's (`em.target.simd_prefix`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from ..ir import Op
from ..ir.types import TensorType
from ..layouts import LinearLayout
from .combine import emit_combine_function, operand_scratch, single_combine_op
from .emitter import BF16, FunctionEmitter, Lowered, elem_type, linear_expr
from .registry import OpFamily
from .shared_memory import index_expr, row_major_strides
from .target_info import MetalTargetInfo

FAMILY = OpFamily("scan")


def _combine_into(em: FunctionEmitter, combine, ctypes: List[str], earlier: List[str], later: List[str],
                  out: List[str]) -> None:
    """out_i = earlier ⊕ later, written so that `out` may alias `later`."""
    temps = []
    for ct, e in zip(ctypes, earlier):
        t = em.temp("scan")
        em.emit(f"{ct} {t} = {e};")
        temps.append(t)
    em.emit(combine.call(temps, list(later)))
    for o, t in zip(out, temps):
        em.emit(f"{o} = {t};")


@FAMILY.lowers("tt.scan")
def _scan(em: FunctionEmitter, op: Op) -> None:
    axis = int(op.attrs["axis"])
    reverse = bool(op.attrs.get("reverse", False))
    ty: TensorType = op.operands[0].type
    lay = em.layout(ty)
    srcs = [em.get(v) for v in op.operands]
    # bfloat16 scans accumulate in float, as Triton does on NVIDIA GPUs (measured on an H200: a bf16
    # cumsum stored to a float32 pointer equals the float64 reference to float32 precision); the results
    # are rounded to bfloat16 once, and `arith.extf` of a result reads the float value (`Lowered.unrounded`).
    wide = any(elem_type(v) == BF16 for v in op.operands)
    combine = emit_combine_function(em, op, op.results[0].name, wide_bf16=wide)
    outs = [_declare_accumulator(em, r, wide) for r in op.results]
    ctypes = [o.ctype for o in outs]
    R = lay.num_regs
    for o, s in zip(outs, srcs):
        with em.for_regs(R) as r:
            em.emit(f"{o.at(r)} = {s.at(r)};")
    length = ty.shape[axis]
    plan = _level_plan(lay, axis) if length > 1 else None
    if plan is not None and not scan_in_levels_applies(em.target, op, lay, plan, ctypes):
        plan = None
    if length > 1 and not any(b[axis] for b in lay.lane + lay.warp):
        _scan_in_registers(em, op, lay, axis, reverse, combine, ctypes, outs)
    elif plan is not None:
        _scan_in_levels(em, op, ty, lay, axis, reverse, combine, ctypes, outs, plan)
    elif length > 1:
        _scan_through_threadgroup(em, op, ty, lay, axis, reverse, combine, ctypes, outs)
    for res, o in zip(op.results, outs):
        if o.ctype == em.ctype(res.type):
            continue
        final = em.declare(res)
        final.unrounded = o
        with em.for_regs(R) as r:
            em.emit(f"{final.at(r)} = {final.ctype}({o.at(r)});")


def _declare_accumulator(em: FunctionEmitter, res, wide: bool) -> Lowered:
    """The scan's working array for result `res`: its own type, or float for bfloat16 when `wide`."""
    if not (wide and elem_type(res) == BF16):
        return em.declare(res)
    lay = em.layout(res.type)
    name = em.temp(f"{res.name}_wide")
    em.emit(f"float {name}[{lay.num_regs}];")
    return Lowered(name, "float", lay.num_regs, False, lay)


def _scan_in_registers(em, op, lay, axis, reverse, combine, ctypes, outs) -> None:
    """Every thread holds whole lines: walk each line's registers in coordinate order."""
    lines = {}
    for r in range(lay.num_regs):
        c = lay.reg_coord(r)
        key = c[:axis] + c[axis + 1:]
        lines.setdefault(key, {})
        lines[key].setdefault(c[axis], r)  # duplicates of an element keep the first register
    dup = {}
    for r in range(lay.num_regs):
        c = lay.reg_coord(r)
        first = lines[c[:axis] + c[axis + 1:]][c[axis]]
        if first != r:
            dup[r] = first
    for key, by_pos in lines.items():
        order = [by_pos[p] for p in sorted(by_pos, reverse=reverse)]
        for prev, cur in zip(order, order[1:]):
            _combine_into(em, combine, ctypes, [o.at(prev) for o in outs], [o.at(cur) for o in outs],
                          [o.at(cur) for o in outs])
    for r, first in sorted(dup.items()):
        for o in outs:
            em.emit(f"{o.at(r)} = {o.at(first)};")


def _scan_through_threadgroup(em, op, ty, lay, axis, reverse, combine, ctypes, outs) -> None:
    strides = row_major_strides(ty.shape)
    length = ty.shape[axis]
    bufs = operand_scratch(em, ctypes, op, ty.numel, "scan_smem")
    R = lay.num_regs
    idx_name, pos_name = em.temp("scan_idx"), em.temp("scan_pos")
    em.emit(f"uint {idx_name}[{R}];")
    em.emit(f"uint {pos_name}[{R}];")
    with em.for_regs(R) as r:
        em.emit(f"{idx_name}[{r}] = {index_expr(em, lay, r, strides)};")
        pos = em.coord_expr(lay, axis, r)
        em.emit(f"{pos_name}[{r}] = {length - 1} - ({pos});" if reverse else f"{pos_name}[{r}] = {pos};")
        for b, o in zip(bufs, outs):
            em.emit(em.tg_store(b, f"{idx_name}[{r}]", o.at(r), o.ctype))
    em.barrier()
    step = strides[axis]
    d = em.loop_var("d")
    em.open(f"for (uint {d} = 1; {d} < {length}; {d} <<= 1)")
    prevs = []
    for ct in ctypes:
        p = em.temp("scan_prev")
        em.emit(f"{ct} {p}[{R}];")
        prevs.append(p)
    with em.for_regs(R) as r:
        em.open(f"if ({pos_name}[{r}] >= {d})")
        neighbour = f"{idx_name}[{r}] + {d} * {step}" if reverse else f"{idx_name}[{r}] - {d} * {step}"
        for p, b, ct in zip(prevs, bufs, ctypes):
            em.emit(f"{p}[{r}] = {em.tg_load(b, neighbour, ct)};")
        em.close()
    em.barrier()
    with em.for_regs(R) as r:
        em.open(f"if ({pos_name}[{r}] >= {d})")
        _combine_into(em, combine, ctypes, [f"{p}[{r}]" for p in prevs], [o.at(r) for o in outs],
                      [o.at(r) for o in outs])
        for b, o in zip(bufs, outs):
            em.emit(em.tg_store(b, f"{idx_name}[{r}]", o.at(r), o.ctype))
        em.close()
    em.barrier()
    em.close()


# -- scans in levels: registers, lanes, simdgroups and register repeats --------------------------------------

# Lines of a scan sharing one simdgroup each take a turn at the builtin (the others add the identity) when
# that is no more calls than the shuffle ladder has steps (one shuffle and one combine per lane bit along the
# axis; whether a builtin costs one step or five on Apple GPUs is not documented), and, where the ladder does
# not apply (lane bits along the axis that are not contiguous), up to this many turns.
_MAX_BUILTIN_TURNS = 8


@dataclass
class _Levels:
    """Basis indices along the scan axis, by level, in position order (each one doubles the position)."""
    regs: List[int]  # a thread's run of registers
    lanes: List[int]
    warps: List[int]
    repeats: List[int]  # register bits above the simdgroups: the tile repeated along the axis


def _level_plan(lay: LinearLayout, axis: int) -> Optional[_Levels]:
    """The levels of the scan axis when its bases are pure powers of two along it ordered registers <
    lanes < warps < register repeats (the usual blocked and slice layouts); else None."""
    along = []
    for kind, bases in (("r", lay.reg), ("l", lay.lane), ("w", lay.warp)):
        for i, b in enumerate(bases):
            if not b[axis]:
                continue
            if any(x for d, x in enumerate(b) if d != axis):
                return None
            along.append((b[axis], kind, i))
    along.sort()
    if [v for v, _, _ in along] != [1 << k for k in range(len(along))]:
        return None
    m = re.fullmatch(r"(r*)(l*)(w*)(r*)", "".join(k for _, k, _ in along))
    if m is None:
        return None
    idx = [i for _, _, i in along]
    a, b, c = (len(g) for g in m.groups()[:3])
    return _Levels(idx[:a], idx[a:a + b], idx[a + b:a + b + c], idx[a + b + c:])


def _scan_builtin(target: MetalTargetInfo, op: Op, ctypes: List[str]) -> Optional[Tuple[str, str, str]]:
    """(Metal exclusive prefix builtin, identity, cast or "") when the scan's combine is one add or multiply on
    a type Metal's SIMD functions take; else None."""
    if len(ctypes) != 1:
        return None
    combine = single_combine_op(op)
    return None if combine is None else target.simd_prefix(combine.name, ctypes[0])


def _lanes_contiguous(levels: _Levels) -> bool:
    return levels.lanes == list(range(levels.lanes[0], levels.lanes[0] + len(levels.lanes))) if levels.lanes else True


def scan_in_levels_applies(target: MetalTargetInfo, op: Op, lay: LinearLayout, levels: _Levels,
                           ctypes: List[str]) -> bool:
    if not levels.lanes:
        return True
    off_lanes = len(lay.lane) - len(levels.lanes)
    if _scan_builtin(target, op, ctypes) is not None and (1 << off_lanes) <= _MAX_BUILTIN_TURNS:
        return True
    return _lanes_contiguous(levels)


def _runs(lay: LinearLayout, axis: int, levels: _Levels, reverse: bool):
    """(runs, duplicates): each run is (repeat index, registers of one line's run in scan order); duplicates
    maps a register that repeats another register's element to that register."""
    groups: Dict[tuple, Dict[int, int]] = {}
    dup: Dict[int, int] = {}
    for r in range(lay.num_regs):
        c = lay.reg_coord(r)
        rep = sum(1 << j for j, bit in enumerate(levels.repeats) if r >> bit & 1)
        by_pos = groups.setdefault((c[:axis] + c[axis + 1:], rep), {})
        if c[axis] in by_pos:
            dup[r] = by_pos[c[axis]]
        else:
            by_pos[c[axis]] = r
    runs = [(key[1], [by_pos[p] for p in sorted(by_pos, reverse=reverse)]) for key, by_pos in groups.items()]
    return runs, dup


def _each_reg(em: FunctionEmitter, regs: Sequence[int], body: Callable[[str, str], None], pairs: bool = False) -> None:
    """body(register, previous register) for each register of `regs` in order (from the second one when
    `pairs`), as a loop when the registers are evenly spaced."""
    n = len(regs)
    start = 1 if pairs else 0
    step = regs[1] - regs[0] if n > 1 else 0
    if n - start <= 2 or any(regs[i + 1] - regs[i] != step for i in range(n - 1)):
        for i in range(start, n):
            body(str(regs[i]), str(regs[i - 1]) if i else "")
        return
    i = em.loop_var("i")
    em.open(f"for (uint {i} = {start}; {i} < {n}; ++{i})")
    scaled = i if abs(step) == 1 else f"{abs(step)} * {i}"
    reg = (f"{regs[0]} + {scaled}" if regs[0] else scaled) if step > 0 else f"{regs[0]} - {scaled}"
    prev = f"{reg} - {step}" if step > 0 else f"{reg} + {-step}"
    body(reg, prev)
    em.close()


def _scan_in_levels(em, op, ty, lay, axis, reverse, combine, ctypes, outs, levels: _Levels) -> None:
    runs, dup = _runs(lay, axis, levels, reverse)

    def at(o: Lowered, r: str) -> str:
        return f"{o.name}[{r}]"

    # 1. each run of registers, sequentially
    for _, regs in runs:
        if len(regs) > 1:
            _each_reg(em, regs, lambda r, prev: _combine_into(
                em, combine, ctypes, [at(o, prev) for o in outs], [at(o, r) for o in outs], [at(o, r) for o in outs]),
                pairs=True)

    def apply(prefix: List[str], regs: List[int]) -> None:
        _each_reg(em, regs, lambda r, _: _combine_into(em, combine, ctypes, prefix, [at(o, r) for o in outs],
                                                        [at(o, r) for o in outs]))

    # 2. across the lanes of each line
    L = 1 << len(levels.lanes)
    pos = "0"
    if levels.lanes:
        vals = [0] * len(lay.lane)
        for j, bit in enumerate(levels.lanes):
            vals[bit] = 1 << j
        pos = em.temp("lane_pos")
        em.emit(f"const uint {pos} = {linear_expr('tt_lane', vals)};")
        first = L - 1 if reverse else 0
        turns = 1 << (len(lay.lane) - len(levels.lanes))
        # the builtin in turns when that is no more calls than the ladder has steps (or there is no ladder)
        use_builtin = _scan_builtin(em.target, op, ctypes) is not None and turns <= _MAX_BUILTIN_TURNS and \
            (turns <= len(levels.lanes) or not _lanes_contiguous(levels))
        for _, regs in runs:
            totals = [at(o, str(regs[-1])) for o in outs]
            prefix = (_lane_prefix_builtin if use_builtin else _lane_prefix_ladder)(
                em, op, lay, levels, reverse, combine, ctypes, totals, pos)
            em.open(f"if ({pos} != {first})")
            apply(prefix, regs)
            em.close()
    # 3. across simdgroups and register repeats: block totals through threadgroup memory
    W, C = 1 << len(levels.warps), 1 << len(levels.repeats)
    if W * C > 1:
        length = ty.shape[axis]
        numel_off = ty.numel // length
        off_shape = list(ty.shape[:axis]) + list(ty.shape[axis + 1:])
        off_strides = row_major_strides(off_shape) if off_shape else []
        strides = off_strides[:axis] + [0] + off_strides[axis:]
        bufs = operand_scratch(em, ctypes, op, W * C * numel_off, "scan_totals")
        wpos = "0"
        if levels.warps:
            vals = [0] * len(lay.warp)
            for j, bit in enumerate(levels.warps):
                vals[bit] = 1 << j
            wpos = em.temp("warp_pos")
            em.emit(f"const uint {wpos} = {linear_expr('tt_warp', vals)};")
        holder = f"{pos} == {0 if reverse else L - 1}" if levels.lanes else ""
        if holder:
            em.open(f"if ({holder})")
        for rep, regs in runs:
            slot = _slot(f"{rep * W} + {wpos}" if rep else wpos, numel_off, index_expr(em, lay, str(regs[0]), strides))
            for b, o, ct in zip(bufs, outs, ctypes):
                em.emit(em.tg_store(b, slot, at(o, str(regs[-1])), ct))
        if holder:
            em.close()
        em.barrier()
        last = W * C - 1
        for rep, regs in runs:
            idx = index_expr(em, lay, str(regs[0]), strides)
            block = f"{rep * W} + {wpos}" if rep else wpos
            # the first block in scan order has no carry; blocks of a later repeat always have one
            always = (rep < C - 1) if reverse else rep > 0
            if not always:
                em.open(f"if ({block} != {last if reverse else 0})")
            prefix = []
            for b, ct in zip(bufs, ctypes):
                p = em.temp("scan_carry")
                em.emit(f"{ct} {p} = {em.tg_load(b, _slot(str(last if reverse else 0), numel_off, idx), ct)};")
                prefix.append(p)
            k = em.loop_var("b")
            em.open(f"for (int {k} = {last - 1}; {k} > int({block}); --{k})" if reverse else
                    f"for (int {k} = 1; {k} < int({block}); ++{k})")
            em.emit(combine.call(prefix, [em.tg_load(b, _slot(k, numel_off, idx), ct) for b, ct in zip(bufs, ctypes)]))
            em.close()
            apply(prefix, regs)
            if not always:
                em.close()
    for r, first_reg in sorted(dup.items()):
        for o in outs:
            em.emit(f"{at(o, str(r))} = {at(o, str(first_reg))};")


def _slot(block: str, numel_off: int, idx: str) -> str:
    """Index of a block total in the scan's scratch: `block * numel_off + idx`."""
    b = block if re.fullmatch(r"\w+", block) else f"({block})"
    scaled = b if numel_off == 1 else f"{b} * {numel_off}"
    return scaled if idx == "0" else f"{scaled} + {idx}"


def _lane_prefix_builtin(em, op, lay, levels, reverse, combine, ctypes, totals, pos) -> List[str]:
    """The combination of the totals of the lanes before this one in its line (identity on the first), by
    Metal's exclusive prefix builtin: lines sharing the simdgroup take turns, the others adding the identity;
    a reverse scan runs on the lanes mirrored along the axis."""
    fn, identity, cast = _scan_builtin(em.target, op, ctypes)
    ct = ctypes[0]
    axis_mask = sum(1 << b for b in levels.lanes)
    off_mask = ((1 << len(lay.lane)) - 1) & ~axis_mask
    xor = em.ctx.require_shuffle(em.target.shuffle_builtin("xor"), ct) if reverse else None

    def call(x: str) -> str:
        return f"{ct}({fn}({cast}({x})))" if cast else f"{fn}({x})"

    t = em.temp("lane_total")
    em.emit(f"{ct} {t} = {xor}({totals[0]}, ushort({axis_mask}));" if reverse else f"{ct} {t} = {totals[0]};")
    e = em.temp("lane_prefix")
    if not off_mask:
        em.emit(f"{ct} {e} = {call(t)};")
    else:
        seg = em.temp("line")
        em.emit(f"const uint {seg} = tt_lane & {off_mask};")
        em.emit(f"{ct} {e} = {identity};")
        off_bits = [b for b in range(len(lay.lane)) if off_mask >> b & 1]
        for turn in range(1 << len(off_bits)):
            sv = sum(1 << b for j, b in enumerate(off_bits) if turn >> j & 1)
            p = em.temp("turn")
            em.emit(f"const {ct} {p} = {call(f'{seg} == {sv} ? {t} : {identity}')};")
            em.emit(f"{e} = {seg} == {sv} ? {p} : {e};")
    if reverse:
        em.emit(f"{e} = {xor}({e}, ushort({axis_mask}));")
    return [e]


def _lane_prefix_ladder(em, op, lay, levels, reverse, combine, ctypes, totals, pos) -> List[str]:
    """The same prefix for any combine: a Hillis-Steele ladder of `simd_shuffle_up` (`_down` when reverse)
    over the lanes of each line (contiguous lane bits), then one more shuffle makes it exclusive."""
    fn = em.target.shuffle_builtin("down" if reverse else "up")
    shuffles = [em.ctx.require_shuffle(fn, ct) for ct in ctypes]
    low = levels.lanes[0]
    L = 1 << len(levels.lanes)
    acc = []
    for ct, t in zip(ctypes, totals):
        a = em.temp("lane_scan")
        em.emit(f"{ct} {a} = {t};")
        acc.append(a)
    d = 1
    while d < L:
        others = []
        for ct, a, sh in zip(ctypes, acc, shuffles):
            o = em.temp("shfl")
            em.emit(f"const {ct} {o} = {sh}({a}, ushort({d << low}));")
            others.append(o)
        em.open(f"if ({pos} < {L - d})" if reverse else f"if ({pos} >= {d})")
        _combine_into(em, combine, ctypes, others, acc, acc)
        em.close()
        d *= 2
    prefix = []
    for ct, a, sh in zip(ctypes, acc, shuffles):
        e = em.temp("lane_prefix")
        em.emit(f"const {ct} {e} = {sh}({a}, ushort({1 << low}));")
        prefix.append(e)
    return prefix

"""Axis-info analysis: per tensor dimension, how many consecutive elements are contiguous (differ by 1),
constant, and what power of two divides the first element of each such run. Runs are aligned: a contiguity or
constancy of n along a dimension speaks of the elements at indices kn .. kn+n-1 along it. A contiguity of 1
makes every element a run, so then the divisibility holds for every element.

It follows the rules of upstream's AxisInfo analysis (which the Python bindings do not expose) over our
IR: facts start at `tt.divisibility` argument attributes, `tt.make_range`, constants and splats, and flow
through `addptr`, integer arithmetic, `broadcast`, `expand_dims` and comparisons. Pointer divisibility is
in bytes; integer divisibility in units. Values it does not understand get the pessimistic fact
(contiguity 1, divisibility 1, constancy 1), which only ever costs vector width, never correctness.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

from ..ir import Function, Op, Value
from ..ir.types import PointerType, ScalarType, TensorType

MAX_DIVISIBILITY = 1 << 30
# Integer width changes: the value (sign- or zero-extended) or its low bits (truncated) carry over.
_WIDTH_CASTS = ("arith.extsi", "arith.extui", "arith.trunci", "arith.index_cast", "arith.index_castui")


@dataclass(frozen=True)
class AxisInfo:
    contiguity: Tuple[int, ...]
    divisibility: Tuple[int, ...]
    constancy: Tuple[int, ...]

    @staticmethod
    def unknown(rank: int) -> "AxisInfo":
        return AxisInfo((1, ) * rank, (1, ) * rank, (1, ) * rank)


def _pow2_divisor(v: int) -> int:
    if v == 0:
        return MAX_DIVISIBILITY
    return min(MAX_DIVISIBILITY, v & -v)


def _div_every(info: "AxisInfo", d: int, run: int) -> int:
    """The power of two that divides the elements at indices k*run along dimension d (run: 1 for every element,
    else a divisor or a multiple of the contiguity there): inside a contiguous run they are x0 + k*run."""
    c, div = info.contiguity[d], info.divisibility[d]
    return div if c == 1 or run % c == 0 else math.gcd(div, run)


def _shape(v: Value) -> Tuple[int, ...]:
    return v.type.shape if isinstance(v.type, TensorType) else ()


def _elem_bytes(v: Value) -> int:
    ty = v.type.element if isinstance(v.type, TensorType) else v.type
    if isinstance(ty, PointerType):
        pointee = ty.pointee
        return max(1, pointee.bitwidth // 8) if isinstance(pointee, ScalarType) else 1
    return 1


class AxisInfoAnalysis:

    def __init__(self, fn: Function):
        self.info: Dict[int, AxisInfo] = {}
        self._scalar_div: Dict[int, int] = {}
        for arg, attrs in zip(fn.args, fn.arg_attrs or [{}] * len(fn.args)):
            self._scalar_div[id(arg)] = int((attrs or {}).get("tt.divisibility", 1))
        for block in fn.body.blocks:  # region order: a block's operands are defined in blocks printed before it
            self._visit_ops(block.ops)

    def _visit_ops(self, ops) -> None:
        for op in ops:
            if op.name == "scf.for":
                self._visit_for(op)
            else:
                for region in op.regions:
                    for block in region.blocks:
                        self._visit_ops(block.ops)
                self._visit(op)
                self._apply_hints(op)

    def _apply_hints(self, op: Op) -> None:
        """`tl.multiple_of` / `tl.max_contiguous` / `tl.max_constancy` attach per-dimension facts."""
        if not op.results or not any(k in op.attrs for k in ("tt.divisibility", "tt.contiguity", "tt.constancy")):
            return
        res = op.results[0]

        def hint(name):
            v = op.attrs.get(name)
            return None if v is None else tuple(v) if isinstance(v, list) else (int(v), )

        div, cont, const = hint("tt.divisibility"), hint("tt.contiguity"), hint("tt.constancy")
        if isinstance(res.type, TensorType):
            cur = self.get(res)
            self.info[id(res)] = AxisInfo(cont or cur.contiguity, div or cur.divisibility, const or cur.constancy)
        elif div:
            self._scalar_div[id(res)] = div[0]

    def _meet(self, a: AxisInfo, b: AxisInfo) -> AxisInfo:
        return AxisInfo(tuple(math.gcd(x, y) for x, y in zip(a.contiguity, b.contiguity)),
                        tuple(math.gcd(x, y) for x, y in zip(a.divisibility, b.divisibility)),
                        tuple(math.gcd(x, y) for x, y in zip(a.constancy, b.constancy)))

    def _visit_for(self, op: Op) -> None:
        """The induction variable is lb + k*step; a loop-carried value gets what holds both for its initial
        value and for every value the body yields (iterated to a fixed point)."""
        lb, _, step, *inits = op.operands
        body = op.regions[0].entry
        iv, *carried = body.args
        self._scalar_div[id(iv)] = math.gcd(self.scalar_divisibility(lb), self.scalar_divisibility(step))
        for arg, init in zip(carried, inits):
            self._copy(init, arg)
        yield_op = body.ops[-1] if body.ops and body.ops[-1].name == "scf.yield" else None
        for _ in range(4):
            self._visit_ops(body.ops)
            if yield_op is None:
                break
            changed = False
            for arg, y in zip(carried, yield_op.operands):
                if isinstance(arg.type, TensorType):
                    new = self._meet(self.get(arg), self.get(y))
                    if new != self.get(arg):
                        self.info[id(arg)] = new
                        changed = True
                else:
                    new = math.gcd(self.scalar_divisibility(arg), self.scalar_divisibility(y))
                    if new != self.scalar_divisibility(arg):
                        self._scalar_div[id(arg)] = new
                        changed = True
            if not changed:
                break
        for res, arg in zip(op.results, carried):
            self._copy(arg, res)

    def _copy(self, src: Value, dst: Value) -> None:
        if id(src) in self.info:
            self.info[id(dst)] = self.info[id(src)]
        self._scalar_div[id(dst)] = self.scalar_divisibility(src)

    # -- queries --------------------------------------------------------------------------------

    def get(self, v: Value) -> AxisInfo:
        rank = len(_shape(v))
        got = self.info.get(id(v))
        if got is None or len(got.contiguity) != rank:
            return AxisInfo.unknown(rank)
        return got

    def scalar_divisibility(self, v: Value) -> int:
        return self._scalar_div.get(id(v), 1)

    # -- transfer functions ---------------------------------------------------------------------

    def _set(self, v: Value, info: AxisInfo) -> None:
        self.info[id(v)] = info

    def _visit(self, op: Op) -> None:
        name = op.name
        if not op.results:
            return
        res = op.results[0]
        shape = _shape(res)
        rank = len(shape)
        if name == "arith.constant" and isinstance(res.type, (ScalarType, TensorType)):
            value = str(op.attrs.get("value", ""))
            text = value[len("dense<"):-1] if value.startswith("dense<") else value
            try:
                c = int(text)
            except ValueError:
                return
            self._scalar_div[id(res)] = _pow2_divisor(c)
            if rank:
                self._set(res, AxisInfo((1, ) * rank, (_pow2_divisor(c), ) * rank, shape))
            return
        if name == "tt.make_range":
            start, end = int(op.attrs.get("start", 0)), int(op.attrs.get("end", 0))
            self._set(res, AxisInfo((end - start, ), (_pow2_divisor(start), ), (1, )))
            return
        if name == "tt.splat":
            d = self._div_of(op.operands[0])
            self._set(res, AxisInfo((1, ) * rank, (d, ) * rank, shape))
            return
        if rank == 0:
            if name in ("arith.muli", ):
                a, b = (self.scalar_divisibility(v) for v in op.operands)
                self._scalar_div[id(res)] = min(MAX_DIVISIBILITY, a * b)
            elif name in ("arith.addi", "arith.subi"):
                a, b = (self.scalar_divisibility(v) for v in op.operands)
                self._scalar_div[id(res)] = min(a, b)
            elif name == "tt.addptr":
                a = self.scalar_divisibility(op.operands[0])
                b = self.scalar_divisibility(op.operands[1]) * _elem_bytes(op.operands[0])
                self._scalar_div[id(res)] = min(a, b)
            elif name in _WIDTH_CASTS:
                # `pid.to(tl.int64) * stride` widens the stride first: its low bits, so its divisor, stay
                self._scalar_div[id(res)] = self.scalar_divisibility(op.operands[0])
            elif name in ("arith.remsi", "arith.remui"):
                # x - n*q: a multiple of whatever power of two divides both
                a, b = (self.scalar_divisibility(v) for v in op.operands)
                self._scalar_div[id(res)] = min(a, b)
            elif name == "arith.select":
                self._scalar_div[id(res)] = min(self.scalar_divisibility(v) for v in op.operands[1:])
            return
        if name == "tt.broadcast":
            src = self.get(op.operands[0])
            src_shape = _shape(op.operands[0])
            cont, div, const = [], [], []
            for d in range(rank):
                if src_shape[d] == 1 and shape[d] != 1:
                    cont.append(1)
                    div.append(src.divisibility[d])
                    const.append(shape[d])
                else:
                    cont.append(src.contiguity[d])
                    div.append(src.divisibility[d])
                    const.append(src.constancy[d])
            self._set(res, AxisInfo(tuple(cont), tuple(div), tuple(const)))
            return
        if name == "tt.expand_dims":
            src = self.get(op.operands[0])
            axis = int(op.attrs["axis"])
            # along the new dimension every element is a run: what divides every element
            d0 = math.gcd(*(_div_every(src, d, 1) for d in range(len(src.divisibility)))) if src.divisibility else 1
            self._set(res, AxisInfo(src.contiguity[:axis] + (1, ) + src.contiguity[axis:],
                                    src.divisibility[:axis] + (d0, ) + src.divisibility[axis:],
                                    src.constancy[:axis] + (1, ) + src.constancy[axis:]))
            return
        if name == "ttg.convert_layout":
            self._set(res, self.get(op.operands[0]))
            return
        if name in ("arith.addi", "tt.addptr"):
            a, b = (self.get(v) for v in op.operands)
            scale = _elem_bytes(op.operands[0]) if name == "tt.addptr" else 1
            cont = tuple(max(math.gcd(ac, bk), math.gcd(ak, bc))
                         for ac, bc, ak, bk in zip(a.contiguity, b.contiguity, a.constancy, b.constancy))
            # the first element of each run of the result: base alignment and the offset's (in bytes) there
            div = tuple(min(_div_every(a, d, c), _div_every(b, d, c) * scale) for d, c in enumerate(cont))
            const = tuple(math.gcd(ak, bk) for ak, bk in zip(a.constancy, b.constancy))
            self._set(res, AxisInfo(cont, div, const))
            return
        if name == "arith.muli":
            a, b = (self.get(v) for v in op.operands)
            # the product is not contiguous: what divides each element
            div = tuple(min(MAX_DIVISIBILITY, _div_every(a, d, 1) * _div_every(b, d, 1)) for d in range(rank))
            const = tuple(math.gcd(ak, bk) for ak, bk in zip(a.constancy, b.constancy))
            self._set(res, AxisInfo((1, ) * rank, div, const))
            return
        if name in ("arith.remsi", "arith.remui"):
            # x % n keeps the runs of x that do not cross a multiple of n: runs of x aligned to what divides
            # both their first values and n
            a, b = (self.get(v) for v in op.operands)
            cont = tuple(math.gcd(a.contiguity[d], a.divisibility[d], b.divisibility[d], b.constancy[d])
                         if b.constancy[d] > 1 else 1 for d in range(rank))
            div = tuple(min(_div_every(a, d, c), _div_every(b, d, c)) for d, c in enumerate(cont))
            const = tuple(math.gcd(ak, bk) for ak, bk in zip(a.constancy, b.constancy))
            self._set(res, AxisInfo(cont, div, const))
            return
        if name in _WIDTH_CASTS:
            # The values (extensions) or their low bits (truncation) stay, so do constancy and the power of two
            # dividing them. A run stays contiguous where it crosses no multiple of 2^31 (where a signed or
            # unsigned value wraps): runs aligned to what divides their first element never do. Truncation to
            # fewer bits wraps at smaller multiples: its runs are not kept.
            a = self.get(op.operands[0])
            cont = tuple(1 if name == "arith.trunci" else math.gcd(c, dv) for c, dv in zip(a.contiguity, a.divisibility))
            self._set(res, AxisInfo(cont, a.divisibility, a.constancy))
            return
        if name in ("arith.cmpi", "arith.andi", "arith.ori", "arith.select"):
            # a scalar operand (the i1 condition of `arith.select` on tensors) is the same for every element
            infos = [self.get(v) for v in op.operands if isinstance(v.type, TensorType)]
            const = [math.gcd(*(i.constancy[d] for i in infos)) if len(infos) > 1 else infos[0].constancy[d]
                     for d in range(rank)]
            if name == "arith.cmpi" and len(infos) == 2:
                const = [max(c, self._ordered_runs(op, d)) for d, c in enumerate(const)]
            self._set(res, AxisInfo((1, ) * rank, (1, ) * rank, tuple(const)))
            return

    def _ordered_runs(self, op: Op, d: int) -> int:
        """Runs along d over which `arith.cmpi` of a contiguous side with a constant side keeps its value.

        For x = x0, x0+1, ... (x0 a multiple of g) against a constant c (a multiple of g), `x < c` and `x >= c`
        switch between x = c-1 and x = c, at the edge of a run of g; `x <= c` and `x > c` switch between c and
        c+1, inside one. So only those two predicates with the contiguous side on the left (and, mirrored,
        `c > x`, `c <= x`) are constant over aligned runs of g = gcd(contiguity, both divisibilities)."""
        pred = op.attrs.get("predicate")
        a, b = (self.get(v) for v in op.operands)
        if pred in ("slt", "ult", "sge", "uge"):
            seq, const = a, b
        elif pred in ("sgt", "ugt", "sle", "ule"):
            seq, const = b, a
        else:
            return 1
        if seq.contiguity[d] == 1 or const.constancy[d] == 1:
            return 1
        return math.gcd(seq.contiguity[d], seq.divisibility[d], const.divisibility[d], const.constancy[d])

    def _div_of(self, v: Value) -> int:
        if isinstance(v.type, TensorType):
            return max(self.get(v).divisibility or (1, ))
        return self.scalar_divisibility(v)


def vector_width(analysis: AxisInfoAnalysis, ptr: Value, mask: Optional[Value], layout, elem_bytes: int,
                 max_bytes: int = 16, max_elems: int = 4) -> int:
    """Widest power-of-two V (at most `max_elems`, `max_bytes`) such that each thread's runs of V registers are
    V consecutive elements along the fastest-varying dimension, aligned to V elements, under one mask value."""
    ty: TensorType = ptr.type
    rank = len(ty.shape)
    info = analysis.get(ptr)
    best = 1
    for dim in range(rank):
        runs = 0
        while runs < len(layout.reg) and layout.reg[runs] == tuple((1 << runs) if d == dim else 0
                                                                   for d in range(rank)):
            runs += 1
        v = 1 << runs
        v = min(v, info.contiguity[dim], max(1, info.divisibility[dim] // elem_bytes), max(1, max_bytes // elem_bytes),
                max_elems)
        if mask is not None:
            v = min(v, analysis.get(mask).constancy[dim])
        p = 1
        while p * 2 <= v:
            p *= 2
        best = max(best, p) if runs and dim == _fastest(layout, rank) else best
    return best


def _fastest(layout, rank: int) -> int:
    """The dimension of the first register basis (the thread's contiguous elements), or -1."""
    if not layout.reg:
        return -1
    b = layout.reg[0]
    for d in range(rank):
        if b[d] == 1 and all(x == 0 for k, x in enumerate(b) if k != d):
            return d
    return -1

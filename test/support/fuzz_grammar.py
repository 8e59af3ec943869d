"""Grammar of the differential fuzzer: hypothesis strategies that generate small Triton kernels as
source text, plus the inputs they run on and the rules their outputs are compared by.

A generated kernel (always named ``fuzz_kernel``) has
* 1-3 input tensors of one drawn dtype (int8/int16/int32/int64/uint8/uint32, float16/bfloat16/float32),
  loaded with masks against a runtime size that is not a multiple of the block, so every block
  boundary is masked (``n`` in 1-D; ``M`` and ``N`` in 2-D, where an input is a ``[BM, BN]`` tile, a
  row vector loaded along N and broadcast with ``[None, :]``, or a column vector loaded along M and
  broadcast with ``[:, None]``);
* 1-2 value outputs, each an expression tree (or, with ``bool_outputs``, a comparison stored to a
  ``torch.bool`` tensor) (written out one SSA-style statement per node) over the
  inputs, stored with the same mask;
* optionally reductions of the first value (``tl.sum``/``tl.max``/``tl.min``/``tl.argmax``/``tl.argmin``
  on an axis, and sum/max/min over a whole 2-D tile with ``axis=None``, over ``tl.where(mask, v, neutral)``),
  reductions broadcast back against the value (``v - tl.max(v, axis=a, keep_dims=True)``, or through
  ``tl.expand_dims``/``[:, None]``/``[None, :]``) and ``tl.cumsum`` on an axis (forward or reverse),
  one partial result per program.

Expression nodes (all operands of a binary node have the node's type; types change only through
explicit casts, so the generator always knows every type, and the kernel ``tl.static_assert``s it):
* integers: ``+ - *`` (wrapping), ``// %`` with the divisor guarded by ``tl.where`` so it is never 0
  (and never -1 for signed types, which would make ``MIN // -1`` overflow), ``& | ^ ~``, ``<< >>`` with
  the amount masked to ``[0, bits)``, literals of the type, ``tl.abs``, unary ``-``;
* floats (float16, float32): ``+ - * /`` (float16 ``/`` is computed in float32, as Triton does, and cast
  back), literals, ``tl.abs``, unary ``-``;
* both: comparisons (``< <= > >= == !=``, combined with ``& |``) feeding ``tl.where`` or a cast,
  ``tl.where``, ``tl.maximum``/``tl.minimum``, ``tl.full`` constants, casts between all the types;
* transcendental functions ``tl.exp/log/sqrt/sin/cos/sigmoid`` on a float32 tree, at the root of a
  value output (optionally cast to float16/bfloat16 afterwards): see "Bounds" for why only there.

Intended semantic differences that are avoided, not reported:
* float -> int casts of NaN or out-of-range values (the backend saturates and maps NaN to 0, the
  interpreter inherits numpy's host behaviour): every float->int cast is written as
  ``tl.where(v == v, tl.minimum(tl.maximum(v, LO), HI), 0).to(T)`` with LO/HI the widest bounds
  representable in the source type that fit the target;
* integer division/remainder by zero: the divisor guard above;
* the sign of a zero returned by ``tl.maximum``/``tl.minimum`` when the operands are -0.0 and +0.0
  (unspecified, like LLVM's maxnum; the interpreter gives -0.0, the backend +0.0): float max/min nodes
  are written ``(tl.maximum(a, b) + 0.0)``, which maps -0.0 to +0.0 and changes nothing else; max/min
  reductions compare -0.0 equal to +0.0;
* NaNs in ``tl.argmax``/``tl.argmin`` (their combine function is order dependent for NaN; the
  interpreter uses ``np.nanargmax``): NaN lanes are replaced by the neutral value first;
* the interpreter's own bugs, so that it stays a usable oracle (found while writing this; triton 3.9.0):
  bfloat16 arithmetic and comparisons in the interpreter operate on the raw uint16 bits, and its
  float32 -> bfloat16 cast truncates instead of rounding to nearest even. So bfloat16 only appears at
  the edges: a bfloat16 input is converted to float32 as it is loaded (and holds no subnormals: the
  interpreter's bfloat16 -> float32 conversion mangles them, e.g. 4.959e-39 becomes 8.08e-39), and a
  bfloat16 output ``v.to(tl.bfloat16)`` is stored together with a float32 "shadow" of ``v``; the
  expected bfloat16 is torch's round-to-nearest-even of the interpreter's shadow.

Bounds (emulator vs interpreter; both run on the host, so these are tighter than a real GPU needs):
* integers, booleans, argmax/argmin indices: exact.
* float ``+ - * /``, abs, neg, comparisons, where, max/min, casts between float16/float32/int types,
  float32 -> bfloat16 rounding: 0 ULP (bit-exact; NaN matches any NaN). float16 arithmetic is correctly
  rounded per operation on both sides (float16 ops computed in float32 and rounded are exact for
  + - * /), so float16 trees are exact too.
* transcendental roots, float32 ULPs (measured over 140k inputs from 1e-38 to 1e30: the emulator is
  within 1 ULP of a float64 reference, numpy's float32 SIMD functions within 3 ULP; bound = observed
  emulator-vs-interpreter maximum + 1): exp 3, log 4, sin 2, cos 2, sqrt 1, sigmoid 5. When such a root
  is then cast to float16/bfloat16 the bound becomes 1 ULP of the narrow type.
  Transcendentals are only generated at the root: a few ULP of difference fed into a comparison, a
  cast to int or a cancelling subtraction would turn into an arbitrarily large difference.
* ``tl.sum``/``tl.cumsum`` over floats: the summation order is implementation defined, so the bound is
  the classical one for any order: ``|got - expected| <= (2(k-1) + 2b + 2) * u * sum|v_i|`` with k the
  number of terms, u the unit roundoff of the accumulation type (2^-24 float32, 2^-11 float16) and b the
  ULP bound of the summed values. If some v_i is inf/NaN the results must be the same inf/NaN. When
  sum|v_i| exceeds half the largest finite value, whether a partial sum overflows depends on the order:
  there a non-finite result on either side is accepted (counted as skipped), finite ones are still
  held to the bound.
* ``tl.max``/``tl.min`` over floats: exact (or b ULP) with -0.0 == +0.0.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import torch
from hypothesis import strategies as st

INT_TYPES = ("int8", "int16", "int32", "int64", "uint8", "uint32")
FLOAT_TYPES = ("float16", "float32")
COMPUTE_TYPES = INT_TYPES + FLOAT_TYPES
IO_TYPES = COMPUTE_TYPES + ("bfloat16", )

TORCH_DTYPE = {
    "int8": torch.int8, "int16": torch.int16, "int32": torch.int32, "int64": torch.int64, "uint8": torch.uint8,
    "uint32": torch.uint32, "float16": torch.float16, "float32": torch.float32, "bfloat16": torch.bfloat16,
    "int1": torch.bool,
}
BITS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64, "uint8": 8, "uint32": 32}

TRANSCENDENTAL_ULP = {"exp": 3, "log": 4, "sin": 2, "cos": 2, "sqrt": 1, "sigmoid": 5}

KERNEL_NAME = "fuzz_kernel"


def is_int(t: str) -> bool:
    return t in INT_TYPES


def is_signed(t: str) -> bool:
    return t.startswith("int")


def int_range(t: str) -> Tuple[int, int]:
    b = BITS[t]
    return (-(1 << (b - 1)), (1 << (b - 1)) - 1) if is_signed(t) else (0, (1 << b) - 1)


def float_literal(x: float) -> str:
    if math.isnan(x):
        return 'float("nan")'
    if math.isinf(x):
        return 'float("inf")' if x > 0 else '-float("inf")'
    return repr(float(x))


def int_literal(x: int) -> str:
    return str(x) if x >= 0 else f"({x})"


def clamp_bounds(src: str, dst: str) -> Tuple[float, float]:
    """Widest [lo, hi] exactly representable in float type `src` and inside int type `dst`."""
    lo, hi = int_range(dst)
    fdt = TORCH_DTYPE[src]
    fmax = torch.finfo(fdt).max

    def fit(v, toward):
        v = max(-fmax, min(fmax, v))
        t = torch.tensor(float(v), dtype=torch.float64).to(fdt)
        while (toward < 0 and float(t) > v) or (toward > 0 and float(t) < v):
            t = torch.nextafter(t, torch.tensor(toward * math.inf, dtype=fdt))
        return float(t)

    return fit(lo, +1), fit(hi, -1)


def accum_type(t: str) -> str:
    """Result type of tl.sum/tl.cumsum (triton.language.standard._pick_sum_dtype)."""
    if is_int(t) and BITS[t] < 32:
        return "int32" if is_signed(t) else "uint32"
    return t


def minmax_type(t: str) -> str:
    """Result type of tl.max/tl.min without indices: narrower types are widened first."""
    if t == "float16":
        return "float32"
    if is_int(t) and BITS[t] < 32:
        return "int32"
    return t


# ------------------------------------------------------------------------------------------------
# Specs


@dataclass
class InputSpec:
    name: str      # pointer parameter
    var: str       # the loaded value in the kernel
    dtype: str     # storage dtype
    shape: Tuple[int, ...]
    kind: str      # "vec" (1-D), "mat" / "row" / "col" (2-D)
    regime: str    # value distribution, see make_input


@dataclass
class OutputSpec:
    name: str
    dtype: str
    shape: Tuple[int, ...]
    kind: str                   # "value", "shadow", "sum", "max", "min", "argmax", "argmin", "cumsum"
    ulp: int = 0                # bound for values (and of the summed values for sums)
    source: int = -1            # index (in outputs) of the value a reduction/scan reads
    shadow: int = -1            # for bfloat16 values: index of the float32 shadow output
    axis: Optional[int] = 0     # None: the whole 2-D tile
    reverse: bool = False
    note: str = ""              # e.g. the transcendental function at the root


@dataclass
class KernelSpec:
    source: str
    layout: str                      # "1d" or "2d"
    grid: Tuple[int, ...]
    constexprs: Dict[str, int]
    num_warps: int
    scalars: List[Tuple[str, int]]   # runtime int parameters (n / M, N)
    inputs: List[InputSpec]
    outputs: List[OutputSpec]
    seed: int
    block: Tuple[int, ...]           # (BLOCK,) or (BM, BN)
    extent: Tuple[int, ...]          # (n,) or (M, N)
    others: Dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        ins = ", ".join(f"{i.name}:{i.dtype}{list(i.shape)}[{i.regime}]" for i in self.inputs)
        return (f"layout={self.layout} extent={self.extent} block={self.block} grid={self.grid} "
                f"num_warps={self.num_warps} seed={self.seed} inputs=({ins})")


# ------------------------------------------------------------------------------------------------
# Expression generator


class _Gen:

    def __init__(self, draw, leaves: List[Tuple[str, str]], shape_expr: str, max_depth: int):
        self.draw = draw
        self.leaves = leaves          # (expression, compute type)
        self.shape_expr = shape_expr  # e.g. "[BLOCK]" or "[BM, BN]"
        self.max_depth = max_depth
        self.lines: List[str] = []
        self.n = 0

    def tmp(self, code: str) -> str:
        name = f"t{self.n}"
        self.n += 1
        self.lines.append(f"{name} = {code}")
        return name

    # literals ----------------------------------------------------------------------------------
    def int_const(self, t: str, nonzero: bool = False, no_minus_one: bool = False) -> int:
        lo, hi = int_range(t)
        edge = [hi, hi - 1, lo + 1] + ([lo] if t != "int64" else [])
        small = list(range(max(lo, -5), min(hi, 9) + 1))
        c = self.draw(st.one_of(st.sampled_from(small), st.sampled_from(edge)))
        if (nonzero and c == 0) or (no_minus_one and c == -1):
            c = 3
        return c

    def float_const(self) -> float:
        return self.draw(st.sampled_from([0.0, -0.0, 1.0, -1.0, 0.5, 2.0, -3.0, 0.1, 1e-3, 1000.0, -65504.0,
                                          1e-6, 7.25]))

    # casts -------------------------------------------------------------------------------------
    def cast(self, var: str, src: str, dst: str) -> str:
        if src == dst:
            return var
        if src in FLOAT_TYPES and is_int(dst):
            lo, hi = clamp_bounds(src, dst)
            clamped = self.tmp(f"tl.minimum(tl.maximum({var}, {float_literal(lo)}), {float_literal(hi)})")
            safe = self.tmp(f"tl.where({var} == {var}, {clamped}, 0.0)")
            return self.tmp(f"{safe}.to(tl.{dst})")
        return self.tmp(f"{var}.to(tl.{dst})")

    # nodes -------------------------------------------------------------------------------------
    def leaf(self, t: str) -> str:
        direct = [v for v, vt in self.leaves if vt == t]
        options = ["cast"] * 3 + (["input"] * 6 if direct else []) + ["full"]
        kind = self.draw(st.sampled_from(options))
        if kind == "input":
            return self.draw(st.sampled_from(direct))
        if kind == "full":
            c = self.int_const(t) if is_int(t) else self.float_const()
            lit = int_literal(c) if is_int(t) else float_literal(c)
            return self.tmp(f"tl.full({self.shape_expr}, {lit}, tl.{t})")
        var, vt = self.draw(st.sampled_from(self.leaves))
        return self.cast(var, vt, t)

    def cond(self, depth: int) -> str:
        s = self.draw(st.sampled_from(COMPUTE_TYPES))
        a = self.expr(s, depth - 1)
        op = self.draw(st.sampled_from(["<", "<=", ">", ">=", "==", "!="]))
        if self.draw(st.booleans()):
            b = self.expr(s, depth - 1)
        else:
            c = self.int_const(s) if is_int(s) else self.float_const()
            b = int_literal(c) if is_int(s) else float_literal(c)
        c1 = self.tmp(f"{a} {op} {b}")
        if depth > 1 and self.draw(st.integers(0, 3)) == 0:
            c2 = self.cond(depth - 1)
            return self.tmp(f"{c1} {self.draw(st.sampled_from(['&', '|']))} {c2}")
        return c1

    def expr(self, t: str, depth: int) -> str:
        if depth <= 0 or self.draw(st.integers(0, 4)) == 0:
            return self.leaf(t)
        if is_int(t):
            ops = ["arith", "arith", "arith_c", "divmod", "divmod_c", "bit", "bit_c", "shift", "shift_c", "where",
                   "minmax", "abs", "neg", "invert", "cast", "cast"]
        else:
            ops = ["arith", "arith", "arith_c", "div", "where", "minmax", "abs", "neg", "cast", "cast"]
        op = self.draw(st.sampled_from(ops))
        d = depth - 1
        if op == "arith":
            a, b = self.expr(t, d), self.expr(t, d)
            return self.tmp(f"{a} {self.draw(st.sampled_from(['+', '-', '*']))} {b}")
        if op == "arith_c":
            a = self.expr(t, d)
            c = int_literal(self.int_const(t)) if is_int(t) else float_literal(self.float_const())
            o = self.draw(st.sampled_from(["+", "-", "*", "r-"]))
            return self.tmp(f"{c} - {a}" if o == "r-" else f"{a} {o} {c}")
        if op == "div":
            # Triton divides floats narrower than 32 bits in float32 (computation_type_impl rule 2)
            a = self.expr(t, d)
            if self.draw(st.booleans()):
                q = self.tmp(f"{a} / {self.expr(t, d)}")
            else:
                q = self.tmp(f"{a} / {float_literal(self.draw(st.sampled_from([3.0, -0.5, 7.0, 0.0, 1e-3])))}")
            return q if t == "float32" else self.tmp(f"{q}.to(tl.{t})")
        if op == "divmod":
            a, b = self.expr(t, d), self.expr(t, d)
            guard = f"({b} == 0) | ({b} == -1)" if is_signed(t) else f"{b} == 0"
            g = self.tmp(f"tl.where({guard}, {self.int_const(t, nonzero=True, no_minus_one=True)}, {b})")
            return self.tmp(f"{a} {self.draw(st.sampled_from(['//', '%']))} {g}")
        if op == "divmod_c":
            a = self.expr(t, d)
            c = self.int_const(t, nonzero=True, no_minus_one=True)
            return self.tmp(f"{a} {self.draw(st.sampled_from(['//', '%']))} {int_literal(c)}")
        if op == "bit":
            a, b = self.expr(t, d), self.expr(t, d)
            return self.tmp(f"{a} {self.draw(st.sampled_from(['&', '|', '^']))} {b}")
        if op == "bit_c":
            a = self.expr(t, d)
            return self.tmp(f"{a} {self.draw(st.sampled_from(['&', '|', '^']))} {int_literal(self.int_const(t))}")
        if op == "shift":
            a, b = self.expr(t, d), self.expr(t, d)
            amt = self.tmp(f"{b} & {BITS[t] - 1}")
            return self.tmp(f"{a} {self.draw(st.sampled_from(['<<', '>>']))} {amt}")
        if op == "shift_c":
            a = self.expr(t, d)
            amt = self.draw(st.integers(0, BITS[t] - 1))
            return self.tmp(f"{a} {self.draw(st.sampled_from(['<<', '>>']))} {amt}")
        if op == "where":
            c = self.cond(d)
            a, b = self.expr(t, d), self.expr(t, d)
            return self.tmp(f"tl.where({c}, {a}, {b})")
        if op == "minmax":
            a, b = self.expr(t, d), self.expr(t, d)
            f = self.draw(st.sampled_from(["maximum", "minimum"]))
            if is_int(t):
                return self.tmp(f"tl.{f}({a}, {b})")
            return self.tmp(f"tl.{f}({a}, {b}) + 0.0")  # -0.0 vs +0.0 is unspecified: normalise
        if op == "abs":
            return self.tmp(f"tl.abs({self.expr(t, d)})")
        if op == "neg":
            return self.tmp(f"-{self.expr(t, d)}")
        if op == "invert":
            return self.tmp(f"~{self.expr(t, d)}")
        if op == "cast":
            if self.draw(st.integers(0, 3)) == 0:
                c = self.cond(d)
                return self.tmp(f"{c}.to(tl.{t})")
            s = self.draw(st.sampled_from([x for x in COMPUTE_TYPES if x != t]))
            return self.cast(self.expr(s, d), s, t)
        raise AssertionError(op)


# ------------------------------------------------------------------------------------------------
# Kernel strategy


def _block_and_extent(draw, sizes, max_blocks=3):
    b = draw(st.sampled_from(sizes))
    if b == 1:
        return b, draw(st.integers(1, max_blocks))
    k = draw(st.integers(0, max_blocks - 1))
    return b, k * b + draw(st.integers(1, b - 1))


@st.composite
def kernel_specs(draw, layouts=("1d", "2d"), dtypes=IO_TYPES, max_depth=3, reductions=True, scans=True,
                 transcendentals=True, max_values=2, bool_outputs=False, num_warps=(1, 2, 4, 8)):
    layout = draw(st.sampled_from(layouts))
    in_dtype = draw(st.sampled_from(dtypes))
    n_inputs = draw(st.integers(1, 3))
    num_warps = draw(st.sampled_from(list(num_warps)))
    seed = draw(st.integers(0, 2**31 - 1))
    ct = "float32" if in_dtype == "bfloat16" else in_dtype

    def other_literal():
        if is_int(in_dtype):
            lo, hi = int_range(in_dtype)
            return int_literal(draw(st.sampled_from([0, 1, hi, max(lo, -7)])))
        return float_literal(draw(st.sampled_from([0.0, 1.0, -2.5, float("nan"), float("inf")])))

    params: List[str] = []
    body: List[str] = []
    inputs: List[InputSpec] = []
    leaves: List[Tuple[str, str]] = []
    others: Dict[str, str] = {}
    regimes = ["small", "full", "edge"] if is_int(in_dtype) else ["normal", "wide", "ints", "special"]
    if layout == "1d":
        block, n = _block_and_extent(draw, [2, 4, 16, 32, 64, 128, 256, 1024])
        grid = (-(-n // block), )
        shape_expr, full_shape = "[BLOCK]", (n, )
        constexprs = {"BLOCK": block}
        scalars = [("n", n)]
        head = ["pid = tl.program_id(0)", "offs = pid * BLOCK + tl.arange(0, BLOCK)", "mask = offs < n"]
        for i in range(n_inputs):
            o = other_literal()
            others[f"x{i}"] = o
            load = f"tl.load(x{i}_ptr + offs, mask=mask, other={o})"
            inputs.append(InputSpec(f"x{i}_ptr", f"x{i}", in_dtype, (n, ), "vec", draw(st.sampled_from(regimes))))
            body.append(f"x{i} = {load}" + (".to(tl.float32)" if in_dtype == "bfloat16" else ""))
            leaves.append((f"x{i}", ct))
        blocks, extent = (block, ), (n, )
    else:
        bm, m = _block_and_extent(draw, [1, 2, 4, 8, 16, 32, 64])
        bn, nn = _block_and_extent(draw, [b for b in (1, 2, 4, 8, 16, 32, 64) if 2 <= bm * b <= 1024])
        grid = (-(-m // bm), -(-nn // bn))
        shape_expr, full_shape = "[BM, BN]", (m, nn)
        constexprs = {"BM": bm, "BN": bn}
        scalars = [("M", m), ("N", nn)]
        head = ["pid_m = tl.program_id(0)", "pid_n = tl.program_id(1)", "rm = pid_m * BM + tl.arange(0, BM)",
                "rn = pid_n * BN + tl.arange(0, BN)", "mask_m = rm < M", "mask_n = rn < N",
                "mask = mask_m[:, None] & mask_n[None, :]", "offs = rm[:, None] * N + rn[None, :]"]
        for i in range(n_inputs):
            kind = "mat" if i == 0 else draw(st.sampled_from(["mat", "row", "col"]))
            o = other_literal()
            others[f"x{i}"] = o
            if kind == "mat":
                load, shape = f"tl.load(x{i}_ptr + offs, mask=mask, other={o})", (m, nn)
            elif kind == "row":
                load, shape = f"tl.load(x{i}_ptr + rn, mask=mask_n, other={o})[None, :]", (nn, )
            else:
                load, shape = f"tl.load(x{i}_ptr + rm, mask=mask_m, other={o})[:, None]", (m, )
            inputs.append(InputSpec(f"x{i}_ptr", f"x{i}", in_dtype, shape, kind, draw(st.sampled_from(regimes))))
            body.append(f"x{i} = {load}" + (".to(tl.float32)" if in_dtype == "bfloat16" else ""))
            leaves.append((f"x{i}", ct))
        blocks, extent = (bm, bn), (m, nn)

    gen = _Gen(draw, leaves, shape_expr, max_depth)
    outputs: List[OutputSpec] = []
    n_values = draw(st.integers(1, max_values))
    for vi in range(n_values):
        trans = None
        if transcendentals and draw(st.integers(0, 3)) == 0:
            trans = draw(st.sampled_from(sorted(TRANSCENDENTAL_ULP)))
            vt = "float32"
        elif bool_outputs and draw(st.integers(0, 5)) == 0:
            vt = "int1"
        else:
            vt = draw(st.sampled_from(COMPUTE_TYPES + ((ct, ) * 4)))
        depth = draw(st.integers(1, max_depth))
        root = gen.cond(depth) if vt == "int1" else gen.expr(vt, depth)
        ulp = 0
        if trans:
            root = gen.tmp(f"tl.{trans}({root})")
            ulp = TRANSCENDENTAL_ULP[trans]
        store_t = vt
        if vt == "float32" and draw(st.integers(0, 3)) == 0:
            store_t = draw(st.sampled_from(["float16", "bfloat16"]))
        v = f"v{vi}"
        gen.lines.append(f"{v} = tl.broadcast_to({root}, ({', '.join(shape_expr[1:-1].split(', '))}, ))"
                         if layout == "2d" else f"{v} = {root}")
        gen.lines.append(f"tl.static_assert({v}.dtype == tl.{vt})")
        if store_t == "float16" and vt != "float16":
            gen.lines.append(f"{v} = {v}.to(tl.float16)")
            ulp = 1 if ulp else 0
            vt = "float16"
        if store_t == "bfloat16":
            outputs.append(OutputSpec(f"y{vi}s_ptr", "float32", full_shape, "shadow", ulp=ulp, note=trans or ""))
            params.append(f"y{vi}s_ptr")
            gen.lines.append(f"tl.store(y{vi}s_ptr + offs, {v}, mask=mask)")
            outputs.append(OutputSpec(f"y{vi}_ptr", "bfloat16", full_shape, "value", ulp=1 if ulp else 0,
                                      shadow=len(outputs) - 1, note=trans or ""))
            gen.lines.append(f"tl.store(y{vi}_ptr + offs, {v}.to(tl.bfloat16), mask=mask)")
        else:
            outputs.append(OutputSpec(f"y{vi}_ptr", vt, full_shape, "value", ulp=ulp, note=trans or ""))
            gen.lines.append(f"tl.store(y{vi}_ptr + offs, {v}, mask=mask)")
        params.append(f"y{vi}_ptr")
        if vi == 0 and vt == "int1":
            reductions = scans = False
        if vi == 0:
            v0_index, v0_type, v0_ulp = len(outputs) - 1, vt, ulp
            if store_t == "bfloat16":  # reduce the float32 value (its shadow)
                v0_index = len(outputs) - 2

    red_kinds = []
    if reductions:
        red_kinds += ["sum", "max", "min"] + (["argmax", "argmin"] if v0_ulp == 0 else [])
        if v0_ulp == 0:  # reduce, then broadcast the result back against v0
            red_kinds += ["bcast_max", "bcast_min"] + (["bcast_sum"] if is_int(v0_type) else [])
    if scans:
        red_kinds += ["cumsum"]
    n_red = draw(st.integers(0, 2)) if red_kinds else 0
    for ri in range(n_red):
        kind = draw(st.sampled_from(red_kinds))
        axes = [0, 1, 1, 0, None] if kind in ("sum", "max", "min") else [0, 1]  # no axis=None argmax in Triton
        axis = 0 if layout == "1d" else draw(st.sampled_from(axes))
        name = f"r{ri}_ptr"
        params.append(name)
        v = "v0"
        if kind.startswith("bcast_"):
            # v0 - reduce(v0) broadcast back over the reduced axis: layout conversions of the reduction
            # result (slice layout -> expand_dims -> broadcast). Exact: the reduced value is cast back
            # to v0's type (and +0.0 fixes the sign of a zero max/min); sums only for integers.
            red = kind[len("bcast_"):]
            if is_int(v0_type):
                lo, hi = int_range(v0_type)
                neutral = {"sum": 0, "max": lo, "min": hi}[red]
                fill = f"tl.full({shape_expr}, {int_literal(neutral)}, tl.{v0_type})"
            else:
                fill = {"max": '-float("inf")', "min": 'float("inf")'}[red]
            src = gen.tmp(f"tl.where(mask, {v}, {fill})")
            style = draw(st.sampled_from(["keep_dims", "expand_dims", "index"]))
            if style == "keep_dims":
                r = gen.tmp(f"tl.{red}({src}, axis={axis}, keep_dims=True)")
            else:
                r = gen.tmp(f"tl.{red}({src}, axis={axis})")
                if layout == "2d" and style == "expand_dims":
                    r = gen.tmp(f"tl.expand_dims({r}, {axis})")
                elif layout == "2d":
                    r = gen.tmp(f"{r}[:, None]" if axis == 1 else f"{r}[None, :]")
            r = gen.tmp(f"{r}.to(tl.{v0_type})" + ("" if is_int(v0_type) else " + 0.0"))
            res = gen.tmp(f"{v} - {r}")
            gen.lines.append(f"tl.static_assert({res}.dtype == tl.{v0_type})")
            gen.lines.append(f"tl.store({name} + offs, {res}, mask=mask)")
            outputs.append(OutputSpec(name, v0_type, full_shape, "value", note=kind))
            continue
        if kind in ("sum", "cumsum"):
            rt = accum_type(v0_type)
        elif kind in ("max", "min"):
            rt = minmax_type(v0_type)
        else:
            rt = "int32"
        if is_int(v0_type):
            lo, hi = int_range(v0_type)
            neutral = {"sum": 0, "cumsum": 0, "max": lo, "argmax": lo, "min": hi, "argmin": hi}[kind]
            fill = f"tl.full({shape_expr}, {int_literal(neutral)}, tl.{v0_type})"
        else:
            neutral = {"sum": "0.0", "cumsum": "0.0", "max": '-float("inf")', "argmax": '-float("inf")',
                       "min": 'float("inf")', "argmin": 'float("inf")'}[kind]
            fill = neutral
        keep = "mask"
        if kind in ("argmax", "argmin") and not is_int(v0_type):
            keep = f"mask & ({v} == {v})"
        src = gen.tmp(f"tl.where({keep}, {v}, {fill})")
        reverse = False
        if kind == "cumsum":
            reverse = draw(st.booleans())
            res = gen.tmp(f"tl.cumsum({src}, axis={axis}" + (", reverse=True)" if reverse else ")"))
            gen.lines.append(f"tl.store({name} + offs, {res}, mask=mask)")
            shape = full_shape
        else:
            res = gen.tmp(f"tl.{kind}({src}, axis={axis})")
            if layout == "1d":
                gen.lines.append(f"tl.store({name} + pid, {res})")
                shape = (grid[0], )
            elif axis is None:  # the whole tile
                gen.lines.append(f"tl.store({name} + pid_m * tl.num_programs(1) + pid_n, {res})")
                shape = grid
            elif axis == 1:
                gen.lines.append(f"tl.store({name} + rm * tl.num_programs(1) + pid_n, {res}, mask=mask_m)")
                shape = (extent[0], grid[1])
            else:
                gen.lines.append(f"tl.store({name} + pid_m * N + rn, {res}, mask=mask_n)")
                shape = (grid[0], extent[1])
        gen.lines.append(f"tl.static_assert({res}.dtype == tl.{rt})")
        outputs.append(OutputSpec(name, rt, shape, kind, ulp=v0_ulp, source=v0_index, axis=axis, reverse=reverse))

    # Parameter order: inputs, outputs (in creation order), scalars, constexprs.
    out_names = [o.name for o in outputs]
    sig = [i.name for i in inputs] + out_names + [s for s, _ in scalars] + [f"{k}: tl.constexpr" for k in constexprs]
    lines = ["import triton", "import triton.language as tl", "", "", "@triton.jit",
             f"def {KERNEL_NAME}({', '.join(sig)}):"]
    lines += ["    " + x for x in head + body + gen.lines]
    source = "\n".join(lines) + "\n"
    return KernelSpec(source=source, layout=layout, grid=grid, constexprs=constexprs, num_warps=num_warps,
                      scalars=scalars, inputs=inputs, outputs=outputs, seed=seed, block=blocks, extent=extent,
                      others=others)


# ------------------------------------------------------------------------------------------------
# Inputs


_FLOAT_SPECIALS = [float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1.0, -1.0, 1e-40, -1e-45, 3.0e38, -65504.0,
                   65504.0, 6e-5, 0.5]


def make_input(spec: InputSpec, gen: torch.Generator) -> torch.Tensor:
    shape, dt = spec.shape, spec.dtype
    if is_int(dt):
        lo, hi = int_range(dt)
        if spec.regime == "small":
            v = torch.randint(max(lo, -8), min(hi, 16) + 1, shape, generator=gen, dtype=torch.int64)
        else:
            # full range: 64 random bits wrapped into the type
            v = torch.randint(-2**63, 2**63 - 1, shape, generator=gen, dtype=torch.int64)
            if dt != "int64":
                v = v & ((1 << BITS[dt]) - 1)
                if is_signed(dt):
                    v = torch.where(v > hi, v - (1 << BITS[dt]), v)
            if spec.regime == "edge":
                edges = torch.tensor([lo, hi, lo + 1, hi - 1, 0, 1, max(lo, -1), 2], dtype=torch.int64)
                pick = torch.randint(0, len(edges), shape, generator=gen)
                use = torch.rand(shape, generator=gen) < 0.4
                v = torch.where(use, edges[pick], v)
        if dt == "uint32":
            return v.to(torch.uint32)
        return v.to(TORCH_DTYPE[dt])
    x = torch.randn(shape, generator=gen, dtype=torch.float32)
    if spec.regime == "wide":
        x = x * torch.exp(torch.randn(shape, generator=gen) * 6)
    elif spec.regime == "ints":
        x = torch.round(x * 4)
    elif spec.regime == "special":
        sp = torch.tensor(_FLOAT_SPECIALS)
        pick = torch.randint(0, len(sp), shape, generator=gen)
        use = torch.rand(shape, generator=gen) < 0.3
        x = torch.where(use, sp[pick], x)
    x = x.to(TORCH_DTYPE[dt])
    if dt == "bfloat16":
        # the interpreter's bfloat16 -> float32 conversion mangles subnormals: keep them out
        tiny = torch.finfo(torch.float32).tiny
        x = torch.where(x.abs() < tiny, x * 0, x)
    return x


def fill_value(dtype: str):
    return 93 if is_int(dtype) or dtype == "int1" else -7.25


def build_args(spec: KernelSpec):
    """Fresh (args, output indices) for one launch; identical on every call for the same spec."""
    gen = torch.Generator().manual_seed(spec.seed)
    args: list = [make_input(i, gen) for i in spec.inputs]
    out_idx = []
    for o in spec.outputs:
        out_idx.append(len(args))
        t = torch.full(o.shape, fill_value(o.dtype), dtype=torch.int64 if o.dtype == "uint32" else TORCH_DTYPE[o.dtype])
        args.append(t.to(torch.uint32) if o.dtype == "uint32" else t)
    args += [v for _, v in spec.scalars]
    return args, out_idx

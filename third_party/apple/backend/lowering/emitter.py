"""The per-function MSL emitter: how a TTGIR value looks in MSL (`Lowered`), names, and every MSL idiom the
op lowerings use (blocks, register loops, owner guards, barriers, threadgroup-memory views and scratch).

A distributed tensor lowers to one MSL array per thread, `T name[R]`, where R is the number of registers
of its linear layout; register `r` of the calling thread holds the element at `layout.coord(r, lane, warp)`.
A tensor known to hold one value in every register (a splat) stays a scalar and is read as such.

Op lowerings read only what this module and `context.KernelContext` declare: the emitter's `ctx`, `target`
(the kernel's `target_info.MetalTargetInfo`, which spells barriers, shuffles, atomics and the threadgroup
address space), `axis` (axis info of the function) and `out_params` (a callee's result slots), the methods
below, and `elementwise`, the per-register loop of every elementwise op.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Sequence, Tuple

from ..abi.msl_locations import location_comment
from ..errors import UnsupportedFeatureError
from ..ir import Op, Value
from ..ir.types import MemDescType, ScalarType, TensorType, Type
from ..layouts import LinearLayout, bit_runs
from .msl_types import is_reserved, msl_type

if TYPE_CHECKING:
    from ..analysis.axis_info import AxisInfoAnalysis
    from .context import KernelContext
    from .target_info import MetalTargetInfo

# Blocks `close` folds onto their header line when their body is one statement (not a declaration, whose scope
# would change), as long as the line stays this short.
_BLOCK_HEADER = re.compile(r"(for|if) \(.*\) \{$")
_DECLARATION = re.compile(r"(const |constexpr |static |thread |threadgroup |device )*[A-Za-z_][\w:<>]*[*&]* +[A-Za-z_]\w*(\[\d+\])* *(=|;)")
_MAX_FOLDED = 140
BF16 = ScalarType("bf16")


@dataclass
class Lowered:
    """The MSL side of a TTGIR value."""
    name: str
    ctype: str
    regs: Optional[int] = None  # None: scalar; else the per-thread register count
    uniform: bool = False  # tensor whose registers all equal the scalar `name`
    layout: Optional[LinearLayout] = None
    # a bfloat16 value that is also held unrounded in float: that float value (a bfloat16 scan's accumulator,
    # which `arith.extf` to float32 of the scan result reads instead of the rounded value; see scan_ops)
    unrounded: Optional["Lowered"] = None
    # a `!ttg.memdesc` view (local_memory_ops): the element strides of its dimensions in threadgroup memory, when
    # they are not the row-major strides of its own shape (a subslice or a transposed view of a buffer)
    strides: Optional[Tuple[int, ...]] = None

    @property
    def is_tensor(self) -> bool:
        return self.regs is not None

    def at(self, r) -> str:
        if self.regs is None or self.uniform:
            return self.name
        return f"{self.name}[{r}]"


def linear_expr(var: str, values: Sequence[int]) -> str:
    """MSL for the XOR-linear map `x -> XOR_i (bit i of x ? values[i] : 0)` applied to `var`."""
    v = var if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*|\d+", var) else f"({var})"
    terms = []
    for first, count, shift in bit_runs(tuple(values)):
        base = f"{v} >> {first}" if first else v
        if count == 0:
            terms.append(f"(({base} & 1) * {shift})")
            continue
        masked = f"({base} & {(1 << count) - 1})"
        terms.append(f"({masked} << {shift})" if shift else masked)
    if not terms:
        return "0"
    return " ^ ".join(terms)


def elementwise(em: "FunctionEmitter", op: Op, make: Callable[[List[str]], str]) -> None:
    """Emit `result = make(operands)` per register; splat-only inputs give a splat (scalar) result."""
    ins = [em.get(v) for v in op.operands]
    res = op.result
    if not is_tensor(res) or all(not i.is_tensor or i.uniform for i in ins):
        name = em.fresh(res.name)
        ct = em.ctype(res.type)
        em.emit(f"{ct} {name} = {make([i.at(0) for i in ins])};")
        em.scalar_or_splat(res, name, ct)
        return
    out = em.declare(res)
    with em.for_regs(out.regs) as r:
        em.emit(f"{out.at(r)} = {make([i.at(r) for i in ins])};")


def is_tensor(v: Value) -> bool:
    return isinstance(v.type, TensorType)


def elem_type(v: Value) -> Type:
    return v.type.element if isinstance(v.type, (TensorType, MemDescType)) else v.type


def element_types(op: Op) -> List[str]:
    """The element type of every operand and result of `op`, as printed (`f32`, `f8E5M2`, `!tt.ptr<f16>`)."""
    return [str(elem_type(v)) for v in list(op.operands) + list(op.results)]


def _identifier(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", text) or "v"


# Types held in threadgroup memory as their bits: the software float64 struct (soft_f64.py) cannot be
# assigned across address spaces.
_STORED_AS = {"tt_double": "ulong"}


# Names the emitter generates for its own temporaries and loop counters start with this prefix, which
# user-derived names never get (see `fresh`), so the two can never collide.
_TEMP_PREFIX = "t_"


class FunctionEmitter:
    """Emits the body of one MSL function from one TTGIR function."""

    def __init__(self, ctx: "KernelContext", axis: Optional["AxisInfoAnalysis"] = None,
                 out_params: Sequence[Lowered] = (), wide_bf16: bool = False, per_element: bool = False):
        self.ctx = ctx
        # a region function (combine, map_elementwise): its scalars are one element's values, different on
        # every thread, so a side effect of a scalar (an assert, a print) happens on every thread
        self.per_element = per_element
        # bfloat16 values held in float, unrounded between ops (scan combine functions; see scan_ops)
        self.wide_bf16 = wide_bf16
        self.axis = axis  # axis info of the function being lowered (None: no vectorisation)
        self.out_params = list(out_params)  # where `tt.return` stores a callee's results
        self.lines: List[str] = []
        self.indent = 1
        self.values: Dict[int, Lowered] = {}
        self.names: set = set()
        self._next_suffix: Dict[str, int] = {}  # per base name of `_unique`: the first suffix worth trying
        self.current_op: Optional[Op] = None
        self.op_lines: List[Tuple[int, Op]] = []  # (index in `lines`, op whose code starts there)
        self._starts: List[int] = []  # first line index of each op being lowered (innermost last)
        self._counter = 0
        self._tg_align: Dict[str, int] = {}  # tg_view name -> the power of two (at most 16) its address is a multiple of

    @property
    def target(self) -> "MetalTargetInfo":
        """The kernel's Metal spellings and family gates."""
        return self.ctx.target

    # -- names and values ------------------------------------------------------------------------

    def fresh(self, hint: str) -> str:
        """A new MSL identifier derived from `hint` (a TTGIR value name): never a reserved word, never one
        of the emitter's own temporaries (`t_...`, `tt_...`), never a name already used in this function."""
        base = _identifier(hint)
        if base[0].isdigit():
            base = "v" + base
        if is_reserved(base) or base.startswith(("t_", "tt_", "__")):
            base = base.lstrip("_") + "_"
        return self._unique(base)

    def temp(self, hint: str = "t") -> str:
        """A new identifier for a temporary of the emitter's own."""
        self._counter += 1
        return self._unique(f"{_TEMP_PREFIX}{_identifier(hint)}{self._counter}")

    def loop_var(self, hint: str) -> str:
        """A new identifier for a loop counter."""
        return self._unique(f"{_TEMP_PREFIX}{_identifier(hint)}")

    def _unique(self, base: str) -> str:
        """`base`, or `base_k` for the smallest k not taken. Names are never given back, so the probe for a base
        resumes where its last one stopped (a kernel asks for the same loop-counter base hundreds of times)."""
        k = self._next_suffix.get(base, 0)
        name = base if k == 0 else f"{base}_{k}"
        while name in self.names:
            k += 1
            name = f"{base}_{k}"
        self._next_suffix[base] = k + 1
        self.names.add(name)
        return name

    def get(self, v: Value) -> Lowered:
        try:
            return self.values[id(v)]
        except KeyError:
            raise self.internal(f"value %{v.name} is used before the lowering defined it") from None

    def bind(self, v: Value, lowered: Lowered) -> Lowered:
        self.values[id(v)] = lowered
        return lowered

    def layout(self, ty: Type) -> Optional[LinearLayout]:
        if isinstance(ty, TensorType):
            try:
                return self.ctx.layouts.of(ty)
            except NotImplementedError as e:
                raise self.unsupported(str(e)) from None
        return None

    def ctype(self, ty: Type) -> str:
        if self.wide_bf16 and ty.scalar == BF16:
            return "float"
        try:
            return msl_type(ty, self.ctx.demote_f64)
        except UnsupportedFeatureError as e:
            raise self.unsupported(f"value of type {ty}: {e}") from None

    def declare(self, v: Value, hint: Optional[str] = None) -> Lowered:
        """Declare the MSL variable(s) for `v` (uninitialised) and bind it."""
        name = self.fresh(hint or v.name)
        ct = self.ctype(v.type)
        lay = self.layout(v.type)
        if lay is not None:
            self.emit(f"{ct} {name}[{lay.num_regs}];")
            return self.bind(v, Lowered(name, ct, lay.num_regs, False, lay))
        self.emit(f"{ct} {name};")
        return self.bind(v, Lowered(name, ct))

    def scalar_or_splat(self, v: Value, name: str, ctype: str) -> Lowered:
        """Bind `v` to the scalar `name`: a scalar, or a tensor whose every register holds that value."""
        lay = self.layout(v.type)
        return self.bind(v, Lowered(name, ctype, lay.num_regs if lay else None, uniform=lay is not None, layout=lay))

    # -- text ------------------------------------------------------------------------------------

    def emit(self, line: str) -> None:
        self.lines.append("    " * self.indent + line)

    def open(self, header: str) -> None:
        self.emit(header + " {")
        self.indent += 1

    def close(self, trailer: str = "}") -> None:
        self.indent -= 1
        if trailer == "}" and self._fold_single_statement():
            return
        self.emit(trailer)

    def _fold_single_statement(self) -> bool:
        """A `for (...) {` or `if (...) {` block whose body is one statement becomes one line,
        `for (...) statement;`; the line indices of ops after it move up by one."""
        if len(self.lines) < 2:
            return False
        header, body = self.lines[-2], self.lines[-1]
        pad = "    " * self.indent
        if not (header.startswith(pad) and _BLOCK_HEADER.match(header[len(pad):]) and body.startswith(pad + "    ")):
            return False
        stmt = body.strip()
        if not stmt.endswith(";") or "//" in stmt or "{" in stmt or "}" in stmt or _DECLARATION.match(stmt):
            return False
        folded = f"{header[:-2]} {stmt}"
        if len(folded) > _MAX_FOLDED:
            return False
        h = len(self.lines) - 2
        self.lines[h:] = [folded]
        # Only ops whose code starts at the folded statement move up, and they are the newest entries: an op is
        # recorded when its lowering ends, and every op that ended after the statement was written started there
        # (the op that wrote the header is still being lowered).
        k = len(self.op_lines)
        while k and self.op_lines[k - 1][0] > h:
            k -= 1
            i, op = self.op_lines[k]
            self.op_lines[k] = (i - 1, op)
        self._starts = [i if i <= h else i - 1 for i in self._starts]
        return True

    def else_(self) -> None:
        """Close the current `if` block and open its `else` block."""
        self.close("} else {")
        self.indent += 1

    def barrier(self) -> None:
        """A threadgroup barrier over threadgroup memory."""
        self.emit(self.target.barrier())

    def for_regs(self, n: int, var: str = "r") -> "_RegLoop":
        return _RegLoop(self, n, var)

    def owned_regs(self, lay: Optional[LinearLayout], cond: Optional[Callable[[str], str]] = None) -> "_OwnedRegs":
        return _OwnedRegs(self, lay, cond)

    # -- threadgroup memory ----------------------------------------------------------------------

    def tg_view(self, ctype: str, offset: int, hint: str) -> str:
        """Declare a pointer `name` to elements of MSL type `ctype` at byte `offset` of the kernel's threadgroup
        memory (a pointer element type, `device T*`, is spelled `device T* threadgroup*`)."""
        name = self.temp(hint)
        ctype = _STORED_AS.get(ctype, ctype)
        ptr = self.target.threadgroup_pointer(ctype)
        self.emit(f"{ptr} {name} = ({ptr})(tt_smem + {offset});")
        self._tg_align[name] = min(16, offset & -offset) if offset else 16  # tt_smem is 16-byte aligned
        return name

    def tg_alignment(self, view: str) -> int:
        """Bytes the address of threadgroup view `view` is known to be a multiple of (1 for views not made by
        `tg_view`)."""
        return self._tg_align.get(view, 1)

    def tg_offset_view(self, view: str, ctype: str, elements: str, hint: str) -> str:
        """Declare a pointer `name` to `elements` (an MSL expression) elements past `view`, a `tg_view` of `ctype`."""
        name = self.temp(hint)
        ptr = self.target.threadgroup_pointer(_STORED_AS.get(ctype, ctype))
        self.emit(f"{ptr} {name} = {view} + ({elements});" if elements != "0" else f"{ptr} {name} = {view};")
        return name

    def tg_cast_view(self, view: str, ctype: str, hint: str) -> str:
        """Declare a pointer `name` to elements of MSL type `ctype` at the address of `view` (a `tg_view` of any type:
        the same bytes read as another type)."""
        name = self.temp(hint)
        ptr = self.target.threadgroup_pointer(_STORED_AS.get(ctype, ctype))
        self.emit(f"{ptr} {name} = ({ptr}){view};")
        return name

    @staticmethod
    def tg_store(view: str, index: str, value: str, ctype: str) -> str:
        """The statement writing `value` (of MSL type `ctype`) at `view[index]` of a `tg_view`."""
        return f"{view}[{index}] = {value}.bits;" if ctype in _STORED_AS else f"{view}[{index}] = {value};"

    @staticmethod
    def tg_load(view: str, index: str, ctype: str) -> str:
        """The expression reading the `ctype` value at `view[index]` of a `tg_view`."""
        return f"tt_f64_from_bits({view}[{index}])" if ctype in _STORED_AS else f"{view}[{index}]"

    def scratch(self, op: Op, parts: Sequence[Tuple[str, int]], hint: str) -> List[str]:
        """Scratch space for `op`: one `threadgroup T*` view per `(T, bytes)` part, each 16-byte aligned,
        after a barrier, so no thread still reads whatever used that space before."""
        sizes = [(nbytes + 15) // 16 * 16 for _, nbytes in parts]
        base = self.ctx.scratch_offset(op, sum(sizes))
        self.barrier()
        views = []
        for (ctype, _), size in zip(parts, sizes):
            views.append(self.tg_view(ctype, base, hint))
            base += size
        return views

    # -- errors ----------------------------------------------------------------------------------

    def unsupported(self, msg: str):
        return self.ctx.unsupported(msg, self.current_op)

    def internal(self, msg: str):
        return self.ctx.internal(msg, self.current_op)

    # -- ops -------------------------------------------------------------------------------------

    def lower_block(self, ops: Sequence[Op]) -> None:
        for op in ops:
            self.lower_op(op)

    def lower_op(self, op: Op) -> None:
        fn = self.ctx.lowerings.get(op.name)
        if fn is None:
            raise self.ctx.unsupported(f"operation '{op.name}' is not supported by the apple backend yet", op)
        saved = self.current_op
        self.current_op = op
        self.ctx.check_f64(op)
        self._starts.append(len(self.lines))
        try:
            fn(self, op)
        finally:
            start = self._starts.pop()
        if len(self.lines) > start:
            self.op_lines.append((start, op))
        self.current_op = saved

    def text_with_origins(self) -> Tuple[List[str], List[Tuple[int, Op]]]:
        """The body's lines, the first line of code of each located op ending in a `// <op> <file>:<line>`
        comment, and, for each op with code, the index of that line."""
        out: List[str] = []
        origins: List[Tuple[int, Op]] = []
        starts = {}
        for idx, op in self.op_lines:
            starts.setdefault(idx, op)  # nested ops start later; the outermost at an index names it
        for i, line in enumerate(self.lines):
            op = starts.get(i)
            if op is not None and op.loc.file:
                line = line + location_comment(op.name, op.loc.file, op.loc.line)
            if op is not None:
                origins.append((len(out), op))
            out.append(line)
        return out, origins

    # -- thread coordinates ----------------------------------------------------------------------

    def coord_expr(self, lay: LinearLayout, dim: int, reg: str) -> str:
        """MSL expression of dimension `dim` of the coordinate held in register `reg` of this thread."""
        parts = [linear_expr(reg, [b[dim] for b in lay.reg]), linear_expr("tt_lane", [b[dim] for b in lay.lane]),
                 linear_expr("tt_warp", [b[dim] for b in lay.warp])]
        parts = [p for p in parts if p != "0"]
        return " ^ ".join(parts) if parts else "0"

    def owner_predicate(self, lay: Optional[LinearLayout]) -> str:
        """Condition true on exactly one thread among those holding the same elements of `lay` (for
        stores and other side effects that must happen once)."""
        if lay is None:
            return "" if self.per_element else "tt_tid == 0"
        conds = []
        lm, wm = lay.free_lane_mask(), lay.free_warp_mask()
        if lm:
            conds.append(f"(tt_lane & {lm}) == 0")
        if wm:
            conds.append(f"(tt_warp & {wm}) == 0")
        return " && ".join(conds)


class _OwnedRegs:
    """`with em.owned_regs(lay, cond) as r:` visits each element of layout `lay` on exactly one thread: the
    owner predicate guards the loop, registers that repeat another register are skipped, and `cond(r)`
    (optional, e.g. a mask) is merged into the same per-register `if`. `lay=None` is a scalar on thread 0."""

    def __init__(self, em: FunctionEmitter, lay: Optional[LinearLayout], cond: Optional[Callable[[str], str]]):
        self.em, self.lay, self.cond = em, lay, cond

    def __enter__(self) -> str:
        em, lay = self.em, self.lay
        self.own = em.owner_predicate(lay)
        if self.own:
            em.open(f"if ({self.own})")
        self.loop = _RegLoop(em, lay.num_regs if lay else 1, "r")
        r = self.loop.__enter__()
        free = lay.free_reg_mask() if lay else 0
        conds = ([f"({r} & {free}) == 0"] if free else []) + ([self.cond(r)] if self.cond else [])
        self.guarded = bool(conds)
        if conds:
            em.open(f"if ({' && '.join(conds)})")
        return r

    def __exit__(self, *exc) -> None:
        if self.guarded:
            self.em.close()
        self.loop.__exit__(*exc)
        if self.own:
            self.em.close()


class _RegLoop:
    """`with em.for_regs(R) as r:` emits `for (uint r = 0; r < R; ++r) {` (or nothing for R == 1,
    where `r` is the literal 0) and closes it afterwards. A loop of at most `UNROLL_MAX` registers whose body
    is one plain statement is written out instead, one line per register (`x[0] = ...;`, `x[1] = ...;`):
    every Metal compiler unrolls such loops anyway, and the emulator's clang spends a quarter of a large
    kernel's optimisation time rotating thousands of two- and four-iteration loops before it unrolls them
    (its dominator-tree updates grow with the function)."""

    UNROLL_MAX = 4

    def __init__(self, em: FunctionEmitter, n: int, var: str):
        self.em, self.n, self.var = em, n, var

    def __enter__(self) -> str:
        if self.n == 1:
            return "0"
        self.name = self.em.loop_var(self.var)
        self.em.open(f"for (uint {self.name} = 0; {self.name} < {self.n}; ++{self.name})")
        self.header = len(self.em.lines) - 1
        return self.name

    def __exit__(self, *exc) -> None:
        if self.n == 1:
            return
        if exc[0] is None and self.n <= self.UNROLL_MAX and self._write_out():
            return
        self.em.close()

    def _write_out(self) -> bool:
        """Replace the open loop by one copy of its body per register, if the body is one plain statement."""
        em, h = self.em, self.header
        if len(em.lines) != h + 2 or any(i > h for i, _ in em.op_lines) or any(i > h for i in em._starts):
            return False
        stmt = em.lines[-1].strip()
        if not stmt.endswith(";") or "//" in stmt or "{" in stmt or "}" in stmt or _DECLARATION.match(stmt):
            return False
        em.indent -= 1
        del em.lines[h:]
        counter = re.compile(rf"\b{re.escape(self.name)}\b")
        for r in range(self.n):
            em.emit(counter.sub(str(r), stmt))
        return True

"""Shared machinery of the TTGIR -> MSL lowering: MSL values, the per-function emitter, and the registry
that maps each TTGIR op name to the function (in one of the `*_ops.py` modules) that lowers it.

A distributed tensor lowers to one MSL array per thread, `T name[R]`, where R is the number of registers
of its linear layout; register `r` of the calling thread holds the element at `layout.coord(r, lane, warp)`.
A tensor known to hold one value in every register (a splat) stays a scalar and is read as such.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence

from ..ir import Op, Value
from ..ir.core import Location
from ..ir.types import MemDescType, PointerType, ScalarType, TensorType, Type
from ..layouts import LinearLayout, LayoutService, bit_runs


class AppleCompilationError(Exception):
    """A kernel the apple backend cannot compile; the message names the kernel, the op and the source line."""


MSL_SCALAR = {
    "i1": "bool", "i8": "char", "i16": "short", "i32": "int", "i64": "long", "f16": "half", "bf16": "bfloat",
    "f32": "float", "index": "long", "f8E4M3FN": "uchar", "f8E5M2": "uchar"
}
MSL_UNSIGNED = {"i1": "bool", "i8": "uchar", "i16": "ushort", "i32": "uint", "i64": "ulong", "index": "ulong"}

# Identifiers the MSL compiler reserves (or that our prelude uses) and so cannot name a value.
_RESERVED = set("""
alignas alignof and asm auto bool break case catch char class const constexpr continue default delete do double
else enum explicit extern false float for friend goto if inline int long mutable namespace new noexcept not nullptr
operator or private protected public register return short signed sizeof static struct switch template this
throw true try typedef typeid typename union unsigned using virtual void volatile while xor half bfloat uint uchar
ushort ulong kernel device threadgroup constant thread vertex fragment metal sampler texture array vec uniform
min max abs clamp select fma exp log sqrt sin cos tan pow isnan isinf signbit floor ceil round trunc
main vertex fragment object mesh visible size_t ptrdiff_t int8_t int16_t int32_t int64_t uint8_t uint16_t
uint32_t uint64_t float2 float3 float4 half2 half3 half4 int2 int3 int4 uint2 uint3 uint4 bool2 bool4 NAN INFINITY
""".split())


def msl_function_name(name: str) -> str:
    """A Triton function name as an MSL identifier: names MSL reserves (`kernel`, `half`, `main`, ...)
    get a trailing underscore."""
    if name in _RESERVED or name.startswith("tt_") or name.startswith("__"):
        return name.lstrip("_") + "_"
    return name


def msl_type(ty: Type, where: str = "", demote_f64: bool = False) -> str:
    """The MSL spelling of a scalar or pointer type (for tensors: of their element)."""
    if isinstance(ty, TensorType):
        ty = ty.element
    if isinstance(ty, PointerType):
        if ty.pointee == ScalarType("f64"):
            raise AppleCompilationError(f"{where}float64 tensors are not supported: Metal has no double type. "
                                        "Convert the tensor to float32 on the host")
        return f"device {msl_type(ty.pointee, where)}*"
    if isinstance(ty, ScalarType):
        if ty.name == "f64" and demote_f64:
            return "float"
        if ty.name == "f64":
            raise AppleCompilationError(
                f"{where}float64 is not supported: Metal has no double type. Cast to float32 in the kernel "
                "(e.g. `x.to(tl.float32)`) before this point")
        if ty.name in MSL_SCALAR:
            return MSL_SCALAR[ty.name]
    raise AppleCompilationError(f"{where}type {ty} has no Metal equivalent")


def unsigned_type(ty: Type) -> str:
    return MSL_UNSIGNED[ty.scalar.name]


@dataclass
class Lowered:
    """The MSL side of a TTGIR value."""
    name: str
    ctype: str
    regs: Optional[int] = None  # None: scalar; else the per-thread register count
    uniform: bool = False  # tensor whose registers all equal the scalar `name`
    layout: Optional[LinearLayout] = None

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


_LOWERINGS: Dict[str, Callable[["FunctionEmitter", Op], None]] = {}


def lowers(*names: str):
    """Register the decorated function as the lowering of the named TTGIR ops."""

    def deco(fn):
        for n in names:
            _LOWERINGS[n] = fn
        return fn

    return deco


def lowering_for(name: str):
    return _LOWERINGS.get(name)


class KernelContext:
    """State shared by every function of one module: options, layouts, shared memory and MSL helpers."""

    def __init__(self, module, options, layouts: LayoutService):
        self.module = module
        self.options = options
        self.layouts = layouts
        self.kernel_name = module.kernel.name
        self.helpers: List[str] = []  # MSL function definitions emitted before the kernel
        self.helper_names: set = set()
        self.uses_smem = False
        self.extra_scratch = 0  # bytes of our own scratch beyond upstream's allocation
        self.upstream_shared = int(module.attrs.get("ttg.shared", 0))
        self.line_map: List[tuple] = []  # (msl line index in body, Location, op name)
        self.used_values: set = set()  # ids of values that some op reads
        self.has_debug = False
        self.demote_f64 = bool(getattr(options, "allow_fp64_demotion", False))

    def add_helper(self, name: str, text: str) -> None:
        if name not in self.helper_names:
            self.helper_names.add(name)
            self.helpers.append(text)

    def error(self, msg: str, op: Optional[Op] = None, loc: Optional[Location] = None) -> AppleCompilationError:
        loc = loc or (op.loc if op is not None else None)
        where = f"\n  at {loc}" if loc is not None and loc.file else ""
        what = f" (op {op.name})" if op is not None else ""
        return AppleCompilationError(f"apple backend: kernel '{self.kernel_name}'{what}: {msg}{where}")


class FunctionEmitter:
    """Emits the body of one MSL function from one TTGIR function."""

    def __init__(self, ctx: KernelContext):
        self.ctx = ctx
        self.lines: List[str] = []
        self.indent = 1
        self.values: Dict[int, Lowered] = {}
        self.names: set = set()
        self.current_op: Optional[Op] = None
        self._counter = 0
        self.axis = None  # AxisInfoAnalysis of the function being lowered

    # -- names and values ------------------------------------------------------------------------

    def fresh(self, hint: str) -> str:
        base = re.sub(r"[^A-Za-z0-9_]", "_", hint) or "v"
        if base[0].isdigit():
            base = "v" + base
        if base in _RESERVED or base.startswith("tt_") or base.startswith("__"):
            base = base.lstrip("_") + "_"
        name, k = base, 1
        while name in self.names:
            name = f"{base}_{k}"
            k += 1
        self.names.add(name)
        return name

    def temp(self, hint: str = "t") -> str:
        self._counter += 1
        return self.fresh(f"{hint}{self._counter}")

    def get(self, v: Value) -> Lowered:
        try:
            return self.values[id(v)]
        except KeyError:
            raise self.error(f"value %{v.name} is used before the lowering defined it") from None

    def bind(self, v: Value, lowered: Lowered) -> Lowered:
        self.values[id(v)] = lowered
        return lowered

    def layout(self, ty: Type) -> Optional[LinearLayout]:
        if isinstance(ty, TensorType):
            try:
                return self.ctx.layouts.of(ty)
            except NotImplementedError as e:
                raise self.error(str(e)) from None
        return None

    def ctype(self, ty: Type) -> str:
        where = ""
        if self.current_op is not None:
            where = f"value of type {ty}: "
        try:
            return msl_type(ty, where, self.ctx.demote_f64)
        except AppleCompilationError as e:
            raise self.error(str(e)) from None

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

    def define_like(self, v: Value, hint: Optional[str] = None) -> Lowered:
        """A fresh, undeclared Lowered for `v` (callers emit the declaration with an initialiser)."""
        name = self.fresh(hint or v.name)
        ct = self.ctype(v.type)
        lay = self.layout(v.type)
        if lay is not None:
            return Lowered(name, ct, lay.num_regs, False, lay)
        return Lowered(name, ct)

    # -- text ------------------------------------------------------------------------------------

    def emit(self, line: str) -> None:
        self.lines.append("    " * self.indent + line)

    def open(self, header: str) -> None:
        self.emit(header + " {")
        self.indent += 1

    def close(self, trailer: str = "}") -> None:
        self.indent -= 1
        self.emit(trailer)

    def for_regs(self, n: int, var: str = "r") -> "_RegLoop":
        return _RegLoop(self, n, var)

    def owned_regs(self, lay: Optional[LinearLayout], cond: Optional[Callable[[str], str]] = None) -> "_OwnedRegs":
        return _OwnedRegs(self, lay, cond)

    def error(self, msg: str) -> AppleCompilationError:
        return self.ctx.error(msg, self.current_op)

    # -- ops -------------------------------------------------------------------------------------

    def lower_block(self, ops: Sequence[Op]) -> None:
        for op in ops:
            self.lower_op(op)

    def lower_op(self, op: Op) -> None:
        fn = lowering_for(op.name)
        if fn is None:
            raise self.ctx.error(f"operation '{op.name}' is not supported by the apple backend yet", op)
        saved = self.current_op
        self.current_op = op
        if op.name not in ("arith.constant", "ub.poison") and not self.ctx.demote_f64:
            # hoisted constants carry no location: report float64 at its first located use
            for v in list(op.results) + list(op.operands):
                if v.type.scalar == ScalarType("f64"):
                    raise self.ctx.error(
                        f"value %{v.name} has type {v.type}: float64 is not supported, Metal has no double "
                        "type; cast to float32 in the kernel, or pass allow_fp64_demotion=True to compute "
                        "float64 values in float32", op)
        self.ctx.line_map.append((self, len(self.lines), op))
        if op.loc.file:
            self.emit(f"// {op.name} {op.loc.file.rsplit('/', 1)[-1]}:{op.loc.line}")
        fn(self, op)
        self.current_op = saved

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
            return "tt_tid == 0"
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

    def __init__(self, em: "FunctionEmitter", lay: Optional[LinearLayout], cond: Optional[Callable[[str], str]]):
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
    where `r` is the literal 0) and closes it afterwards."""

    def __init__(self, em: FunctionEmitter, n: int, var: str):
        self.em, self.n, self.var = em, n, var

    def __enter__(self) -> str:
        if self.n == 1:
            return "0"
        self.em.open(f"for (uint {self.var} = 0; {self.var} < {self.n}; ++{self.var})")
        return self.var

    def __exit__(self, *exc) -> None:
        if self.n != 1:
            self.em.close()


def is_tensor(v: Value) -> bool:
    return isinstance(v.type, TensorType)


def elem_type(v: Value) -> Type:
    return v.type.element if isinstance(v.type, (TensorType, MemDescType)) else v.type

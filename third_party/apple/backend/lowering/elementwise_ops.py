"""Lowering of elementwise ops: `arith.*`, `math.*`, and Triton's elementwise `tt.*` ops.

Every op here works register by register, so one function (`emitter.elementwise`) handles scalars, tensors
and splat ("uniform") tensors alike; the per-op code only builds the MSL expression for one register. The
conversions other families share (fp8 decoding, float to integer) are in `conversions.py`.
bfloat16 arithmetic is done in float and rounded back (Metal's bfloat arithmetic is not on every
family); half uses Metal's native half arithmetic, which rounds each operation like IEEE binary16.
"""
from __future__ import annotations

from ..ir import Op
from ..ir.types import PointerType
from .conversions import FP8_FORMATS, float_to_int, fp8_to_float
from .emitter import FunctionEmitter, elem_type, element_types, elementwise
from . import soft_f64
from .msl_helpers import metal_math
from .msl_types import unsigned_type
from .registry import OpFamily

FAMILY = OpFamily("elementwise")


def _in_float(op: Op, expr: str, which: int = 0) -> str:
    """Widen a bf16 operand to float for arithmetic."""
    ty = elem_type(op.operands[which])
    return f"float({expr})" if ty.name == "bf16" else expr


def _round_back(em: FunctionEmitter, op: Op, expr: str) -> str:
    ty = elem_type(op.result)
    if ty.name == "bf16" and em.wide_bf16:
        return expr
    if ty.name == "bf16":
        return f"bfloat({expr})"
    if ty.name == "f16":
        return f"half({expr})"
    return expr


# -- float arithmetic --------------------------------------------------------------------------------

_FLOAT_BINARY = {"arith.addf": "+", "arith.subf": "-", "arith.mulf": "*", "arith.divf": "/"}


@FAMILY.lowers(*_FLOAT_BINARY)
def _float_binary(em: FunctionEmitter, op: Op) -> None:
    _refuse_fp8_arithmetic(em, op)
    sym = _FLOAT_BINARY[op.name]
    elementwise(em, op, lambda a: _round_back(em, op, f"{_in_float(op, a[0])} {sym} {_in_float(op, a[1], 1)}"))


@FAMILY.lowers("arith.negf")
def _negf(em: FunctionEmitter, op: Op) -> None:
    if elem_type(op.result).name in FP8_FORMATS:  # flip the sign bit of the byte
        elementwise(em, op, lambda a: f"uchar({a[0]} ^ 0x80)")
        return
    elementwise(em, op, lambda a: _round_back(em, op, f"-{_in_float(op, a[0])}"))


_MINMAX = {
    "arith.maximumf": "tt_maximum", "arith.minimumf": "tt_minimum", "arith.maxnumf": "tt_maxnum",
    "arith.minnumf": "tt_minnum"
}


@FAMILY.lowers(*_MINMAX)
def _float_minmax(em: FunctionEmitter, op: Op) -> None:
    _refuse_fp8_arithmetic(em, op)
    fn = em.ctx.require(_MINMAX[op.name])
    elementwise(em, op, lambda a: _round_back(em, op, f"{fn}(float({a[0]}), float({a[1]}))"))


# -- integer arithmetic ------------------------------------------------------------------------------

_INT_BINARY = {"arith.addi": "+", "arith.subi": "-", "arith.muli": "*", "arith.andi": "&", "arith.ori": "|",
               "arith.xori": "^"}


@FAMILY.lowers(*_INT_BINARY)
def _int_binary(em: FunctionEmitter, op: Op) -> None:
    sym = _INT_BINARY[op.name]
    ty = elem_type(op.result)
    if ty.name == "i1" and sym in "+-":
        sym = "^"  # i1 arithmetic is modulo 2
    elif ty.name == "i1" and sym == "*":
        sym = "&"
    ct = em.ctype(ty)
    if ty.name == "i1" or sym in "&|^":
        elementwise(em, op, lambda a: f"{a[0]} {sym} {a[1]}")
        return
    # Compute in the unsigned type so that overflow wraps without relying on signed-overflow behaviour.
    ut = unsigned_type(ty)
    elementwise(em, op, lambda a: f"{ct}({ut}({a[0]}) {sym} {ut}({a[1]}))")


_DIVREM = {"arith.divsi": "tt_sdiv", "arith.remsi": "tt_srem", "arith.divui": "tt_udiv", "arith.remui": "tt_urem",
           "arith.ceildivsi": "tt_ceildivsi", "arith.floordivsi": "tt_floordivsi", "arith.ceildivui": "tt_ceildivui"}


@FAMILY.lowers(*_DIVREM)
def _divrem(em: FunctionEmitter, op: Op) -> None:
    fn = em.ctx.require(_DIVREM[op.name])
    ty = elem_type(op.result)
    ct = em.ctype(ty)
    if op.name in ("arith.divui", "arith.remui", "arith.ceildivui"):
        ut = unsigned_type(ty)
        elementwise(em, op, lambda a: f"{ct}({fn}({ut}({a[0]}), {ut}({a[1]})))")
    else:
        elementwise(em, op, lambda a: f"{fn}({ct}({a[0]}), {ct}({a[1]}))")


_SHIFTS = {"arith.shli": "tt_shl", "arith.shrui": "tt_lshr", "arith.shrsi": "tt_ashr"}


@FAMILY.lowers(*_SHIFTS)
def _shift(em: FunctionEmitter, op: Op) -> None:
    fn = em.ctx.require(_SHIFTS[op.name])
    ty = elem_type(op.result)
    ct, ut = em.ctype(ty), unsigned_type(ty)
    if op.name == "arith.shrui":
        elementwise(em, op, lambda a: f"{ct}({fn}({ut}({a[0]}), {ut}({a[1]})))")
    else:
        elementwise(em, op, lambda a: f"{fn}({ct}({a[0]}), {ut}({a[1]}))")


_INT_MINMAX = {"arith.maxsi": (">", False), "arith.minsi": ("<", False), "arith.maxui": (">", True),
               "arith.minui": ("<", True)}


@FAMILY.lowers(*_INT_MINMAX)
def _int_minmax(em: FunctionEmitter, op: Op) -> None:
    sym, unsigned = _INT_MINMAX[op.name]
    ty = elem_type(op.result)
    if unsigned:
        ut = unsigned_type(ty)
        elementwise(em, op, lambda a: f"({ut}({a[0]}) {sym} {ut}({a[1]})) ? {a[0]} : {a[1]}")
    else:
        elementwise(em, op, lambda a: f"({a[0]} {sym} {a[1]}) ? {a[0]} : {a[1]}")


# -- comparisons and select --------------------------------------------------------------------------

_ICMP = {"eq": "==", "ne": "!=", "slt": "<", "sle": "<=", "sgt": ">", "sge": ">=", "ult": "<", "ule": "<=",
         "ugt": ">", "uge": ">="}


@FAMILY.lowers("arith.cmpi")
def _cmpi(em: FunctionEmitter, op: Op) -> None:
    pred = op.attrs["predicate"]
    sym = _ICMP[pred]
    ty = elem_type(op.operands[0])
    if pred.startswith("u") and ty.name != "i1":
        ut = unsigned_type(ty)
        elementwise(em, op, lambda a: f"{ut}({a[0]}) {sym} {ut}({a[1]})")
    else:
        elementwise(em, op, lambda a: f"{a[0]} {sym} {a[1]}")


def _fcmp(pred: str, a: str, b: str) -> str:
    ordered = {"oeq": "==", "ogt": ">", "oge": ">=", "olt": "<", "ole": "<="}
    if pred in ordered:
        return f"{a} {ordered[pred]} {b}"
    negated = {"une": "==", "ule": ">", "ult": ">=", "uge": "<", "ugt": "<="}
    if pred in negated:
        return f"!({a} {negated[pred]} {b})"
    if pred == "one":
        return f"({a} < {b} || {a} > {b})"
    if pred == "ueq":
        return f"!({a} < {b} || {a} > {b})"
    if pred == "ord":
        return f"(!isnan({a}) && !isnan({b}))"
    if pred == "uno":
        return f"(isnan({a}) || isnan({b}))"
    if pred == "true":
        return "true"
    if pred == "false":
        return "false"
    raise KeyError(pred)


@FAMILY.lowers("arith.cmpf")
def _cmpf(em: FunctionEmitter, op: Op) -> None:
    _refuse_fp8_arithmetic(em, op)
    pred = op.attrs["predicate"]
    elementwise(em, op, lambda a: _fcmp(pred, _in_float(op, a[0]), _in_float(op, a[1], 1)))


@FAMILY.lowers("arith.select")
def _select(em: FunctionEmitter, op: Op) -> None:
    elementwise(em, op, lambda a: f"{a[0]} ? {a[1]} : {a[2]}")


# -- casts -------------------------------------------------------------------------------------------

@FAMILY.lowers("arith.extsi", "arith.trunci", "arith.index_cast", "arith.index_castui")
def _int_resize(em: FunctionEmitter, op: Op) -> None:
    src, dst = elem_type(op.operands[0]), elem_type(op.result)
    ct = em.ctype(dst)
    if src.name == "i1" and op.name == "arith.extsi":
        elementwise(em, op, lambda a: f"{a[0]} ? {ct}(-1) : {ct}(0)")
    elif dst.name == "i1":
        elementwise(em, op, lambda a: f"bool({a[0]} & 1)")
    else:
        elementwise(em, op, lambda a: f"{ct}({a[0]})")


@FAMILY.lowers("arith.extui")
def _extui(em: FunctionEmitter, op: Op) -> None:
    src, dst = elem_type(op.operands[0]), elem_type(op.result)
    ct = em.ctype(dst)
    if src.name == "i1":
        elementwise(em, op, lambda a: f"{ct}({a[0]} ? 1 : 0)")
    else:
        ut = unsigned_type(src)
        elementwise(em, op, lambda a: f"{ct}({ut}({a[0]}))")


@FAMILY.lowers("arith.sitofp", "arith.uitofp")
def _itofp(em: FunctionEmitter, op: Op) -> None:
    src, dst = elem_type(op.operands[0]), elem_type(op.result)
    ct = em.ctype(dst)
    if op.name == "arith.uitofp" and src.name != "i1":
        ut = unsigned_type(src)
        elementwise(em, op, lambda a: f"{ct}(float({ut}({a[0]})))" if dst.name == "bf16" else f"{ct}({ut}({a[0]}))")
    elif src.name == "i1":
        elementwise(em, op, lambda a: f"{ct}({a[0]} ? -1.0f : 0.0f)" if op.name == "arith.sitofp" else
                    f"{ct}({a[0]} ? 1.0f : 0.0f)")
    else:
        elementwise(em, op, lambda a: f"{ct}(float({a[0]}))" if dst.name == "bf16" else f"{ct}({a[0]})")


@FAMILY.lowers("arith.fptosi", "arith.fptoui")
def _fptoi(em: FunctionEmitter, op: Op) -> None:
    src, dst = elem_type(op.operands[0]), elem_type(op.result)

    def value(a):  # the float value (fp8 bytes decoded)
        return fp8_to_float(em, src, a)

    if dst.name == "i1":
        elementwise(em, op, lambda a: f"{value(a[0])} != 0.0f")
        return
    elementwise(em, op, lambda a: float_to_int(em, value(a[0]), dst, op.name == "arith.fptosi"))


@FAMILY.lowers("arith.extf", "arith.truncf", "tt.fp_to_fp")
def _fresize(em: FunctionEmitter, op: Op) -> None:
    """Float conversions. fp8 results round to nearest even (or toward zero, `rounding = rtz`) and saturate to
    the largest finite value (Triton's behaviour on NVIDIA GPUs, `cvt.rn.satfinite`); NaN stays NaN."""
    src, dst = elem_type(op.operands[0]), elem_type(op.result)
    ct = em.ctype(dst)
    toward_zero = "rtz" in str(op.attrs.get("rounding", "rtne"))
    if src.name in FP8_FORMATS or dst.name in FP8_FORMATS:
        def widen(a):
            return fp8_to_float(em, src, a)

        if dst.name in FP8_FORMATS:
            mbits, bias, maxv, nan, _ = FP8_FORMATS[dst.name]
            fn = em.ctx.require("tt_to_fp8")
            rtz = "true" if toward_zero else "false"
            elementwise(em, op, lambda a: f"{fn}({widen(a[0])}, {mbits}u, {bias}, {maxv}, {nan}, {rtz})")
        else:
            elementwise(em, op, lambda a: f"{ct}({widen(a[0])})")
        return
    if toward_zero and dst.name in ("f16", "bf16") and src.name == "f32":
        fn = em.ctx.require("tt_to_half_rtz" if dst.name == "f16" else "tt_to_bfloat_rtz")
        elementwise(em, op, lambda a: f"{fn}({a[0]})")
        return
    wide = em.get(op.operands[0]).unrounded
    if wide is not None and dst.name == "f32":  # a bfloat16 scan result: read its float accumulator
        em.bind(op.result, wide)
        return
    if src.name == "bf16" and dst.name == "f16" or src.name == "f16" and dst.name == "bf16":
        elementwise(em, op, lambda a: f"{ct}(float({a[0]}))")
    else:
        elementwise(em, op, lambda a: f"{ct}({a[0]})")


@FAMILY.lowers("arith.bitcast", "tt.bitcast")
def _bitcast(em: FunctionEmitter, op: Op) -> None:
    src, dst = elem_type(op.operands[0]), elem_type(op.result)
    ct = em.ctype(dst)
    if isinstance(dst, PointerType):  # pointer casts (e.g. float atomics done on int pointers)
        elementwise(em, op, lambda a: f"({ct})({a[0]})")
    elif src.name == "i1" or dst.name == "i1":
        elementwise(em, op, lambda a: f"{ct}({a[0]})")
    else:
        elementwise(em, op, lambda a: f"as_type<{ct}>({a[0]})")


@FAMILY.lowers("tt.int_to_ptr", "tt.ptr_to_int")
def _int_ptr_cast(em: FunctionEmitter, op: Op) -> None:
    """Pointers as 64-bit integers and back (pointer tables, e.g. grouped GEMM). The integer must be an
    address the device can use: on the emulator a CPU tensor's data_ptr(); on Metal a buffer's GPU address
    (an MPS tensor's data_ptr() is not one)."""
    ct = em.ctype(elem_type(op.result))
    elementwise(em, op, lambda a: f"reinterpret_cast<{ct}>({a[0]})")


# -- math ----------------------------------------------------------------------------------------------

# Float functions (keys of msl_helpers.METAL_MATH), computed in float and rounded back to the result type.
_FLOAT_MATH = {
    "math.exp": "exp", "math.exp2": "exp2", "math.log": "log", "math.log2": "log2", "math.sqrt": "sqrt",
    "math.rsqrt": "rsqrt", "math.sin": "sin", "math.cos": "cos", "math.tan": "tan", "math.tanh": "tanh",
    "math.floor": "floor", "math.ceil": "ceil", "math.trunc": "trunc", "math.round": "round",
    "math.roundeven": "rint", "math.erf": "erf", "math.fma": "fma", "math.copysign": "copysign", "math.powf": "pow",
    "arith.remf": "fmod", "tt.precise_sqrt": "sqrt", "tt.precise_divf": "divide", "math.log1p": "log1p",
    "math.expm1": "expm1",
}


@FAMILY.lowers(*_FLOAT_MATH)
def _float_math(em: FunctionEmitter, op: Op) -> None:
    _refuse_fp8_arithmetic(em, op)
    tmpl = metal_math(em.ctx, _FLOAT_MATH[op.name])
    elementwise(em, op, lambda a: _round_back(em, op, tmpl.format(*[f"float({x})" for x in a])))


@FAMILY.lowers("math.absf")
def _absf(em: FunctionEmitter, op: Op) -> None:
    if elem_type(op.result).name in FP8_FORMATS:  # fp8 values are their bytes: clear the sign bit
        elementwise(em, op, lambda a: f"uchar({a[0]} & 0x7F)")
        return
    elementwise(em, op, lambda a: _round_back(em, op, f"fabs({_in_float(op, a[0])})"))


def _refuse_fp8_arithmetic(em: FunctionEmitter, op: Op) -> None:
    """fp8 values live in MSL as their bytes; arithmetic on them would compute on the byte. Triton
    converts fp8 to a wider type before arithmetic, so a kernel that reaches here gets a clear refusal."""
    for name in element_types(op):
        if name in FP8_FORMATS:
            raise em.unsupported(f"{op.name} on {name} values is not supported; convert to float16 "
                                 "or float32 first (x.to(tl.float32))")


@FAMILY.lowers("tt.clampf")
def _clampf(em: FunctionEmitter, op: Op) -> None:
    _refuse_fp8_arithmetic(em, op)
    propagate = op.attrs.get("propagateNan", "none") == "all"
    fn = em.ctx.require("tt_maximum" if propagate else "tt_maxnum")
    fn2 = em.ctx.require("tt_minimum" if propagate else "tt_minnum")
    elementwise(em, op, lambda a: _round_back(em, op, f"{fn2}({fn}(float({a[0]}), float({a[1]})), float({a[2]}))"))


# Integer functions over one or two operands, as templates; `{ct}` is the MSL type, `{ut}` its unsigned twin.
_INT_FUNCS = {
    "math.absi": "{0} < {ct}(0) ? {ct}({ut}(0) - {ut}({0})) : {0}",
    "math.ctpop": "{ct}(popcount({ut}({0})))",
    "math.ctlz": "{ct}(clz({ut}({0})))",
    "tt.mulhiui": "{ct}(mulhi({ut}({0}), {ut}({1})))",
}


@FAMILY.lowers(*_INT_FUNCS)
def _int_func(em: FunctionEmitter, op: Op) -> None:
    ty = elem_type(op.result)
    ct, ut = em.ctype(ty), unsigned_type(ty)
    elementwise(em, op, lambda a: _INT_FUNCS[op.name].format(*a, ct=ct, ut=ut))


# -- float64 ---------------------------------------------------------------------------------------------
# Unless the kernel opts into allow_fp64_demotion, float64 values are `tt_double`, IEEE binary64 in software
# (soft_f64.py): every elementwise op that touches one lowers through soft_f64's tables instead.

_INT_CAST_OPS = ("arith.sitofp", "arith.uitofp", "arith.fptosi", "arith.fptoui")


def _lower_f64(em: FunctionEmitter, op: Op) -> None:
    res_ty, src_ty = elem_type(op.result), elem_type(op.operands[0])
    if op.name in soft_f64.OPS:
        tmpl, helper = soft_f64.OPS[op.name]
        if helper:
            em.ctx.require(helper)
        elementwise(em, op, lambda a: tmpl.format(*a))
    elif op.name == "arith.cmpf":
        tmpl = soft_f64.CMPF[op.attrs["predicate"]]
        elementwise(em, op, lambda a: tmpl.format(*a))
    elif op.name == "arith.select":
        elementwise(em, op, lambda a: f"({a[0]} ? {a[1]} : {a[2]})")
    elif op.name == "tt.clampf":
        lo_hi = ("tt_f64_minimum", "tt_f64_maximum") if op.attrs.get("propagateNan", "none") == "all" else \
            ("tt_f64_minnum", "tt_f64_maxnum")
        elementwise(em, op, lambda a: f"{lo_hi[0]}({lo_hi[1]}({a[0]}, {a[1]}), {a[2]})")
    elif op.name in ("arith.bitcast", "tt.bitcast") and res_ty.name == "f64":
        elementwise(em, op, lambda a: f"tt_f64_from_bits(as_type<ulong>({a[0]}))")
    elif op.name in ("arith.bitcast", "tt.bitcast"):
        elementwise(em, op, lambda a: f"as_type<{em.ctype(res_ty)}>({a[0]}.bits)")
    elif res_ty.name == "f64" and (op.name in _INT_CAST_OPS or op.name in ("arith.extf", "tt.fp_to_fp")):
        if src_ty.name == "i1":  # Triton: sitofp(true) is -1, uitofp(true) is 1
            neg = op.name == "arith.sitofp"
            elementwise(em, op, lambda a: f"tt_f64_from_i32({a[0]} ? {-1 if neg else 1} : 0)")
            return
        src_ct = unsigned_type(src_ty) if op.name == "arith.uitofp" else em.ctype(src_ty)
        if src_ct == "bfloat":
            em.ctx.require("tt_f64_bfloat")
        tmpl = soft_f64.CASTS_TO_F64[src_ct]
        elementwise(em, op, lambda a: tmpl.format(f"{src_ct}({a[0]})"))
    elif src_ty.name == "f64" and (op.name in _INT_CAST_OPS or op.name in ("arith.truncf", "tt.fp_to_fp")):
        if "rtz" in str(op.attrs.get("rounding", "rtne")):
            raise em.unsupported("round-toward-zero conversion from float64 is not supported (software float64 "
                                 "rounds to nearest even); convert to float32 first")
        dst_ct = em.ctype(res_ty) if res_ty.name != "i1" else "bool"
        if op.name == "arith.fptoui" and res_ty.name != "i1":
            dst_ct = unsigned_type(res_ty)
        if dst_ct == "bfloat":
            em.ctx.require("tt_f64_bfloat")
        if dst_ct not in soft_f64.CASTS_FROM_F64:
            raise em.unsupported(f"{op.name} from float64 to {res_ty} is not supported")
        tmpl = soft_f64.CASTS_FROM_F64[dst_ct]
        elementwise(em, op, lambda a: f"{em.ctype(res_ty)}({tmpl.format(a[0])})")
    else:
        raise em.unsupported(f"{op.name} on float64 is not supported by the apple backend's software float64")


def _touches_f64(op: Op) -> bool:
    return "f64" in element_types(op)


def _or_soft_f64(lower):

    def lower_or_soft_f64(em: FunctionEmitter, op: Op) -> None:
        if not em.ctx.demote_f64 and _touches_f64(op):
            _lower_f64(em, op)
        else:
            lower(em, op)

    return lower_or_soft_f64


for _name in list(FAMILY.lowerings):
    FAMILY.lowerings[_name] = _or_soft_f64(FAMILY.lowerings[_name])


@FAMILY.lowers("tt.elementwise_inline_asm")
def _inline_asm(em: FunctionEmitter, op: Op) -> None:
    raise em.unsupported("tl.inline_asm_elementwise runs inline assembly for NVIDIA or AMD GPUs (PTX, AMDGCN), which "
                         "Metal cannot run and MSL has no inline assembly for; write the operation with tl functions "
                         "(or tl.map_elementwise for a scalar function applied element by element)")

"""Lowering of `tt.extern_elementwise` calls made through `triton.language.extra.libdevice`.

The apple libdevice (`language/apple/libdevice.py`) names each function `apple.<name>`; this table maps
those names to Metal's math library. Half-precision arguments are computed in float and rounded back.
Functions Metal lacks are either implemented here with a measured error bound (erf, log1p, expm1, hypot, cbrt) or refused
with a clear message (erfc, lgamma, tgamma, ...), never approximated behind the user's back.
"""
from __future__ import annotations

from ..ir import Op
from .elementwise_ops import elementwise
from .emitter import FunctionEmitter, elem_type, element_types
from . import soft_f64
from .msl_helpers import METAL_MATH, metal_math
from .registry import OpFamily

FAMILY = OpFamily("extern")

# libdevice name -> a METAL_MATH function (msl_helpers), or an MSL template of its own over float arguments
_SAME_AS = {"sqrt_rn": "sqrt", "nearbyint": "rint", "div_rn": "divide", "fma_rn": "fma"}
_OWN = {
    "rcp_rn": "precise::divide(1.0f, {0})", "fast_expf": "fast::exp({0})", "fast_logf": "fast::log({0})",
    "fast_sinf": "fast::sin({0})", "fast_cosf": "fast::cos({0})", "fast_tanf": "fast::tan({0})",
    "fast_powf": "fast::pow({0}, {1})", "fast_dividef": "fast::divide({0}, {1})", "add_rn": "({0} + {1})",
    "sub_rn": "({0} - {1})", "mul_rn": "({0} * {1})",
}
_PREDICATES = {"signbit": "int(signbit({0}))", "isnan": "int(isnan({0}))", "isinf": "int(isinf({0}))",
               "finitef": "int(isfinite({0}))"}
# Functions whose naive Metal formulation loses accuracy (near zero, or by overflow) are refused on purpose.
_IMPRECISE = {"remainder"}


@FAMILY.lowers("tt.extern_elementwise")
def _extern(em: FunctionEmitter, op: Op) -> None:
    symbol = str(op.attrs.get("symbol", ""))
    if not symbol.startswith("apple."):
        raise em.unsupported(f"external function {symbol!r} is not available on the apple backend; use "
                             "triton.language.extra.libdevice, which maps to Metal's math library")
    name = symbol[len("apple."):]
    res_ty = elem_type(op.result)
    ct = em.ctype(res_ty)
    if any(t.startswith("f8") for t in element_types(op)):
        raise em.unsupported(f"libdevice.{name} on fp8 values is not supported; convert to float32 first")
    if any(em.ctype(elem_type(v)) == "tt_double" for v in list(op.operands) + [op.result]):  # software float64
        _extern_f64(em, op, name)
        return
    if name in _IMPRECISE:
        raise em.unsupported(f"libdevice.{name} is not supported by the apple backend yet (Metal has no "
                             "accurate equivalent)")
    if name in _OWN or _SAME_AS.get(name, name) in METAL_MATH:
        tmpl = _OWN.get(name) or metal_math(em.ctx, _SAME_AS.get(name, name))

        def make(a):
            expr = tmpl.format(*[f"float({x})" for x in a])
            return expr if ct == "float" else f"{ct}({expr})"

        elementwise(em, op, make)
        return
    if name in _PREDICATES:
        tmpl = _PREDICATES[name]
        elementwise(em, op, lambda a: tmpl.format(*[f"float({x})" for x in a]))
        return
    if name in ("clz", "popc"):
        src = elem_type(op.operands[0])
        ut = "uint" if src.bitwidth == 32 else "ulong"
        fn = "clz" if name == "clz" else "popcount"
        elementwise(em, op, lambda a: f"int({fn}({ut}({a[0]})))")
        return
    if name == "brev":
        src = elem_type(op.operands[0])
        ut = "uint" if src.bitwidth == 32 else "ulong"
        elementwise(em, op, lambda a: f"{ct}(reverse_bits({ut}({a[0]})))")
        return
    if name == "mulhi":
        src = elem_type(op.operands[0])
        if src.bitwidth != 32:
            raise em.unsupported("libdevice.mulhi on 64-bit integers is not supported yet")
        elementwise(em, op, lambda a: f"{ct}(mulhi({a[0]}, {a[1]}))")
        return
    if name == "pown":
        elementwise(em, op, lambda a: f"{ct}(precise::pown(float({a[0]}), int({a[1]})))")
        return
    raise em.unsupported(f"libdevice.{name} is not supported by the apple backend yet")


# libdevice name -> the math op of soft_f64.OPS computing it on software float64
_F64_FUNCTIONS = {"exp": "math.exp", "exp2": "math.exp2", "log": "math.log", "log2": "math.log2", "sin": "math.sin",
                  "cos": "math.cos", "tanh": "math.tanh", "erf": "math.erf", "pow": "math.powf", "sqrt": "math.sqrt",
                  "sqrt_rn": "math.sqrt", "fabs": "math.absf", "floor": "math.floor", "ceil": "math.ceil",
                  "trunc": "math.trunc", "round": "math.round", "rint": "math.roundeven", "fma": "math.fma",
                  "fma_rn": "math.fma", "fmod": "arith.remf", "copysign": "math.copysign", "fmin": "arith.minnumf",
                  "fmax": "arith.maxnumf", "div_rn": "arith.divf", "add_rn": "arith.addf", "sub_rn": "arith.subf",
                  "mul_rn": "arith.mulf"}


_F64_PREDICATES = {"isnan": "int(tt_f64_isnan({0}))", "isinf": "int(tt_f64_isinf({0}))",
                   "finitef": "int(tt_f64_isfinite({0}))", "signbit": "int(tt_f64_signbit({0}))"}


def _extern_f64(em: FunctionEmitter, op: Op, name: str) -> None:
    if name in _F64_PREDICATES:
        elementwise(em, op, lambda a: _F64_PREDICATES[name].format(*a))
        return
    if name not in _F64_FUNCTIONS:
        raise em.unsupported(f"libdevice.{name} on float64 is not supported by the apple backend's software "
                             "float64 (it has " + ", ".join(sorted(_F64_FUNCTIONS)) + ")")
    tmpl, helper = soft_f64.OPS[_F64_FUNCTIONS[name]]
    if helper:
        em.ctx.require(helper)
    elementwise(em, op, lambda a: tmpl.format(*a))

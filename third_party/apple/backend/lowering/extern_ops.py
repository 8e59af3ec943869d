"""Lowering of `tt.extern_elementwise` calls made through `triton.language.extra.libdevice`.

The apple libdevice (`language/apple/libdevice.py`) names each function `apple.<name>`; this table maps
those names to Metal's math library. Half-precision arguments are computed in float and rounded back.
Functions Metal lacks are either implemented here with a measured error bound (erf) or refused with a
clear message (erfc, lgamma, tgamma, ...), never approximated behind the user's back.
"""
from __future__ import annotations

from ..ir import Op
from .elementwise_ops import elementwise
from .emitter import FunctionEmitter, elem_type
from .registry import OpFamily

FAMILY = OpFamily("extern")

# name -> MSL template over float arguments a0, a1, a2
_FLOAT = {
    "exp": "precise::exp({0})", "exp2": "precise::exp2({0})", "exp10": "precise::exp10({0})",
    "log": "precise::log({0})", "log2": "precise::log2({0})", "log10": "precise::log10({0})",
    "sqrt": "precise::sqrt({0})", "sqrt_rn": "precise::sqrt({0})", "rsqrt": "precise::rsqrt({0})",
    "rcp_rn": "precise::divide(1.0f, {0})", "sin": "precise::sin({0})", "cos": "precise::cos({0})",
    "tan": "precise::tan({0})", "asin": "precise::asin({0})", "acos": "precise::acos({0})",
    "atan": "precise::atan({0})", "sinh": "precise::sinh({0})", "cosh": "precise::cosh({0})",
    "tanh": "precise::tanh({0})", "asinh": "precise::asinh({0})", "acosh": "precise::acosh({0})",
    "atanh": "precise::atanh({0})", "floor": "floor({0})", "ceil": "ceil({0})", "trunc": "trunc({0})",
    "round": "round({0})", "rint": "rint({0})", "nearbyint": "rint({0})", "fabs": "fabs({0})",
    "fast_expf": "fast::exp({0})", "fast_logf": "fast::log({0})", "fast_sinf": "fast::sin({0})",
    "fast_cosf": "fast::cos({0})", "fast_tanf": "fast::tan({0})", "fast_powf": "fast::pow({0}, {1})",
    "fast_dividef": "fast::divide({0}, {1})", "pow": "precise::pow({0}, {1})", "atan2": "precise::atan2({0}, {1})",
    "fmod": "fmod({0}, {1})", "hypot": "precise::sqrt({0} * {0} + {1} * {1})", "copysign": "copysign({0}, {1})",
    "fmin": "tt_minnum({0}, {1})", "fmax": "tt_maxnum({0}, {1})", "fdim": "fdim({0}, {1})",
    "div_rn": "precise::divide({0}, {1})", "add_rn": "({0} + {1})", "sub_rn": "({0} - {1})",
    "mul_rn": "({0} * {1})", "fma": "fma({0}, {1}, {2})", "fma_rn": "fma({0}, {1}, {2})",
    "expm1": "(precise::exp({0}) - 1.0f)", "log1p": "precise::log(1.0f + {0})",
    "cbrt": "(sign({0}) * precise::pow(fabs({0}), 1.0f / 3.0f))", "remainder": "({0} - {1} * rint({0} / {1}))",
}
_PREDICATES = {"signbit": "int(signbit({0}))", "isnan": "int(isnan({0}))", "isinf": "int(isinf({0}))",
               "finitef": "int(isfinite({0}))"}
# Functions whose naive Metal formulation loses accuracy near zero are left out on purpose.
_IMPRECISE = {"expm1", "log1p", "hypot", "cbrt", "remainder"}


@FAMILY.lowers("tt.extern_elementwise")
def _extern(em: FunctionEmitter, op: Op) -> None:
    symbol = str(op.attrs.get("symbol", ""))
    if not symbol.startswith("apple."):
        raise em.unsupported(f"external function {symbol!r} is not available on the apple backend; use "
                       "triton.language.extra.libdevice, which maps to Metal's math library")
    name = symbol[len("apple."):]
    res_ty = elem_type(op.result)
    ct = em.ctype(res_ty)
    if name in _IMPRECISE:
        raise em.unsupported(f"libdevice.{name} is not supported by the apple backend yet (Metal has no accurate "
                       "equivalent)")
    if name == "erf":
        fn = em.ctx.require("tt_erf")
        elementwise(em, op, lambda a: f"{fn}(float({a[0]}))" if ct == "float" else f"{ct}({fn}(float({a[0]})))")
        return
    if name in ("fmin", "fmax"):
        em.ctx.require("tt_minnum" if name == "fmin" else "tt_maxnum")
    if name in _FLOAT:
        tmpl = _FLOAT[name]

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

"""Lowering of `tt.extern_elementwise` calls made through `triton.language.extra.libdevice`.

The apple libdevice (`language/apple/libdevice.py`) names each function `apple.<name>`; this table maps
those names to Metal's math library. Half-precision arguments are computed in float and rounded back.
Functions Metal lacks are either implemented here with a measured error bound (erf, log1p, expm1, hypot, cbrt) or refused
with a clear message (erfc, lgamma, tgamma, ...), never approximated behind the user's back.
"""
from __future__ import annotations

from ..ir import Op
from .conversions import float_to_int
from .emitter import FunctionEmitter, elem_type, element_types, elementwise
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
               "finitef": "int(isfinite({0}))", "isfinited": "int(isfinite({0}))"}
# libdevice name -> (MSL template over float arguments, the library helpers it calls)
_COMPOSED = {
    "fast_exp10f": ("fast::exp10({0})", ()), "fast_log10f": ("fast::log10({0})", ()),
    "fast_log2f": ("fast::log2({0})", ()), "sinpi": ("tt_sinpi({0})", ("tt_sinpi", )),
    "cospi": ("tt_cospi({0})", ("tt_sinpi", )), "rcbrt": ("precise::divide(1.0f, tt_cbrt({0}))", ("tt_cbrt", )),
    "rhypot": ("tt_rnorm4({0}, {1}, 0.0f, 0.0f)", ("tt_norm", )),
    "norm3d": ("tt_norm4({0}, {1}, {2}, 0.0f)", ("tt_norm", )),
    "rnorm3d": ("tt_rnorm4({0}, {1}, {2}, 0.0f)", ("tt_norm", )),
    "norm4d": ("tt_norm4({0}, {1}, {2}, {3})", ("tt_norm", )),
    "rnorm4d": ("tt_rnorm4({0}, {1}, {2}, {3})", ("tt_norm", )),
    "saturatef": ("(isnan({0}) ? 0.0f : clamp({0}, 0.0f, 1.0f))", ()), "logb": ("tt_logb({0})", ("tt_ilogb", )),
}
# Functions whose naive Metal formulation loses accuracy (near zero, or by overflow) are refused on purpose.
_IMPRECISE = {"remainder", "rsqrt_rn", "erfcx", "normcdf", "normcdfinv", "erfinv", "erfcinv", "j0", "j1", "y0", "y1",
              "jn", "yn", "cyl_bessel_i0", "cyl_bessel_i1"}
_DIRECTED = ("_rd", "_ru", "_rz")  # libdevice arithmetic in a directed rounding mode: Metal rounds to nearest only
_DIRECTED_OPS = {"add", "sub", "mul", "div", "fma", "rcp", "sqrt"}
_ROUND = {"rn": "rint", "rz": "trunc", "rd": "floor", "ru": "ceil"}
_CONVERSION_TYPES = {"float": "f32", "int": "i32", "uint": "u32", "ll": "i64", "ull": "u64", "double": "f64"}


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
    if name == "rcp64h" or name.endswith(_DIRECTED) and name.split("_")[0] in _DIRECTED_OPS:
        raise em.unsupported(f"libdevice.{name} is not supported: Metal computes in round-to-nearest only (no "
                             "directed rounding modes); use the _rn form")
    if name in _COMPOSED:
        tmpl, helpers = _COMPOSED[name]
        for h in helpers:
            em.ctx.require(h)
        elementwise(em, op, lambda a: _narrowed(ct, tmpl.format(*[f"float({x})" for x in a])))
        return
    if _integer_or_bits(em, op, name, ct):
        return
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
    if name == "pown":  # x to an int32 power, as CUDA's powif (Metal has no pown): msl/float_math.metal
        fn = em.ctx.require("tt_pown")
        elementwise(em, op, lambda a: _narrowed(ct, f"{fn}(float({a[0]}), int({a[1]}))"))
        return
    raise em.unsupported(f"libdevice.{name} is not supported by the apple backend yet")


def _narrowed(ct: str, expr: str) -> str:
    return expr if ct == "float" else f"{ct}({expr})"


def _integer_or_bits(em: FunctionEmitter, op: Op, name: str, ct: str) -> bool:
    """The libdevice functions on integers, bit patterns and conversions of 32-bit values; False for others."""
    src = elem_type(op.operands[0])
    if name == "abs":
        elementwise(em, op, lambda a: f"{ct}(abs({a[0]}))" if src.is_int else _narrowed(ct, f"fabs(float({a[0]}))"))
    elif name == "ffs":
        ut = "uint" if src.bitwidth == 32 else "ulong"
        elementwise(em, op, lambda a: f"({a[0]} == 0 ? 0 : int(ctz({ut}({a[0]}))) + 1)")
    elif name == "mul24":  # the low 24 bits of each, sign-extended; the low 32 bits of the product
        elementwise(em, op, lambda a: f"{ct}(uint(as_type<int>(uint({a[0]}) << 8) >> 8) * "
                    f"uint(as_type<int>(uint({a[1]}) << 8) >> 8))")
    elif name == "umul24":
        elementwise(em, op, lambda a: f"{ct}((uint({a[0]}) & 0xFFFFFFu) * (uint({a[1]}) & 0xFFFFFFu))")
    elif name in ("hadd", "rhadd", "uhadd", "urhadd"):  # (x + y) >> 1, (x + y + 1) >> 1 without overflow
        tt = "uint" if name.startswith("u") else "int"
        elementwise(em, op, lambda a: f"{ct}({name.lstrip('u')}({tt}({a[0]}), {tt}({a[1]})))")
    elif name in ("sad", "usad"):  # |x - y| + z
        tt = "uint" if name == "usad" else "int"
        elementwise(em, op, lambda a: f"{ct}(absdiff({tt}({a[0]}), {tt}({a[1]})) + uint({a[2]}))")
    elif name == "byte_perm":
        fn = em.ctx.require("tt_byte_perm")
        elementwise(em, op, lambda a: f"{fn}({a[0]}, {a[1]}, {a[2]})")
    elif name in ("float_as_int", "float_as_uint", "int_as_float", "uint_as_float"):
        elementwise(em, op, lambda a: f"as_type<{ct}>({a[0]})")
    elif name in ("ldexp", "scalbn"):
        elementwise(em, op, lambda a: f"ldexp(float({a[0]}), int({a[1]}))")
    elif name == "ilogb":
        fn = em.ctx.require("tt_ilogb")
        elementwise(em, op, lambda a: f"{fn}(float({a[0]}))")
    elif name in ("llrint", "llround"):
        rnd = "rint" if name == "llrint" else "round"
        elementwise(em, op, lambda a: float_to_int(em, f"{rnd}(float({a[0]}))", elem_type(op.result), True))
    elif "2" in name and name.split("2")[0] in _CONVERSION_TYPES and name[-3:] in ("_rn", "_rz", "_rd", "_ru"):
        _convert(em, op, name)
    else:
        return False
    return True


def _convert(em: FunctionEmitter, op: Op, name: str) -> None:
    """<source>2<destination>_<mode> conversions of 32-bit sources and float destinations from integers."""
    src_name, rest = name.split("2", 1)
    dst_name, mode = rest[:-3], rest[-2:]
    dst = elem_type(op.result)
    if _CONVERSION_TYPES[src_name] == "f32":  # float -> integer: round, then convert (saturating, NaN -> 0)
        signed = not dst_name.startswith("u")
        elementwise(em, op, lambda a: float_to_int(em, f"{_ROUND[mode]}(float({a[0]}))", dst, signed))
    elif dst_name == "float" and mode == "rn":  # integer -> float: the conversion rounds to nearest
        ut = "uint" if src_name == "uint" else "ulong" if src_name == "ull" else None
        elementwise(em, op, lambda a: f"float({ut}({a[0]}))" if ut else f"float({a[0]})")
    elif dst_name == "float" and src_name in ("int", "uint"):
        fn = em.ctx.require("tt_int_to_float_directed")
        code = {"rd": 1, "ru": 2, "rz": 3}[mode]
        cast = "long(uint({}))" if src_name == "uint" else "long({})"
        elementwise(em, op, lambda a: f"{fn}({cast.format(a[0])}, {code})")
    else:
        raise em.unsupported(f"libdevice.{name} is not supported: Metal has no directed rounding modes, and "
                             "64-bit integers are converted to float rounded to nearest only")


# libdevice name -> the math op of soft_f64.OPS computing it on software float64
_F64_FUNCTIONS = {"exp": "math.exp", "exp2": "math.exp2", "log": "math.log", "log2": "math.log2", "sin": "math.sin",
                  "cos": "math.cos", "tanh": "math.tanh", "erf": "math.erf", "pow": "math.powf", "sqrt": "math.sqrt",
                  "sqrt_rn": "math.sqrt", "fabs": "math.absf", "floor": "math.floor", "ceil": "math.ceil",
                  "trunc": "math.trunc", "round": "math.round", "rint": "math.roundeven", "fma": "math.fma",
                  "fma_rn": "math.fma", "fmod": "arith.remf", "copysign": "math.copysign", "fmin": "arith.minnumf",
                  "fmax": "arith.maxnumf", "div_rn": "arith.divf", "add_rn": "arith.addf", "sub_rn": "arith.subf",
                  "mul_rn": "arith.mulf"}


_F64_PREDICATES = {"isnan": "int(tt_f64_isnan({0}))", "isinf": "int(tt_f64_isinf({0}))",
                   "finitef": "int(tt_f64_isfinite({0}))", "isfinited": "int(tt_f64_isfinite({0}))",
                   "signbit": "int(tt_f64_signbit({0}))"}
# libdevice functions on float64 bit patterns and conversions from and to float64 (software float64)
_F64_ROUND = {"rn": "tt_f64_rint", "rz": "tt_f64_trunc", "rd": "tt_f64_floor", "ru": "tt_f64_ceil"}
_F64_TO_INT = {"int": "tt_f64_to_i32", "uint": "tt_f64_to_u32", "ll": "tt_f64_to_i64", "ull": "tt_f64_to_u64"}
_F64_BITS = {
    "double_as_longlong": "as_type<long>({0}.bits)", "longlong_as_double": "tt_f64_from_bits(as_type<ulong>({0}))",
    "double2hiint": "int(uint({0}.bits >> 32))", "double2loint": "int(uint({0}.bits))",
    "hiloint2double": "tt_f64_from_bits(ulong(uint({0})) << 32 | uint({1}))", "abs": "tt_f64_fabs({0})",
    "ldexp": "tt_f64_ldexp({0}, int({1}))", "scalbn": "tt_f64_ldexp({0}, int({1}))",
    "llrint": "tt_f64_to_i64(tt_f64_rint({0}))", "llround": "tt_f64_to_i64(tt_f64_round({0}))",
    "double2float_rn": "tt_f64_to_float({0})", "int2double_rn": "tt_f64_from_i32(int({0}))",
    "uint2double_rn": "tt_f64_from_u32(uint({0}))", "ll2double_rn": "tt_f64_from_i64(long({0}))",
    "ull2double_rn": "tt_f64_from_u64(ulong({0}))",
}
for _dst, _fn in _F64_TO_INT.items():
    for _mode, _rnd in _F64_ROUND.items():
        _F64_BITS[f"double2{_dst}_{_mode}"] = f"{_fn}({_rnd}({{0}}))"


def _extern_f64(em: FunctionEmitter, op: Op, name: str) -> None:
    if name in _F64_PREDICATES or name in _F64_BITS:
        tmpl = _F64_PREDICATES.get(name) or _F64_BITS[name]
        elementwise(em, op, lambda a: tmpl.format(*a))
        return
    if name not in _F64_FUNCTIONS:
        raise em.unsupported(f"libdevice.{name} on float64 is not supported by the apple backend's software "
                             "float64 (it has " + ", ".join(sorted(_F64_FUNCTIONS)) + ")")
    tmpl, helper = soft_f64.OPS[_F64_FUNCTIONS[name]]
    if helper:
        em.ctx.require(helper)
    elementwise(em, op, lambda a: tmpl.format(*a))

"""`triton.language.extra.libdevice` for the `apple` backend.

Each function lowers to an `tt.extern_elementwise` whose symbol is `apple.<name>`; the MSL lowering
(`backend/lowering/extern_ops.py`) maps that symbol to Metal's math library. Half-precision
arguments are computed in float and rounded back, as Triton's CUDA libdevice does.
"""
from triton.language import core

_F32 = core.dtype("fp32")
_F16 = core.dtype("fp16")
_BF16 = core.dtype("bf16")
_F64 = core.dtype("fp64")  # software binary64 on Metal: the lowering computes the functions it has, refuses others
_I32 = core.dtype("int32")
_I64 = core.dtype("int64")
_U32 = core.dtype("uint32")
_U64 = core.dtype("uint64")


def _float_table(name: str, arity: int) -> dict:
    return {(t, ) * arity: (f"apple.{name}", t) for t in (_F32, _F16, _BF16, _F64)}


def _make(name: str, arity: int, table: dict):

    def fn(*args, _semantic=None):
        if len(args) != arity:
            raise TypeError(f"libdevice.{name} takes {arity} argument(s), got {len(args)}")
        return core.extern_elementwise("", "", list(args), table, is_pure=True, _semantic=_semantic)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"libdevice.{name} on the apple backend (Metal math)."
    return core.extern(fn)


# Every function of Triton's CUDA libdevice exists here with the same name; the lowering computes it or refuses
# it naming it (Metal has no directed rounding modes, and no accurate Bessel functions or inverse error functions).
_UNARY_FLOAT = ("exp", "exp2", "exp10", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "cbrt", "sin",
                "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf",
                "erfc", "floor", "ceil", "trunc", "round", "rint", "nearbyint", "fabs", "lgamma", "tgamma",
                "signbit", "isnan", "isinf", "finitef", "isfinited", "fast_expf", "fast_logf", "fast_sinf",
                "fast_cosf", "fast_tanf", "fast_exp10f", "fast_log10f", "fast_log2f", "sqrt_rn", "rcp_rn",
                "sinpi", "cospi", "rcbrt", "rsqrt_rn", "saturatef", "logb", "normcdf", "normcdfinv", "erfinv",
                "erfcinv", "erfcx", "j0", "j1", "y0", "y1", "cyl_bessel_i0", "cyl_bessel_i1", "sqrt_rd", "sqrt_ru",
                "sqrt_rz", "rcp_rd", "rcp_ru", "rcp_rz", "rcp64h")
_BINARY_FLOAT = ("pow", "atan2", "fmod", "remainder", "hypot", "rhypot", "copysign", "fmin", "fmax", "fdim",
                 "nextafter", "div_rn", "add_rn", "sub_rn", "mul_rn", "fast_powf", "fast_dividef", "div_rd", "div_ru",
                 "div_rz", "add_rd", "add_ru", "add_rz", "sub_rd", "sub_ru", "sub_rz", "mul_rd", "mul_ru", "mul_rz")
_TERNARY_FLOAT = ("fma", "fma_rn", "fma_rd", "fma_ru", "fma_rz", "norm3d", "rnorm3d")

_PREDICATES = {"signbit", "isnan", "isinf", "finitef", "isfinited"}

for _name in _UNARY_FLOAT:
    if _name in _PREDICATES:
        _table = {(t, ): (f"apple.{_name}", _I32) for t in (_F32, _F16, _BF16, _F64)}
    else:
        _table = _float_table(_name, 1)
    globals()[_name] = _make(_name, 1, _table)
for _name in _BINARY_FLOAT:
    globals()[_name] = _make(_name, 2, _float_table(_name, 2))
for _name in _TERNARY_FLOAT:
    globals()[_name] = _make(_name, 3, _float_table(_name, 3))
for _name in ("norm4d", "rnorm4d"):
    globals()[_name] = _make(_name, 4, _float_table(_name, 4))
for _name in ("ldexp", "scalbn"):
    globals()[_name] = _make(_name, 2, {(t, _I32): (f"apple.{_name}", t) for t in (_F32, _F64)})
for _name in ("jn", "yn"):
    globals()[_name] = _make(_name, 2, {(_I32, t): (f"apple.{_name}", t) for t in (_F32, _F64)})
ilogb = _make("ilogb", 1, {(t, ): ("apple.ilogb", _I32) for t in (_F32, _F64)})
llrint = _make("llrint", 1, {(t, ): ("apple.llrint", _I64) for t in (_F32, _F64)})
llround = _make("llround", 1, {(t, ): ("apple.llround", _I64) for t in (_F32, _F64)})

# Integer functions
abs = _make("abs", 1, {(t, ): ("apple.abs", t) for t in (_I32, _I64, _F32, _F16, _BF16, _F64)})
ffs = _make("ffs", 1, {(_I32, ): ("apple.ffs", _I32), (_I64, ): ("apple.ffs", _I32)})
# (the unsigned forms get symbols of their own: the IR's integers are signless)
mul24 = _make("mul24", 2, {(_I32, _I32): ("apple.mul24", _I32), (_U32, _U32): ("apple.umul24", _U32)})
hadd = _make("hadd", 2, {(_I32, _I32): ("apple.hadd", _I32), (_U32, _U32): ("apple.uhadd", _U32)})
rhadd = _make("rhadd", 2, {(_I32, _I32): ("apple.rhadd", _I32), (_U32, _U32): ("apple.urhadd", _U32)})
sad = _make("sad", 3, {(_I32, _I32, _U32): ("apple.sad", _I32), (_U32, _U32, _U32): ("apple.usad", _U32)})
byte_perm = _make("byte_perm", 3, {(_I32, _I32, _I32): ("apple.byte_perm", _I32)})

# Bit patterns
float_as_int = _make("float_as_int", 1, {(_F32, ): ("apple.float_as_int", _I32)})
float_as_uint = _make("float_as_uint", 1, {(_F32, ): ("apple.float_as_uint", _U32)})
int_as_float = _make("int_as_float", 1, {(_I32, ): ("apple.int_as_float", _F32)})
uint_as_float = _make("uint_as_float", 1, {(_U32, ): ("apple.uint_as_float", _F32)})
double_as_longlong = _make("double_as_longlong", 1, {(_F64, ): ("apple.double_as_longlong", _I64)})
longlong_as_double = _make("longlong_as_double", 1, {(_I64, ): ("apple.longlong_as_double", _F64)})
double2hiint = _make("double2hiint", 1, {(_F64, ): ("apple.double2hiint", _I32)})
double2loint = _make("double2loint", 1, {(_F64, ): ("apple.double2loint", _I32)})
hiloint2double = _make("hiloint2double", 2, {(_I32, _I32): ("apple.hiloint2double", _F64)})

# Conversions with a rounding mode: <source>2<destination>_<rn|rz|rd|ru>
_CONVERSION_TYPES = {"float": _F32, "double": _F64, "int": _I32, "uint": _U32, "ll": _I64, "ull": _U64}
for _src, _dst in (("float", "int"), ("float", "uint"), ("float", "ll"), ("float", "ull"), ("double", "int"),
                   ("double", "uint"), ("double", "ll"), ("double", "ull"), ("double", "float"), ("int", "float"),
                   ("uint", "float"), ("ll", "float"), ("ull", "float"), ("ll", "double"), ("ull", "double")):
    for _mode in ("rn", "rz", "rd", "ru"):
        _name = f"{_src}2{_dst}_{_mode}"
        globals()[_name] = _make(_name, 1, {(_CONVERSION_TYPES[_src], ): (f"apple.{_name}", _CONVERSION_TYPES[_dst])})
for _src in ("int", "uint"):  # exact
    _name = f"{_src}2double_rn"
    globals()[_name] = _make(_name, 1, {(_CONVERSION_TYPES[_src], ): (f"apple.{_name}", _F64)})

clz = _make("clz", 1, {(_I32, ): ("apple.clz", _I32), (_I64, ): ("apple.clz", _I32)})
popc = _make("popc", 1, {(_I32, ): ("apple.popc", _I32), (_I64, ): ("apple.popc", _I32)})
brev = _make("brev", 1, {(_I32, ): ("apple.brev", _I32), (_I64, ): ("apple.brev", _I64)})
mulhi = _make("mulhi", 2, {
    (_I32, _I32): ("apple.mulhi", _I32),
    (_U32, _U32): ("apple.mulhi", _U32),
    (_I64, _I64): ("apple.mulhi", _I64),
    (_U64, _U64): ("apple.mulhi", _U64),
})
pow_int = _make("pow_int", 2, {(t, _I32): ("apple.pown", t) for t in (_F32, _F16, _BF16)})
# libdevice.pow also takes an int32 exponent, as CUDA's (__nv_powif): the same apple.pown
pow = _make("pow", 2, {**_float_table("pow", 2), **{(t, _I32): ("apple.pown", t) for t in (_F32, _F16, _BF16, _F64)}})

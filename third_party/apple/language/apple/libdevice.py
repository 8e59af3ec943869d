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


_UNARY_FLOAT = ("exp", "exp2", "exp10", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "cbrt", "sin",
                "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf",
                "erfc", "floor", "ceil", "trunc", "round", "rint", "nearbyint", "fabs", "lgamma", "tgamma",
                "signbit", "isnan", "isinf", "finitef", "fast_expf", "fast_logf", "fast_sinf", "fast_cosf",
                "fast_tanf", "fast_powf", "fast_dividef", "sqrt_rn", "rcp_rn")
_BINARY_FLOAT = ("pow", "atan2", "fmod", "remainder", "hypot", "copysign", "fmin", "fmax", "fdim", "nextafter",
                 "div_rn", "add_rn", "sub_rn", "mul_rn")
_TERNARY_FLOAT = ("fma", "fma_rn")

_PREDICATES = {"signbit", "isnan", "isinf", "finitef"}

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

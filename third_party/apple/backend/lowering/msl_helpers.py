"""The lowering's view of the MSL helper library (`lowering/msl/`, loaded by `msl_library.py`): the float-math
templates, and the helpers parameterised by a type or kind (simd_shuffle overloads, vector-register pack and
unpack, locked 64-bit atomics), each chosen here and instantiated from its library text.

What the helpers compute, and why Triton's semantics need them, is said in the library files' headers."""
from __future__ import annotations

from typing import Tuple

from . import msl_library

# Float math in MSL: templates over float arguments {0}, {1}, {2}. `precise::` keeps full float accuracy
# whatever math mode the Metal compiler is in; `tt_erf` is our own (Metal has no erf; max 4 ulp measured), and so
# are `tt_log1p` and `tt_expm1` (Metal has neither).
METAL_MATH = {
    "exp": "precise::exp({0})", "exp2": "precise::exp2({0})", "exp10": "precise::exp10({0})",
    "log": "precise::log({0})", "log2": "precise::log2({0})", "log10": "precise::log10({0})",
    "sqrt": "precise::sqrt({0})", "rsqrt": "precise::rsqrt({0})", "sin": "precise::sin({0})",
    "cos": "precise::cos({0})", "tan": "precise::tan({0})", "asin": "precise::asin({0})",
    "acos": "precise::acos({0})", "atan": "precise::atan({0})", "sinh": "precise::sinh({0})",
    "cosh": "precise::cosh({0})", "tanh": "precise::tanh({0})", "asinh": "precise::asinh({0})",
    "acosh": "precise::acosh({0})", "atanh": "precise::atanh({0})", "floor": "floor({0})", "ceil": "ceil({0})",
    "trunc": "trunc({0})", "round": "round({0})", "rint": "rint({0})", "fabs": "fabs({0})",
    "pow": "precise::pow({0}, {1})", "atan2": "precise::atan2({0}, {1})", "fmod": "fmod({0}, {1})",
    "copysign": "copysign({0}, {1})", "fdim": "fdim({0}, {1})", "divide": "precise::divide({0}, {1})",
    "fma": "fma({0}, {1}, {2})", "erf": "tt_erf({0})", "fmin": "tt_minnum({0}, {1})", "fmax": "tt_maxnum({0}, {1})",
    "log1p": "tt_log1p({0})", "expm1": "tt_expm1({0})", "hypot": "tt_hypot({0}, {1})", "cbrt": "tt_cbrt({0})",
}


def metal_math(ctx, name: str) -> str:
    """The METAL_MATH template `name`, asking `ctx` for the library helper it calls, if any."""
    tmpl = METAL_MATH[name]
    if tmpl.startswith("tt_"):
        ctx.require(tmpl[:tmpl.index("(")])
    return tmpl


# Metal's simd_shuffle family takes 8/16/32-bit values: wider or narrower types move through the forms of
# msl/shuffle.metal.
_SHUFFLE_DIRECT = ("float", "half", "int", "uint", "short", "ushort")
_SHUFFLE_VIA = {"char": "short", "uchar": "ushort"}


def _shuffle_form(ctype: str) -> str:
    """The library helper (`tt_shuffle_<form>`) that moves MSL type `ctype`."""
    if ctype in _SHUFFLE_DIRECT:
        return "tt_shuffle_direct"
    if ctype in _SHUFFLE_VIA:
        return "tt_shuffle_via"
    if ctype in ("bool", "bfloat"):
        return f"tt_shuffle_{ctype}"
    if ctype in ("long", "ulong"):
        return "tt_shuffle_64"
    if ctype == "tt_double":
        return "tt_shuffle_f64"
    if ctype.endswith("*"):
        return "tt_shuffle_pointer"
    raise ValueError(f"no shuffle overload for MSL type {ctype}")


def shuffle_helper(metal_fn: str, ctype: str) -> Tuple[str, str, str]:
    """(key, name, text) of the `tt_<metal_fn>(T v, ushort m)` overload for MSL type `ctype`, over Metal's
    `metal_fn` (`simd_shuffle`, `simd_shuffle_xor`, ...): 64-bit values and pointers move as two 32-bit
    halves, bool and bfloat as 16-bit integers."""
    try:
        form = msl_library.helper(_shuffle_form(ctype))
    except ValueError:
        raise ValueError(f"no {metal_fn} overload for MSL type {ctype}") from None
    params = {"FN": metal_fn, "T": ctype}
    if ctype in _SHUFFLE_VIA:
        params["VIA"] = _SHUFFLE_VIA[ctype]
    name = "tt_" + metal_fn
    return f"{name}:{ctype}", name, form.instantiate(**params)


def shuffle_requires(ctype: str) -> Tuple[str, ...]:
    """The library helpers the shuffle overload for `ctype` calls (emitted before it)."""
    return msl_library.helper(_shuffle_form(ctype)).requires


# MSL element types that move in vector accesses: type -> bytes
VECTOR_TYPES = {"float": 4, "half": 2, "bfloat": 2, "int": 4, "uint": 4, "short": 2, "ushort": 2, "char": 1, "uchar": 1,
                "long": 8, "ulong": 8}
# element types that move as 32-bit words when a run holds more than 4 of them: type -> bytes
PACKED = {"half": 2, "bfloat": 2, "short": 2, "ushort": 2, "char": 1, "uchar": 1}


def vector_access_type(ct: str, width: int) -> str:
    """The MSL type one run of `width` elements moves as: `T<width>`, or 32-bit words past 4 elements."""
    if width <= 4:
        return f"{ct}{width}"
    return f"uint{width * PACKED[ct] // 4}"


def vector_register_helpers(ctype: str, width: int, access: str) -> tuple:
    """((key, name, text) of `tt_unpack(thread T* regs, A v)`, which writes the `width` elements a vector
    access of MSL type `access` moved to consecutive registers, and of `tt_pack<width>(thread const T* regs)`,
    which reads them into one such value), for MSL element type `ctype`: the register side of a vector global
    access. `access` is `T<width>`, or 32-bit words (`uint4` for 8 halves), each word holding a `T2`/`T4`."""
    params = {"T": ctype, "A": access, "W": str(width)}
    if access == f"{ctype}{width}":
        unpack_text = msl_library.helper("tt_unpack_vector").instantiate(**params)
        pack_text = msl_library.helper("tt_pack_vector").instantiate(**params)
    else:
        per = width // int(access[len("uint"):])  # elements per 32-bit word
        params.update(PER=str(per), PART=f"{ctype}{per}")
        unpack_text = msl_library.helper("tt_unpack_words").instantiate(**params)
        pack_text = msl_library.helper("tt_pack_words").instantiate(**params, WORDS=str(width // per))
    unpack = (f"tt_unpack:{ctype}:{access}", "tt_unpack", unpack_text)
    pack = (f"tt_pack{width}:{ctype}", f"tt_pack{width}", pack_text)
    return unpack, pack


# The new value of a locked 64-bit read-modify-write (tt_atomic64_<kind>, msl/atomics64_locked.metal), from the
# old value `old` and the operand `v`, all as their 64 bits (float64 is software float64, soft_f64.py).
_LOCKED64_UPDATE = {
    "add": "old + v", "and": "old & v", "or": "old | v", "xor": "old ^ v",
    "max": "as_type<long>(old) > as_type<long>(v) ? old : v", "min": "as_type<long>(old) < as_type<long>(v) ? old : v",
    "umax": "max(old, v)", "umin": "min(old, v)", "xchg": "v", "exch": "v",
    "fadd": "tt_f64_add(tt_f64_from_bits(old), tt_f64_from_bits(v)).bits",
}
# what an update calls besides the lock helpers
_LOCKED64_UPDATE_REQUIRES = {"fadd": ("tt_f64_core", )}


def locked_atomic64_helper(kind: str) -> Tuple[str, str, str]:
    """(key, name, text) of `tt_atomic64_<kind>(locks, p, v, lane)` (`cas`: `(locks, p, cmp, v, lane)`): a
    64-bit atomic read-modify-write under the element's lock (the `tt_lock64` helpers), returning the old value
    (why the lanes take turns: msl/atomics64_locked.metal)."""
    name = f"tt_atomic64_{kind}"
    if kind == "cas":
        return name, name, msl_library.helper("tt_atomic64_cas").text
    return name, name, msl_library.helper("tt_atomic64_rmw").instantiate(KIND=kind, UPDATE=_LOCKED64_UPDATE[kind])


def locked_atomic64_requires(kind: str) -> Tuple[str, ...]:
    """The library helpers `tt_atomic64_<kind>` calls, in emission order."""
    form = msl_library.helper("tt_atomic64_cas" if kind == "cas" else "tt_atomic64_rmw")
    return form.requires + _LOCKED64_UPDATE_REQUIRES.get(kind, ())

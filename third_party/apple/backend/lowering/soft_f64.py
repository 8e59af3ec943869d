"""The lowering's tables for software IEEE binary64 (`tt_double`; Metal has no `double`): how each float64 op,
comparison, cast and constant is written over the library's API.

The MSL itself is in `lowering/msl/`: `soft_f64_core.metal` (the type, arithmetic, conversions, comparisons,
rounding, fmod, min/max; its header states the semantics and the names the lowering calls),
`soft_f64_bfloat.metal` (conversions to and from bfloat) and `soft_f64_math.metal` (exp, exp2, log, log2, pow,
sin, cos, tanh, erf in double-double arithmetic; its header states their measured accuracy). They are the
library helpers `tt_f64_core`, `tt_f64_bfloat` and `tt_f64_math` (each of the last two requires the first).
Every result is checked bit for bit against the host's doubles by test/lowering/test_soft_f64.py.

  tables         OPS (arith/math op -> template, helper key), CMPF (every arith.cmpf predicate),
                 CASTS_TO_F64 / CASTS_FROM_F64 (MSL scalar type -> template), constant(value) -> MSL expression
"""
from __future__ import annotations

import struct
from typing import List

from . import msl_library


def helper_texts(*keys: str) -> List[str]:
    """The helper texts of `keys` (`tt_f64_core`, `tt_f64_bfloat`, `tt_f64_math`) and everything they need,
    each once, in emission order."""
    return [msl_library.helper(k).text for k in msl_library.closure(keys)]


# --------------------------------------------------------------------------------------------------------
# How each float64 op maps onto the API: MSL templates over operands {0}, {1}, {2} (tt_double values)
# --------------------------------------------------------------------------------------------------------
# arith/math ops -> (template, helper key it needs besides tt_f64_core, or None)
OPS = {
    "arith.addf": ("({0} + {1})", None), "arith.subf": ("({0} - {1})", None), "arith.mulf": ("({0} * {1})", None),
    "arith.divf": ("({0} / {1})", None), "arith.negf": ("(-{0})", None), "arith.remf": ("tt_f64_fmod({0}, {1})", None),
    "arith.minimumf": ("tt_f64_minimum({0}, {1})", None), "arith.maximumf": ("tt_f64_maximum({0}, {1})", None),
    "arith.minnumf": ("tt_f64_minnum({0}, {1})", None), "arith.maxnumf": ("tt_f64_maxnum({0}, {1})", None),
    "math.fma": ("tt_f64_fma({0}, {1}, {2})", None), "math.sqrt": ("tt_f64_sqrt({0})", None),
    "tt.precise_sqrt": ("tt_f64_sqrt({0})", None), "tt.precise_divf": ("({0} / {1})", None),
    "math.absf": ("tt_f64_fabs({0})", None), "math.copysign": ("tt_f64_copysign({0}, {1})", None),
    "math.floor": ("tt_f64_floor({0})", None), "math.ceil": ("tt_f64_ceil({0})", None),
    "math.trunc": ("tt_f64_trunc({0})", None), "math.round": ("tt_f64_round({0})", None),
    "math.roundeven": ("tt_f64_rint({0})", None),
    "math.exp": ("tt_f64_exp({0})", "tt_f64_math"), "math.exp2": ("tt_f64_exp2({0})", "tt_f64_math"),
    "math.log": ("tt_f64_log({0})", "tt_f64_math"), "math.log2": ("tt_f64_log2({0})", "tt_f64_math"),
    "math.sin": ("tt_f64_sin({0})", "tt_f64_math"), "math.cos": ("tt_f64_cos({0})", "tt_f64_math"),
    "math.tanh": ("tt_f64_tanh({0})", "tt_f64_math"), "math.erf": ("tt_f64_erf({0})", "tt_f64_math"), "math.powf": ("tt_f64_pow({0}, {1})", "tt_f64_math"),
}

# arith.cmpf predicates -> bool-valued templates (ordered predicates are the operators; u* = not the opposite)
CMPF = {
    "false": "false", "true": "true",
    "oeq": "({0} == {1})", "ogt": "({0} > {1})", "oge": "({0} >= {1})", "olt": "({0} < {1})", "ole": "({0} <= {1})",
    "one": "({0} < {1} || {0} > {1})", "ord": "!(tt_f64_isnan({0}) || tt_f64_isnan({1}))",
    "ueq": "!({0} < {1} || {0} > {1})", "ugt": "!({0} <= {1})", "uge": "!({0} < {1})", "ult": "!({0} >= {1})",
    "ule": "!({0} > {1})", "une": "({0} != {1})", "uno": "(tt_f64_isnan({0}) || tt_f64_isnan({1}))",
}

# casts: (from, to) MSL scalar types -> template over the operand {0}
CASTS_TO_F64 = {"float": "tt_f64_from_float({0})", "half": "tt_f64_from_half({0})",
                "bfloat": "tt_f64_from_bfloat({0})", "bool": "tt_f64_from_bool({0})",
                "char": "tt_f64_from_i32(int({0}))", "short": "tt_f64_from_i32(int({0}))", "int": "tt_f64_from_i32({0})",
                "long": "tt_f64_from_i64({0})", "uchar": "tt_f64_from_u32(uint({0}))",
                "ushort": "tt_f64_from_u32(uint({0}))", "uint": "tt_f64_from_u32({0})", "ulong": "tt_f64_from_u64({0})"}
CASTS_FROM_F64 = {"float": "tt_f64_to_float({0})", "half": "tt_f64_to_half({0})", "bfloat": "tt_f64_to_bfloat({0})",
                  "bool": "tt_f64_to_bool({0})", "char": "char(tt_f64_to_sint({0}, -128l, 127l))",
                  "short": "short(tt_f64_to_sint({0}, -32768l, 32767l))", "int": "tt_f64_to_i32({0})",
                  "long": "tt_f64_to_i64({0})", "uchar": "uchar(tt_f64_to_uint({0}, 255ul))",
                  "ushort": "ushort(tt_f64_to_uint({0}, 65535ul))", "uint": "tt_f64_to_u32({0})",
                  "ulong": "tt_f64_to_u64({0})"}


def constant(value: float) -> str:
    """MSL expression of the float64 constant `value` (exact, any value including NaN payloads, -0.0, inf)."""
    return "tt_f64_from_bits(0x%016Xul)" % struct.unpack("<Q", struct.pack("<d", value))[0]

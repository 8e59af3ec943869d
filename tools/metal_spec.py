"""What the Metal Shading Language Specification (version 4, 2025-06-05; section numbers are that revision's)
allows, as rules tools/metal_surface.py checks each use of Metal against: the section that defines the name,
the MSL version and GPU families it needs, and the argument types it takes.

A use gets one of three statuses:
  - "verified": the specification defines the name with these argument types (the rule's check passed);
  - "NOT IN SPEC": the specification defines the name but not for these types (or not at all where it lists
    the alternatives): the lowering must not emit it, and test/lowering/test_metal_surface.py fails;
  - "unverified": the specification says nothing we could find either way (or contradicts code that runs on
    Macs); each such use has an instance in tools/metal_probe.metal, which the macOS workflow compiles with
    Apple's compiler at -std=metal3.1 and metal3.2.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

SPEC = "MSL 4 spec"


@dataclass(frozen=True)
class Verdict:
    reference: str
    status: str


# -- types --------------------------------------------------------------------------------------------------

INTS = ("char", "uchar", "short", "ushort", "int", "uint", "long", "ulong")
FLOATS = ("half", "float")
SIZES = {"bool": 1, "char": 1, "uchar": 1, "short": 2, "ushort": 2, "int": 4, "uint": 4, "long": 8, "ulong": 8,
         "half": 2, "bfloat": 2, "float": 4}


def _split(t: str) -> Tuple[str, int]:
    """(element, components) of a scalar or vector MSL type name, or (t, 0) for anything else."""
    m = re.fullmatch(r"(bool|char|uchar|short|ushort|int|uint|long|ulong|half|bfloat|float)([234]?)", t)
    if not m:
        return t, 0
    return m.group(1), int(m.group(2) or 1)


def size_of(t: str) -> Optional[int]:
    """sizeof per specification Tables 2.2 and 2.3 (a 3-vector is the size of a 4-vector)."""
    e, n = _split(t)
    if not n:
        return None
    return SIZES[e] * (4 if n == 3 else n)


def _is(t: str, elements) -> bool:
    e, n = _split(t)
    return n > 0 and e in elements


def _args(signature: str) -> Tuple[List[str], str]:
    m = re.fullmatch(r"\((.*)\) -> (.*)", signature)
    if not m:
        return [], ""
    inner = m.group(1)
    parts, depth, cur = [], 0, ""
    for ch in inner:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur.strip())
    return parts, m.group(2)


Check = Callable[[List[str], str], Optional[str]]  # (argument types, result) -> what is wrong, or None


def _all(elements, what: str, count: Optional[int] = None) -> Check:
    def check(args: List[str], result: str) -> Optional[str]:
        use = args if count is None else args[:count]
        bad = [a for a in use if not _is(a, elements)]
        return f"takes {what}, not {', '.join(bad)}" if bad else None
    return check


def _first(elements, what: str, rest: Tuple[str, ...] = ()) -> Check:
    def check(args: List[str], result: str) -> Optional[str]:
        if not args or not _is(args[0], elements):
            return f"takes {what}, not {args[0] if args else 'nothing'}"
        if rest and tuple(args[1:]) != rest:
            return f"takes ({what}, {', '.join(rest)}), not ({', '.join(args)})"
        return None
    return check


def _exact(*allowed: Tuple[str, ...]) -> Check:
    def check(args: List[str], result: str) -> Optional[str]:
        return None if tuple(args) in allowed else f"takes {' or '.join('(' + ', '.join(a) + ')' for a in allowed)}"
    return check


def _as_type(args: List[str], result: str) -> Optional[str]:
    if len(args) != 1 or "*" in args[0] or "*" in result:
        return "reinterprets scalars and vectors of the same size, never pointers"
    a, r = size_of(args[0]), size_of(result)
    if a is None or r is None or a != r:
        return f"needs operand and result of one size ({args[0]}: {a}, {result}: {r})"
    return None


_SIMD_T = tuple(e for e in INTS + FLOATS + ("bfloat", ) if e not in ("long", "ulong"))
_SIMD_TI = tuple(e for e in INTS if e not in ("long", "ulong"))


def _atomic(types: Tuple[str, ...], spaces=("device", "threadgroup"), device_only=("atomic_float", )) -> Check:
    def check(args: List[str], result: str) -> Optional[str]:
        obj = args[0] if args else ""
        m = re.fullmatch(r"(?:const )?(?:volatile )?(device|threadgroup) (atomic_\w+)\*", obj)
        if not m or m.group(2) not in types:
            return f"takes a pointer to {' / '.join(types)}, not {obj}"
        if m.group(1) not in spaces or (m.group(2) in device_only and m.group(1) != "device"):
            return f"{m.group(2)} is not allowed in {m.group(1)} memory here"
        if any(a == "memory_order" for a in args[1:]) is False:
            return "takes a memory_order"
        return None
    return check


@dataclass(frozen=True)
class Rule:
    section: str
    since: str  # MSL version (and family, where it depends on one)
    check: Optional[Check] = None
    unverified: str = ""  # why the use stays unverified although the name is in the specification


_FLOAT1 = _all(FLOATS, "half or float (scalars or vectors)")
_MATH = "6.5 Table 6.4"
_MATH_NAMES = ("acos", "acosh", "asin", "asinh", "atan", "atan2", "atanh", "ceil", "copysign", "cos", "cosh",
               "cospi", "divide", "exp", "exp2", "exp10", "fabs", "fdim", "floor", "fma", "fmax", "fmax3", "fmedian3",
               "fmin", "fmin3", "fmod", "fract", "log", "log2", "log10", "pow", "powr", "rint", "round", "rsqrt",
               "sin", "sinh", "sinpi", "sqrt", "tan", "tanh", "tanpi", "trunc")
_INT_NAMES = ("abs", "absdiff", "addsat", "clz", "ctz", "hadd", "madhi", "madsat", "max3", "median3", "min3", "mulhi",
              "popcount", "reverse_bits", "rhadd", "rotate", "subsat")
_INT1 = _all(INTS, "integer scalars or vectors")


def _int_or_float(args: List[str], result: str) -> Optional[str]:
    if all(_is(a, INTS) for a in args) or all(_is(a, FLOATS) for a in args):
        return None
    return f"takes integers (6.3) or half / float (6.2, 6.5), not {', '.join(args)}"


FUNCTIONS: Dict[str, Rule] = {
    **{n: Rule(_MATH, "1.0", _FLOAT1) for n in _MATH_NAMES},
    **{n: Rule("6.3 Table 6.2", "1.0", _INT1) for n in _INT_NAMES},
    "nextafter": Rule(_MATH, "3.1 (macOS 14)", _FLOAT1),
    "frexp": Rule(_MATH, "1.0", _exact(("float", "int"), ("half", "int"))),
    "ldexp": Rule(_MATH, "1.0", _exact(("float", "int"), ("half", "int"))),
    "ilogb": Rule(_MATH, "1.0", _FLOAT1),
    "max": Rule("6.3 Table 6.2 / 6.5 Table 6.4", "1.0", _int_or_float),
    "min": Rule("6.3 Table 6.2 / 6.5 Table 6.4", "1.0", _int_or_float),
    "clamp": Rule("6.2 Table 6.1 / 6.3 Table 6.2", "1.0", _int_or_float),
    "extract_bits": Rule("6.3 Table 6.2", "1.2", _first(INTS, "an integer", ("uint", "uint"))),
    "insert_bits": Rule("6.3 Table 6.2", "1.2", _all(INTS, "integers", 2)),
    "mul24": Rule("6.3 Table 6.2", "2.1", _all(("int", "uint"), "int or uint")),
    "mad24": Rule("6.3 Table 6.2", "2.1", _all(("int", "uint"), "int or uint")),
    "select": Rule("6.4 Table 6.3", "1.0"),
    **{n: Rule("6.4 Table 6.3", "1.0", _all(FLOATS + ("bfloat", ), "half, bfloat or float"))
       for n in ("isfinite", "isinf", "isnan", "isnormal", "signbit", "isordered", "isunordered")},
    **{n: Rule("6.2 Table 6.1", "1.0", _FLOAT1) for n in ("mix", "saturate", "sign", "smoothstep", "step")},
    "as_type": Rule("2.21", "1.0", _as_type),
    # synchronization and SIMD-group functions
    "threadgroup_barrier": Rule("6.9.1 Table 6.12", "1.0", _exact(("mem_flags", ))),
    "simdgroup_barrier": Rule("6.9.1 Table 6.12", "2.0 (macOS)", _exact(("mem_flags", ))),
    **{n: Rule("6.9.2 Table 6.14", "2.0 (macOS)", _first(_SIMD_T, "integer or floating-point values other than "
                                                                  "bool, long, ulong", ("ushort", )))
       for n in ("simd_shuffle", "simd_shuffle_up", "simd_shuffle_down", "simd_broadcast")},
    **{n: Rule("6.9.2 Table 6.14", "2.1 (macOS)", _first(_SIMD_T, "integer or floating-point values other than "
                                                                  "bool, long, ulong", ("ushort", )))
       for n in ("simd_shuffle_rotate_up", "simd_shuffle_rotate_down")},
    "simd_shuffle_xor": Rule("6.9.2 Table 6.14", "2.0 (macOS)", _first(_SIMD_T, "values other than bool, long, ulong",
                                                                      ("ushort", )),
                             unverified="the table gives `Ti simd_shuffle_xor(Ti value, ushort mask)` (integers); "
                                        "earlier revisions gave T, and code run on Macs (MLX-based kernels) "
                                        "shuffles floats"),
    **{n: Rule("6.9.2 Table 6.15", "2.1 (macOS)", _all(_SIMD_T, "values other than bool, long, ulong"))
       for n in ("simd_sum", "simd_product", "simd_max", "simd_min", "simd_prefix_exclusive_sum",
                 "simd_prefix_inclusive_sum", "simd_prefix_exclusive_product", "simd_prefix_inclusive_product",
                 "simd_broadcast_first")},
    **{n: Rule("6.9.2 Table 6.15", "2.1 (macOS)", _all(_SIMD_TI, "integers other than long, ulong"))
       for n in ("simd_and", "simd_or", "simd_xor")},
    **{n: Rule("6.9.2 Table 6.14", "2.1 (macOS)") for n in ("simd_ballot", "simd_all", "simd_any", "simd_is_first",
                                                            "simd_active_threads_mask")},
    # atomics
    **{n: Rule("6.15.4.1-3", "1.0 (atomic_float 3.0)", _atomic(("atomic_int", "atomic_uint", "atomic_bool",
                                                                 "atomic_float")))
       for n in ("atomic_load_explicit", "atomic_store_explicit", "atomic_exchange_explicit")},
    "atomic_compare_exchange_weak_explicit": Rule("6.15.4.4", "1.0", _atomic(("atomic_int", "atomic_uint",
                                                                                "atomic_bool", "atomic_float"))),
    **{n: Rule("6.15.4.5 Table 6.25", "1.0 (atomic_float 3.0)", _atomic(("atomic_int", "atomic_uint",
                                                                          "atomic_float")))
       for n in ("atomic_fetch_add_explicit", "atomic_fetch_sub_explicit")},
    **{n: Rule("6.15.4.5 Table 6.25", "1.0", _atomic(("atomic_int", "atomic_uint")))
       for n in ("atomic_fetch_and_explicit", "atomic_fetch_or_explicit", "atomic_fetch_xor_explicit",
                 "atomic_fetch_min_explicit", "atomic_fetch_max_explicit")},
    **{n: Rule("6.15.4.6 Table 6.26", "2.4, Apple9 (feature set tables)", _atomic(("atomic_ulong", ), ("device", )))
       for n in ("atomic_max_explicit", "atomic_min_explicit")},
    "atomic_thread_fence": Rule("6.15.3", "3.2 (macOS 15)", _exact(("mem_flags", "memory_order", "thread_scope"))),
    # SIMD-group matrices
    "simdgroup_load": Rule("6.7.1 Table 6.9", "2.3 (bfloat 3.1)"),
    "simdgroup_store": Rule("6.7.1 Table 6.9", "2.3 (bfloat 3.1)"),
    "simdgroup_multiply_accumulate": Rule("6.7.2 Table 6.10", "2.3 (bfloat 3.1)"),
    "simdgroup_multiply": Rule("6.7.2 Table 6.10", "2.3 (bfloat 3.1)"),
    "make_filled_simdgroup_matrix": Rule("6.7.1 Table 6.9", "2.3 (bfloat 3.1)"),
}

# member functions, by the name after the type
MEMBERS: Dict[str, Rule] = {
    "thread_elements": Rule("2.4, 6.7", "2.3", unverified="not in the specification (which leaves the element to "
                                                          "thread mapping unspecified); MLX and metal-flash-attention "
                                                          "use it"),
}

TYPES: Dict[str, Rule] = {
    **{t: Rule("2.1 Table 2.1", "1.0") for t in ("bool", "char", "uchar", "short", "ushort", "int", "uint", "half",
                                                   "float")},
    "long": Rule("2.1 Table 2.1", "2.2"), "ulong": Rule("2.1 Table 2.1", "2.2"),
    "bfloat": Rule("2.1 Table 2.1", "3.1 (macOS 14)"),
    "atomic_int": Rule("2.6", "1.0"), "atomic_uint": Rule("2.6", "1.0"), "atomic_bool": Rule("2.6", "2.4"),
    "atomic_ulong": Rule("2.6", "2.4"), "atomic_float": Rule("2.6", "3.0"),
    "mem_flags": Rule("6.9.1 Table 6.13", "1.0"), "memory_order": Rule("6.15.1", "1.0"),
    "thread_scope": Rule("6.15.2", "3.2 (macOS 15)"), "simd_vote": Rule("6.9.2", "2.1 (macOS)"),
    "simdgroup_float8x8": Rule("2.4", "2.3"), "simdgroup_half8x8": Rule("2.4", "2.3"),
    "simdgroup_bfloat8x8": Rule("2.4", "3.1 (macOS 14)"), "simdgroup_matrix": Rule("2.4", "2.3"),
}
CONSTANTS: Dict[str, Rule] = {
    **{c: Rule("6.9.1 Table 6.13", "1.0") for c in ("mem_none", "mem_device", "mem_threadgroup", "mem_texture")},
    "memory_order_relaxed": Rule("6.15.1", "1.0"),
    "memory_order_seq_cst": Rule("6.15.1", "3.2 (macOS 15; atomic_thread_fence only)"),
    **{c: Rule("6.15.2", "3.2 (macOS 15)") for c in ("thread_scope_thread", "thread_scope_simdgroup",
                                                     "thread_scope_threadgroup", "thread_scope_device")},
}
MACROS: Dict[str, Rule] = {
    **{m: Rule("6.5 Table 6.5", "1.2") for m in ("INFINITY", "NAN", "MAXFLOAT", "HUGE_VALF", "M_PI_F", "M_E_F",
                                                 "M_LN2_F", "M_LOG2E_F")},
    "__METAL_VERSION__": Rule("1.6.2", "1.0"),
    **{m: Rule("", "", unverified="the integer limits are not in the specification we read; Metal's headers "
                                  "define them (<metal_integer>)") for m in ("INT_MAX", "INT_MIN", "UINT_MAX",
                                                                              "FLT_MAX", "FLT_MIN")},
}
QUALIFIERS: Dict[str, Rule] = {
    "kernel": Rule("5.1.3", "1.0"), "device": Rule("4.1", "1.0"), "constant": Rule("4.2", "1.0"),
    "thread": Rule("4.3", "1.0"), "threadgroup": Rule("4.4", "1.0"),
    "volatile": Rule("6.15.4 (the volatile overloads)", "1.0"),
}
_KERNEL_BUILTINS = {  # Table 5.8: attribute -> the types it takes
    "threadgroup_position_in_grid": ("ushort", "ushort2", "ushort3", "uint", "uint2", "uint3"),
    "threadgroups_per_grid": ("ushort", "ushort2", "ushort3", "uint", "uint2", "uint3"),
    "thread_position_in_grid": ("ushort", "ushort2", "ushort3", "uint", "uint2", "uint3"),
    "thread_index_in_threadgroup": ("ushort", "uint"), "thread_index_in_simdgroup": ("ushort", "uint"),
    "simdgroup_index_in_threadgroup": ("ushort", "uint"), "threads_per_simdgroup": ("ushort", "uint"),
}


def _attribute(name: str, on: str) -> Verdict:
    m = re.fullmatch(r"\[\[(\w+)(?:\(n\))?\]\]", name)
    attr = m.group(1) if m else name
    if attr == "buffer":
        ok = re.fullmatch(r"(device \w[\w ]*\*|constant \w+[&*])", on)
        return Verdict(f"{SPEC} 5.2.1, 4 (kernel arguments in device or constant)", "verified" if ok else
                       f"NOT IN SPEC: a buffer argument is a device/constant pointer or constant reference, not {on}")
    if attr in _KERNEL_BUILTINS:
        ok = on in _KERNEL_BUILTINS[attr]
        return Verdict(f"{SPEC} 5.2.3.6 Table 5.8", "verified" if ok else
                       f"NOT IN SPEC: [[{attr}]] takes {', '.join(_KERNEL_BUILTINS[attr])}, not {on}")
    return Verdict("", f"unverified: no rule for [[{attr}]]")


def _casts(name: str, signature: str) -> Verdict:
    src, _, result = signature.partition(" -> ")
    src = src.strip("()")
    if re.fullmatch(r"\w+ T\d\*|\w+ uint\d\* \(8/16-bit T\)", result):
        return Verdict(f"{SPEC} 1.5 (C++14), 2.5 (alignment)", "unverified: a pointer to elements used as a pointer "
                       "to vectors (or 32-bit words) of them for one wide access, where the lowering proved the "
                       "address aligned to the vector; C++ allows the conversion, the specification does not discuss "
                       "it; code run on Macs (MLX) does it")
    if name == "reinterpret_cast" and ("*" in src) != ("*" in result):
        return Verdict(f"{SPEC} 1.5 (C++14), 2.21", "unverified: a pointer <-> integer conversion; the specification "
                       "reinterprets scalars and vectors only (as_type) and says nothing of pointer <-> integer "
                       "casts; no Metal source we know does it")
    if re.fullmatch(r"\w+ atomic_\w+\*", result):
        return Verdict(f"{SPEC} 2.6, 6.15", "unverified: a buffer of plain values used through an atomic type; the "
                       "specification says atomic functions take atomic types, not how memory becomes one; code "
                       "run on Macs (MLX, PyTorch's Metal kernels) converts the pointer")
    return Verdict(f"{SPEC} 1.5 (C++14 pointer conversions)", "unverified: a pointer converted to a pointer to "
                   "another type in the same address space (threadgroup bytes as typed scratch, long as ulong); C++ "
                   "allows the conversion, the specification does not discuss it")


def _rule_verdict(rule: Optional[Rule], args: List[str], result: str, what: str) -> Verdict:
    if rule is None:
        return Verdict("", f"unverified: no rule recorded for {what}")
    ref = f"{SPEC} {rule.section}".strip() + (f"; MSL {rule.since}" if rule.since else "")
    problem = rule.check(args, result) if rule.check else None
    if problem:
        return Verdict(ref, f"NOT IN SPEC: {problem}")
    if rule.unverified:
        return Verdict(ref, f"unverified: {rule.unverified}")
    return Verdict(ref, "verified")


def verdict(kind: str, name: str, signature: str) -> Verdict:
    """The specification's verdict on one use (tools/metal_surface.Use)."""
    args, result = _args(signature)
    if kind == "function":
        base = re.sub(r"^(precise|fast)::", "", name)
        base = re.sub(r"<.*>$", "", base)
        if "::" in base:  # a member function: Type::name
            return _rule_verdict(MEMBERS.get(base.rsplit("::", 1)[1]), args, result, name)
        v = _rule_verdict(FUNCTIONS.get(base), args, result, name)
        if base in ("simdgroup_multiply_accumulate", "simdgroup_multiply") and v.status == "verified" and \
                len({a.rstrip("&") for a in args}) > 1:
            return Verdict(v.reference, "unverified: operands of another element type than the result (half or "
                           "bfloat into float); the table gives one T for every matrix, mixed precision is what "
                           "metal-flash-attention relies on")
        if name.startswith(("precise::", "fast::")) and base not in _MATH_NAMES + ("clamp", "saturate"):
            return Verdict(v.reference, f"NOT IN SPEC: {name.split('::')[0]}:: holds the math functions (6.5)")
        return v
    if kind == "type":
        return _rule_verdict(TYPES.get(name) or (TYPES.get(_split(name)[0]) if _split(name)[1] > 1 else None),
                             [], "", name)
    if kind == "constant":
        return _rule_verdict(CONSTANTS.get(name), [], "", name)
    if kind == "macro":
        return _rule_verdict(MACROS.get(name), [], "", name)
    if kind == "qualifier":
        return _rule_verdict(QUALIFIERS.get(name), [], "", name)
    if kind == "attribute":
        return _attribute(name, signature)
    if kind == "cast":
        return _casts(name, signature)
    if kind == "constructor":
        if _split(name)[1]:
            return _rule_verdict(Rule("2.2.2 (vector constructors)", "1.0"), [], "", name)
        if name.startswith("simdgroup_") and signature == "()":
            return _rule_verdict(Rule("2.4, 6.7.1 Table 6.9", "2.3", unverified="a default-constructed SIMD-group "
                                      "matrix (the table lists the diagonal and filled constructors); MLX declares "
                                      "them so"), [], "", name)
        return _rule_verdict(TYPES.get(name), [], "", name)
    if kind == "literal":
        return Verdict(f"{SPEC} 2.1", "unverified: MSL has no double (2.1) and suffixes float literals with f; the "
                       "emitted source has unsuffixed ones (`float(-0.0)`), which C++ types double")
    if kind == "pragma":
        return Verdict(f"{SPEC} 1.6.3", "unverified: the specification ties `#pragma METAL fp math_mode` to the Metal "
                       "compiler of Xcode 16 / macOS 15, not to a -std; the lowering guards it with "
                       "__METAL_VERSION__ >= 320")
    if kind == "declaration":
        return Verdict(f"{SPEC} 4.4 (threadgroup variables in a kernel), 2.5 (alignas)", "verified")
    return Verdict("", f"unverified: no rule for {kind}")

"""The Metal spellings the op lowerings emit, and what differs between GPU families: one `MetalTargetInfo` per
kernel (`ctx.target`, `em.target`), in the role upstream's `TargetInfoBase` plays for its GPUs.

It owns the MSL version the kernel is compiled for (what needs more than the oldest supported version, and
the guards that say so in the source), barriers and fences, the threadgroup address space, the simdgroup shuffles, reductions and prefix
scans (and which combine ops and MSL types they take), the atomic functions with their memory order and
atomic types, and the family gates (64-bit atomic min/max). Op lowerings ask it instead of writing these
spellings. Numbers (SIMD width, threadgroup memory size) stay in `target.py`; the text of library helpers
(shuffle overloads, 16- and 64-bit atomics) stays in `msl/`, reached through `KernelContext.require*`.
"""
from __future__ import annotations

from typing import Optional, Tuple

from ..target import DEFAULT_MSL_VERSION, OLDEST_MSL_VERSION, Family, MslVersion, msl_version

# Metal's simdgroup functions (shuffles, reductions, prefix scans) take these MSL types directly.
SIMD_TYPES = frozenset({"float", "half", "int", "uint", "short", "ushort"})
# The unsigned MSL type an integer simdgroup sum or product runs in, so that overflow wraps as Triton's does.
_UNSIGNED_TWIN = {"int": "uint", "short": "ushort", "uint": "uint", "ushort": "ushort"}

# Triton's shuffle kinds -> Metal's simdgroup function (called through a `tt_<fn>` overload: msl_helpers)
_SHUFFLES = {"idx": "simd_shuffle", "xor": "simd_shuffle_xor", "up": "simd_shuffle_up",
             "down": "simd_shuffle_down"}

# Combine ops with a simdgroup reduction: op -> (builtin, the MSL type it runs in: "" = the value's own,
# "u" = its unsigned twin). Float max/min are not here: their NaN rules differ from Triton's.
_SIMD_REDUCTIONS = {
    "arith.addf": ("simd_sum", ""), "arith.addi": ("simd_sum", "u"), "arith.mulf": ("simd_product", ""),
    "arith.muli": ("simd_product", "u"), "arith.maxsi": ("simd_max", ""), "arith.minsi": ("simd_min", ""),
    "arith.maxui": ("simd_max", "u"), "arith.minui": ("simd_min", "u"), "arith.andi": ("simd_and", ""),
    "arith.ori": ("simd_or", ""), "arith.xori": ("simd_xor", ""),
}
# Float max/min combines with a NaN-exact simdgroup form: op -> (builtin over the floats' order keys, whether one
# NaN lane makes the result NaN ("any", maximum/minimum) or only all of them do ("all", maxnum/minnum)).
_SIMD_FLOAT_EXTREMA = {
    "arith.maximumf": ("simd_max", "any"), "arith.maxnumf": ("simd_max", "all"),
    "arith.minimumf": ("simd_min", "any"), "arith.minnumf": ("simd_min", "all"),
}
# The unsigned MSL type of a float type's order key (msl/float_math.metal `tt_float_order_key`).
_ORDER_KEY_TYPES = {"float": "uint", "half": "ushort"}
# The value each simd_max / simd_min leaves every other value unchanged with, per MSL integer type.
_INT_LIMITS = {"int": ("(-2147483647 - 1)", "2147483647"), "short": ("-32768", "32767"),
               "uint": ("0", "0xFFFFFFFFu"), "ushort": ("0", "0xFFFF")}
# Combine ops with a simdgroup exclusive prefix scan: op -> (builtin, identity, "u" when it runs on the
# unsigned twin). Adding -0.0 leaves every float exactly as it is (+0.0 would turn -0.0 into +0.0), as
# multiplying by 1 does.
_SIMD_SCANS = {
    "arith.addf": ("simd_prefix_exclusive_sum", "-0.0", ""), "arith.addi": ("simd_prefix_exclusive_sum", "0", "u"),
    "arith.mulf": ("simd_prefix_exclusive_product", "1", ""), "arith.muli": ("simd_prefix_exclusive_product", "1", "u"),
}

# Triton's read-modify-write kinds -> Metal's atomic function (each returns the old value)
_ATOMIC_RMW = {
    "add": "atomic_fetch_add_explicit", "fadd": "atomic_fetch_add_explicit", "and": "atomic_fetch_and_explicit",
    "or": "atomic_fetch_or_explicit", "xor": "atomic_fetch_xor_explicit", "max": "atomic_fetch_max_explicit",
    "min": "atomic_fetch_min_explicit", "umax": "atomic_fetch_max_explicit", "umin": "atomic_fetch_min_explicit",
    "exch": "atomic_exchange_explicit", "xchg": "atomic_exchange_explicit"
}
# Metal's only memory order for atomic operations; acquire/release come from fences around them.
_RELAXED = "memory_order_relaxed"
# atomic_thread_fence, memory_order_seq_cst and thread_scope arrived with MSL 3.2 (specification 6.15.1-6.15.3):
# before it MSL has no fence that orders device memory between threadgroups.
DEVICE_FENCE_MSL = "3.2"
# `#pragma METAL fp math_mode` arrived with the Metal compiler of macOS 15 (specification 1.6.3).
MATH_MODE_PRAGMA_MSL = "3.2"


class MetalTargetInfo:
    """Metal spellings and the gates of one GPU family (`target.Family`)."""

    # -- the kernel's source and signature --------------------------------------------------------

    @staticmethod
    def prelude(fast_math: bool) -> str:
        """The first lines of every kernel's source. Triton's NaN/Inf semantics need Metal's safe math mode
        unless the kernel opts into fast math. The pragma is MSL 3.2's: at 3.1 the math mode is the compile
        options' (PyTorch's `compile_shader` asks for safe math unless PYTORCH_MPS_FAST_MATH is set), so a
        `fast_math=True` kernel runs in safe math there."""
        need = msl_version(MATH_MODE_PRAGMA_MSL).number
        return "\n".join(["#include <metal_stdlib>", "using namespace metal;", f"#if __METAL_VERSION__ >= {need}",
                          f"#pragma METAL fp math_mode({'fast' if fast_math else 'safe'})", "#endif", ""])

    @staticmethod
    def version_guard(kernel: str, need: MslVersion, why: str) -> str:
        """The lines that stop the kernel's source from compiling below MSL version `need` (what `why` needs),
        with a message naming the macOS it needs (the source is compiled at whatever version the Mac's Metal
        compiler is asked for, which need not be the one the kernel was lowered for)."""
        text = f"kernel '{kernel}' needs {need.needs}: {why}".replace('"', "'")
        return "\n".join([f"#if __METAL_VERSION__ < {need.number}", f'#error "{text}"', "#endif", ""])

    @staticmethod
    def buffer_parameter(msl_type: str, name: str, slot: int, reference: bool = False) -> str:
        """A kernel parameter bound to `[[buffer(slot)]]`: a pointer of `msl_type`, or with `reference` a
        `constant` reference to a value of it (scalars)."""
        return f"constant {msl_type}& {name} [[buffer({slot})]]" if reference else f"{msl_type} {name} [[buffer({slot})]]"

    @staticmethod
    def builtin_parameter(msl_type: str, name: str, attribute: str) -> str:
        """A kernel parameter Metal fills with a builtin input (`thread_index_in_simdgroup`, ...)."""
        return f"{msl_type} {name} [[{attribute}]]"

    @staticmethod
    def kernel_header(name: str, parameters: list) -> str:
        """The kernel function's header, one parameter per line."""
        return f"kernel void {name}(\n    " + ",\n    ".join(parameters) + ")"

    # the read-modify-write kinds Metal has on `atomic_float` (device memory)
    FLOAT_ATOMIC_KINDS = ("fadd", "exch", "xchg")

    def __init__(self, family: Family, msl: MslVersion = msl_version(DEFAULT_MSL_VERSION)):
        self.family = family
        self.msl = msl  # the version the kernel is compiled for

    @staticmethod
    def oldest_msl() -> MslVersion:
        """The oldest MSL version any kernel compiles at (bfloat: MSL 3.1)."""
        return msl_version(OLDEST_MSL_VERSION)

    # -- barriers and fences ------------------------------------------------------------------------

    @staticmethod
    def barrier(device: bool = False) -> str:
        """The statement every thread of the threadgroup waits at, ordering threadgroup memory (and, with
        `device`, device memory: what `tl.debug_barrier()` and polls need)."""
        if device:
            return "threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);"
        return "threadgroup_barrier(mem_flags::mem_threadgroup);"

    @staticmethod
    def device_fence() -> str:
        """The device-scope fence that turns relaxed atomics into acquire/release ones (MSL 3.2: callers say
        so with `KernelContext.require_msl(DEVICE_FENCE_MSL, ...)`)."""
        return "atomic_thread_fence(mem_flags::mem_device, memory_order_seq_cst, thread_scope_device);"

    # -- threadgroup memory -------------------------------------------------------------------------

    @staticmethod
    def threadgroup_pointer(ctype: str) -> str:
        """The type of a pointer to threadgroup-memory elements of MSL type `ctype` (a pointer element type,
        `device T*`, is spelled `device T* threadgroup*`)."""
        return f"{ctype} threadgroup*" if ctype.endswith("*") else f"threadgroup {ctype}*"

    # -- simdgroup functions ------------------------------------------------------------------------

    @staticmethod
    def shuffle_builtin(kind: str) -> str:
        """Metal's simdgroup shuffle of kind `idx`, `xor`, `up` or `down` (lowerings call it through
        `ctx.require_shuffle`, whose overloads move the types Metal's shuffles do not take)."""
        return _SHUFFLES[kind]

    @staticmethod
    def _simd_type(ctype: str, kind: str) -> Optional[str]:
        """The MSL type a simdgroup builtin runs in for values of `ctype` ("" = `ctype` itself), or None."""
        if ctype not in SIMD_TYPES:
            return None
        if kind != "u":
            return ""
        twin = _UNSIGNED_TWIN.get(ctype)
        if twin is None:
            return None
        return twin if twin != ctype else ""

    def simd_reduction(self, combine: str, ctype: str) -> Optional[Tuple[str, str]]:
        """(simdgroup reduction, cast to apply first or "") for combine op `combine` on MSL type `ctype`, or
        None when Metal has no such builtin. Integer sums and products run unsigned."""
        if combine not in _SIMD_REDUCTIONS:
            return None
        fn, kind = _SIMD_REDUCTIONS[combine]
        cast = self._simd_type(ctype, kind)
        return None if cast is None else (fn, cast)

    @staticmethod
    def simd_float_extremum(combine: str, ctype: str) -> Optional[Tuple[str, str, str]]:
        """(simdgroup reduction over order keys, the key's MSL type, NaN rule "any" or "all") for the float
        max/min combine `combine` on MSL type `ctype`, or None. The reduction runs on integer keys, so it is
        exact whatever Metal's `simd_max` does with NaN and signed zeros on floats (undocumented)."""
        if combine not in _SIMD_FLOAT_EXTREMA or ctype not in _ORDER_KEY_TYPES:
            return None
        fn, nan_rule = _SIMD_FLOAT_EXTREMA[combine]
        return fn, _ORDER_KEY_TYPES[ctype], nan_rule

    @staticmethod
    def simd_reduction_identity(fn: str, ctype: str) -> str:
        """The value of MSL type `ctype` that reduction `fn` leaves every other value unchanged with (-0.0:
        x + -0.0 == x for every float x, including -0.0)."""
        if fn == "simd_sum":
            return f"{ctype}(-0.0)" if ctype in ("float", "half") else f"{ctype}(0)"
        if fn == "simd_product":
            return f"{ctype}(1)"
        if fn in ("simd_max", "simd_min"):
            return f"{ctype}({_INT_LIMITS[ctype][0 if fn == 'simd_max' else 1]})"
        return f"{ctype}(~{ctype}(0))" if fn == "simd_and" else f"{ctype}(0)"

    def simd_prefix(self, combine: str, ctype: str) -> Optional[Tuple[str, str, str]]:
        """(simdgroup exclusive prefix builtin, identity, cast or "") for combine op `combine` on MSL type
        `ctype`, or None when Metal has no such builtin."""
        if combine not in _SIMD_SCANS:
            return None
        fn, identity, kind = _SIMD_SCANS[combine]
        cast = self._simd_type(ctype, kind)
        return None if cast is None else (fn, f"{ctype}({identity})", cast)

    # -- atomics ------------------------------------------------------------------------------------

    @staticmethod
    def has_atomic_rmw(kind: str) -> bool:
        return kind in _ATOMIC_RMW

    @staticmethod
    def atomic_type(ctype: str) -> str:
        """The atomic MSL type over `ctype` (`int`, `uint`, `float`)."""
        return f"atomic_{ctype}"

    @staticmethod
    def device_atomic(atype: str, ptr: str) -> str:
        """`ptr` (device memory) as a pointer to the atomic MSL type `atype`."""
        return f"(device {atype}*){ptr}"

    @staticmethod
    def atomic_rmw(kind: str, obj: str, value: str) -> str:
        """Read-modify-write `kind` of `value` into the atomic at `obj`; the expression is the old value."""
        return f"{_ATOMIC_RMW[kind]}({obj}, {value}, {_RELAXED})"

    @staticmethod
    def atomic_load(obj: str) -> str:
        """The value of the atomic at `obj`."""
        return f"atomic_load_explicit({obj}, {_RELAXED})"

    @staticmethod
    def atomic_store(obj: str, value: str) -> str:
        return f"atomic_store_explicit({obj}, {value}, {_RELAXED})"

    @staticmethod
    def atomic_compare_exchange(obj: str, expected: str, desired: str) -> str:
        """Weak compare-and-swap at `obj`; `expected` points to the expected value, which receives the old."""
        return f"atomic_compare_exchange_weak_explicit({obj}, {expected}, {desired}, {_RELAXED}, {_RELAXED})"

    @property
    def has_atomic64_min_max(self) -> bool:
        """Whether the family has 64-bit unsigned atomic min/max on device memory (Apple9, MSL 2.4)."""
        return self.family.atomic_ulong_min_max

    @staticmethod
    def atomic64_min_max(kind: str, ptr: str, value: str) -> str:
        """The native 64-bit `umax`/`umin` of ulong `value` into device memory at `ptr` (returns nothing:
        `has_atomic64_min_max` families only)."""
        fn = "atomic_max_explicit" if kind == "umax" else "atomic_min_explicit"
        return f"{fn}((device atomic_ulong*){ptr}, {value}, {_RELAXED})"

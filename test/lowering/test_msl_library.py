"""The MSL helper library (`lowering/msl/*.metal`, loaded by `lowering/msl_library.py`): its markers are well
formed, every file compiles on its own with the emulator's compiler and Metal compat header, and the constants
written in it as literals are the values derived here with exact integer arithmetic."""
from __future__ import annotations

import math
import re
import struct
import subprocess
from fractions import Fraction
from pathlib import Path
from string import Template
from typing import Dict, List

import pytest

from triton.backends.apple.abi.lock_table import LOCK_WORDS
from triton.backends.apple.lowering import msl_library
from triton.backends.apple.lowering.target_info import MetalTargetInfo
from triton.backends.apple.lowering.msl_helpers import (_LOCKED64_UPDATE, locked_atomic64_helper,
                                                        locked_atomic64_requires, shuffle_helper, shuffle_requires,
                                                        vector_register_helpers)
from triton.backends.apple.target import SIMD_WIDTH

FILES = msl_library.library_files()


def _placeholders(text: str) -> set:
    """The `$NAME` / `${NAME}` placeholders of a text (string.Template's syntax)."""
    return {m.group("named") or m.group("braced") for m in Template.pattern.finditer(text)
            if m.group("named") or m.group("braced")}


# ---------------------------------------------------------------------------------------------------------
# markers
# ---------------------------------------------------------------------------------------------------------
def test_files_exist():
    names = {p.name for p in FILES}
    assert {"integer.metal", "soft_f64_core.metal", "soft_f64_math.metal", "shuffle.metal"} <= names
    assert (msl_library.LIBRARY_DIR / "README.md").is_file()


def test_names_unique_and_requirements_exist():
    seen: Dict[str, str] = {}
    for path in FILES:
        helpers = msl_library.parse_file(path)
        assert helpers, f"{path.name} defines no helper"
        for h in helpers:
            assert h.name not in seen, f"{h.name} in {seen.get(h.name)} and {path.name}"
            seen[h.name] = path.name
    lib = msl_library.library()
    assert set(lib) == set(seen)
    for h in lib.values():
        for dep in h.requires:
            assert dep in lib, f"{h.name} requires unknown helper {dep}"
            assert dep != h.name
        order = msl_library.closure([h.name])  # no cycle: requirements come first, each once
        assert order[-1] == h.name and len(order) == len(set(order))
        for dep in h.requires:
            assert order.index(dep) < order.index(h.name)


def test_markers_stay_out_of_the_text():
    """Directives and `///` documentation are not emitted; a text ends with code, not with blank lines."""
    for h in msl_library.library().values():
        assert "// @" not in h.text and not h.text.startswith("///"), h.name
        assert h.text == h.text.strip("\n") and h.text.strip(), h.name


def test_placeholders():
    """Target facts are filled at load, from their homes; a parameterised text uses exactly its @params, and
    instantiating it with all of them leaves no placeholder."""
    assert msl_library.target_facts() == {"SIMD_WIDTH": str(SIMD_WIDTH), "LOCK_MASK": str(LOCK_WORDS - 1)}
    assert LOCK_WORDS & (LOCK_WORDS - 1) == 0  # the mask form of the lock index needs a power of two
    for h in msl_library.library().values():
        assert _placeholders(h.text) == set(h.params), h.name
        if h.params:
            filled = h.instantiate(**{p: f"X{p}" for p in h.params})
            assert "$" not in filled, h.name
            with pytest.raises(ValueError):
                h.instantiate()
    lock = msl_library.helper("tt_lock64").text
    assert f"& {LOCK_WORDS - 1}u]" in lock
    assert f"turn < {SIMD_WIDTH}u" in locked_atomic64_helper("add")[2]


# ---------------------------------------------------------------------------------------------------------
# every file compiles alone
# ---------------------------------------------------------------------------------------------------------
_SHUFFLE_FNS = ("simd_shuffle", "simd_shuffle_xor", "simd_shuffle_down", "simd_shuffle_up")
_SHUFFLE_TYPES = ("float", "half", "int", "uint", "short", "ushort", "char", "uchar", "bool", "bfloat", "long",
                  "ulong", "tt_double", "device float*", "device const half*")
_VECTOR_TYPES = ("float", "half", "bfloat", "int", "uint", "short", "ushort", "char", "uchar", "long", "ulong")
_PACKED = {"half": 2, "bfloat": 2, "short": 2, "ushort": 2, "char": 1, "uchar": 1}


def _vector_cases():
    """(type, width, access) as load_store_ops chooses them: T<W> up to 4 elements, 32-bit words beyond."""
    cases = [(ct, w, f"{ct}{w}") for ct in _VECTOR_TYPES for w in (2, 3, 4)]
    cases += [(ct, w, f"uint{w * n // 4}") for ct, n in _PACKED.items() for w in (8, 16) if w * n <= 16]
    return cases


# The instances of the parameterised helpers as the lowering builds them (msl_helpers), by file: (the helpers an
# instance requires, its text).
INSTANCES = {
    "shuffle.metal": lambda: [(shuffle_requires(ct), shuffle_helper(fn, ct)[2]) for fn in _SHUFFLE_FNS
                              for ct in _SHUFFLE_TYPES],
    "vector_registers.metal": lambda: [((), text) for case in _vector_cases()
                                       for _, _, text in vector_register_helpers(*case)],
    "atomics64_locked.metal": lambda: [(locked_atomic64_requires(k), locked_atomic64_helper(k)[2])
                                       for k in _LOCKED64_UPDATE],  # (cas has no parameters)
}


def _translation_unit(path: Path) -> str:
    """One file's helpers (instances for parameterised ones) after what they require from other files."""
    own = msl_library.parse_file(path)
    names = {h.name for h in own}
    instances = []
    if any(h.params for h in own):
        assert path.name in INSTANCES, f"{path.name} has parameterised helpers: add their instances to INSTANCES"
        instances = INSTANCES[path.name]()
    wanted = [d for h in own for d in h.requires] + [d for reqs, _ in instances for d in reqs]
    deps = [d for d in msl_library.closure(wanted) if d not in names]
    texts = [msl_library.helper(d).text for d in deps]
    texts += [h.text for h in own if not h.params] + [text for _, text in instances]
    return MetalTargetInfo.prelude(fast_math=False) + "\n\n".join(texts) + "\n"


def _compile_command(source: Path) -> List[str]:
    from triton.backends.apple.emulator import build, clang
    cxx = clang.find_compiler()  # the suite needs the emulator's clang: its absence is a failure, not a skip
    inc = build.native_dirs()[0]
    # the kernel build's language flags; nothing that links or generates code
    skip = {"-shared", "-fPIC", "-gline-tables-only", "-w", "-undefined", "dynamic_lookup"}
    flags = [f for f in clang.KERNEL_FLAGS if f not in skip and not f.startswith("-fvisibility")]
    return [cxx, *flags, "-fsyntax-only", "-Werror=return-type", "-I", str(inc), "-x", "c++", str(source)]


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_file_compiles_alone(path: Path, tmp_path: Path):
    source = tmp_path / (path.stem + ".cpp")
    source.write_text(_translation_unit(path))
    res = subprocess.run(_compile_command(source), capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, f"{path.name} does not compile alone:\n{res.stderr[-6000:]}"


# ---------------------------------------------------------------------------------------------------------
# the constants of soft_f64_math.metal, derived again
# ---------------------------------------------------------------------------------------------------------
_PREC = 1400  # bits after the binary point of the fixed-point constants below
_ONE = 1 << _PREC


def _atan_inv(n: int) -> int:
    """atan(1/n) * 2^_PREC (truncated series; error far below 2^-1300)."""
    term = _ONE // n
    total = term
    k = 1
    sign = -1
    while term:
        term //= n * n
        k += 2
        total += sign * (term // k)
        sign = -sign
    return total


_PI_FIX = 4 * (4 * _atan_inv(5) - _atan_inv(239))  # Machin
_LN2_FIX = sum(_ONE // (k << k) for k in range(1, _PREC + 16))  # ln 2 = sum 1 / (k 2^k)
_PI = Fraction(_PI_FIX, _ONE)
_LN2 = Fraction(_LN2_FIX, _ONE)


def _bits(x: float) -> str:
    return "0x%016Xul" % struct.unpack("<Q", struct.pack("<d", x))[0]


def _split(value: Fraction, parts: int, head_bits: int = 53) -> list:
    """value as a sum of `parts` doubles; every part but the last keeps only `head_bits` significant bits."""
    out = []
    for i in range(parts):
        if i == parts - 1 or head_bits >= 53:
            d = float(value)
        else:
            e = abs(value.numerator).bit_length() - value.denominator.bit_length()
            scale = Fraction(2)**(head_bits - 1 - e)
            while abs(value) * scale >= 2**head_bits:
                scale /= 2
            while abs(value) * scale < 2**(head_bits - 1):
                scale *= 2
            d = float(Fraction(int(value * scale)) / scale)
        out.append(d)
        value -= Fraction(d)
    return out


def _derived_constants() -> Dict[str, str]:
    """Each constant of the math text by name, as the MSL it is written as."""
    two_over_sqrtpi = Fraction(2 << _PREC, math.isqrt(_PI_FIX << _PREC))
    doubles = {"TWOOPI": float(2 / _PI)}
    for name, value in [("MSIXTH", Fraction(-1, 6)), ("TSP", two_over_sqrtpi), ("LN2", _LN2),
                        ("INVLN2", 1 / _LN2), ("PIO2", _PI / 2), ("THIRD", Fraction(1, 3))]:
        doubles[f"{name}_HI"], doubles[f"{name}_LO"] = _split(value, 2)
    for i, v in enumerate(_split(_LN2, 3, head_bits=42)):  # k * part0 is exact for |k| < 2^11
        doubles[f"LN2_C{i}"] = v
    for i, v in enumerate(_split(_PI / 2, 4, head_bits=33)):  # k * part0..2 exact for |k| < 2^20
        doubles[f"PIO2_C{i}"] = v
    out = {name: f"tt_f64_from_bits({_bits(v)})" for name, v in doubles.items()}

    def coefs(values) -> str:
        return ", ".join(_bits(float(v)) for v in values)

    fact = math.factorial
    # exp(r) - 1 - r - r^2/2 = r^3 * (1/3! + r/4! + ... + r^10/13!) on |r| <= ln2/2 (truncation < 2^-63 relative)
    out["EXP_COEFS"] = coefs(Fraction(1, fact(n)) for n in range(13, 2, -1))
    # log(1+f) = 2s + 2 s^3 (1/3 + z Q(z)), z = s^2, Q(z) = 1/5 + z/7 + ... + z^11/27 (Horner from the top)
    out["LOG_COEFS"] = coefs(Fraction(1, 2 * n + 1) for n in range(13, 1, -1))
    # sin(r) = r - r^3/6 + r^5 S(z), S = 1/5! - z/7! + ... (to z^7/19!); cos(r) = 1 - z/2 + z^2 C(z) (to z^8/20!)
    out["SIN_COEFS"] = coefs(Fraction((-1)**n, fact(2 * n + 1)) for n in range(9, 1, -1))
    out["COS_COEFS"] = coefs(Fraction((-1)**n, fact(2 * n)) for n in range(10, 1, -1))
    # 2/pi: bits b_1 b_2 ... (2/pi = sum b_i 2^-i), 64 per word, after a zero word (reads before b_1 give 0)
    words = [0] + [((2 * _ONE * _ONE // _PI_FIX) >> (_PREC - 64 * (k + 1))) & (2**64 - 1) for k in range(20)]
    out["TWOOPI_TABLE"] = ", ".join("0x%016Xul" % w for w in words)
    return out


# Where each constant is used in soft_f64_math.metal: the lines, with @NAME@ for the derived value.
_USES = [
    "const ulong c[11] = {@EXP_COEFS@};",
    "const tt_double kd = tt_f64_rint(x * @INVLN2_HI@);",
    "tt_f64dd r = tt_f64x_dd(tt_f64_fma(nk, @LN2_C0@, x), tt_f64x_k(0ul));",
    "r = tt_f64x_dd_add(r, tt_f64x_two_prod(nk, @LN2_C1@));",
    "return tt_f64x_dd_add_d(r, nk * @LN2_C2@);",
    "const tt_f64dd r = tt_f64x_dd_mul_d(tt_f64x_dd(@LN2_HI@, @LN2_LO@), f);",
    "const ulong c[12] = {@LOG_COEFS@};",
    "const tt_f64dd a = tt_f64x_dd_add_d(tt_f64x_dd(@THIRD_HI@, @THIRD_LO@), z.hi * q);",
    "tt_f64dd kl = tt_f64x_dd(kd * @LN2_C0@, tt_f64x_k(0ul));",
    "kl = tt_f64x_dd_add(kl, tt_f64x_two_prod(kd, @LN2_C1@));",
    "kl = tt_f64x_dd_add_d(kl, kd * @LN2_C2@);",
    "return tt_f64x_dd_add_d(tt_f64x_dd_mul(l, tt_f64x_dd(@INVLN2_HI@, @INVLN2_LO@)), tt_f64_from_i32(k));",
    "const tt_f64dd r = tt_f64x_dd_mul(f, tt_f64x_dd(@LN2_HI@, @LN2_LO@));",
    "const tt_double kd = tt_f64_rint(x * @TWOOPI@);",
    "r = tt_f64x_dd(tt_f64_fma(nk, @PIO2_C0@, x), tt_f64x_k(0ul));",
    "r = tt_f64x_dd_add(r, tt_f64x_two_prod(nk, @PIO2_C1@));",
    "r = tt_f64x_dd_add(r, tt_f64x_two_prod(nk, @PIO2_C2@));",
    "r = tt_f64x_dd_add(r, tt_f64x_two_prod(nk, @PIO2_C3@));",
    "const ulong tbl[21] = {@TWOOPI_TABLE@};",
    "r = tt_f64x_dd_mul(tt_f64x_dd(fh, fl), tt_f64x_dd(@PIO2_HI@, @PIO2_LO@));",
    "const ulong c[8] = {@SIN_COEFS@};",
    "const tt_f64dd t3 = tt_f64x_dd_mul(r3, tt_f64x_dd(@MSIXTH_HI@, @MSIXTH_LO@));",
    "const ulong c[9] = {@COS_COEFS@};",
    "const tt_f64dd v = tt_f64x_dd_mul(tt_f64x_dd_mul(e, sum), tt_f64x_dd(@TSP_HI@, @TSP_LO@));",
]


def test_derivation_is_exact():
    """The fixed-point pi and ln 2 the constants come from agree with independent values to 1300+ bits."""
    mpmath = pytest.importorskip("mpmath")
    with mpmath.workprec(_PREC + 64):
        for fixed, ref in [(_PI_FIX, mpmath.pi), (_LN2_FIX, mpmath.ln(2))]:
            assert abs(mpmath.mpf(fixed) / mpmath.mpf(2)**_PREC - ref) < mpmath.mpf(2)**-1380
    # the Cody-Waite parts: short heads (k * part exact for |k| < 2^20) summing to pi/2 far below an ulp
    parts = _split(_PI / 2, 4, head_bits=33)
    for p in parts[:3]:
        m, _ = math.frexp(p)
        assert (Fraction(m) * 2**33).denominator == 1
    assert abs(sum(Fraction(p) for p in parts) - _PI / 2) < Fraction(1, 2**150)


def test_soft_f64_constants_match_their_derivation():
    text = msl_library.helper("tt_f64_math").text
    constants = _derived_constants()
    literals = {}
    for line in _USES:
        filled = re.sub(r"@(\w+)@", lambda m: constants[m.group(1)], line)
        assert text.count(filled) == 1, f"soft_f64_math.metal: expected once: {filled}"
        for name in re.findall(r"@(\w+)@", line):
            literals[name] = literals.get(name, 0) + 1
    assert set(literals) == set(constants), "a derived constant is not checked where it is used"
    # no other copy of a derived value hides elsewhere in the file (a stale or hand-edited one)
    for name, uses in literals.items():
        assert text.count(constants[name]) == uses, f"{name} appears outside the checked places"

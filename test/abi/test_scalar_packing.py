"""The one scalar packer (abi/scalars.py) and every path that binds a scalar: the emulator launcher's C fast
path, the packed-scalars buffer, the emulator's own API and the Metal launch. References are independent of
the packer: exact rational rounding (fractions), numpy's and torch's conversions where they are exact."""
import math
import struct
from fractions import Fraction

import numpy as np
import pytest
import torch

from triton.backends.apple.abi import scalars
from triton.backends.apple.abi.scalars import ScalarValueError, pack

NAN_PAYLOAD = struct.unpack("<d", struct.pack("<Q", 0xFFF4_0000_0000_0001))[0]  # a signalling NaN with a payload
BF16_MAX = 3.3895313892515355e38
FLOATS = [0.0, -0.0, 1.0, -1.5, 1 / 3, 2.0**-126, 2.0**-133, 2.0**-134, 3 * 2.0**-135, 2.0**-149, 2.0**-150,
          65504.0, 65519.99, 65520.0, 1e-8, 5.96e-8, 1.0 + 2.0**-8, 1.0 + 3 * 2.0**-9, 1.0 + 2.0**-8 + 2.0**-30,
          BF16_MAX, 3.3961775e38, 3.39617752923e38, 3.4028234663852886e38, 3.4028235677973366e38, 1e300,
          float("inf"), float("-inf"), float("nan"), -float("nan"), NAN_PAYLOAD, 123456789.0, -7.25e-20, 1e39]
INTS = [0, 1, -1, 127, 128, 255, 256, -128, -129, 2**15, 2**16 - 1, 2**16, -2**15 - 1, 2**31 - 1, 2**31, 2**32 - 1,
        2**32, -2**31, -2**31 - 1, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -2**63, -2**63 - 1, True, False]


def _nearest(x: float, bits_mant: int, min_exp: int, max_finite: float) -> float:
    """The value of precision `bits_mant`+1 and smallest normal exponent `min_exp` nearest to x, ties to
    even, by exact rational arithmetic; inf when it is beyond max_finite."""
    q = Fraction(x)
    if q == 0:
        return x
    e = math.floor(math.log2(abs(x)))
    while Fraction(2)**e > abs(q):
        e -= 1
    while Fraction(2)**(e + 1) <= abs(q):
        e += 1
    step = Fraction(2)**(max(e, min_exp) - bits_mant)
    n = abs(q) / step
    r = math.floor(n)
    if n - r > Fraction(1, 2) or (n - r == Fraction(1, 2) and r % 2):
        r += 1
    value = float(r * step)
    if value > max_finite:
        return math.inf
    return math.copysign(value, x)


@pytest.mark.parametrize("msl,mant,min_exp,largest", [("half", 10, -14, 65504.0), ("bfloat", 7, -126, BF16_MAX),
                                                      ("float", 23, -126, 3.4028234663852886e38)])
@pytest.mark.parametrize("x", [x for x in FLOATS if not math.isnan(x) and not math.isinf(x)])
def test_floats_round_once_to_nearest_even_and_refuse_overflow(msl, mant, min_exp, largest, x):
    want = _nearest(x, mant, min_exp, largest)
    if math.isinf(want):
        with pytest.raises(ScalarValueError, match=f"does not fit in {msl} .*it would become infinity"):
            pack(msl, x)
        return
    got = scalars.unpack(msl, pack(msl, x))
    assert got == want and math.copysign(1, got) == math.copysign(1, want), (x, got, want)


def test_random_doubles_round_like_the_exact_reference():
    rng = np.random.default_rng(7)
    xs = np.ldexp(rng.uniform(-1, 1, 3000), rng.integers(-140, 128, 3000))
    for x in map(float, xs):
        for msl, mant, min_exp, largest in (("half", 10, -14, 65504.0), ("bfloat", 7, -126, BF16_MAX)):
            want = _nearest(x, mant, min_exp, largest)
            if math.isinf(want):
                continue
            assert scalars.unpack(msl, pack(msl, x)) == want, (msl, x)


def test_nan_keeps_sign_and_leading_payload_quietly():
    # the payload 0x4_0000_0000_0001: its leading bits are 0100..., the quiet bit is set on narrowing
    assert pack("float", NAN_PAYLOAD) == struct.pack("<I", 0xFFE0_0000)
    assert pack("bfloat", NAN_PAYLOAD) == struct.pack("<H", 0xFFE0)
    assert pack("half", NAN_PAYLOAD) == struct.pack("<H", 0xFF00)
    assert pack("bfloat", float("nan")) == struct.pack("<H", 0x7FC0)
    assert pack("bfloat", -float("nan")) == struct.pack("<H", 0xFFC0)
    assert pack("half", -float("nan")) == struct.pack("<H", 0xFE00)
    assert pack("tt_double", NAN_PAYLOAD) == struct.pack("<d", NAN_PAYLOAD)  # float64 keeps every bit


def test_infinities_pass_and_float64_is_its_bits():
    for msl in ("half", "bfloat", "float", "tt_double"):
        assert math.isinf(scalars.unpack(msl, pack(msl, float("-inf")))) and scalars.unpack(
            msl, pack(msl, float("-inf"))) < 0
    assert pack("tt_double", 0.1) == struct.pack("<d", 0.1)
    assert pack("tt_double", 2**53 + 1) == struct.pack("<d", float(2**53 + 1))
    with pytest.raises(ScalarValueError, match="an integer of 401 digits is too large for a float"):
        pack("tt_double", 10**400)


@pytest.mark.parametrize("msl", ["char", "uchar", "short", "ushort", "int", "uint", "long", "ulong"])
def test_integers_take_either_range_of_their_width_as_bits(msl):
    bits = scalars.MSL_SCALARS[msl].bits
    for v in INTS:
        if -2**(bits - 1) <= v <= 2**bits - 1:
            assert pack(msl, v) == (int(v) % 2**bits).to_bytes(bits // 8, "little")
        else:
            with pytest.raises(ScalarValueError, match=f"does not fit in {msl}"):
                pack(msl, v)
    assert pack(msl, np.int16(-3)) == ((-3) % 2**bits).to_bytes(bits // 8, "little")  # __index__ objects
    with pytest.raises(ScalarValueError, match="expects an integer, got float"):
        pack(msl, 1.0)


def test_bool_takes_0_and_1_only():
    assert pack("bool", True) == b"\x01" and pack("bool", 0) == b"\x00"
    for bad in (2, -1, 1.0):
        with pytest.raises(ScalarValueError):
            pack("bool", bad)


def test_the_table_agrees_with_torch():
    """Sizes and dtypes of the table are torch's (the Metal launch binds scalars as tensors of these bytes)."""
    for row in scalars.MSL_SCALARS.values():
        assert getattr(torch, row.torch).itemsize == row.nbytes, row
    for row in scalars.ELEMENT_TYPES.values():
        assert getattr(torch, row.torch).itemsize == row.nbytes, row
        assert scalars.MSL_SCALARS[row.msl].nbytes == row.nbytes, row


def test_packed_floats_equal_torch_where_torch_rounds_once():
    """torch converts a Python float to float16 / float32 with one rounding: the same bytes."""
    for x in FLOATS:
        if math.isnan(x) or abs(x) > 65504.0:
            continue
        assert pack("half", x) == torch.tensor(x, dtype=torch.float64).to(torch.float16).view(torch.int16).numpy().tobytes()
        assert pack("float", x) == torch.tensor(x, dtype=torch.float64).to(torch.float32).view(torch.int32).numpy().tobytes()


# ------------------------------------------------------------------------------------------------
# The launcher's C fast path, value for value


@pytest.fixture(scope="module")
def launcher():
    from triton.backends.apple.emulator import launcher as emulator_launcher
    return emulator_launcher.launcher()


class _Index:
    def __index__(self):
        return 5


def test_the_c_launcher_packs_what_the_python_packer_packs(launcher):
    """For every type the fast path knows and every edge value: the C bytes are the Python bytes, or the C side
    hands the value to the Python hook (None); whatever Python refuses, C never packs."""
    names = launcher.SCALAR_TYPES
    assert set(names) == set(scalars.MSL_SCALARS), "the launcher's scalar types are the table's"
    values = FLOATS + INTS + [_Index(), np.float32(1.5), "1", None, 10**400]
    for msl, code in names.items():
        for v in values:
            c = launcher.pack_scalar(v, code)
            try:
                py = pack(msl, v)
            except ScalarValueError:
                assert c is None, (msl, v, c)
                continue
            assert c is None or c == py, (msl, v, c, py)
            if isinstance(v, (int, float)) and not (isinstance(v, int) and scalars.MSL_SCALARS[msl].kind == "float"
                                                    and abs(v) > 2**1023):
                assert c is not None, f"the fast path should pack {v!r} as {msl}"

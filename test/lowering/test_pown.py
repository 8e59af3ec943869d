"""libdevice.pow(x, int32) and libdevice.pow_int (`apple.pown`, msl/float_math.metal `tt_pown`; Metal has no pown):
CUDA powif's special cases bit for bit, and every finite result against x^n computed to 200 bits and rounded to
float32 (mpmath; the reference rounds to nearest even itself): correctly rounded for |n| <= 4096 in float's normal
range, within one step otherwise."""
import mpmath
import numpy as np
import pytest
import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

_BLOCK = 256


@triton.jit
def _pow_kernel(x_ptr, n_ptr, y_ptr, N, VIA_POW_INT: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < N
    x = tl.load(x_ptr + i, mask=m)
    n = tl.load(n_ptr + i, mask=m)
    y = libdevice.pow_int(x, n) if VIA_POW_INT else libdevice.pow(x, n)
    tl.store(y_ptr + i, y, mask=m)


def _run(x: np.ndarray, n: np.ndarray, device, via_pow_int=False, dtype=torch.float32) -> np.ndarray:
    xt = torch.from_numpy(x).to(dtype).to(device)
    nt = torch.from_numpy(n.astype(np.int32)).to(device)
    y = torch.empty_like(xt)
    _pow_kernel[(triton.cdiv(len(x), _BLOCK), )](xt, nt, y, len(x), VIA_POW_INT=via_pow_int, BLOCK=_BLOCK)
    return y.cpu().float().numpy() if dtype != torch.float32 else y.cpu().numpy()


def _round(v, mant_bits: int, min_exp: int, max_value):
    """The float nearest to mpmath value `v` (ties to even) of a format with `mant_bits` stored bits, smallest
    normal exponent `min_exp` and largest finite value `max_value`; +-inf beyond."""
    if v == 0:
        return 0.0
    a = abs(v)
    ulp_max = mpmath.mpf(2) ** (mpmath.floor(mpmath.log(max_value, 2)) - mant_bits)
    if a >= max_value + ulp_max / 2:
        return float("inf") if v > 0 else float("-inf")
    _, e = mpmath.frexp(a)
    ulp = mpmath.mpf(2) ** (max(int(e) - 1, min_exp) - mant_bits)
    q = a / ulp
    fl = mpmath.floor(q)
    frac = q - fl
    r = fl + 1 if frac > 0.5 or (frac == 0.5 and int(fl) % 2 == 1) else fl
    out = float(r * ulp)
    return out if v > 0 else -out


def _reference_f32(x: float, n: int) -> float:
    with mpmath.workprec(200):
        return _round(mpmath.mpf(float(x)) ** n, 23, -126, mpmath.mpf(2) ** 128 - mpmath.mpf(2) ** 104)


def _ulps_apart(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance in float32 steps (the int32 ordering of the bit patterns; same sign assumed, as tested)."""
    ia, ib = a.view(np.int32).astype(np.int64), b.view(np.int32).astype(np.int64)
    return np.abs(ia - ib)


def test_special_cases_are_cudas_powif(device):
    inf, nan = np.float32(np.inf), np.float32(np.nan)
    cases = [  # (x, n, expected)
        (nan, 0, 1.0), (inf, 0, 1.0), (-inf, 0, 1.0), (0.0, 0, 1.0), (-0.0, 0, 1.0), (5.0, 0, 1.0),
        (0.0, -3, inf), (-0.0, -3, -inf), (0.0, -2, inf), (-0.0, -2, inf), (-0.0, 3, -0.0), (-0.0, 2, 0.0),
        (0.0, 5, 0.0), (inf, -1, 0.0), (inf, 2, inf), (-inf, -3, -0.0), (-inf, -2, 0.0), (-inf, 3, -inf),
        (-inf, 4, inf), (nan, 3, nan), (nan, -2, nan), (1.0, -2147483648, 1.0), (1.0, 2147483647, 1.0),
        (-1.0, 2147483647, -1.0), (-1.0, -2147483648, 1.0), (2.0, 127, 2.0**127), (2.0, 128, inf),
        (2.0, -149, 2.0**-149), (2.0, -150, 0.0), (-2.0, -149, -(2.0**-149)), (0.5, 2147483647, 0.0),
        (0.5, -2147483648, inf), (-3.0, 3, -27.0), (10.0, 38, float(np.float32(1e38))), (10.0, 39, inf),
    ]
    x = np.array([c[0] for c in cases], dtype=np.float32)
    n = np.array([c[1] for c in cases])
    want = np.array([c[2] for c in cases], dtype=np.float32)
    got = _run(x, n, device)
    for xi, ni, g, w in zip(x, n, got, want):
        assert (np.isnan(g) and np.isnan(w)) or g.view(np.uint32) == w.view(np.uint32), (xi, ni, g, w)


def _cases(rng):
    near_one = (1 + rng.integers(-64, 64, 400) * 2.0**-23).astype(np.float32)
    wide = (rng.uniform(0.25, 4, 800) * rng.choice([-1, 1], 800)).astype(np.float32)
    spread = np.ldexp(rng.uniform(0.5, 1, 400), rng.integers(-140, 120, 400)).astype(np.float32)
    x = np.concatenate([near_one, near_one, wide, wide, spread])
    n = np.concatenate([rng.integers(-(1 << 24), 1 << 24, 400), rng.integers(-300, 300, 400),
                        rng.integers(-40, 40, 800), rng.integers(-150, 150, 800), rng.integers(-3, 3, 400)])
    return x, n


def test_results_are_x_to_the_n_rounded_once(device):
    x, n = _cases(np.random.default_rng(0))
    got = _run(x, n, device)
    want = np.array([_reference_f32(a, int(b)) for a, b in zip(x, n)], dtype=np.float32)
    finite = np.isfinite(want)
    assert np.array_equal(np.isinf(got), np.isinf(want)) and np.array_equal(np.signbit(got), np.signbit(want))
    apart = _ulps_apart(got[finite], want[finite])
    normal = np.abs(want[finite]) >= np.float32(2.0**-126)
    small_n = np.abs(n[finite]) <= 4096
    # the double-float power's relative error stays below |n| * 2^-47: rounded once, to the correctly rounded
    # result, in float's normal range for small |n|; within a step for every n and for subnormal results
    assert apart[normal & small_n].max() == 0
    assert apart.max() <= 1
    assert (normal & small_n).sum() > 1500 and (normal & ~small_n).sum() > 300 and (~normal).sum() > 10
    assert (apart[normal & ~small_n] == 0).mean() > 0.99


def test_pow_int_and_pow_with_an_int_exponent_are_the_same_function(device):
    x, n = _cases(np.random.default_rng(1))
    assert np.array_equal(_run(x, n, device, via_pow_int=True), _run(x, n, device), equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_16_bit_floats_are_within_one_step_of_the_rounded_power(device, dtype):
    rng = np.random.default_rng(2)
    x = torch.from_numpy(rng.uniform(-3, 3, 600).astype(np.float32)).to(dtype).float().numpy()
    n = rng.integers(-12, 12, 600)
    got = torch.from_numpy(_run(x, n, device, dtype=dtype)).to(dtype)
    exact = torch.tensor([_reference_f32(a, int(b)) for a, b in zip(x, n)], dtype=torch.float32)
    want = exact.to(dtype)  # float32 of the power, rounded to the 16-bit type: within a step of the exact power
    bits = torch.int16
    apart = (got.view(bits).int() - want.view(bits).int()).abs()
    both_inf = torch.isinf(got) & torch.isinf(want)
    assert int(apart[~both_inf].max()) <= 1
    assert torch.equal(torch.isinf(got), torch.isinf(want))


def test_the_kernel_calls_our_pown(apple_compile):
    k = apple_compile(_pow_kernel, {"x_ptr": "*fp32", "n_ptr": "*i32", "y_ptr": "*fp32", "N": "i32",
                                    "VIA_POW_INT": "constexpr", "BLOCK": "constexpr"},
                      {"VIA_POW_INT": False, "BLOCK": _BLOCK})
    src = k.asm["msl"]
    assert "static inline float tt_pown(float x, int n)" in src and "tt_pown(" in src.split("kernel void")[1]
    assert "precise::pown" not in src

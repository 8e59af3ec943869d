"""float64 kernels: Metal has no double, so the backend computes float64 in software (IEEE binary64 on
64-bit integers, lowering/soft_f64.py). Arithmetic is correctly rounded, so it must match the host's doubles
bit for bit; math functions are within 1 ulp. References: torch float64 on the CPU."""
import warnings

import pytest
import torch
import triton
import triton.language as tl

pytestmark = pytest.mark.filterwarnings("ignore:apple backend.*computes float64 in software")


_INT_OF = {torch.float64: torch.int64, torch.float32: torch.int32, torch.float16: torch.int16}


def _bits_equal(a, b):
    a, b = a.cpu().contiguous(), b.cpu().contiguous()
    same = a.view(_INT_OF[a.dtype]) == b.view(_INT_OF[b.dtype])
    return bool((same | (torch.isnan(a) & torch.isnan(b))).all())


@triton.jit
def arith_kernel(x_ptr, y_ptr, z_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0.0)
    y = tl.load(y_ptr + offs, mask=m, other=1.0)
    z = tl.load(z_ptr + offs, mask=m, other=0.0)
    tl.store(out_ptr + 0 * n + offs, x + y, mask=m)
    tl.store(out_ptr + 1 * n + offs, x - y, mask=m)
    tl.store(out_ptr + 2 * n + offs, x * y, mask=m)
    tl.store(out_ptr + 3 * n + offs, x / y, mask=m)
    tl.store(out_ptr + 4 * n + offs, tl.sqrt(tl.abs(x)), mask=m)
    tl.store(out_ptr + 5 * n + offs, tl.fma(x, y, z), mask=m)
    tl.store(out_ptr + 6 * n + offs, tl.where(x < y, x, y), mask=m)
    tl.store(out_ptr + 7 * n + offs, tl.maximum(x, y), mask=m)


def test_arithmetic_is_bit_exact(device):
    torch.manual_seed(0)
    n = 300
    x = torch.randn(n, dtype=torch.float64) * torch.logspace(-300, 300, n, dtype=torch.float64)
    y = torch.randn(n, dtype=torch.float64) * 1e3
    z = torch.randn(n, dtype=torch.float64)
    x[:6] = torch.tensor([0.0, -0.0, float("inf"), float("nan"), 5e-324, -1.7976931348623157e308])
    out = torch.empty(8 * n, dtype=torch.float64, device=device)
    arith_kernel[(3, )](x.to(device), y.to(device), z.to(device), out, n, BLOCK=128)
    # numpy's sqrt is the IEEE one (torch's float64 sqrt on x86 CPUs is 1 ulp off for some inputs)
    sqrt = torch.from_numpy(__import__("numpy").sqrt(x.abs().numpy()))
    # tl.maximum ignores NaN by default (propagate_nan=NONE): torch.fmax
    refs = [x + y, x - y, x * y, x / y, sqrt, None, torch.where(x < y, x, y), torch.fmax(x, y)]
    for k, ref in enumerate(refs):
        if ref is not None:
            assert _bits_equal(out[k * n:(k + 1) * n], ref), k
    # fma is one rounding: compare with the exact product-sum rounded once (torch computes x * y + z twice)
    exact = [float((__import__("fractions").Fraction(a) * __import__("fractions").Fraction(b) +
                    __import__("fractions").Fraction(c))) if all(map(lambda v: abs(v) < float("inf") and v == v,
                                                                      (a, b, c))) else None
             for a, b, c in zip(x.tolist(), y.tolist(), z.tolist())]
    got = out[5 * n:6 * n].cpu().tolist()
    assert all(e is None or e == g or (e != e and g != g) for e, g in zip(exact, got))


@triton.jit
def cast_kernel(x_ptr, f_ptr, h_ptr, i_ptr, back_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(f_ptr + offs, x.to(tl.float32))
    tl.store(h_ptr + offs, x.to(tl.float16))
    tl.store(i_ptr + offs, x.to(tl.int32))
    tl.store(back_ptr + offs, x.to(tl.float32).to(tl.float64) + tl.load(i_ptr + offs).to(tl.float64))


def test_conversions_round_once_and_saturate(device):
    x = torch.cat([torch.randn(60, dtype=torch.float64) * 1e5,
                   torch.tensor([float("nan"), 3e9, -3e9, 70000.5], dtype=torch.float64)])
    f = torch.empty(64, device=device)
    h = torch.empty(64, dtype=torch.float16, device=device)
    i = torch.empty(64, dtype=torch.int32, device=device)
    back = torch.empty(64, dtype=torch.float64, device=device)
    cast_kernel[(1, )](x.to(device), f, h, i, back, BLOCK=64)
    assert _bits_equal(f, x.float()) and _bits_equal(h, x.half())
    # float -> int: truncation, saturation, NaN -> 0 (Triton's rule, as for float32)
    ref_i = torch.where(torch.isnan(x), 0, x.clamp(-2**31, 2**31 - 1)).trunc().to(torch.int32)
    assert torch.equal(i.cpu(), ref_i)
    assert _bits_equal(back, x.float().double() + ref_i.double())


@triton.jit
def reduce_kernel(x_ptr, out_ptr, cum_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(out_ptr, tl.sum(x, 0))
    tl.store(out_ptr + 1, tl.max(x, 0))
    tl.store(cum_ptr + offs, tl.cumsum(x, 0))


@pytest.mark.parametrize("num_warps", [1, 4])
def test_reductions_and_scans_across_simdgroups(num_warps, device):
    x = torch.randn(256, dtype=torch.float64)
    out = torch.empty(2, dtype=torch.float64, device=device)
    cum = torch.empty(256, dtype=torch.float64, device=device)
    reduce_kernel[(1, )](x.to(device), out, cum, BLOCK=256, num_warps=num_warps)
    assert out[1].item() == x.max().item()
    torch.testing.assert_close(out[0].cpu(), x.sum(), rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(cum.cpu(), torch.cumsum(x, 0), rtol=1e-13, atol=1e-12)


@triton.jit
def math_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, tl.exp(x))
    tl.store(out_ptr + BLOCK + offs, tl.log(tl.abs(x) + 1e-3))
    tl.store(out_ptr + 2 * BLOCK + offs, tl.sin(x))
    tl.store(out_ptr + 3 * BLOCK + offs, tl.cos(x))


def test_math_functions_within_one_ulp(device):
    x = torch.linspace(-20, 20, 128, dtype=torch.float64)
    out = torch.empty(4 * 128, dtype=torch.float64, device=device)
    math_kernel[(1, )](x.to(device), out, BLOCK=128)
    for k, ref in enumerate([torch.exp(x), torch.log(x.abs() + 1e-3), torch.sin(x), torch.cos(x)]):
        got = out[k * 128:(k + 1) * 128].cpu()
        ulp = torch.nextafter(ref.abs(), torch.tensor(float("inf"), dtype=torch.float64)) - ref.abs()
        assert ((got - ref).abs() <= ulp).all(), k


@triton.jit
def dot_kernel(a_ptr, b_ptr, c_ptr, N: tl.constexpr):
    r = tl.arange(0, N)
    a = tl.load(a_ptr + r[:, None] * N + r[None, :])
    b = tl.load(b_ptr + r[:, None] * N + r[None, :])
    tl.store(c_ptr + r[:, None] * N + r[None, :], tl.dot(a, b))


def test_float64_dot(device):
    a = torch.randn(16, 16, dtype=torch.float64)
    b = torch.randn(16, 16, dtype=torch.float64)
    c = torch.empty(16, 16, dtype=torch.float64, device=device)
    dot_kernel[(1, )](a.to(device), b.to(device), c, N=16)
    torch.testing.assert_close(c.cpu(), a @ b, rtol=1e-14, atol=1e-13)


def test_demotion_stays_an_opt_in(device):

    @triton.jit
    def k(x_ptr, out_ptr):
        tl.store(out_ptr, (tl.load(x_ptr).to(tl.float64) / 3).to(tl.float32))

    x = torch.tensor([1.0], device=device)
    soft, fast = torch.empty(1, device=device), torch.empty(1, device=device)
    k[(1, )](x, soft)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # demotion is silent: it is what the user asked for
        k[(1, )](x, fast, allow_fp64_demotion=True)
    assert soft.item() == torch.tensor(1.0 / 3, dtype=torch.float64).float().item()
    assert fast.item() == (torch.tensor(1.0) / 3).item()

"""Math functions Metal lacks that the backend computes itself (msl_helpers): log1p and expm1 (log(1 + x) and
exp(x) - 1 lose every digit near zero; these use the rounding error of 1 + x and of exp(x)), hypot (without
overflow or underflow) and cbrt. Each within 4 ulp of double precision over its whole range, with exact special
values (erf has test_erf.py)."""
import math

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from test_erf import _ulp_distance


@triton.jit
def log1p_expm1_kernel(x_ptr, l_ptr, e_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    x = tl.load(x_ptr + i, mask=m)
    tl.store(l_ptr + i, libdevice.log1p(x), mask=m)
    tl.store(e_ptr + i, libdevice.expm1(x), mask=m)


def _inputs() -> torch.Tensor:
    g = torch.Generator().manual_seed(12)
    tiny = torch.logspace(-38, -1, 4000, dtype=torch.float64).float()
    return torch.cat([tiny, -tiny, torch.linspace(-0.999999, 10, 20001), torch.linspace(-88, 88, 20001),
                      torch.rand(5000, generator=g) * 1e30, -torch.rand(2000, generator=g) * 0.1,
                      torch.tensor([0.0, -0.0, 1e-45, -1e-45, 1.0, -0.5, 3.4e38, 88.72, 88.73, -103.0])])


def test_within_4_ulp(device):
    x = _inputs()
    x = x.to(device)
    logs, exps = torch.empty_like(x), torch.empty_like(x)
    log1p_expm1_kernel[(triton.cdiv(x.numel(), 1024), )](x, logs, exps, x.numel(), BLOCK=1024)
    xd = x.cpu().double().tolist()
    ref_log = torch.tensor([math.log1p(v) if v > -1 else -math.inf if v == -1 else math.nan for v in xd],
                           dtype=torch.float64).float()
    ref_exp = torch.tensor([math.expm1(v) if v < 88.8 else math.inf for v in xd], dtype=torch.float64).float()
    defined = ~torch.isnan(ref_log)
    assert torch.isnan(logs.cpu()[~defined]).all()
    assert _ulp_distance(logs.cpu()[defined], ref_log[defined]).max().item() <= 4
    assert _ulp_distance(exps.cpu(), ref_exp).max().item() <= 4


def test_special_values(device):
    x = torch.tensor([0.0, -0.0, -1.0, -2.0, float("inf"), -float("inf"), float("nan"), 100.0], device=device)
    logs, exps = torch.empty_like(x), torch.empty_like(x)
    log1p_expm1_kernel[(1, )](x, logs, exps, x.numel(), BLOCK=16)
    logs, exps = logs.cpu(), exps.cpu()
    assert logs[0].item() == 0.0 and not logs[0].signbit() and logs[1].item() == 0.0 and logs[1].signbit()
    assert logs[2].item() == -math.inf and math.isnan(logs[3]) and logs[4].item() == math.inf
    assert math.isnan(logs[5]) and math.isnan(logs[6])
    assert exps[0].item() == 0.0 and exps[1].signbit() and exps[4].item() == math.inf
    assert exps[5].item() == -1.0 and math.isnan(exps[6]) and exps[7].item() == math.inf


@triton.jit
def f16_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    m = i < n
    x = tl.load(x_ptr + i, mask=m)
    tl.store(out_ptr + i, libdevice.log1p(x) + libdevice.expm1(x), mask=m)


def test_half_precision_rounds_the_float_result(device):
    x = torch.linspace(-0.5, 2, 200).half()
    out = torch.empty_like(x)
    f16_kernel[(1, )](x.to(device), out, 200, BLOCK=256)
    ref = (torch.log1p(x.double()).float() + torch.expm1(x.double()).float()).half()
    torch.testing.assert_close(out.cpu(), ref, rtol=2e-3, atol=2e-3)


@triton.jit
def hypot_cbrt_kernel(x_ptr, y_ptr, h_ptr, c_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    x = tl.load(x_ptr + i, mask=m)
    y = tl.load(y_ptr + i, mask=m)
    tl.store(h_ptr + i, libdevice.hypot(x, y), mask=m)
    tl.store(c_ptr + i, libdevice.cbrt(x), mask=m)


def test_hypot_and_cbrt_within_4_ulp(device):
    g = torch.Generator().manual_seed(3)
    wide = torch.logspace(-40, 38, 5000, dtype=torch.float64).float()
    sign = torch.where(torch.rand(5000, generator=g) < 0.5, -1.0, 1.0)
    x = torch.cat([torch.randn(20000, generator=g) * 10, wide * sign, torch.tensor([1e-45, 3.4e38, -3.4e38, -27.0])])
    y = torch.cat([torch.randn(20000, generator=g) * 10, wide.flip(0), torch.tensor([1e-45, 3.4e38, 3.4e38, 1e-30])])
    h, c = torch.empty_like(x).to(device), torch.empty_like(x).to(device)
    hypot_cbrt_kernel[(triton.cdiv(x.numel(), 1024), )](x.to(device), y.to(device), h, c, x.numel(), BLOCK=1024)
    xs, ys = x.double().tolist(), y.double().tolist()
    ref_h = torch.tensor([math.hypot(a, b) for a, b in zip(xs, ys)], dtype=torch.float64).float()
    ref_c = torch.tensor([math.copysign(abs(a)**(1 / 3), a) for a in xs], dtype=torch.float64).float()
    assert _ulp_distance(h.cpu(), ref_h).max().item() <= 4
    assert _ulp_distance(c.cpu(), ref_c).max().item() <= 4


def test_hypot_and_cbrt_special_values(device):
    inf, nan = float("inf"), float("nan")
    x = torch.tensor([0.0, -0.0, inf, nan, -inf, 3.0, nan, 0.0], device=device)
    y = torch.tensor([0.0, 0.0, nan, inf, 1.0, nan, 1.0, -4.0], device=device)
    h, c = torch.empty_like(x), torch.empty_like(x)
    hypot_cbrt_kernel[(1, )](x, y, h, c, x.numel(), BLOCK=16)
    h, c = h.cpu(), c.cpu()
    assert h.tolist()[:5] == [0.0, 0.0, inf, inf, inf] and math.isnan(h[5]) and math.isnan(h[6])
    assert h[7].item() == 4.0
    assert c[0].item() == 0.0 and not c[0].signbit() and c[1].signbit() and c[2].item() == inf
    assert math.isnan(c[3]) and c[4].item() == -inf

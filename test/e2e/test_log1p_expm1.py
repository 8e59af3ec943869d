"""libdevice.log1p / libdevice.expm1 (and math.log1p / math.expm1): Metal has neither, and log(1 + x) or
exp(x) - 1 lose every digit near zero, so the backend computes them from the rounding error of 1 + x and of
exp(x) (msl_helpers tt_log1p, tt_expm1). Within 4 ulp of double precision over their whole range, exact
special values."""
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

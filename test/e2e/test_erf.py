"""tl.math.erf / libdevice.erf: Metal has no erf, so the backend ships its own; it must stay within 4 ulp
of double-precision erf everywhere, keep erf(-x) = -erf(x), and handle 0, +-inf and NaN."""
import math

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def erf_kernel(x_ptr, out_ptr, out2_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    x = tl.load(x_ptr + i, mask=m)
    tl.store(out_ptr + i, tl.math.erf(x), mask=m)
    tl.store(out2_ptr + i, libdevice.erf(x), mask=m)


def _ulp_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    ia = a.view(torch.int32).to(torch.int64)
    ib = b.view(torch.int32).to(torch.int64)
    ia = torch.where(ia < 0, -(ia & 0x7FFFFFFF), ia)  # map to a monotonic integer line
    ib = torch.where(ib < 0, -(ib & 0x7FFFFFFF), ib)
    return (ia - ib).abs()


def test_erf_within_4_ulp(device):
    x = torch.cat([torch.linspace(-6, 6, 60001), torch.linspace(-1e-3, 1e-3, 2001),
                   torch.tensor([0.0, -0.0, float("inf"), -float("inf"), 1e-30, -1e-30, 2.0, -2.0, 4.0])])
    x = x.to(device)
    out = torch.empty_like(x)
    out2 = torch.empty_like(x)
    erf_kernel[(triton.cdiv(x.numel(), 1024), )](x, out, out2, x.numel(), BLOCK=1024)
    ref = torch.tensor([math.erf(v) for v in x.cpu().double().tolist()], dtype=torch.float64).float()
    assert _ulp_distance(out.cpu(), ref).max().item() <= 4
    assert torch.equal(out, out2)
    assert torch.equal(torch.signbit(out[x == 0]), torch.signbit(x[x == 0]))  # erf(-0) = -0
    nan = erf_kernel[(1, )]
    xn = torch.tensor([float("nan")], device=device)
    o = torch.empty_like(xn)
    nan(xn, o, torch.empty_like(xn), 1, BLOCK=16)
    assert torch.isnan(o).all()

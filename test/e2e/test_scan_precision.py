"""bfloat16 scans accumulate in float32, as Triton does on NVIDIA GPUs (measured on an H200: a bf16 cumsum
stored to a float32 pointer equals the float64 reference to float32 precision, while bf16 elementwise
chains still round after every op). References: float64 torch scans of the bf16 inputs."""
import pytest
import torch
import triton
import triton.language as tl


@triton.jit
def scan_kernel(x_ptr, y_ptr, M: tl.constexpr, N: tl.constexpr, AXIS: tl.constexpr, PROD: tl.constexpr,
                REVERSE: tl.constexpr):
    offs = tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :]
    x = tl.load(x_ptr + offs)
    if PROD:
        y = tl.cumprod(x, AXIS, reverse=REVERSE)
    else:
        y = tl.cumsum(x, AXIS, reverse=REVERSE)
    tl.store(y_ptr + offs, y)


def _reference(x, axis, prod, reverse):
    x = x.double()
    if reverse:
        x = x.flip(axis)
    y = torch.cumprod(x, axis) if prod else torch.cumsum(x, axis)
    return y.flip(axis) if reverse else y


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("prod,reverse", [(False, False), (False, True), (True, False)])
@pytest.mark.parametrize("num_warps", [1, 4])
def test_bf16_scan_to_float32_keeps_float32_precision(axis, prod, reverse, num_warps, device):
    torch.manual_seed(axis * 7 + prod * 3 + reverse)
    x = (torch.randn(16, 64) if not prod else 1 + torch.rand(16, 64) * 0.05).to(torch.bfloat16)
    y = torch.empty(16, 64, dtype=torch.float32, device=device)
    scan_kernel[(1, )](x.to(device), y, M=16, N=64, AXIS=axis, PROD=prod, REVERSE=reverse, num_warps=num_warps)
    ref = _reference(x, axis, prod, reverse)
    # float32 accumulation: relative to the running magnitude, a few float32 ulps
    scale = _reference(x.abs(), axis, prod, reverse)
    assert ((y.cpu().double() - ref).abs() <= 64 * 2**-24 * scale + 1e-30).all()


def test_bf16_scan_to_bf16_rounds_once(device):
    x = torch.randn(1, 64).to(torch.bfloat16)
    y = torch.empty(1, 64, dtype=torch.bfloat16, device=device)
    scan_kernel[(1, )](x.to(device), y, M=1, N=64, AXIS=1, PROD=False, REVERSE=False)
    ref = torch.cumsum(x.double(), 1)
    # a float32 running sum rounded to bfloat16 once: within half a bfloat16 ulp of the exact sum (plus the
    # float32 error), which per-step bfloat16 rounding does not achieve on this input
    err = (y.cpu().double() - ref).abs()
    half_ulp = ref.abs() * 2**-8 + 1e-30
    assert (err <= half_ulp * 1.01 + 64 * 2**-24 * torch.cumsum(x.double().abs(), 1)).all()

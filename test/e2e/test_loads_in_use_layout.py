"""passes/loads_in_use_layout.py: a load whose only use converts it to a layout with longer contiguous runs
per thread is done in that layout (the per-column bias of a tile: one 16-byte access per thread, no
conversion through threadgroup memory). Checked exactly against torch, with masked tails and with offsets the
pass cannot recompute."""
import pytest
import torch
import triton
import triton.language as tl

from support.device import compile_for_apple


@triton.jit
def bias_add_kernel(x_ptr, b_ptr, y_ptr, M, N, stride_m, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    offs = rm[:, None] * stride_m + rn[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    b = tl.load(b_ptr + rn, mask=rn < N, other=0.0)
    tl.store(y_ptr + offs, x + b[None, :], mask=mask)


@triton.jit
def gathered_bias_kernel(x_ptr, b_ptr, idx_ptr, y_ptr, M, N, stride_m, BLOCK_M: tl.constexpr,
                         BLOCK_N: tl.constexpr):
    # the bias offsets are loaded: nothing for the pass to recompute, the conversion stays
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.arange(0, BLOCK_N)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    offs = rm[:, None] * stride_m + rn[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    idx = tl.load(idx_ptr + rn, mask=rn < N, other=0)
    b = tl.load(b_ptr + idx, mask=rn < N, other=0.0)
    tl.store(y_ptr + offs, x + b[None, :], mask=mask)


@pytest.mark.parametrize("M,N", [(16, 128), (37, 1000), (5, 3), (64, 256)])
@pytest.mark.parametrize("num_warps", [1, 4])
def test_bias_add(M, N, num_warps, device):
    x = torch.randn(M, N).to(device)
    b = torch.randn(N).to(device)
    y = torch.empty(M, N, device=device)
    grid = (triton.cdiv(M, 16), triton.cdiv(N, 128))
    bias_add_kernel[grid](x, b, y, M, N, x.stride(0), BLOCK_M=16, BLOCK_N=128, num_warps=num_warps)
    assert torch.equal(y.cpu(), x.cpu() + b.cpu()[None, :])


@pytest.mark.parametrize("M,N", [(16, 128), (9, 100)])
def test_gathered_bias(M, N, device):
    x = torch.randn(M, N).to(device)
    b = torch.randn(N).to(device)
    idx = torch.randperm(N).to(torch.int32).to(device)
    y = torch.empty(M, N, device=device)
    gathered_bias_kernel[(triton.cdiv(M, 16), )](x, b, idx, y, M, N, x.stride(0), BLOCK_M=16, BLOCK_N=128)
    assert torch.equal(y.cpu(), x.cpu() + b.cpu()[idx.cpu().long()][None, :])


def test_bias_is_loaded_in_the_tiles_slice_layout():
    sig = {"x_ptr": "*fp32", "b_ptr": "*fp32", "y_ptr": "*fp32", "M": "i32", "N": "i32", "stride_m": "i32",
           "BLOCK_M": "constexpr", "BLOCK_N": "constexpr"}
    k = compile_for_apple(bias_add_kernel, sig, {"BLOCK_M": 16, "BLOCK_N": 128})
    assert "ttg.convert_layout" in k.asm["ttgir"]  # upstream's TTGIR converts the bias; the MSL does not
    msl = k.asm["msl"]
    assert "threadgroup_barrier" not in msl and "ttg.convert_layout" not in msl
    assert k.metadata.shared == 0

"""Vector global accesses (load_store_ops): runs of registers move as one 8- or 16-byte access when axis info
proves them contiguous and aligned. A mask that is not provably one value over a run (the masked tail of a
length that is not a multiple of 16) checks the run's mask bits: all set, one vector access; else element by
element, so no byte past the end is read or written (the emulator faults on any out-of-bounds access).
Results are checked exactly against torch."""
import pytest
import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask, other=1)
    tl.store(out_ptr + offs, x + y, mask=mask)


@triton.jit
def other_tensor_kernel(x_ptr, z_ptr, out_ptr, n, BLOCK: tl.constexpr):
    # the fallback of the masked load is a tensor (different in every register)
    offs = tl.arange(0, BLOCK)
    z = tl.load(z_ptr + offs)
    x = tl.load(x_ptr + offs, mask=offs < n, other=z)
    tl.store(out_ptr + offs, x)


@triton.jit
def rows_kernel(x_ptr, out_ptr, M, N, stride, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.arange(0, BLOCK_N)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    offs = rm[:, None] * stride + rn[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=0)
    tl.store(out_ptr + offs, x * 2, mask=mask)


def _msl(kernel) -> str:
    src = kernel.asm["msl"]
    return src.decode() if isinstance(src, bytes) else src


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int16, torch.int8])
@pytest.mark.parametrize("n", [1, 3, 17, 1000, 1001, 1023, 1024, 2047])
def test_masked_tail(dtype, n, device):
    g = torch.Generator().manual_seed(n)
    scale = 30 if dtype == torch.int8 else 100
    x = torch.randn(n, generator=g).mul(scale).to(dtype).to(device)
    y = torch.randn(n, generator=g).mul(scale).to(dtype).to(device)
    out = torch.full((n, ), -7, dtype=dtype, device=device)
    k = add_kernel[(triton.cdiv(n, 1024), )](x, y, out, n, BLOCK=1024)
    assert torch.equal(out.cpu(), (x + y).cpu())
    # 16 bytes per access: 4 x 32-bit, or 8 x 16-bit elements as four 32-bit words; 1024 int8 over 128
    # threads are 8 per thread, so 8 bytes (two words)
    vt = {torch.float32: "float4", torch.int32: "int4", torch.int8: "uint2"}.get(dtype, "uint4")
    src = _msl(k)
    assert f"*(device const {vt}*)" in src and f"*(device {vt}*)" in src
    if n % 16:  # the JIT does not specialise n: the tail checks every mask bit of a run
        assert " && " in src


@pytest.mark.parametrize("n", [0, 5, 64, 127])
def test_masked_tail_with_a_tensor_fallback(n, device):
    x = torch.arange(128, dtype=torch.float32, device=device)
    z = -torch.arange(128, dtype=torch.float32, device=device)
    out = torch.empty(128, device=device)
    other_tensor_kernel[(1, )](x, z, out, n, BLOCK=128)
    ref = torch.where(torch.arange(128) < n, x.cpu(), z.cpu())
    assert torch.equal(out.cpu(), ref)


@pytest.mark.parametrize("M,N", [(5, 7), (16, 64), (33, 100), (8, 129)])
def test_rows_with_masked_tails(M, N, device):
    x = torch.randn(M, N).to(device)
    out = torch.zeros(M, N, device=device)
    rows_kernel[(triton.cdiv(M, 8), )](x, out, M, N, x.stride(0), BLOCK_M=8, BLOCK_N=triton.next_power_of_2(N))
    assert torch.equal(out.cpu(), x.cpu() * 2)


def test_tail_reads_nothing_past_the_end(device):
    # exactly n elements: a vector access crossing the end would be an out-of-bounds fault in the emulator
    for n in (1, 2, 3, 5, 6, 7):
        x = torch.arange(n, dtype=torch.float32, device=device)
        out = torch.empty(n, device=device)
        add_kernel[(1, )](x, x, out, n, BLOCK=128)
        assert torch.equal(out.cpu(), 2 * x.cpu())

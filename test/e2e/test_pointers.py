"""Pointers as values: tensors of pointers built from loaded indices (scattered atomics, indirect stores),
pointers read from int64 tables (tt.int_to_ptr, as grouped GEMM does), and multiple_of/max_contiguous
hints on 2-D offsets. References: torch."""
import pytest
import torch
import triton
import triton.language as tl

@triton.jit
def scatter_count(v_ptr, h_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(v_ptr + offs, mask=offs < n, other=0)
    tl.atomic_add(h_ptr + v, 1, mask=offs < n)

@triton.jit
def indirect_store(idx_ptr, src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    i = tl.load(idx_ptr + offs, mask=offs < n, other=0)
    tl.store(dst_ptr + i, tl.load(src_ptr + offs, mask=offs < n), mask=offs < n)

@triton.jit
def grouped_copy(ptrs_ptr, sizes_ptr, out_ptr, BLOCK: tl.constexpr):
    g = tl.program_id(0)
    src = tl.load(ptrs_ptr + g).to(tl.pointer_type(tl.float16))
    n = tl.load(sizes_ptr + g)
    offs = tl.arange(0, BLOCK)
    x = tl.load(src + offs, mask=offs < n, other=0)
    tl.store(out_ptr + g * BLOCK + offs, x.to(tl.float32))

@triton.jit
def hinted_2d(x_ptr, out_ptr, M, N, stride, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rm = tl.max_contiguous(tl.multiple_of(rm, BM), BM)
    offs = rm[:, None] * stride + rn[None, :]
    offs = tl.multiple_of(offs, [1, 16])
    x = tl.load(x_ptr + offs, mask=(rm[:, None] < M) & (rn[None, :] < N))
    tl.store(out_ptr + offs, x * 2, mask=(rm[:, None] < M) & (rn[None, :] < N))



def test_scattered_atomics_count_like_bincount(device):
    v = torch.randint(0, 16, (1000, ), dtype=torch.int32, device=device)
    h = torch.zeros(16, dtype=torch.int32, device=device)
    scatter_count[(8, )](v, h, 1000, BLOCK=128)
    assert torch.equal(h.cpu(), torch.bincount(v.cpu(), minlength=16).int())


def test_indirect_store_is_a_permutation(device):
    idx = torch.randperm(300).int().to(device)
    src = torch.randn(300, device=device)
    dst = torch.zeros(300, device=device)
    indirect_store[(3, )](idx, src, dst, 300, BLOCK=128)
    ref = torch.zeros(300)
    ref[idx.cpu().long()] = src.cpu()
    assert torch.equal(dst.cpu(), ref)


@pytest.mark.emulator_only  # on Metal a table needs GPU addresses; an MPS tensor's data_ptr() is not one
def test_pointer_tables_through_int_to_ptr():
    a = torch.randn(40, dtype=torch.float16)
    b = torch.randn(64, dtype=torch.float16)
    ptrs = torch.tensor([a.data_ptr(), b.data_ptr()], dtype=torch.int64)
    sizes = torch.tensor([40, 64], dtype=torch.int32)
    out = torch.zeros(128)
    grouped_copy[(2, )](ptrs, sizes, out, BLOCK=64)
    ref = torch.zeros(128)
    ref[:40] = a.float()
    ref[64:] = b.float()
    assert torch.equal(out, ref)


def test_hints_on_2d_offsets(device):
    x = torch.randn(64, 64, device=device)
    out = torch.zeros(64, 64, device=device)
    hinted_2d[(4, )](x, out, 64, 64, 64, BM=16, BN=64)
    assert torch.equal(out.cpu(), x.cpu() * 2)

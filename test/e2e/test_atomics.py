"""Atomics beyond the 32-bit read-modify-writes of test_ops.py: tl.atomic_poll (with .item(), tt.unsplat, in the
same kernel) and 16-bit float atomics (add and compare-and-swap built on the 32-bit word). 64-bit atomics are in
test_wide_atomics.py. References: torch."""
import pytest
import torch
import triton
import triton.language as tl

from triton.backends.apple.errors import UnsupportedFeatureError


@triton.jit
def item_and_poll(x_ptr, flag_ptr, out_ptr, BLOCK: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, BLOCK))
    total = tl.sum(x, 0, keep_dims=True).item()
    seen = tl.atomic_poll(flag_ptr, 1)
    tl.store(out_ptr, total + seen.to(tl.float32))


def test_item_and_atomic_poll(device):
    x = torch.arange(64, dtype=torch.float32, device=device)
    flag = torch.ones(1, dtype=torch.int32, device=device)
    out = torch.zeros(1, device=device)
    item_and_poll[(1, )](x, flag, out, BLOCK=64)
    assert out.item() == 64 * 63 / 2 + 1


def test_atomic_poll_with_timeout_is_refused():

    @triton.jit
    def k(flag_ptr, out_ptr):
        tl.store(out_ptr, tl.atomic_poll(flag_ptr, 1, timeout_ns=1000).to(tl.int32))

    with pytest.raises(UnsupportedFeatureError, match="no global timer"):
        k[(1, )](torch.ones(1, dtype=torch.int32), torch.zeros(1, dtype=torch.int32))


@triton.jit
def scatter_add16(h_ptr, v_ptr, idx_ptr, old_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    i = tl.load(idx_ptr + offs, mask=m, other=0)
    old = tl.atomic_add(h_ptr + i, tl.load(v_ptr + offs, mask=m, other=0), mask=m)
    tl.store(old_ptr + offs, old, mask=m)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_16bit_float_atomic_add_under_contention(dtype, device):
    n = 2000
    idx = torch.randint(0, 7, (n, ), dtype=torch.int32)
    v = (torch.randint(-4, 5, (n, )).float() / 4).to(dtype)  # quarter steps: every partial sum is exact
    h = torch.zeros(8, dtype=dtype, device=device)
    old = torch.zeros(n, dtype=dtype, device=device)
    scatter_add16[(16, )](h, v.to(device), idx.to(device), old, n, BLOCK=128)
    assert torch.equal(h.cpu().float(), torch.zeros(8).index_add_(0, idx.long(), v.float()))
    # neighbouring 16-bit slots share 32-bit words: none was disturbed, and every old value is a partial sum
    for slot in range(7):
        olds = set(old.cpu()[idx == slot].float().tolist())
        assert all(o == int(o * 4) / 4 for o in olds)


@triton.jit
def cas16(p_ptr, out_ptr, cmp, val):
    i = tl.program_id(0)
    ty = p_ptr.dtype.element_ty
    tl.store(out_ptr + i, tl.atomic_cas(p_ptr + i, cmp.to(ty), val.to(ty)))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_16bit_compare_and_swap(dtype, device):
    p = torch.tensor([1.5, 2.0, 1.5, -0.0, 1.5], dtype=dtype, device=device)
    out = torch.zeros_like(p)
    cas16[(5, )](p, out, 1.5, 3.25)
    assert p.cpu().tolist() == [3.25, 2.0, 3.25, -0.0, 3.25]
    assert out.cpu().tolist() == [1.5, 2.0, 1.5, -0.0, 1.5]

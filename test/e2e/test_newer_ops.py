"""Ops of Triton 3.9 beyond the classic set: tl.map_elementwise (with control flow and pack), .item()
(tt.unsplat), tl.atomic_poll, and 16-bit float atomics (add and compare-and-swap built on the 32-bit
word). References: torch."""
import pytest
import torch
import triton
import triton.language as tl

from triton.backends.apple.errors import UnsupportedFeatureError


@triton.jit
def _selu_scalar(x, alpha):
    if x > 0:
        return x
    else:
        return alpha * (tl.exp(x) - 1)


@triton.jit
def _sum_diff_pair(a0, a1, b0, b1):
    return a0 + b0, a1 + b1, a0 - b0, a1 - b1


@triton.jit
def map_kernel(x_ptr, y_ptr, s_ptr, d_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    y = tl.load(y_ptr + offs)
    tl.store(x_ptr + offs, tl.map_elementwise(_selu_scalar, x, tl.full([BLOCK], 1.5, tl.float32)))
    s, d = tl.map_elementwise(_sum_diff_pair, x, y, pack=2)
    tl.store(s_ptr + offs, s)
    tl.store(d_ptr + offs, d)


def test_map_elementwise_with_branches_and_pack(device):
    x = torch.randn(256, device=device)
    y = torch.randn(256, device=device)
    s, d = torch.empty_like(x), torch.empty_like(x)
    x_in = x.clone()
    map_kernel[(1, )](x, y, s, d, BLOCK=256)
    xc = x_in.cpu()
    torch.testing.assert_close(x.cpu(), torch.where(xc > 0, xc, 1.5 * (torch.exp(xc) - 1)), rtol=1e-6, atol=1e-6)
    assert torch.equal(s.cpu(), xc + y.cpu()) and torch.equal(d.cpu(), xc - y.cpu())


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


# What upstream's tensor-descriptor loads become (tutorial 06): the masked load's `other` is an `arith.select`
# between two constant tiles on a scalar i1 (the descriptor's padding flag); axis analysis once crashed on it.
_SELECT_OTHER = """
#blk = #ttg.blocked<{sizePerThread = [4], threadsPerWarp = [32], warpsPerCTA = [1], order = [0]}>
module attributes {"ttg.num-ctas" = 1 : i32, "ttg.num-warps" = 1 : i32, "ttg.threads-per-warp" = 32 : i32} {
  tt.func public @select_other(%x: !tt.ptr<f32>, %o: !tt.ptr<f32>, %n: i32, %pad: i1) {
    %nan = arith.constant dense<0x7FC00000> : tensor<128xf32, #blk>
    %zero = arith.constant dense<0.000000e+00> : tensor<128xf32, #blk>
    %other = arith.select %pad, %nan, %zero : tensor<128xf32, #blk>
    %r = tt.make_range {end = 128 : i32, start = 0 : i32} : tensor<128xi32, #blk>
    %ns = tt.splat %n : i32 -> tensor<128xi32, #blk>
    %m = arith.cmpi slt, %r, %ns : tensor<128xi32, #blk>
    %xs = tt.splat %x : !tt.ptr<f32> -> tensor<128x!tt.ptr<f32>, #blk>
    %xp = tt.addptr %xs, %r : tensor<128x!tt.ptr<f32>, #blk>, tensor<128xi32, #blk>
    %v = tt.load %xp, %m, %other : tensor<128x!tt.ptr<f32>, #blk>
    %os = tt.splat %o : !tt.ptr<f32> -> tensor<128x!tt.ptr<f32>, #blk>
    %op = tt.addptr %os, %r : tensor<128x!tt.ptr<f32>, #blk>, tensor<128xi32, #blk>
    tt.store %op, %v : tensor<128x!tt.ptr<f32>, #blk>
    tt.return
  }
}
"""


@pytest.mark.parametrize("pad", [0, 1])
def test_masked_load_whose_other_selects_on_a_scalar(pad, tmp_path, device):
    path = tmp_path / "select_other.ttgir"
    path.write_text(_SELECT_OTHER)
    kernel = triton.compile(str(path))
    x = torch.randn(128)
    out = torch.empty(128, device=device)
    kernel[(1, 1, 1)](x.to(device), out, 100, pad)
    ref = x.clone()
    ref[100:] = float("nan") if pad else 0.0
    torch.testing.assert_close(out.cpu(), ref, equal_nan=True)


# MLIR's rounding divisions, which upstream passes create (fuse_nested_loops computes trip counts with
# arith.ceildivsi); element-wise on tensors here, with every sign combination.
_ROUNDING_DIVISIONS = """
#blk = #ttg.blocked<{sizePerThread = [1], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}>
module attributes {"ttg.num-ctas" = 1 : i32, "ttg.num-warps" = 4 : i32, "ttg.threads-per-warp" = 32 : i32} {
  tt.func public @rounding_divisions(%a: !tt.ptr<i32>, %b: !tt.ptr<i32>, %o: !tt.ptr<i32>) {
    %c128 = arith.constant dense<128> : tensor<128xi32, #blk>
    %r = tt.make_range {end = 128 : i32, start = 0 : i32} : tensor<128xi32, #blk>
    %as = tt.splat %a : !tt.ptr<i32> -> tensor<128x!tt.ptr<i32>, #blk>
    %ap = tt.addptr %as, %r : tensor<128x!tt.ptr<i32>, #blk>, tensor<128xi32, #blk>
    %x = tt.load %ap : tensor<128x!tt.ptr<i32>, #blk>
    %bs = tt.splat %b : !tt.ptr<i32> -> tensor<128x!tt.ptr<i32>, #blk>
    %bp = tt.addptr %bs, %r : tensor<128x!tt.ptr<i32>, #blk>, tensor<128xi32, #blk>
    %y = tt.load %bp : tensor<128x!tt.ptr<i32>, #blk>
    %ceil = arith.ceildivsi %x, %y : tensor<128xi32, #blk>
    %floor = arith.floordivsi %x, %y : tensor<128xi32, #blk>
    %uceil = arith.ceildivui %x, %y : tensor<128xi32, #blk>
    %os = tt.splat %o : !tt.ptr<i32> -> tensor<128x!tt.ptr<i32>, #blk>
    %o0 = tt.addptr %os, %r : tensor<128x!tt.ptr<i32>, #blk>, tensor<128xi32, #blk>
    tt.store %o0, %ceil : tensor<128x!tt.ptr<i32>, #blk>
    %r1 = arith.addi %r, %c128 : tensor<128xi32, #blk>
    %o1 = tt.addptr %os, %r1 : tensor<128x!tt.ptr<i32>, #blk>, tensor<128xi32, #blk>
    tt.store %o1, %floor : tensor<128x!tt.ptr<i32>, #blk>
    %r2 = arith.addi %r1, %c128 : tensor<128xi32, #blk>
    %o2 = tt.addptr %os, %r2 : tensor<128x!tt.ptr<i32>, #blk>, tensor<128xi32, #blk>
    tt.store %o2, %uceil : tensor<128x!tt.ptr<i32>, #blk>
    tt.return
  }
}
"""


def test_rounding_divisions(tmp_path, device):
    path = tmp_path / "rounding_divisions.ttgir"
    path.write_text(_ROUNDING_DIVISIONS)
    kernel = triton.compile(str(path))
    g = torch.Generator().manual_seed(8)
    a = torch.randint(-1000, 1000, (128, ), generator=g, dtype=torch.int32)
    b = torch.randint(1, 40, (128, ), generator=g, dtype=torch.int32) * torch.where(torch.rand(128, generator=g) < 0.5,
                                                                                    -1, 1).int()
    a[:4] = torch.tensor([12, -12, 0, 2**31 - 1], dtype=torch.int32)
    b[:4] = torch.tensor([4, 4, -3, 2], dtype=torch.int32)
    out = torch.zeros(3 * 128, dtype=torch.int32, device=device)
    kernel[(1, 1, 1)](a.to(device), b.to(device), out)
    a64, b64 = a.long(), b.long()
    ceil = -torch.div(-a64, b64, rounding_mode="floor")
    floor = torch.div(a64, b64, rounding_mode="floor")
    ua, ub = a64 & 0xFFFFFFFF, b64 & 0xFFFFFFFF
    uceil = ((ua + ub - 1) // ub).to(torch.int64)
    uceil = torch.where(uceil >= 2**31, uceil - 2**32, uceil)
    assert torch.equal(out.cpu().long(), torch.cat([ceil, floor, uceil]))

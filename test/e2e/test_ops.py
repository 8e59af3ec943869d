"""Op families of the walking skeleton, and ops of Triton 3.9 beyond that classic set (tl.map_elementwise with
control flow and pack, MLIR's rounding divisions), each kernel checked against torch on the emulator."""
import pytest
import torch
import triton
import triton.language as tl

FLOATS = [torch.float16, torch.bfloat16, torch.float32]
INTS = [torch.int8, torch.int16, torch.int32, torch.int64]


def _rand(shape, dtype, device):
    if dtype.is_floating_point:
        return torch.randn(shape, device=device).to(dtype)
    info = torch.iinfo(dtype)
    return torch.randint(max(info.min, -1000), min(info.max, 1000), shape, device=device, dtype=dtype)


# -- reductions ----------------------------------------------------------------------------------


@triton.jit
def reduce2d_kernel(x_ptr, s0_ptr, s1_ptr, m0_ptr, m1_ptr, M: tl.constexpr, N: tl.constexpr):
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    x = tl.load(x_ptr + rm[:, None] * N + rn[None, :])
    tl.store(s0_ptr + rn, tl.sum(x, axis=0))
    tl.store(s1_ptr + rm, tl.sum(x, axis=1))
    tl.store(m0_ptr + rn, tl.max(x, axis=0))
    tl.store(m1_ptr + rm, tl.min(x, axis=1))


@pytest.mark.parametrize("M,N", [(1, 32), (32, 64), (64, 8), (128, 128), (2, 2)])
@pytest.mark.parametrize("num_warps", [1, 4, 8])
def test_reduce_2d_both_axes(M, N, num_warps, device):
    x = torch.randn(M, N, device=device)
    outs = [torch.empty(N, device=device), torch.empty(M, device=device), torch.empty(N, device=device),
            torch.empty(M, device=device)]
    reduce2d_kernel[(1, )](x, *outs, M=M, N=N, num_warps=num_warps)
    torch.testing.assert_close(outs[0], x.sum(0), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(outs[1], x.sum(1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(outs[2], x.amax(0), rtol=0, atol=0)
    torch.testing.assert_close(outs[3], x.amin(1), rtol=0, atol=0)


@triton.jit
def reduce1d_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i, mask=i < n, other=0)
    tl.store(out_ptr, tl.sum(x, axis=0))
    tl.store(out_ptr + 1, tl.max(tl.where(i < n, x, tl.full(x.shape, -100, x.dtype)), axis=0))
    tl.store(out_ptr + 2, tl.argmax(tl.where(i < n, x, tl.full(x.shape, -100, x.dtype)), axis=0).to(x.dtype))


@pytest.mark.parametrize("dtype", INTS + [torch.float32])
def test_reduce_1d_dtypes_with_argmax(dtype, device):
    n = 1000
    x = _rand((n, ), dtype, device)
    out = torch.zeros(3, dtype=dtype, device=device)
    reduce1d_kernel[(1, )](x, out, n, BLOCK=1024)
    if dtype.is_floating_point:
        torch.testing.assert_close(out[0], x.sum(), rtol=1e-5, atol=1e-3)
    else:
        assert out[0].item() == x.to(torch.int64).sum().to(dtype).item()
    assert out[1].item() == x.max().item()
    # the index is stored in the element type, so it wraps like a cast would
    assert out[2].item() == torch.argmax(x.to(torch.float64)).to(dtype).item()


def test_max_propagates_nan_and_sum_of_halves(device):
    x = torch.randn(256, device=device)
    x[77] = float("nan")
    out = torch.zeros(3, device=device)
    reduce1d_kernel[(1, )](x, out, 256, BLOCK=256)
    # tl.max ignores NaN unless propagate_nan is set (it lowers to maxnumf)
    assert out[1].item() == torch.nan_to_num(x, nan=-1e9).max().item()
    assert torch.isnan(out[0])


# -- scans ---------------------------------------------------------------------------------------


@triton.jit
def scan_kernel(x_ptr, out_ptr, rev_ptr, M: tl.constexpr, N: tl.constexpr, AXIS: tl.constexpr):
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    offs = rm[:, None] * N + rn[None, :]
    x = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, tl.cumsum(x, axis=AXIS))
    tl.store(rev_ptr + offs, tl.cumsum(x, axis=AXIS, reverse=True))


@pytest.mark.parametrize("M,N,axis", [(1, 256, 1), (16, 32, 0), (16, 32, 1), (64, 4, 0), (4, 64, 1)])
def test_cumsum(M, N, axis, device):
    x = torch.randint(-5, 5, (M, N), device=device, dtype=torch.int32)
    out = torch.empty_like(x)
    rev = torch.empty_like(x)
    scan_kernel[(1, )](x, out, rev, M=M, N=N, AXIS=axis)
    assert torch.equal(out, torch.cumsum(x, dim=axis).to(torch.int32))
    assert torch.equal(rev, torch.flip(torch.cumsum(torch.flip(x, [axis]), dim=axis), [axis]).to(torch.int32))


@triton.jit
def _first_nonzero(a_val, a_idx, b_val, b_idx):
    # not commutative: keeps the earlier element when it is set
    take_a = a_val != 0
    return tl.where(take_a, a_val, b_val), tl.where(take_a, a_idx, b_idx)


@triton.jit
def scan_tuple_kernel(x_ptr, v_ptr, i_ptr, N: tl.constexpr):
    i = tl.arange(0, N)
    x = tl.load(x_ptr + i)
    v, idx = tl.associative_scan((x, i), 0, _first_nonzero)
    tl.store(v_ptr + i, v)
    tl.store(i_ptr + i, idx)


def test_associative_scan_two_operands_non_commutative(device):
    N = 128
    x = torch.zeros(N, dtype=torch.int32, device=device)
    x[[5, 9, 70]] = torch.tensor([3, 4, 5], dtype=torch.int32, device=device)
    v = torch.empty_like(x)
    idx = torch.empty_like(x)
    scan_tuple_kernel[(1, )](x, v, idx, N=N)
    ref_v, ref_i, cur_v, cur_i = [], [], 0, 0
    for k in range(N):
        if cur_v == 0:
            cur_v, cur_i = int(x[k]), k
        ref_v.append(cur_v)
        ref_i.append(cur_i)
    assert v.tolist() == ref_v
    assert idx.tolist() == ref_i


# -- integer semantics ---------------------------------------------------------------------------


@triton.jit
def int_ops_kernel(a_ptr, b_ptr, div_ptr, rem_ptr, shl_ptr, shr_ptr, n, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    m = i < n
    a = tl.load(a_ptr + i, mask=m)
    b = tl.load(b_ptr + i, mask=m)
    tl.store(div_ptr + i, a // b, mask=m)
    tl.store(rem_ptr + i, a % b, mask=m)
    tl.store(shl_ptr + i, a << b, mask=m)
    tl.store(shr_ptr + i, a >> b, mask=m)


def test_integer_division_and_shifts_follow_triton(device):
    a = torch.tensor([7, -7, 7, -7, -2**31, 5, -1, 1, 2**31 - 1, 12], dtype=torch.int32, device=device)
    b = torch.tensor([2, 2, -2, 0, -1, 0, 32, 40, 3, 31], dtype=torch.int32, device=device)
    outs = [torch.zeros_like(a) for _ in range(4)]
    int_ops_kernel[(1, )](a, b, *outs, a.numel(), BLOCK=16)
    # the same values Triton's interpreter gives (truncating division, 0 on division by zero,
    # shifts by >= 32 give 0 / the sign)
    assert outs[0].tolist() == [3, -3, -3, 0, -2**31, 0, 0, 0, 715827882, 0]
    assert outs[1].tolist() == [1, -1, 1, 0, 0, 0, -1, 1, 1, 12]
    assert outs[2].tolist() == [28, -28, 0, -7, 0, 5, 0, 0, -8, 0]
    assert outs[3].tolist() == [1, -2, 0, -7, -1, 5, -1, 0, 268435455, 0]


@triton.jit
def cast_kernel(x_ptr, i32_ptr, u8_ptr, h_ptr, bf_ptr, n, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    m = i < n
    x = tl.load(x_ptr + i, mask=m)
    tl.store(i32_ptr + i, x.to(tl.int32), mask=m)
    tl.store(u8_ptr + i, x.to(tl.uint8), mask=m)
    tl.store(h_ptr + i, x.to(tl.float16), mask=m)
    tl.store(bf_ptr + i, x.to(tl.bfloat16), mask=m)


def test_float_casts(device):
    x = torch.tensor([0.5, -0.5, 1.5, -1.5, 3e9, -3e9, float("nan"), float("inf"), 255.9, 256.0, 65520.0,
                      1e-8, -0.0, 2.5, 1.00048828125, 3.14159],
                     device=device)
    n = x.numel()
    i32 = torch.zeros(n, dtype=torch.int32, device=device)
    u8 = torch.zeros(n, dtype=torch.uint8, device=device)
    h = torch.zeros(n, dtype=torch.float16, device=device)
    bf = torch.zeros(n, dtype=torch.bfloat16, device=device)
    cast_kernel[(1, )](x, i32, u8, h, bf, n, BLOCK=16)
    # float -> int saturates and maps NaN to 0 (Metal's and NVIDIA's hardware behaviour)
    assert i32.tolist() == [0, 0, 1, -1, 2**31 - 1, -2**31, 0, 2**31 - 1, 255, 256, 65520, 0, 0, 2, 1, 3]
    assert u8.tolist()[:4] == [0, 0, 1, 0] and u8.tolist()[8] == 255
    # round to nearest even, overflow to inf, NaN stays NaN
    torch.testing.assert_close(h, x.to(torch.float16), rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(bf, x.to(torch.bfloat16), rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", FLOATS)
def test_minimum_maximum_nan_and_signed_zero(dtype, device):

    @triton.jit
    def k(a_ptr, b_ptr, mx_ptr, mn_ptr, BLOCK: tl.constexpr):
        i = tl.arange(0, BLOCK)
        a = tl.load(a_ptr + i)
        b = tl.load(b_ptr + i)
        tl.store(mx_ptr + i, tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL))
        tl.store(mn_ptr + i, tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL))

    a = torch.tensor([1.0, float("nan"), -0.0, 0.0, -1.0, 2.0, float("inf"), 3.0], device=device).to(dtype)
    b = torch.tensor([2.0, 1.0, 0.0, -0.0, float("nan"), -2.0, 1.0, 3.0], device=device).to(dtype)
    mx, mn = torch.empty_like(a), torch.empty_like(a)
    k[(1, )](a, b, mx, mn, BLOCK=8)
    torch.testing.assert_close(mx, torch.maximum(a, b), equal_nan=True, rtol=0, atol=0)
    torch.testing.assert_close(mn, torch.minimum(a, b), equal_nan=True, rtol=0, atol=0)
    # IEEE 754-2019 maximum/minimum (LLVM's llvm.maximum, which Triton lowers to): -0.0 < +0.0.
    # torch.maximum does not order signed zeros, so these two lanes are checked explicitly.
    assert mx[2].item() == 0 and not torch.signbit(mx[2]) and not torch.signbit(mx[3])
    assert torch.signbit(mn[2]) and torch.signbit(mn[3])


@pytest.mark.parametrize("dtype", FLOATS)
def test_math_functions(dtype, device):

    @triton.jit
    def k(x_ptr, o_ptr, BLOCK: tl.constexpr):
        i = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + i)
        xf = x.to(tl.float32)  # Triton's math functions take fp32; results are rounded back to the dtype
        tl.store(o_ptr + i, tl.exp(xf).to(x.dtype))
        tl.store(o_ptr + BLOCK + i, tl.log(tl.abs(xf) + 1).to(x.dtype))
        tl.store(o_ptr + 2 * BLOCK + i, tl.sqrt(tl.abs(xf)).to(x.dtype))
        tl.store(o_ptr + 3 * BLOCK + i, tl.sin(xf).to(x.dtype))
        tl.store(o_ptr + 4 * BLOCK + i, tl.cos(xf).to(x.dtype))
        tl.store(o_ptr + 5 * BLOCK + i, tl.sigmoid(xf).to(x.dtype))
        tl.store(o_ptr + 6 * BLOCK + i, x / 3.0)

    x = torch.linspace(-4, 4, 64, device=device).to(dtype)
    o = torch.empty(7 * 64, device=device, dtype=dtype)
    k[(1, )](x, o, BLOCK=64)
    xf = x.float()
    refs = [xf.exp(), (xf.abs() + 1).log(), xf.abs().sqrt(), xf.sin(), xf.cos(), torch.sigmoid(xf), xf / 3]
    tol = {torch.float32: 2e-6, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]
    for j, ref in enumerate(refs):
        torch.testing.assert_close(o[j * 64:(j + 1) * 64].float(), ref.to(dtype).float(), rtol=tol, atol=tol)


# -- control flow and calls ----------------------------------------------------------------------


@triton.jit(noinline=True)
def _weight(k, s):
    # noinline functions take scalars (Triton 3.9 refuses tensor arguments)
    return (k + 1) * s


@triton.jit
def control_flow_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i, mask=i < n, other=0.0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    k = 0
    while k < n:  # scf.while
        if k % 2 == 0:  # scf.if with a carried value
            acc = acc + x * (_weight(k, 1.0) / (k + 1))  # noinline call returning 1.0
        else:
            acc = acc - x * 0.5
        k += 1
    tl.store(out_ptr + i, acc, mask=i < n)


@pytest.mark.parametrize("n", [0, 1, 5, 6])
def test_while_if_and_noinline_call(n, device):
    x = torch.randn(64, device=device)
    out = torch.full((64, ), 7.0, device=device)
    control_flow_kernel[(1, )](x, out, n, BLOCK=64)
    evens, odds = (n + 1) // 2, n // 2
    ref = x * evens - x * 0.5 * odds
    torch.testing.assert_close(out[:n], ref[:n], rtol=1e-5, atol=1e-5)
    assert torch.all(out[n:] == 7.0)


@triton.jit
def grid_kernel(out_ptr):
    x = tl.program_id(0)
    y = tl.program_id(1)
    z = tl.program_id(2)
    nx = tl.num_programs(0)
    ny = tl.num_programs(1)
    tl.store(out_ptr + (z * ny + y) * nx + x, x * 10000 + y * 100 + z)


def test_3d_grid(device):
    out = torch.zeros(3 * 4 * 5, dtype=torch.int32, device=device)
    grid_kernel[(3, 4, 5)](out)
    ref = [x * 10000 + y * 100 + z for z in range(5) for y in range(4) for x in range(3)]
    assert out.tolist() == ref


@triton.jit
def transpose_kernel(x_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr):
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    x = tl.load(x_ptr + rm[:, None] * N + rn[None, :])
    tl.store(out_ptr + rn[:, None] * M + rm[None, :], tl.trans(x))


@pytest.mark.parametrize("M,N", [(32, 64), (8, 8), (128, 16)])
def test_transpose_moves_data_between_threads(M, N, device):
    x = torch.randn(M, N, device=device)
    out = torch.empty(N, M, device=device)
    transpose_kernel[(1, )](x, out, M=M, N=N)
    assert torch.equal(out, x.t())


# -- atomics -------------------------------------------------------------------------------------


@triton.jit
def atomic_kernel(x_ptr, sum_ptr, cnt_ptr, max_ptr, old_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    x = tl.load(x_ptr + i, mask=m, other=0.0)
    tl.atomic_add(sum_ptr, tl.sum(x, axis=0))
    old = tl.atomic_add(cnt_ptr + (i % 4), 1, mask=m)
    tl.store(old_ptr + i, old, mask=m)
    tl.atomic_max(max_ptr, tl.program_id(0))


def test_atomics_across_threadgroups(device):
    n = 5000
    x = torch.randn(n, device=device)
    total = torch.zeros(1, device=device)
    cnt = torch.zeros(4, dtype=torch.int32, device=device)
    mx = torch.zeros(1, dtype=torch.int32, device=device)
    old = torch.zeros(n, dtype=torch.int32, device=device)
    atomic_kernel[(triton.cdiv(n, 256), )](x, total, cnt, mx, old, n, BLOCK=256)
    torch.testing.assert_close(total, x.sum().reshape(1), rtol=1e-4, atol=1e-3)
    assert cnt.tolist() == [1250, 1250, 1250, 1250]
    assert mx.item() == triton.cdiv(n, 256) - 1
    # each counter handed out every ticket exactly once
    for r in range(4):
        assert sorted(old[r::4].tolist()) == list(range(1250))


@triton.jit
def cas_kernel(lock_ptr, out_ptr):
    # every program takes the lock in turn and appends its id
    pid = tl.program_id(0)
    while tl.atomic_cas(lock_ptr, 0, 1) == 1:
        pass
    n = tl.load(out_ptr)
    tl.store(out_ptr + 1 + n, pid)
    tl.store(out_ptr, n + 1)
    tl.atomic_xchg(lock_ptr, 0)


def test_atomic_cas_spin_lock(device):
    lock = torch.zeros(1, dtype=torch.int32, device=device)
    out = torch.zeros(1 + 16, dtype=torch.int32, device=device)
    cas_kernel[(16, )](lock, out, num_warps=1)
    assert out[0].item() == 16
    assert sorted(out[1:].tolist()) == list(range(16))


@triton.jit
def row_sum_single_warp(x_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr):
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    x = tl.load(x_ptr + rm[:, None] * N + rn[None, :])
    tl.store(out_ptr + rm, tl.sum(x, axis=1))


@pytest.mark.parametrize("M,N", [(32, 16), (64, 8), (8, 64)])
def test_single_warp_layout_conversions_by_shuffle(M, N, device):
    x = torch.randn(M, N, device=device)
    out = torch.empty(M, device=device)
    row_sum_single_warp[(1, )](x, out, M=M, N=N, num_warps=1)
    torch.testing.assert_close(out, x.sum(1), rtol=1e-5, atol=1e-5)


# -- tl.map_elementwise (with control flow and pack) ---------------------------------------------


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


# -- rounding divisions -------------------------------------------------------------------------

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

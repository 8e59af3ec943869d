"""Scans whose axis spans lanes and simdgroups (scan_ops: registers, then lanes through Metal's
simd_prefix_exclusive_* or a shuffle ladder, then simdgroups and register repeats through one exchange of
block totals in threadgroup memory), against torch references: sums and products on f32, f16, bf16, int32
and int16, forward and reverse, one to eight simdgroups, lines sharing a simdgroup, and general combines."""
import zlib

import pytest
import torch
import triton
import triton.language as tl

from support.device import compile_for_apple


@triton.jit
def _max_combine(a, b):
    return tl.maximum(a, b)


@triton.jit
def _second_if_set(a, b):
    # non-commutative: the later element wins unless it is zero
    return tl.where(b != 0, b, a)


@triton.jit
def scan_kernel(x_ptr, y_ptr, M: tl.constexpr, N: tl.constexpr, AXIS: tl.constexpr, OP: tl.constexpr,
                REVERSE: tl.constexpr):
    offs = tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :]
    x = tl.load(x_ptr + offs)
    if OP == "sum":
        y = tl.cumsum(x, AXIS, reverse=REVERSE)
    elif OP == "prod":
        y = tl.cumprod(x, AXIS, reverse=REVERSE)
    elif OP == "max":
        y = tl.associative_scan(x, AXIS, _max_combine, reverse=REVERSE)
    else:
        y = tl.associative_scan(x, AXIS, _second_if_set, reverse=REVERSE)
    tl.store(y_ptr + offs, y)


def _reference(x, axis, op, reverse):
    if reverse:
        x = x.flip(axis)
    if op == "sum":
        y = torch.cumsum(x.double() if x.is_floating_point() else x.long(), axis)
    elif op == "prod":
        y = torch.cumprod(x.double() if x.is_floating_point() else x.long(), axis)
    elif op == "max":
        y = torch.cummax(x.double() if x.is_floating_point() else x.long(), axis).values
    else:
        idx = torch.where(x != 0, torch.arange(x.shape[axis]).view([-1 if d == axis else 1 for d in range(x.dim())]),
                          torch.zeros((), dtype=torch.long))
        last = torch.cummax(idx, axis).values
        y = torch.gather(x, axis, last)
    return y.flip(axis) if reverse else y


def _input(dtype, op, shape, seed):
    g = torch.Generator().manual_seed(seed)
    if dtype in (torch.int32, torch.int16):
        if op == "prod":
            return torch.randint(1, 4, shape, generator=g).to(dtype)
        return torch.randint(-1000, 1000, shape, generator=g).to(dtype)
    if op == "prod":
        return (1 + torch.rand(shape, generator=g) * 0.02 - 0.01).to(dtype)
    if op == "other":
        return (torch.randn(shape, generator=g) * (torch.rand(shape, generator=g) < 0.3)).to(dtype)
    return torch.randn(shape, generator=g).to(dtype)


def _run(shape, axis, op, reverse, dtype, num_warps, device, out_dtype=None):
    M, N = shape
    x = _input(dtype, op, shape, zlib.crc32(repr((shape, axis, op, reverse, str(dtype), num_warps)).encode()))
    y = torch.empty(M, N, dtype=out_dtype or dtype, device=device)
    scan_kernel[(1, )](x.to(device), y, M=M, N=N, AXIS=axis, OP=op, REVERSE=reverse, num_warps=num_warps)
    return x, y.cpu(), _reference(x, axis, op, reverse)


def _check(x, y, ref, axis, op, reverse, dtype):
    if not dtype.is_floating_point:
        # integer sums and products wrap as two's complement in the element type
        assert torch.equal(y, ref.to(dtype))
        return
    if op in ("max", "other"):
        assert torch.equal(y, ref.to(dtype))
        return
    # accumulation in the element type (f16) or float32 (f32, bf16): the error bound of n - 1 roundings that
    # holds in any order of association, (n - 1) u times the running magnitude, plus the final rounding
    n = x.shape[axis]
    u = {torch.float32: 2**-24, torch.bfloat16: 2**-24, torch.float16: 2**-11}[dtype]
    scale = _reference(x.abs(), axis, op, reverse)
    rounding = 2**-8 if y.dtype == torch.bfloat16 else 2**-11 if y.dtype == torch.float16 else 0
    tol = 1.01 * (n - 1) * u * scale + rounding * ref.abs() + 1e-30
    assert ((y.double() - ref).abs() <= tol).all(), float(((y.double() - ref).abs() - tol).max())


SHAPES = [(1, 32), (1, 128), (1, 1024), (1, 4096), (2, 64), (4, 64), (8, 16), (16, 8), (16, 64), (32, 32), (64, 8),
          (2, 512)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("num_warps", [1, 4, 8])
def test_cumsum_f32(shape, axis, reverse, num_warps, device):
    # shape[axis] == 1 included: a scan over one element is the element itself
    x, y, ref = _run(shape, axis, "sum", reverse, torch.float32, num_warps, device)
    _check(x, y, ref, axis, "sum", reverse, torch.float32)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int32, torch.int16])
@pytest.mark.parametrize("op", ["sum", "prod"])
@pytest.mark.parametrize("shape,axis", [((1, 1024), 1), ((16, 64), 0), ((16, 64), 1), ((8, 16), 1), ((16, 8), 1)])
@pytest.mark.parametrize("reverse", [False, True])
def test_scan_dtypes(dtype, op, shape, axis, reverse, device):
    x, y, ref = _run(shape, axis, op, reverse, dtype, 4, device)
    _check(x, y, ref, axis, op, reverse, dtype)


def test_int32_sum_wraps(device):
    x = torch.full((1, 256), 2**30, dtype=torch.int32)
    y = torch.empty(1, 256, dtype=torch.int32, device=device)
    scan_kernel[(1, )](x.to(device), y, M=1, N=256, AXIS=1, OP="sum", REVERSE=False, num_warps=4)
    assert torch.equal(y.cpu(), torch.cumsum(x.long(), 1).to(torch.int32))


@pytest.mark.parametrize("op", ["max", "other"])
@pytest.mark.parametrize("shape,axis", [((1, 1024), 1), ((16, 64), 0), ((8, 16), 1), ((4, 64), 1)])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("num_warps", [1, 4])
def test_general_combine(op, shape, axis, reverse, num_warps, device):
    x, y, ref = _run(shape, axis, op, reverse, torch.float32, num_warps, device)
    _check(x, y, ref, axis, op, reverse, torch.float32)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("shape,axis", [((1, 256), 1), ((8, 16), 1), ((16, 8), 1)])
def test_negative_zero_stays(reverse, shape, axis, device):
    # the identity other lines add while they wait for their turn at the builtin is -0.0: x + -0.0 == x exactly
    x = torch.full(shape, -0.0)
    y = torch.empty(shape, device=device)
    scan_kernel[(1, )](x.to(device), y, M=shape[0], N=shape[1], AXIS=axis, OP="sum", REVERSE=reverse, num_warps=4)
    assert torch.equal(torch.signbit(y.cpu()), torch.ones(shape, dtype=torch.bool))


def _msl(op, shape, axis, num_warps=4, dtype="fp32", reverse=False):
    consts = dict(M=shape[0], N=shape[1], AXIS=axis, OP=op, REVERSE=reverse)
    k = compile_for_apple(scan_kernel, {"x_ptr": f"*{dtype}", "y_ptr": f"*{dtype}", **{c: "constexpr" for c in consts}},
                          consts, num_warps=num_warps)
    msl = k.asm["msl"]
    return msl


@pytest.mark.parametrize("dtype,builtin", [("fp32", "simd_prefix_exclusive_sum"), ("fp16", "simd_prefix_exclusive_sum"),
                                           ("bf16", "simd_prefix_exclusive_sum"), ("i32", "simd_prefix_exclusive_sum")])
def test_sum_uses_the_metal_builtin_and_two_barriers(dtype, builtin):
    msl = _msl("sum", (1, 1024), 1, dtype=dtype)
    assert f"{builtin}(" in msl
    assert "simd_shuffle" not in msl
    assert msl.count("threadgroup_barrier(") == 2


def test_prod_uses_the_metal_builtin():
    assert "simd_prefix_exclusive_product(" in _msl("prod", (1, 1024), 1)
    # [8, 16] (no divisibility: one element per thread): 16 lanes along a row, 2 rows share a simdgroup: 2 turns
    # at the builtin, fewer than the 4 ladder steps
    assert _msl("prod", (8, 16), 1).count("simd_prefix_exclusive_product(") == 2
    # [16, 8]: 4 rows share a simdgroup, 3 lane bits along a row: the ladder
    msl = _msl("sum", (16, 8), 1)
    assert "simd_prefix" not in msl and "simd_shuffle_up" in msl


def test_general_combine_uses_a_shuffle_ladder_not_threadgroup_memory_per_step():
    msl = _msl("max", (1, 1024), 1)
    assert "simd_prefix" not in msl and "simd_shuffle_up" in msl
    assert msl.count("threadgroup_barrier(") == 2
    assert "simd_shuffle_down" in _msl("max", (1, 1024), 1, reverse=True)

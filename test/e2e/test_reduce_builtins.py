"""Reductions whose axis covers only some lanes of a simdgroup (several lines share it) use Metal's SIMD
reductions in turns, the other lanes contributing the identity, when that is no more calls than the shuffle
butterfly has steps; checked against torch for every combine Metal reduces natively, on the types its SIMD
functions take, on shapes that take either path, with the MSL checked for the builtin. Float max/min run on
integer order keys with the NaN flags reduced beside them: checked bit for bit on NaN and signed zeros."""
import re
import zlib

import pytest
import torch
import triton
import triton.language as tl

from support.device import compile_for_apple


@triton.jit
def _and(a, b):
    return a & b


@triton.jit
def _or(a, b):
    return a | b


@triton.jit
def _xor(a, b):
    return a ^ b


@triton.jit
def reduce_kernel(x_ptr, y_ptr, M: tl.constexpr, N: tl.constexpr, AXIS: tl.constexpr, OP: tl.constexpr):
    offs = tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :]
    x = tl.load(x_ptr + offs)
    if OP == "sum":
        y = tl.sum(x, AXIS)
    elif OP == "prod":
        y = tl.reduce(x, AXIS, _prod)
    elif OP == "max":
        y = tl.max(x, AXIS)
    elif OP == "min":
        y = tl.min(x, AXIS)
    elif OP == "and":
        y = tl.reduce(x, AXIS, _and)
    elif OP == "or":
        y = tl.reduce(x, AXIS, _or)
    else:
        y = tl.reduce(x, AXIS, _xor)
    if AXIS == 0:
        tl.store(y_ptr + tl.arange(0, N), y)
    else:
        tl.store(y_ptr + tl.arange(0, M), y)


@triton.jit
def _prod(a, b):
    return a * b


def _reference(x, axis, op):
    if op == "sum":
        return x.double().sum(axis) if x.is_floating_point() else x.long().sum(axis)
    if op == "prod":
        return x.double().prod(axis) if x.is_floating_point() else x.long().prod(axis)
    if op == "max":
        return x.max(axis).values
    if op == "min":
        return x.min(axis).values
    out = x.select(axis, 0).clone()
    for i in range(1, x.shape[axis]):
        v = x.select(axis, i)
        out = out & v if op == "and" else out | v if op == "or" else out ^ v
    return out


def _input(dtype, op, shape, seed):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        if op == "prod":
            return (1 + (torch.rand(shape, generator=g) - 0.5) * 0.02).to(dtype)
        return torch.randn(shape, generator=g).to(dtype)
    if op == "prod":
        return torch.randint(1, 3, shape, generator=g).to(dtype)
    if op in ("and", "or", "xor"):
        return torch.randint(-(1 << 14), 1 << 14, shape, generator=g).to(dtype)
    low = 0 if dtype == torch.uint16 else -30000
    return torch.randint(low, 30000, shape, generator=g).to(dtype)


CASES = [("sum", torch.float32), ("sum", torch.float16), ("sum", torch.int32), ("sum", torch.int16),
         ("prod", torch.float32), ("prod", torch.int32), ("max", torch.int32), ("min", torch.int32),
         ("max", torch.int16), ("min", torch.int16), ("and", torch.int32), ("or", torch.int32),
         ("xor", torch.int16)]


@pytest.mark.parametrize("op,dtype", CASES)
@pytest.mark.parametrize("shape,axis", [((8, 16), 1), ((16, 8), 1), ((16, 64), 0), ((4, 64), 1), ((32, 32), 1),
                                        ((2, 64), 1), ((32, 4), 1)])
@pytest.mark.parametrize("num_warps", [1, 4])
def test_reduce_lines_sharing_a_simdgroup(op, dtype, shape, axis, num_warps, device):
    x = _input(dtype, op, shape, zlib.crc32(repr((op, str(dtype), shape, axis, num_warps)).encode()))
    n_out = shape[1 - axis]
    y = torch.empty(n_out, dtype=dtype, device=device)
    reduce_kernel[(1, )](x.to(device), y, M=shape[0], N=shape[1], AXIS=axis, OP=op, num_warps=num_warps)
    ref = _reference(x, axis, op)
    y = y.cpu()
    if not dtype.is_floating_point:
        assert torch.equal(y, ref.to(dtype))
        return
    n = shape[axis]
    u = 2**-24 if dtype == torch.float32 else 2**-11
    scale = x.double().abs().sum(axis) if op == "sum" else ref.abs()
    assert ((y.double() - ref).abs() <= 1.01 * (n - 1) * u * scale + u * ref.abs() + 1e-30).all()


def _msl(op, shape, axis, dtype="fp32", num_warps=4):
    consts = dict(M=shape[0], N=shape[1], AXIS=axis, OP=op)
    k = compile_for_apple(reduce_kernel, {"x_ptr": f"*{dtype}", "y_ptr": f"*{dtype}", **{c: "constexpr" for c in consts}},
                          consts, num_warps=num_warps)
    msl = k.asm["msl"]
    return msl


@pytest.mark.parametrize("op,dtype,builtin", [("sum", "fp32", "simd_sum"), ("max", "i32", "simd_max"),
                                              ("and", "i32", "simd_and"), ("prod", "fp32", "simd_product")])
def test_builtin_in_turns(op, dtype, builtin):
    # [8, 16] over 4 warps (no divisibility: one element per thread): 16 lanes along a row, 2 rows per
    # simdgroup: 2 turns, fewer than the 4 butterfly steps
    msl = _msl(op, (8, 16), 1, dtype)
    assert msl.count(f"{builtin}(") == 2 and "simd_shuffle" not in msl


def test_more_turns_than_butterfly_steps_keep_the_butterfly():
    # [16, 8]: 8 lanes along a row, 4 rows per simdgroup: 4 turns would be more calls than 3 shuffle steps
    msl = _msl("sum", (16, 8), 1)
    assert "simd_sum" not in msl and "simd_shuffle_xor" in msl


def test_float_max_in_turns_runs_on_order_keys():
    # [8, 16]: 2 turns of the key reduction and 2 of the NaN flags, no more than the 4 butterfly steps
    msl = _msl("max", (8, 16), 1)
    assert msl.count("simd_max(") == 2 and msl.count("simd_min(") == 2 and "simd_shuffle" not in msl
    # [4, 64] over 4 warps: 4 turns of each would be more calls than 5 butterfly steps
    assert "simd_shuffle_xor" in _msl("max", (32, 4), 1)


@triton.jit
def _maximum(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _minimum(a, b):
    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def extrema_kernel(x_ptr, y_ptr, M: tl.constexpr, N: tl.constexpr, AXIS: tl.constexpr):
    offs = tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :]
    x = tl.load(x_ptr + offs)
    n_out: tl.constexpr = N if AXIS == 0 else M
    o = tl.arange(0, n_out)
    tl.store(y_ptr + o, tl.max(x, AXIS))  # maxnum: NaN ignored unless the whole line is NaN
    tl.store(y_ptr + n_out + o, tl.min(x, AXIS))
    tl.store(y_ptr + 2 * n_out + o, tl.reduce(x, AXIS, _maximum))  # any NaN makes the result NaN
    tl.store(y_ptr + 3 * n_out + o, tl.reduce(x, AXIS, _minimum))


def _extremum_reference(x, axis, largest, propagate):
    """The exact rule: -0 < +0; NaN ignored unless every element is NaN, or (propagate) when any is."""
    nan = torch.isnan(x)
    clean = x.double().masked_fill(nan, -float("inf") if largest else float("inf"))
    m = clean.amax(axis) if largest else clean.amin(axis)
    zeros = (x == 0) & (torch.signbit(x) != largest)  # +0 for max, -0 for min
    m = torch.where(m == 0, torch.where(zeros.any(axis), 0.0 if largest else -0.0, -0.0 if largest else 0.0), m)
    return torch.where(nan.any(axis) if propagate else nan.all(axis), float("nan"), m).to(x.dtype)


def _special_lines(shape, axis, dtype, seed):
    """Each line one pattern: random; random with a NaN; all NaN; signed zeros only; -0 among negatives; +0
    among negatives; infinities with a NaN; one -inf."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g).to(dtype).movedim(axis, -1).contiguous()
    n = x.shape[-1]
    for i in range(x.shape[0]):
        line = x[i]
        pattern = i % 8
        pick = torch.randint(0, n, (max(1, n // 4), ), generator=g)
        if pattern == 1:
            line[pick[0]] = float("nan")
        elif pattern == 2:
            line[:] = float("nan")
        elif pattern == 3:
            line[:] = torch.where(torch.rand(n, generator=g) < 0.5, -0.0, 0.0)
        elif pattern in (4, 5):
            line[:] = -line.abs() - 1
            line[pick] = -0.0 if pattern == 4 else 0.0
        elif pattern == 6:
            line[pick] = float("inf")
            line[pick[-1]] = -float("inf")
            line[pick[0]] = float("nan")
        elif pattern == 7:
            line[:] = float("nan")
            line[pick[0]] = -float("inf")
    return x.movedim(-1, axis).contiguous()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape,axis,num_warps", [((8, 256), 1, 4), ((256, 8), 0, 8), ((8, 16), 1, 4),
                                                  ((16, 64), 0, 4), ((32, 4), 1, 1)])
def test_float_max_min_are_exact_on_nan_and_signed_zeros(dtype, shape, axis, num_warps, device):
    # the key form (full simdgroups, in turns), the butterfly (bfloat16, [32, 4]) and cross-simdgroup steps
    # all follow one rule, bit for bit
    x = _special_lines(shape, axis, dtype, zlib.crc32(repr((str(dtype), shape, axis)).encode()))
    n_out = shape[1 - axis]
    y = torch.empty(4 * n_out, dtype=dtype, device=device)
    extrema_kernel[(1, )](x.to(device), y, M=shape[0], N=shape[1], AXIS=axis, num_warps=num_warps)
    y = y.cpu().view(4, n_out)
    for row, (largest, propagate) in enumerate([(True, False), (False, False), (True, True), (False, True)]):
        ref = _extremum_reference(x, axis, largest, propagate)
        got = y[row]
        assert torch.equal(torch.isnan(got), torch.isnan(ref)), (row, x, got, ref)
        ok = ~torch.isnan(ref)
        assert torch.equal(got[ok], ref[ok]) and torch.equal(torch.signbit(got[ok]), torch.signbit(ref[ok])), (row, got, ref)


# -- whole-tensor reductions (axis=None): Triton flattens each operand with a reshape that may reorder it --


@triton.jit
def _max_with_index(a, ia, b, ib):
    take_b = (b > a) | ((b == a) & (ib < ia))
    return tl.where(take_b, b, a), tl.where(take_b, ib, ia)


@triton.jit
def whole_reduce_kernel(x_ptr, out_ptr, idx_ptr, M: tl.constexpr, N: tl.constexpr, OP: tl.constexpr):
    offs = tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :]
    x = tl.load(x_ptr + offs)
    if OP == "max":
        tl.store(out_ptr, tl.max(x))
    elif OP == "sum":
        tl.store(out_ptr, tl.sum(x))
    elif OP == "argmax" or OP == "argmax_one_layout":  # a tuple: values and their indices flattened alike
        # the indices in the layout of the loaded values, or (plain `offs`) in the one of the offsets
        i = (x * 0).to(tl.int32) + offs if OP == "argmax_one_layout" else offs
        v, i = tl.reduce((x, i), None, _max_with_index)
        tl.store(out_ptr, v)
        tl.store(idx_ptr, i)
    else:  # the reordering reshape feeds a store: its order is kept
        tl.store(out_ptr + tl.arange(0, M * N), tl.reshape(x, M * N, can_reorder=True))


@pytest.mark.parametrize("op", ["max", "sum", "argmax", "argmax_one_layout", "store"])
@pytest.mark.parametrize("shape, num_warps", [((1, 2048), 32), ((64, 64), 4), ((16, 8), 1)])
def test_whole_tensor_reduction_without_a_relayout(op, shape, num_warps, device):
    """Flattening for `axis=None` hands the registers on in another order (as upstream's lowering does) when both
    layouts hold every element once: no threadgroup memory, no barrier. The operands of a tuple reduction are
    permuted alike, so only when they come from one layout (`argmax_one_layout`); values and indices in two
    layouts (`argmax`) are flattened in order. A reordering reshape that a store reads keeps the row-major order."""
    M, N = shape
    g = torch.Generator().manual_seed(M * N)
    x = torch.randn(M, N, generator=g)
    out = torch.zeros(M * N if op == "store" else 1)
    idx = torch.zeros(1, dtype=torch.int32)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # can_reorder is deprecated
        k = whole_reduce_kernel[(1, )](x.to(device), out_d := out.to(device), idx_d := idx.to(device), M=M, N=N,
                                       OP=op, num_warps=num_warps)
    out, idx = out_d.cpu(), idx_d.cpu()
    if op == "max":
        assert out.item() == x.max().item()
    elif op == "sum":
        torch.testing.assert_close(out[0], x.sum(), rtol=1e-5, atol=1e-4)
    elif op.startswith("argmax"):
        assert out.item() == x.max().item() and idx.item() == int(x.flatten().argmax())
    else:
        assert torch.equal(out, x.flatten())
    reshapes = [line for line in k.asm["ttgir"].splitlines() if "tt.reshape" in line]
    assert reshapes and all("allow_reorder" in line for line in reshapes)  # what Triton emits for these
    src_layouts = {re.search(r"tensor<[^,]+, (#\w+)> ->", line).group(1) for line in reshapes}
    msl = k.asm["msl"]
    if op == "argmax":  # two source layouts: both flattened in order (through threadgroup memory here)
        assert len(src_layouts) == 2 and "tt.reshape" in msl
    elif op != "store":  # no code at all for the flattening
        assert len(src_layouts) == 1 and "tt.reshape" not in msl

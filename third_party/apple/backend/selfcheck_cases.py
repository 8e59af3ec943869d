"""The kernels of the self-check (`selfcheck.py`): a conformance subset that touches each op family the lowering
has (elementwise float and integer semantics, NaN-aware min/max, conversions, reductions across simdgroups,
scans, a simdgroup_matrix dot, atomics, a transpose through threadgroup memory, 64-bit integers), and the two
timed kernels (vector add, fp16 GEMM).

Kernel bodies are plain functions, made into Triton kernels by `jit_cases` once per device: Triton keeps a
JIT function's compiled kernels for the target that was active at its first launch, so the GPU half and the
emulator half need JIT functions of their own. Each case makes its inputs on the CPU from a seeded generator,
runs on the device it is given and returns its outputs on the CPU, so both halves see the same bits.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List

import torch
import triton
import triton.language as tl

# ----------------------------------------------------------------------------------------------- kernel bodies


def elementwise_f32(x_ptr, y_ptr, z_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    z = tl.load(z_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * y + z / (1.0 + y * y), mask=mask)


def math_f32(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    ax = tl.abs(x)
    tl.store(out_ptr + 0 * n + offs, tl.exp(x), mask=mask)
    tl.store(out_ptr + 1 * n + offs, tl.log(ax + 1.0), mask=mask)
    tl.store(out_ptr + 2 * n + offs, tl.sqrt(ax), mask=mask)
    tl.store(out_ptr + 3 * n + offs, tl.sin(x), mask=mask)
    tl.store(out_ptr + 4 * n + offs, tl.erf(x), mask=mask)
    tl.store(out_ptr + 5 * n + offs, tl.rsqrt(ax + 0.5), mask=mask)


def integer_i32(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask)
    b = tl.load(b_ptr + offs, mask=mask, other=1)
    tl.store(out_ptr + 0 * n + offs, a // b, mask=mask)
    tl.store(out_ptr + 1 * n + offs, a % b, mask=mask)
    tl.store(out_ptr + 2 * n + offs, a >> (b & 31), mask=mask)
    tl.store(out_ptr + 3 * n + offs, a * b + (a ^ b), mask=mask)
    tl.store(out_ptr + 4 * n + offs, tl.minimum(a, b) - tl.maximum(a, b), mask=mask)
    tl.store(out_ptr + 5 * n + offs, (a.to(tl.uint32) >> 3).to(tl.int32), mask=mask)


def nan_minmax(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + 0 * n + offs, tl.maximum(x, y), mask=mask)  # NaN propagates (Triton's default)
    tl.store(out_ptr + 1 * n + offs, tl.minimum(x, y, propagate_nan=tl.PropagateNan.ALL), mask=mask)
    tl.store(out_ptr + 2 * n + offs, tl.where(x != x, -1.0, x), mask=mask)


def casts(x_ptr, out_ptr, iout_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + 0 * n + offs, x.to(tl.float16).to(tl.float32), mask=mask)
    tl.store(out_ptr + 1 * n + offs, x.to(tl.bfloat16).to(tl.float32), mask=mask)
    tl.store(iout_ptr + 0 * n + offs, (x * 1000.0).to(tl.int32), mask=mask)
    tl.store(iout_ptr + 1 * n + offs, (tl.clamp(x, -40.0, 40.0) * 3.0).to(tl.int8).to(tl.int32), mask=mask)


def row_reduce(x_ptr, sum_ptr, max_ptr, arg_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * N + cols, mask=cols < N, other=-float("inf"))
    tl.store(sum_ptr + row, tl.sum(tl.where(cols < N, x, 0.0), axis=0))
    tl.store(max_ptr + row, tl.max(x, axis=0))
    tl.store(arg_ptr + row, tl.argmax(x, axis=0).to(tl.int32))


def cumsum_i32(x_ptr, out_ptr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    i = tl.arange(0, BLOCK)
    tl.store(out_ptr + row * BLOCK + i, tl.cumsum(tl.load(x_ptr + row * BLOCK + i), axis=0))


def dot_f16(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    rk = tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], tl.dot(a, b))


def atomic_histogram(x_ptr, bins_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.atomic_add(bins_ptr + tl.load(x_ptr + offs, mask=mask, other=0), 1, mask=mask, sem="relaxed")


def transpose(x_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr):
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    x = tl.load(x_ptr + rm[:, None] * N + rn[None, :])
    tl.store(out_ptr + rn[:, None] * M + rm[None, :], tl.trans(x))


def int64_arith(a_ptr, out_ptr, k, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask)
    tl.store(out_ptr + 0 * n + offs, a * k + (a >> 7), mask=mask)  # wraps modulo 2^64
    tl.store(out_ptr + 1 * n + offs, a // 1000003 - a % 97, mask=mask)


def vector_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def gemm(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """C = A @ B for row-major fp16 A [M, K], B [K, N], C [M, N] (float32 accumulation)."""
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rm[:, None] * K + (k0 + rk)[None, :],
                    mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k0 + rk)[:, None] * N + rn[None, :],
                    mask=((k0 + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.float16), mask=(rm[:, None] < M) & (rn[None, :] < N))


# ----------------------------------------------------------------------------------------------- the cases


@dataclass(frozen=True)
class Case:
    """One conformance case: what it covers, its kernel body, how to run it and how to compare the results
    (`rtol`/`atol` of 0: bit for bit, NaNs equal)."""
    name: str
    covers: str
    body: Callable
    run: Callable  # (kernel, device, generator) -> list of CPU tensors
    rtol: float = 0.0
    atol: float = 0.0


def _on(device, *ts):
    return [t.to(device) for t in ts]


def _run_elementwise(k, dev, g):
    n = 1000
    x, y, z = (torch.randn(n, generator=g) for _ in range(3))
    x, y, z = _on(dev, x, y, z)
    out = torch.empty(n, device=dev)
    k[(triton.cdiv(n, 256), )](x, y, z, out, n, BLOCK=256)
    return [out.cpu()]


def _run_math(k, dev, g):
    n = 777
    x = (torch.randn(n, generator=g) * 4).to(dev)
    out = torch.empty(6 * n, device=dev)
    k[(triton.cdiv(n, 128), )](x, out, n, BLOCK=128, num_warps=2)
    return [out.cpu()]


def _run_integer(k, dev, g):
    n = 512
    a = torch.randint(-2**31, 2**31 - 1, (n, ), generator=g, dtype=torch.int32)
    b = torch.randint(-300, 300, (n, ), generator=g, dtype=torch.int32)
    b[b == 0] = 7
    a[:4] = torch.tensor([-2**31, 2**31 - 1, -7, 7], dtype=torch.int32)
    b[:4] = torch.tensor([-1, -1, 2, -2], dtype=torch.int32)
    a, b = _on(dev, a, b)
    out = torch.empty(6 * n, dtype=torch.int32, device=dev)
    k[(triton.cdiv(n, 256), )](a, b, out, n, BLOCK=256)
    return [out.cpu()]


def _run_nan_minmax(k, dev, g):
    n = 256
    x, y = torch.randn(n, generator=g), torch.randn(n, generator=g)
    x[::7] = float("nan")
    y[::5] = float("nan")
    x[1], y[1] = -0.0, 0.0
    x[2], y[2] = float("inf"), float("-inf")
    x, y = _on(dev, x, y)
    out = torch.empty(3 * n, device=dev)
    k[(1, )](x, y, out, n, BLOCK=256)
    return [out.cpu()]


def _run_casts(k, dev, g):
    n = 300
    x = torch.randn(n, generator=g) * 40
    x[:6] = torch.tensor([65504.0, 1e-8, -1e-8, 70000.0, -0.0, 0.5])  # 70000 is infinity in float16
    x = x.to(dev)
    out = torch.empty(2 * n, device=dev)
    iout = torch.empty(2 * n, dtype=torch.int32, device=dev)
    k[(triton.cdiv(n, 128), )](x, out, iout, n, BLOCK=128)
    return [out.cpu(), iout.cpu()]


def _run_row_reduce(k, dev, g):
    m, n = 37, 300
    x = torch.randn(m, n, generator=g)
    x[3, 17] = x[3].max() + 1  # an argmax to find
    x = x.to(dev)
    s, mx = torch.empty(m, device=dev), torch.empty(m, device=dev)
    arg = torch.empty(m, dtype=torch.int32, device=dev)
    k[(m, )](x, s, mx, arg, n, BLOCK=512, num_warps=4)  # across the 4 simdgroups of a threadgroup
    return [s.cpu(), mx.cpu(), arg.cpu()]


def _run_cumsum(k, dev, g):
    x = torch.randint(-1000, 1000, (4, 256), generator=g, dtype=torch.int32).to(dev)
    out = torch.empty_like(x)
    k[(4, )](x, out, BLOCK=256, num_warps=4)
    return [out.cpu()]


def _run_dot(k, dev, g):
    a = torch.randn(32, 32, generator=g).to(torch.float16).to(dev)
    b = torch.randn(32, 32, generator=g).to(torch.float16).to(dev)
    c = torch.empty(32, 32, device=dev)
    k[(1, )](a, b, c, M=32, N=32, K=32, num_warps=4)
    return [c.cpu()]


def _run_atomics(k, dev, g):
    n = 4000
    x = torch.randint(0, 16, (n, ), generator=g, dtype=torch.int32).to(dev)
    bins = torch.zeros(16, dtype=torch.int32, device=dev)
    k[(triton.cdiv(n, 512), )](x, bins, n, BLOCK=512)
    return [bins.cpu()]


def _run_transpose(k, dev, g):
    x = torch.randn(32, 16, generator=g).to(dev)
    out = torch.empty(16, 32, device=dev)
    k[(1, )](x, out, M=32, N=16, num_warps=4)
    return [out.cpu()]


def _run_int64(k, dev, g):
    n = 300
    a = torch.randint(-2**62, 2**62, (n, ), generator=g, dtype=torch.int64).to(dev)
    out = torch.empty(2 * n, dtype=torch.int64, device=dev)
    k[(triton.cdiv(n, 128), )](a, out, 0x9E3779B97F4A7C15 - 2**64, n, BLOCK=128)
    return [out.cpu()]


CASES: List[Case] = [
    Case("elementwise_f32", "float arithmetic, masked loads and stores", elementwise_f32, _run_elementwise, 1e-6, 1e-6),
    Case("math_f32", "exp, log, sqrt, sin, erf, rsqrt (Metal's precise math)", math_f32, _run_math, 1e-5, 1e-6),
    Case("integer_i32", "Triton's integer division, remainder, shifts, wrapping, min/max", integer_i32,
         _run_integer),
    Case("nan_minmax", "NaN-propagating maximum/minimum, signed zeros, infinities", nan_minmax, _run_nan_minmax),
    Case("casts", "float32 to float16, bfloat16, int32 and int8", casts, _run_casts),
    Case("row_reduce", "sum, max and argmax across 4 simdgroups (SIMD reductions, threadgroup memory)",
         row_reduce, _run_row_reduce, 1e-5, 1e-5),
    Case("cumsum_i32", "prefix sums across simdgroups", cumsum_i32, _run_cumsum),
    Case("dot_f16", "tl.dot of float16 on simdgroup_matrix, float32 accumulation", dot_f16, _run_dot, 1e-3, 1e-3),
    Case("atomic_histogram", "32-bit atomic adds under contention", atomic_histogram, _run_atomics),
    Case("transpose", "tl.trans through threadgroup memory", transpose, _run_transpose),
    Case("int64_arith", "64-bit integer arithmetic, wrapping, division", int64_arith, _run_int64),
]


def jit_cases() -> Dict[str, Callable]:
    """A fresh JIT function per case body (and the timed kernels), for one device."""
    kernels = {c.name: triton.jit(c.body) for c in CASES}
    kernels["vector_add"] = triton.jit(vector_add)
    kernels["gemm"] = triton.jit(gemm)
    return kernels

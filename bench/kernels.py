"""Kernels for the compile-time benchmark (bench/compile_time.py), each with the signature,
constexprs and launch options it is compiled with.

Vector add, softmax and layer norm are the repository's examples (examples/kernels.py); the 2-D
reduction, the cumsum scan and the matmul are written here. Nothing in them is apple specific.
"""
import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict

import triton
import triton.language as tl

_ROOT = Path(__file__).resolve().parent.parent


def _examples():
    name = "triton_apple_example_kernels"
    mod = sys.modules.get(name)
    if mod is None:
        spec = importlib.util.spec_from_file_location(name, _ROOT / "examples" / "kernels.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return mod


@triton.jit
def row_reduce_kernel(x_ptr, sum_ptr, max_ptr, M, N, stride_m, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Per-row sum and max of an [M, N] matrix: a [BLOCK_M, BLOCK_N] tile loop over N, then a reduction
    of the accumulators along axis 1."""
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    mx = tl.full([BLOCK_M, BLOCK_N], -float("inf"), dtype=tl.float32)
    for off in range(0, N, BLOCK_N):
        rn = off + tl.arange(0, BLOCK_N)
        mask = (rm[:, None] < M) & (rn[None, :] < N)
        x = tl.load(x_ptr + rm[:, None] * stride_m + rn[None, :], mask=mask, other=0.0).to(tl.float32)
        acc += x
        mx = tl.maximum(mx, tl.where(mask, x, -float("inf")))
    tl.store(sum_ptr + rm, tl.sum(acc, axis=1), mask=rm < M)
    tl.store(max_ptr + rm, tl.max(mx, axis=1), mask=rm < M)


@triton.jit
def row_cumsum_kernel(x_ptr, y_ptr, N, stride, BLOCK: tl.constexpr):
    """Inclusive prefix sum of each row, in BLOCK-wide chunks with a running carry."""
    row = tl.program_id(0)
    carry = tl.zeros([1], dtype=tl.float32)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        mask = cols < N
        x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)
        s = tl.cumsum(x, axis=0) + carry
        tl.store(y_ptr + row * stride + cols, s, mask=mask)
        carry += tl.sum(x, axis=0)


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """C = A @ B, fp16 inputs, fp32 accumulation with tl.dot, K loop, masked edges."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak
    b_ptrs = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptrs, mask=(rm[:, None] < M) & (rk[None, :] + k < K), other=0.0)
        b = tl.load(b_ptrs, mask=(rk[:, None] + k < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c = acc.to(tl.float16)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, c, mask=(rm[:, None] < M) & (rn[None, :] < N))


@dataclass
class BenchKernel:
    name: str
    fn: object
    signature: Dict[str, str]          # every parameter, constexprs marked "constexpr"
    constexprs: Dict[str, object]
    options: Dict[str, object] = field(default_factory=lambda: {"num_warps": 4})

    def attrs(self):
        """Divisibility hints the JIT would attach for 16-byte aligned tensors and multiple-of-16 ints."""
        names = list(self.signature)
        return {(names.index(k), ): [["tt.divisibility", 16]] for k, t in self.signature.items()
                if t.startswith("*") or k in self._div16}

    _div16 = ("stride", "stride_m", "in_row_stride", "out_row_stride", "stride_am", "stride_bk", "stride_cm")


def bench_kernels():
    ex = _examples()
    p32, p16 = "*fp32", "*fp16"
    return [
        BenchKernel("vector_add", ex.vector_add_kernel,
                    {"x_ptr": p32, "y_ptr": p32, "out_ptr": p32, "n_elements": "i32", "BLOCK_SIZE": "constexpr"},
                    {"BLOCK_SIZE": 1024}),
        BenchKernel("softmax", ex.softmax_kernel,
                    {"out_ptr": p32, "in_ptr": p32, "in_row_stride": "i32", "out_row_stride": "i32", "n_rows": "i32",
                     "n_cols": "i32", "BLOCK_SIZE": "constexpr"}, {"BLOCK_SIZE": 1024}),
        BenchKernel("layer_norm", ex.layer_norm_fwd_kernel,
                    {"x_ptr": p32, "y_ptr": p32, "w_ptr": p32, "b_ptr": p32, "mean_ptr": p32, "rstd_ptr": p32,
                     "stride": "i32", "N": "i32", "eps": "fp32", "BLOCK_SIZE": "constexpr"}, {"BLOCK_SIZE": 1024}),
        BenchKernel("reduce_2d", row_reduce_kernel,
                    {"x_ptr": p32, "sum_ptr": p32, "max_ptr": p32, "M": "i32", "N": "i32", "stride_m": "i32",
                     "BLOCK_M": "constexpr", "BLOCK_N": "constexpr"}, {"BLOCK_M": 16, "BLOCK_N": 128}),
        BenchKernel("cumsum", row_cumsum_kernel,
                    {"x_ptr": p32, "y_ptr": p32, "N": "i32", "stride": "i32", "BLOCK": "constexpr"}, {"BLOCK": 1024}),
        BenchKernel("matmul", matmul_kernel,
                    {"a_ptr": p16, "b_ptr": p16, "c_ptr": p16, "M": "i32", "N": "i32", "K": "i32", "stride_am": "i32",
                     "stride_ak": "constexpr", "stride_bk": "i32", "stride_bn": "constexpr", "stride_cm": "i32",
                     "stride_cn": "constexpr", "BLOCK_M": "constexpr", "BLOCK_N": "constexpr", "BLOCK_K": "constexpr"},
                    # unit strides are specialised to constexpr 1, as the JIT does for row-major tensors
                    {"stride_ak": 1, "stride_bn": 1, "stride_cn": 1, "BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}),
    ]

"""Gluon kernels (explicit layouts, `triton.experimental.gluon`) through the apple backend's `gluon_to_ttgir`
stage, run on the emulator (or a Mac's GPU) against torch: elementwise on a blocked layout, a reduction onto
a slice layout, a layout conversion, and `dot_fma` on dot-operand layouts of a blocked parent. Apple's
simdgroup_matrix layout is ours only (upstream's verifier cannot hold it), so Gluon cannot name it; NVIDIA's
MMA layouts are refused with a message saying what to use instead."""
import torch

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl


@gluon.jit
def gl_axpy(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout(size_per_thread=[4], threads_per_warp=[32], warps_per_cta=[4],
                                            order=[0])
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=layout)
    mask = offs < n
    x = gl.load(x_ptr + offs, mask=mask)
    y = gl.load(y_ptr + offs, mask=mask)
    gl.store(out_ptr + offs, alpha * x + y, mask=mask)


def test_gluon_elementwise_blocked(device):
    n = 1500
    x, y = torch.randn(n, device=device), torch.randn(n, device=device)
    out = torch.empty_like(x)
    k = gl_axpy[(triton.cdiv(n, 512), )](x, y, out, 0.5, n, BLOCK=512, num_warps=4)
    torch.testing.assert_close(out, 0.5 * x + y)
    assert "#ttg.blocked<{sizePerThread = [4]" in k.asm["ttgir"]  # the layout written in the kernel


@gluon.jit
def gl_row_sum(x_ptr, out_ptr, M, N, stride, BM: gl.constexpr, BN: gl.constexpr):
    blocked: gl.constexpr = gl.BlockedLayout(size_per_thread=[1, 4], threads_per_warp=[4, 8], warps_per_cta=[2, 2],
                                             order=[1, 0])
    rows = gl.program_id(0) * BM + gl.arange(0, BM, layout=gl.SliceLayout(1, blocked))
    cols = gl.arange(0, BN, layout=gl.SliceLayout(0, blocked))
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    x = gl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=mask, other=0.0)
    total = gl.sum(x, axis=1)  # onto SliceLayout(1, blocked)
    gl.store(out_ptr + rows, total, mask=rows < M)


def test_gluon_reduction_onto_a_slice_layout(device):
    x = torch.randn(37, 50, device=device)
    out = torch.empty(37, device=device)
    gl_row_sum[(triton.cdiv(37, 16), )](x, out, 37, 50, x.stride(0), BM=16, BN=64, num_warps=4)
    torch.testing.assert_close(out, x.sum(dim=1), rtol=1e-5, atol=1e-5)


@gluon.jit
def gl_transpose_copy(x_ptr, out_ptr, N: gl.constexpr):
    # loads row-contiguous, stores column-contiguous: the data changes threads through convert_layout
    by_rows: gl.constexpr = gl.BlockedLayout([1, 4], [8, 4], [4, 1], [1, 0])
    by_cols: gl.constexpr = gl.BlockedLayout([4, 1], [4, 8], [1, 4], [0, 1])
    r = gl.arange(0, N, layout=gl.SliceLayout(1, by_rows))
    c = gl.arange(0, N, layout=gl.SliceLayout(0, by_rows))
    x = gl.load(x_ptr + r[:, None] * N + c[None, :])
    y = gl.convert_layout(x, by_cols)
    r2 = gl.arange(0, N, layout=gl.SliceLayout(1, by_cols))
    c2 = gl.arange(0, N, layout=gl.SliceLayout(0, by_cols))
    gl.store(out_ptr + c2[None, :] * N + r2[:, None], y * 2)


def test_gluon_convert_layout(device):
    x = torch.randn(32, 32, device=device)
    out = torch.empty_like(x)
    k = gl_transpose_copy[(1, )](x, out, N=32, num_warps=4)
    assert "ttg.convert_layout" in k.asm["ttgir"]
    torch.testing.assert_close(out, (x * 2).t())


@gluon.jit
def gl_matmul_fma(a_ptr, b_ptr, c_ptr, M: gl.constexpr, N: gl.constexpr, K: gl.constexpr):
    acc_layout: gl.constexpr = gl.BlockedLayout([1, 4], [8, 4], [4, 1], [1, 0])
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=0)
    b_layout: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=acc_layout, k_width=0)
    m = gl.arange(0, M, layout=gl.SliceLayout(1, a_layout))
    ka = gl.arange(0, K, layout=gl.SliceLayout(0, a_layout))
    kb = gl.arange(0, K, layout=gl.SliceLayout(1, b_layout))
    n = gl.arange(0, N, layout=gl.SliceLayout(0, b_layout))
    a = gl.load(a_ptr + m[:, None] * K + ka[None, :])
    b = gl.load(b_ptr + kb[:, None] * N + n[None, :])
    acc = gl.dot_fma(a, b, gl.zeros([M, N], gl.float32, layout=acc_layout))
    mc = gl.arange(0, M, layout=gl.SliceLayout(1, acc_layout))
    nc = gl.arange(0, N, layout=gl.SliceLayout(0, acc_layout))
    gl.store(c_ptr + mc[:, None] * N + nc[None, :], acc)


def test_gluon_dot_fma_on_dot_operand_layouts(device):
    a, b = torch.randn(32, 16, device=device), torch.randn(16, 32, device=device)
    c = torch.empty(32, 32, device=device)
    gl_matmul_fma[(1, )](a, b, c, M=32, N=32, K=16, num_warps=4)
    torch.testing.assert_close(c, a @ b, rtol=1e-5, atol=1e-5)


def test_gluon_nvidia_mma_v2_runs(device):
    # NVIDIA's mma layouts are register distributions like any other (their linear layouts come from
    # libtriton); the dot on them is put onto simdgroup_matrix with layout conversions around it
    from triton.experimental.gluon.language.nvidia.ampere import mma_v2

    @gluon.jit
    def gl_matmul_mma_v2(a_ptr, b_ptr, c_ptr, M: gl.constexpr, N: gl.constexpr, K: gl.constexpr):
        mma: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[4, 1], instr_shape=[16, 8])
        a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
        b_layout: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=mma, k_width=2)
        m = gl.arange(0, M, layout=gl.SliceLayout(1, a_layout))
        ka = gl.arange(0, K, layout=gl.SliceLayout(0, a_layout))
        kb = gl.arange(0, K, layout=gl.SliceLayout(1, b_layout))
        n = gl.arange(0, N, layout=gl.SliceLayout(0, b_layout))
        a = gl.load(a_ptr + m[:, None] * K + ka[None, :])
        b = gl.load(b_ptr + kb[:, None] * N + n[None, :])
        acc = mma_v2(a, b, gl.zeros([M, N], gl.float32, layout=mma))
        mc = gl.arange(0, M, layout=gl.SliceLayout(1, mma))
        nc = gl.arange(0, N, layout=gl.SliceLayout(0, mma))
        gl.store(c_ptr + mc[:, None] * N + nc[None, :], acc)

    a, b = torch.randn(64, 16, device=device).half(), torch.randn(16, 32, device=device).half()
    c = torch.zeros(64, 32, device=device)
    gl_matmul_mma_v2[(1, )](a, b, c, M=64, N=32, K=16, num_warps=4)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-3, atol=1e-3)

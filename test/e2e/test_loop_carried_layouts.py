"""Row vectors carried by a loop next to a simdgroup_matrix accumulator (passes/loop_carried_layouts.py): they
are carried in the MMA rows' layout, so no step moves them through threadgroup memory. Checked against torch,
with the barriers inside the loop counted in the MSL; and loops the pass must leave alone."""
import re

import pytest
import torch
import triton
import triton.language as tl


def _loop_body(kernel) -> str:
    """The MSL of the kernel's (first) scf.for loop: from its `for (int` line to the matching closing brace
    (loops over a thread's registers count `uint`s)."""
    lines = kernel.asm["msl"].splitlines()
    start = next(i for i, l in enumerate(lines) if re.match(r"\s*for \(int .*\{$", l))
    depth, out = 0, []
    for line in lines[start:]:
        depth += line.count("{") - line.count("}")
        out.append(line)
        if depth == 0:
            break
    return "\n".join(out)


@triton.jit
def online_softmax_attention(q_ptr, k_ptr, v_ptr, out_ptr, lse_ptr, SEQ, M: tl.constexpr, D: tl.constexpr,
                             BN: tl.constexpr, BRANCH: tl.constexpr = False):
    """BRANCH: the running sum is updated inside an scf.if with tensor results, so that vector stays in its
    layout (an scf.if is not elementwise) while the running max still moves to the MMA rows."""
    rm = tl.arange(0, M)
    rd = tl.arange(0, D)
    q = tl.load(q_ptr + rm[:, None] * D + rd[None, :])
    m_i = tl.zeros([M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([M], dtype=tl.float32) + 1.0
    acc = tl.zeros([M, D], dtype=tl.float32)
    for n0 in range(0, SEQ, BN):
        rn = n0 + tl.arange(0, BN)
        kt = tl.load(k_ptr + rn[None, :] * D + rd[:, None])
        s = tl.dot(q, kt) * 0.125
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.math.exp2(s - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        if BRANCH and n0 % (2 * BN) != 0:
            l_i = tl.sum(p, 1) + alpha * l_i
        else:
            l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = tl.load(v_ptr + rn[:, None] * D + rd[None, :])
        acc = tl.dot(p.to(tl.float16), v, acc)
        m_i = m_new
    tl.store(lse_ptr + rm, m_i + tl.math.log2(l_i))
    tl.store(out_ptr + rm[:, None] * D + rd[None, :], acc / l_i[:, None])


def _reference(q, k, v):
    s = (q.float() @ k.float().T) * 0.125
    lse = torch.logsumexp(s * torch.log(torch.tensor(2.0)), 1) / torch.log(torch.tensor(2.0))  # log2-sum-exp2
    p = torch.exp2(s - s.max(1, keepdim=True).values)
    return (p @ v.float()) / p.sum(1, keepdim=True), lse


@pytest.mark.parametrize("M, D, BN, SEQ, warps", [(64, 32, 32, 128, 4), (32, 64, 32, 96, 2), (128, 64, 64, 128, 4)])
def test_running_max_and_sum_stay_in_mma_rows(M, D, BN, SEQ, warps, device):
    g = torch.Generator().manual_seed(9)
    q = (torch.randn(M, D, generator=g) * 0.5).half()
    k, v = ((torch.randn(SEQ, D, generator=g) * 0.5).half() for _ in range(2))
    out = torch.empty(M, D, device=device)
    lse = torch.empty(M, device=device)
    kern = online_softmax_attention[(1, )](q.to(device), k.to(device), v.to(device), out, lse, SEQ, M=M, D=D, BN=BN,
                                           num_warps=warps)
    ref, ref_lse = _reference(q, k, v)
    torch.testing.assert_close(out.cpu(), ref, atol=2e-2, rtol=1e-2)
    torch.testing.assert_close(lse.cpu(), ref_lse, atol=1e-3, rtol=1e-4)
    # per step: K^T and V staged for the two dots (two barriers each); m_i, l_i and alpha never move
    assert _loop_body(kern).count("threadgroup_barrier") <= 4, _loop_body(kern)


@triton.jit
def carried_from_memory(x_ptr, w_ptr, out_ptr, col_ptr, STEPS: tl.constexpr, M: tl.constexpr, K: tl.constexpr):
    """A carried row vector whose update is loaded from memory (not made from the MMA rows): left as it is."""
    rm = tl.arange(0, M)
    rk = tl.arange(0, K)
    acc = tl.zeros([M, K], dtype=tl.float32)
    col = tl.zeros([M], dtype=tl.float32)
    for i in range(STEPS):
        x = tl.load(x_ptr + i * M * K + rm[:, None] * K + rk[None, :])
        acc = tl.dot(x, tl.load(w_ptr + rk[:, None] * K + rk[None, :]), acc)
        col = col + tl.load(x_ptr + i * M * K + rm * K).to(tl.float32) + tl.sum(acc, 1)
    tl.store(out_ptr + rm[:, None] * K + rk[None, :], acc)
    tl.store(col_ptr + rm, col)


def test_vector_not_made_from_mma_rows_is_left_alone(device):
    g = torch.Generator().manual_seed(10)
    steps, M, K = 3, 32, 32
    x = (torch.randn(steps, M, K, generator=g) * 0.3).half()
    w = (torch.randn(K, K, generator=g) * 0.3).half()
    out = torch.empty(M, K, device=device)
    col = torch.empty(M, device=device)
    carried_from_memory[(1, )](x.to(device), w.to(device), out, col, STEPS=steps, M=M, K=K)
    acc = torch.zeros(M, K)
    ref_col = torch.zeros(M)
    for i in range(steps):
        acc = acc + x[i].float() @ w.float()
        ref_col = ref_col + x[i, :, 0].float() + acc.sum(1)
    torch.testing.assert_close(out.cpu(), acc, atol=1e-2, rtol=1e-2)
    torch.testing.assert_close(col.cpu(), ref_col, atol=5e-2, rtol=1e-3)


def test_vector_updated_in_a_branch(device):
    g = torch.Generator().manual_seed(11)
    M, D, BN, SEQ = 64, 32, 32, 128
    q = (torch.randn(M, D, generator=g) * 0.5).half()
    k, v = ((torch.randn(SEQ, D, generator=g) * 0.5).half() for _ in range(2))
    out = torch.empty(M, D, device=device)
    lse = torch.empty(M, device=device)
    online_softmax_attention[(1, )](q.to(device), k.to(device), v.to(device), out, lse, SEQ, M=M, D=D, BN=BN,
                                    BRANCH=True)
    ref, ref_lse = _reference(q, k, v)
    torch.testing.assert_close(out.cpu(), ref, atol=2e-2, rtol=1e-2)
    torch.testing.assert_close(lse.cpu(), ref_lse, atol=1e-3, rtol=1e-4)


@triton.jit
def carried_offsets_gemm(a_ptr, b_ptr, c_ptr, K, M: tl.constexpr, N: tl.constexpr, BK: tl.constexpr):
    """A K loop that carries its column offsets as a vector: they address the loads, so they stay."""
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    rk = tl.arange(0, BK)
    acc = tl.zeros([M, N], dtype=tl.float32)
    for _ in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
        b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
        acc = tl.dot(a, b, acc)
        rk = rk + BK
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


def test_vector_that_addresses_memory_is_left_alone(device):
    g = torch.Generator().manual_seed(13)
    M, N, K, BK = 32, 32, 96, 32
    a = torch.randn(M, K, generator=g).half()
    b = torch.randn(K, N, generator=g).half()
    c = torch.empty(M, N, device=device)
    kern = carried_offsets_gemm[(1, )](a.to(device), b.to(device), c, K, M=M, N=N, BK=BK)
    torch.testing.assert_close(c.cpu(), a.float() @ b.float(), atol=1e-2, rtol=1e-3)
    # only the A and B tiles are staged per step; the offsets are not converted back and forth
    assert "_rows" not in kern.asm["msl"]
    assert _loop_body(kern).count("threadgroup_barrier") <= 4

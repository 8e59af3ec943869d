"""simdgroup_matrix operands kept in registers (passes/operands_in_registers.py), checked against torch:
a loop-invariant B (and A) operand hoisted into fragments, and two dots chained through elementwise ops and
a row reduction, where the first dot's result is the second's A operand without threadgroup memory."""
import re

import pytest
import torch
import triton
import triton.language as tl


def _msl(kernel) -> str:
    msl = kernel.asm["msl"]
    return msl


@triton.jit
def invariant_operand_kernel(a_ptr, w_ptr, out_ptr, STEPS: tl.constexpr, M: tl.constexpr, K: tl.constexpr,
                             N: tl.constexpr, W_IS_A: tl.constexpr):
    rm = tl.arange(0, M)
    rk = tl.arange(0, K)
    rn = tl.arange(0, N)
    acc = tl.zeros((M, N), dtype=tl.float32)
    if W_IS_A:  # out = sum_i W @ b_i, W (M x K) read before the loop
        w = tl.load(w_ptr + rm[:, None] * K + rk[None, :])
        for i in range(STEPS):
            b = tl.load(a_ptr + i * K * N + rk[:, None] * N + rn[None, :])
            acc += tl.dot(w, b)
    else:  # out = sum_i a_i @ W, W (K x N) read before the loop
        w = tl.load(w_ptr + rk[:, None] * N + rn[None, :])
        for i in range(STEPS):
            a = tl.load(a_ptr + i * M * K + rm[:, None] * K + rk[None, :])
            acc += tl.dot(a, w)
    tl.store(out_ptr + rm[:, None] * N + rn[None, :], acc)


@pytest.mark.parametrize("w_is_a", [False, True])
@pytest.mark.parametrize("M, K, N, warps", [(32, 32, 32, 4), (64, 16, 32, 4), (16, 64, 64, 2)])
def test_loop_invariant_operand_in_registers(w_is_a, M, K, N, warps, device):
    g = torch.Generator().manual_seed(3)
    steps = 3
    if w_is_a:
        w = torch.randn(M, K, generator=g).half()
        a = torch.randn(steps, K, N, generator=g).half()
        ref = sum(w.float() @ a[i].float() for i in range(steps))
    else:
        w = torch.randn(K, N, generator=g).half()
        a = torch.randn(steps, M, K, generator=g).half()
        ref = sum(a[i].float() @ w.float() for i in range(steps))
    out = torch.empty(M, N, device=device)
    k = invariant_operand_kernel[(1, )](a.to(device), w.to(device), out, STEPS=steps, M=M, K=K, N=N, W_IS_A=w_is_a,
                                        num_warps=warps)
    torch.testing.assert_close(out.cpu(), ref, atol=1e-2, rtol=1e-3)
    msl = _msl(k)
    assert "simdgroup_multiply_accumulate" in msl
    # W's fragments come from registers (thread_elements), the per-step operand from simdgroup_load
    frag = "a_frag" if w_is_a else "b_frag"
    assert re.search(frag + r"\w*\[\w+\]\.thread_elements\(\)\[0\] = half\(", msl), msl
    assert "simdgroup_load(" in msl


@triton.jit
def chained_dots_kernel(q_ptr, k_ptr, v_ptr, out_ptr, M: tl.constexpr, D: tl.constexpr, N: tl.constexpr,
                        CAUSAL: tl.constexpr):
    """out = softmax-like(q @ k^T) @ v with a row max, exp2 and an optional causal mask between the dots."""
    rm = tl.arange(0, M)
    rd = tl.arange(0, D)
    rn = tl.arange(0, N)
    q = tl.load(q_ptr + rm[:, None] * D + rd[None, :])
    kt = tl.load(k_ptr + rn[None, :] * D + rd[:, None])
    s = tl.dot(q, kt) * 0.125
    if CAUSAL:
        s = tl.where(rm[:, None] >= rn[None, :], s, -1.0e6)
    p = tl.math.exp2(s - tl.max(s, 1)[:, None])
    v = tl.load(v_ptr + rn[:, None] * D + rd[None, :])
    o = tl.dot(p.to(tl.float16), v)
    o = o / tl.sum(p, 1)[:, None]
    tl.store(out_ptr + rm[:, None] * D + rd[None, :], o)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("M, D, N, warps", [(64, 32, 64, 4), (32, 64, 32, 2), (128, 16, 32, 4)])
def test_chained_dots_keep_p_in_registers(causal, M, D, N, warps, device):
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(r, D, generator=g).half() for r in (M, N, N))
    s = (q.float() @ k.float().T) * 0.125
    if causal:
        s = torch.where(torch.arange(M)[:, None] >= torch.arange(N)[None, :], s, torch.tensor(-1.0e6))
    p = torch.exp2(s - s.max(1, keepdim=True).values)
    ref = (p.half().float() @ v.float()) / p.sum(1, keepdim=True)
    out = torch.empty(M, D, device=device)
    kern = chained_dots_kernel[(1, )](q.to(device), k.to(device), v.to(device), out, M=M, D=D, N=N, CAUSAL=causal,
                                      num_warps=warps)
    torch.testing.assert_close(out.cpu(), ref, atol=2e-2, rtol=1e-2)
    msl = _msl(kern)
    assert msl.count("simdgroup_multiply_accumulate") >= 2
    assert re.search(r"a_frag\w*\[\w+\]\.thread_elements\(\)\[0\] = half\(", msl), msl  # Q and P
    # P (M x N fp16) never goes to threadgroup memory: only K^T and V (and small scratch) do
    assert kern.metadata.shared < M * N * 2 + 2 * N * D * 2 or kern.metadata.shared <= 2 * N * D * 2 + 1024

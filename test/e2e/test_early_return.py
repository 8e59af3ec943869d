"""Early `return`s: Triton emits a function body of several blocks joined by cf.br / cf.cond_br, which the
backend lowers to structured MSL. Each kernel is checked against the same logic written in torch."""
import pytest
import torch
import triton
import triton.language as tl


@triton.jit(noinline=True)
def _scale_or_record(record_ptr, v, n):
    if n < 0:
        return v * 2
    tl.store(record_ptr, v)
    return v + 1


@triton.jit
def nested_returns(x_ptr, n, m, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    if pid >= n:
        return
    v = tl.load(x_ptr + offs)
    if m > 2:
        if m > 5:
            tl.store(x_ptr + offs, v * 3)
            return
        v = v + 1
    else:
        v = v - 1
    # Each program records into its own slot (x[100 + pid], a block no program runs): programs have no order.
    w = _scale_or_record(x_ptr + 100 + pid, tl.sum(v), m - 4)
    tl.store(x_ptr + offs, v + w)


def _nested_returns_ref(x, n, m, grid, block=32):
    x = x.clone()
    for pid in range(grid):
        if pid >= n:
            continue
        s = slice(pid * block, pid * block + block)
        v = x[s].clone()
        if m > 2:
            if m > 5:
                x[s] = v * 3
                continue
            v = v + 1
        else:
            v = v - 1
        t = v.sum()
        if m - 4 < 0:
            w = t * 2
        else:
            x[100 + pid] = t
            w = t + 1
        x[s] = v + w
    return x


@pytest.mark.parametrize("m", [0, 3, 4, 7])
def test_returns_at_any_depth_and_in_noinline_callees(m, device):
    x = torch.randn(128, device=device)
    ref = _nested_returns_ref(x.cpu(), 2, m, grid=3)
    nested_returns[(3, )](x, 2, m, BLOCK=32)
    torch.testing.assert_close(x.cpu(), ref, rtol=1e-5, atol=1e-5)


@triton.jit(noinline=True)
def _first(v):
    return _second(v) + 1.0


@triton.jit(noinline=True)
def _second(v):
    if v > 0:
        return v * 10.0
    return -v


@triton.jit
def call_chain(x_ptr, out_ptr):
    i = tl.program_id(0)
    tl.store(out_ptr + i, _first(tl.load(x_ptr + i)))


def test_noinline_functions_calling_each_other_in_any_order(device):
    x = torch.tensor([2.0, -3.0, 0.5], device=device)
    out = torch.empty_like(x)
    call_chain[(3, )](x, out)
    ref = torch.where(x.cpu() > 0, x.cpu() * 10, -x.cpu()) + 1
    torch.testing.assert_close(out.cpu(), ref)


@triton.jit
def row_loss(x_ptr, out_ptr, n_cols, ignore_index, label_ptr, BLOCK: tl.constexpr):
    """Shaped like cross-entropy kernels: rows whose label is ignored write zeros and return early."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    label = tl.load(label_ptr + row)
    if label == ignore_index:
        tl.store(out_ptr + row * n_cols + cols, tl.zeros([BLOCK], tl.float32), mask=cols < n_cols)
        return
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=-float("inf"))
    p = tl.exp(x - tl.max(x, 0))
    p = p / tl.sum(p, 0)
    tl.store(out_ptr + row * n_cols + cols, p, mask=cols < n_cols)


def test_early_return_per_row(device):
    x = torch.randn(6, 50, device=device)
    labels = torch.tensor([1, -100, 3, -100, 0, 2], device=device, dtype=torch.int32)
    out = torch.full_like(x, 7.0)
    row_loss[(6, )](x, out, 50, -100, labels, BLOCK=64)
    ref = torch.softmax(x.cpu(), dim=1)
    ref[labels.cpu() == -100] = 0
    torch.testing.assert_close(out.cpu(), ref, rtol=1e-5, atol=1e-6)


@triton.jit
def dot_then_early_exit(a_ptr, b_ptr, c_ptr, rows_ptr, flag, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    """The dot's result, its row maxima and a value carried through a loop are read after an early return,
    in another block: the Apple passes must see those reads when they retype values."""
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    rk = tl.arange(0, K)
    acc = tl.zeros([M, N], dtype=tl.float32)
    m_i = tl.zeros([M], dtype=tl.float32) - float("inf")
    for k0 in range(0, 2 * K, K):
        a = tl.load(a_ptr + rm[:, None] * 2 * K + (k0 + rk)[None, :])
        b = tl.load(b_ptr + (k0 + rk)[:, None] * N + rn[None, :])
        s = tl.dot(a, b)
        m_i = tl.maximum(m_i, tl.max(s, 1))
        acc = acc + s * 0.5
    if flag != 0:
        return
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)
    tl.store(rows_ptr + rm, m_i)


@pytest.mark.parametrize("flag", [0, 1])
def test_dot_results_read_after_an_early_return(flag, device):
    g = torch.Generator().manual_seed(14)
    M, N, K = 32, 32, 32
    a = torch.randn(M, 2 * K, generator=g).half()
    b = torch.randn(2 * K, N, generator=g).half()
    c = torch.full((M, N), -5.0, device=device)
    rows = torch.full((M, ), -5.0, device=device)
    dot_then_early_exit[(1, )](a.to(device), b.to(device), c, rows, flag, M=M, N=N, K=K)
    s0 = a[:, :K].float() @ b[:K].float()
    s1 = a[:, K:].float() @ b[K:].float()
    if flag:
        assert (c.cpu() == -5).all() and (rows.cpu() == -5).all()
    else:
        torch.testing.assert_close(c.cpu(), (s0 + s1) * 0.5, atol=1e-2, rtol=1e-3)
        torch.testing.assert_close(rows.cpu(), torch.maximum(s0.max(1).values, s1.max(1).values), atol=1e-2,
                                   rtol=1e-3)

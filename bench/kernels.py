"""Every Triton kernel the benchmarks run, in one place; nothing in them is specific to the apple backend.

The examples' vector add, softmax and layer norm are the user-facing demo's own (examples/kernels.py) and are
imported from there rather than copied, so the benchmarks measure exactly what the demo shows. Written here:
reductions and scans (row_reduce, row_cumsum, row_argmax), an elementwise epilogue (bias_gelu), two matmuls
(masked_matmul: the compile-time report's plain K loop; matmul: Triton's tutorial GEMM with grouped program
ordering and an optional float16 accumulator), the tutorial's flash-attention forward (QK^T -> online softmax
in base 2 -> PV, the causal case split into an off-diagonal and a diagonal stage), a scatter-add with atomics,
and launch-cost kernels (empty ones, a tiny load-scale-store, one with many arguments).

How each kernel is launched, sized and checked lives with the report that runs it (bench/cases.py for the
tutorial-style set).
"""
import triton
import triton.language as tl

from examples.kernels import layer_norm_fwd_kernel, softmax_kernel, vector_add_kernel

__all__ = ["vector_add_kernel", "softmax_kernel", "layer_norm_fwd_kernel", "row_reduce_kernel", "row_cumsum_kernel",
           "row_argmax_kernel", "bias_gelu_kernel", "masked_matmul_kernel", "matmul_kernel", "attn_fwd_kernel",
           "scatter_add_kernel", "empty_kernel", "empty_kernel_many_args", "tiny_kernel", "wide_kernel"]

# ------------------------------------------------------------------------------------------------ reductions, scans


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
def row_argmax_kernel(x_ptr, idx_ptr, N, stride, BLOCK: tl.constexpr):
    """Index of the largest element of each row (first one on ties), as int32."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < N, other=-float("inf"))
    tl.store(idx_ptr + row, tl.argmax(x, axis=0).to(tl.int32))


@triton.jit
def bias_gelu_kernel(x_ptr, b_ptr, y_ptr, M, N, stride_m, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """y = gelu(x + b) on an [M, N] matrix with a per-column bias (the exact, erf-based GELU)."""
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    offs = rm[:, None] * stride_m + rn[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    b = tl.load(b_ptr + rn, mask=rn < N, other=0.0)
    h = x + b[None, :]
    y = 0.5 * h * (1.0 + tl.math.erf(h * 0.7071067811865476))
    tl.store(y_ptr + offs, y, mask=mask)

# ------------------------------------------------------------------------------------------------ matmul, attention

@triton.jit
def masked_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
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


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                  ACC_F16: tl.constexpr):
    """C = A @ B. The accumulator is float32 (ACC_F16: float16 via out_dtype); C takes c_ptr's type."""
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)

    if ACC_F16:
        accumulator = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float16)
    else:
        accumulator = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)
        if ACC_F16:
            accumulator = tl.dot(a, b, accumulator, out_dtype=tl.float16)
        else:
            accumulator = tl.dot(a, b, accumulator)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c = accumulator.to(c_ptr.dtype.element_ty)

    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    tl.store(c_ptrs, c, mask=c_mask)


@triton.jit
def _attn_fwd_inner(acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_vn, offs_m, offs_n, offs_d, N_CTX,
                    qk_scale, lo, hi, STAGE: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    # STAGE 1: blocks strictly left of the diagonal (no mask needed), STAGE 2: the diagonal block (causal
    # mask), STAGE 3: every block (non-causal). K is read as a (HEAD_DIM, BLOCK_N) tile, i.e. K^T.
    for start_n in range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        cols = start_n + offs_n
        k = tl.load(k_base + cols[None, :] * stride_kn + offs_d[:, None], mask=cols[None, :] < N_CTX, other=0.0)
        qk = tl.dot(q, k)
        if STAGE == 2:
            keep = (offs_m[:, None] >= cols[None, :]) & (cols[None, :] < N_CTX)
            qk = qk * qk_scale + tl.where(keep, 0, -1.0e6)
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            qk -= m_ij[:, None]
        else:
            qk = tl.where(cols[None, :] < N_CTX, qk * qk_scale, -1.0e6)
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            qk -= m_ij[:, None]
        p = tl.math.exp2(qk)
        l_ij = tl.sum(p, 1)
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + l_ij
        acc = acc * alpha[:, None]
        v = tl.load(v_base + cols[:, None] * stride_vn + offs_d[None, :], mask=cols[:, None] < N_CTX, other=0.0)
        p = p.to(tl.float16)
        acc = tl.dot(p, v, acc)
        m_i = m_ij
    return acc, l_i, m_i


@triton.jit
def attn_fwd_kernel(Q, K, V, Out, sm_scale, stride_qh, stride_qm, stride_kh, stride_kn, stride_vh, stride_vn,
                    stride_oh, stride_om, N_CTX, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                    BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """Out = softmax(Q K^T * sm_scale) V per head; Q, K, V, Out: (heads, N_CTX, HEAD_DIM) fp16, unit stride
    along HEAD_DIM. Grid: (cdiv(N_CTX, BLOCK_M), heads)."""
    start_m = tl.program_id(0)
    off_h = tl.program_id(1)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + off_h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :],
                mask=offs_m[:, None] < N_CTX, other=0.0)
    k_base = K + off_h * stride_kh
    v_base = V + off_h * stride_vh
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.44269504  # exp(x) == exp2(x * log2(e))
    if CAUSAL:
        acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_vn, offs_m, offs_n,
                                        offs_d, N_CTX, qk_scale, 0, start_m * BLOCK_M, 1, BLOCK_N, HEAD_DIM)
        acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_vn, offs_m, offs_n,
                                        offs_d, N_CTX, qk_scale, start_m * BLOCK_M, (start_m + 1) * BLOCK_M, 2,
                                        BLOCK_N, HEAD_DIM)
    else:
        acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_vn, offs_m, offs_n,
                                        offs_d, N_CTX, qk_scale, 0, N_CTX, 3, BLOCK_N, HEAD_DIM)
    acc = acc / l_i[:, None]
    tl.store(Out + off_h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :], acc.to(Out.type.element_ty),
             mask=offs_m[:, None] < N_CTX)

# ------------------------------------------------------------------------------------------------ atomics

@triton.jit
def scatter_add_kernel(hist_ptr, idx_ptr, v_ptr, old_ptr, n, USE_OLD: tl.constexpr, BLOCK: tl.constexpr):
    """hist[idx[i]] += v[i] with tl.atomic_add; USE_OLD also stores each old value (a 64-bit add whose old value
    is used takes the lock table's path)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    i = tl.load(idx_ptr + offs, mask=m, other=0)
    v = tl.load(v_ptr + offs, mask=m, other=0)
    if USE_OLD:
        tl.store(old_ptr + offs, tl.atomic_add(hist_ptr + i, v, mask=m, sem="relaxed"), mask=m)
    else:
        tl.atomic_add(hist_ptr + i, v, mask=m, sem="relaxed")


# ------------------------------------------------------------------------------------------------ launch cost

@triton.jit
def empty_kernel(x_ptr, n):
    """Does nothing: what a launch costs on its own."""
    pass


@triton.jit
def empty_kernel_many_args(t1, t2, t3, t4, t5, i1, i2, i3, i4, i5, i6, i7, i8, i9):
    """Does nothing, with 5 tensor and 9 integer arguments to bind."""
    pass


@triton.jit
def tiny_kernel(x_ptr, y_ptr, n, s, BLOCK: tl.constexpr):
    """y = x * s on the first n of BLOCK elements: the smallest kernel that moves data."""
    i = tl.arange(0, BLOCK)
    m = i < n
    tl.store(y_ptr + i, tl.load(x_ptr + i, mask=m) * s, mask=m)


@triton.jit
def wide_kernel(a, b, c, d, e, f, g, out, n, big, s, h):
    """8 pointers and 4 scalars (int, 64-bit int, float, float), two stores: the cost per argument."""
    if tl.program_id(0) == 0:
        tl.store(out, n + s + h)
        tl.store(out + 1, (big >> 40).to(tl.float32))

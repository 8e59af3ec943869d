"""tl.dot: GEMMs and attention as Triton's tutorials write them, on the simdgroup_matrix path (and the
FMA fallback), against torch."""
import pytest
import torch
import triton
import triton.language as tl

from support.device import compile_for_apple


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, OUT_F16: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float16 if OUT_F16 else tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * stride_am + (k + rk)[None, :] * stride_ak,
                    mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k + rk)[:, None] * stride_bk + rn[None, :] * stride_bn,
                    mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        if OUT_F16:
            acc = tl.dot(a, b, acc, out_dtype=tl.float16)
        else:
            acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def _matmul(a, b, BM=32, BN=32, BK=16, out_dtype=None, num_warps=4, out_f16=False):
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), dtype=out_dtype or a.dtype, device=a.device)
    grid = (triton.cdiv(M, BM), triton.cdiv(N, BN))
    matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                        c.stride(1), BM=BM, BN=BN, BK=BK, OUT_F16=out_f16, num_warps=num_warps)
    return c


TOL = {torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 1.6e-1}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("M,N,K", [(64, 64, 64), (70, 50, 90), (8, 8, 8), (1, 33, 17), (128, 32, 40)])
def test_gemm_shapes_and_dtypes(M, N, K, dtype, device):
    torch.manual_seed(0)
    a = torch.randn(M, K, device=device).to(dtype)
    b = torch.randn(K, N, device=device).to(dtype)
    c = _matmul(a, b)
    ref = (a.float() @ b.float()).to(dtype)
    torch.testing.assert_close(c.float(), ref.float(), rtol=TOL[dtype], atol=TOL[dtype] * (K ** 0.5))


@pytest.mark.parametrize("BM,BN,BK,num_warps", [(16, 16, 16, 1), (64, 32, 32, 4), (32, 64, 16, 8), (16, 64, 8, 2),
                                                (64, 64, 32, 2)])
def test_gemm_tilings(BM, BN, BK, num_warps, device):
    a = torch.randn(100, 72, device=device).half()
    b = torch.randn(72, 90, device=device).half()
    c = _matmul(a, b, BM, BN, BK, num_warps=num_warps)
    torch.testing.assert_close(c.float(), (a.float() @ b.float()).half().float(), rtol=2e-2, atol=0.1)


def test_gemm_transposed_operands(device):
    a = torch.randn(48, 80, device=device).half().t()  # (80, 48) with strides (1, 80)
    b = torch.randn(64, 48, device=device).half().t()  # (48, 64), column-major
    c = _matmul(a, b)
    torch.testing.assert_close(c.float(), (a.float() @ b.float()).half().float(), rtol=2e-2, atol=0.1)


def test_gemm_f16_output_accumulator(device):
    a = torch.randn(32, 64, device=device).half() * 0.5
    b = torch.randn(64, 32, device=device).half() * 0.5
    c = _matmul(a, b, out_f16=True)
    torch.testing.assert_close(c.float(), (a.float() @ b.float()), rtol=3e-2, atol=0.15)


def test_f16_results_round_once_per_dot(device):
    """A float16 accumulator (out_dtype=float16) is rounded once per tl.dot, after its K (here one dot of
    K = 64): each result is the exactly rounded sum but for float32 accumulation order (at most one unit in the
    last place off)."""
    torch.manual_seed(1)
    a = torch.randn(32, 64, device=device).half()
    b = torch.randn(64, 32, device=device).half()
    c = _matmul(a, b, BK=64, out_f16=True).cpu()
    exact = a.cpu().double() @ b.cpu().double()
    ulp = torch.finfo(torch.float16).eps * exact.abs().half().double().clamp_min(2.0**-14)
    assert ((c.double() - exact.half().double()).abs() <= ulp * 1.01).all()
    assert (c == exact.half()).float().mean() > 0.95


@triton.jit
def int8_dot_kernel(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    rk = tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], tl.dot(a, b))


def test_int8_dot_uses_fma_path_exactly(device):
    a = torch.randint(-128, 127, (16, 32), dtype=torch.int8, device=device)
    b = torch.randint(-128, 127, (32, 16), dtype=torch.int8, device=device)
    c = torch.empty(16, 16, dtype=torch.int32, device=device)
    int8_dot_kernel[(1, )](a, b, c, M=16, N=16, K=32)
    assert torch.equal(c, a.int() @ b.int())


@triton.jit
def bmm_kernel(a_ptr, b_ptr, c_ptr, B: tl.constexpr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    rb = tl.arange(0, B)
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    rk = tl.arange(0, K)
    a = tl.load(a_ptr + rb[:, None, None] * M * K + rm[None, :, None] * K + rk[None, None, :])
    b = tl.load(b_ptr + rb[:, None, None] * K * N + rk[None, :, None] * N + rn[None, None, :])
    c = tl.dot(a, b)
    tl.store(c_ptr + rb[:, None, None] * M * N + rm[None, :, None] * N + rn[None, None, :], c)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_batched_dot(dtype, device):
    a = torch.randn(2, 16, 16, device=device).to(dtype)
    b = torch.randn(2, 16, 32, device=device).to(dtype)
    c = torch.empty(2, 16, 32, device=device)
    bmm_kernel[(1, )](a, b, c, B=2, M=16, N=32, K=16)
    torch.testing.assert_close(c, torch.bmm(a.float(), b.float()), rtol=1e-3, atol=1e-3)


@triton.jit
def attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, seq, scale, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                     CAUSAL: tl.constexpr):
    start_m = tl.program_id(0)
    head = tl.program_id(1)
    offs_m = start_m * BM + tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    offs_d = tl.arange(0, D)
    base = head * seq * D
    q = tl.load(q_ptr + base + offs_m[:, None] * D + offs_d[None, :], mask=offs_m[:, None] < seq, other=0.0)
    m_i = tl.full([BM], -float("inf"), tl.float32)
    l_i = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, D], tl.float32)
    end = tl.minimum((start_m + 1) * BM, seq) if CAUSAL else seq
    for start_n in range(0, end, BN):
        cols = start_n + offs_n
        k = tl.load(k_ptr + base + cols[None, :] * D + offs_d[:, None], mask=cols[None, :] < seq, other=0.0)
        s = tl.dot(q, k) * scale
        valid = cols[None, :] < seq
        if CAUSAL:
            valid = valid & (offs_m[:, None] >= cols[None, :])
        s = tl.where(valid, s, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None]
        v = tl.load(v_ptr + base + cols[:, None] * D + offs_d[None, :], mask=cols[:, None] < seq, other=0.0)
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(o_ptr + base + offs_m[:, None] * D + offs_d[None, :], out.to(o_ptr.dtype.element_ty),
             mask=offs_m[:, None] < seq)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seq", [64, 50])
def test_attention_forward(causal, seq, device):
    torch.manual_seed(0)
    H, D = 2, 32
    q, k, v = (torch.randn(H, seq, D, device=device).half() for _ in range(3))
    o = torch.empty_like(q)
    scale = D ** -0.5
    attention_kernel[(triton.cdiv(seq, 32), H)](q, k, v, o, seq, scale, D=D, BM=32, BN=32, CAUSAL=causal)
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
    torch.testing.assert_close(o.float(), ref, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("causal", [False, True])
def test_attention_forward_at_the_tutorial_tile_fits_threadgroup_memory(causal, device):
    # 64x64 tiles, head dim 64, fp16: the operand buffers upstream allocates leave 8 KB, so the 16 KB float
    # layout conversions run in two slabs instead of refusing the kernel
    torch.manual_seed(1)
    H, D, seq = 2, 64, 80
    q, k, v = (torch.randn(H, seq, D, device=device).half() for _ in range(3))
    o = torch.empty_like(q)
    compiled = attention_kernel[(triton.cdiv(seq, 64), H)](q, k, v, o, seq, D ** -0.5, D=D, BM=64, BN=64,
                                                          CAUSAL=causal)
    assert compiled.metadata.shared <= 32 * 1024
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
    torch.testing.assert_close(o.float(), ref, rtol=2e-2, atol=2e-2)


def test_f16_gemm_uses_simdgroup_mma_and_keeps_the_accumulator_in_registers():
    from triton._filecheck import run_filecheck
    sig = {k: "i32" for k in ("M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn", "stride_cm",
                              "stride_cn")}
    sig = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", **sig, "BM": "constexpr", "BN": "constexpr",
           "BK": "constexpr", "OUT_F16": "constexpr"}
    k = compile_for_apple(matmul_kernel, sig, {"BM": 64, "BN": 64, "BK": 32, "OUT_F16": False})
    msl = k.asm["msl"]
    run_filecheck("gemm", msl, r"""
CHECK: for (int k = {{.*}}; k < K; k += {{.*}})
CHECK: simdgroup_matrix<float, 8, 8> {{.*}}[
CHECK: simdgroup_load(
CHECK: simdgroup_multiply_accumulate(
CHECK: // ttg.convert_layout
""")
    # up to the line whose trailing comment names the conversion after the loop
    loop_end = msl.rindex("\n", 0, msl.index("// ttg.convert_layout", msl.index("simdgroup_multiply_accumulate")))
    loop = msl[msl.index("for (int k ="):loop_end]
    # inside the K loop the accumulator is only exchanged with fragments, never with threadgroup memory
    acc_name = msl[msl.index("thread_elements()[0] = float(") + len("thread_elements()[0] = float("):].split("[")[0]
    assert not any(acc_name in line and "smem" in line for line in loop.splitlines())
    assert "simdgroup_load" in loop and loop.count("threadgroup_barrier") <= 4


# Operand tiles that together exceed Apple's 32 KB of threadgroup memory: the dot stages them itself, in rounds
# over K through the room that is left (upstream's allocation would need 40-128 KB; refused as OutOfResources
# before).
@pytest.mark.parametrize("M,N,K,dtype", [(64, 128, 128, torch.float32), (32, 128, 64, torch.float32),
                                         (128, 128, 128, torch.float16), (128, 64, 256, torch.bfloat16)])
def test_operand_tiles_larger_than_threadgroup_memory(M, N, K, dtype, device):
    g = torch.Generator().manual_seed(M + K)
    a = torch.randn(M, K, generator=g).to(dtype).to(device)
    b = torch.randn(K, N, generator=g).to(dtype).to(device)
    c = torch.empty(M, N, dtype=dtype, device=device)
    k = matmul_kernel[(1, 1)](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                              c.stride(1), BM=M, BN=N, BK=K, OUT_F16=False, num_warps=4)
    assert k.metadata.shared <= 32 * 1024 and "t_round" in k.asm["msl"]
    ref = (a.float() @ b.float()).to(dtype)
    torch.testing.assert_close(c.float(), ref.float(), rtol=TOL[dtype], atol=TOL[dtype] * (K ** 0.5))


def test_operand_tiles_larger_than_threadgroup_memory_in_a_k_loop(device):
    # 128x128 fp32 result, 64-wide K steps: 64 KB of operands per step, accumulated over three steps + a tail
    g = torch.Generator().manual_seed(5)
    a = torch.randn(128, 200, generator=g).to(device)
    b = torch.randn(200, 128, generator=g).to(device)
    c = _matmul(a, b, BM=128, BN=128, BK=64)
    torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-4 * 200 ** 0.5)


def test_batched_operands_larger_than_threadgroup_memory(device):
    # test_core's test_dot3d at B=8: 8 x (64x64 @ 64x32) fp16 operands need 96 KB
    g = torch.Generator().manual_seed(6)
    a = torch.randn(8, 64, 64, generator=g).half().to(device)
    b = torch.randn(8, 64, 32, generator=g).half().to(device)
    c = torch.empty(8, 64, 32, device=device)
    k = bmm_kernel[(1, )](a, b, c, B=8, M=64, N=32, K=64)
    assert k.metadata.shared <= 32 * 1024
    torch.testing.assert_close(c, torch.bmm(a.float(), b.float()), rtol=1e-3, atol=1e-3)


# Found by running upstream Triton's test_core on the apple backend (issue 9); hand-written TTGIR is
# compiled from a `.ttgir` file the way upstream's layout tests do it.
@triton.jit
def _dot_f16_add_kernel(x_ptr, y_ptr, z_ptr, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    offs = r[:, None] * BLOCK + r[None, :]
    acc = tl.dot(tl.load(x_ptr + offs), tl.load(y_ptr + offs), out_dtype=tl.float16)
    tl.store(z_ptr + offs, acc + tl.load(z_ptr + offs))


def test_dot_float16_result_plus_matrix(device):
    # test_core's test_dot[32-32-32, 4 warps, add-matrix, float16 in and out] came out wrong (992 of 1024
    # elements) at 15e66c3 and until 3885faf; right since 4649d5c (operands kept in registers)
    g = torch.Generator().manual_seed(17)
    x = (torch.randn(32, 32, generator=g) * 0.1).half().to(device)
    y = (torch.randn(32, 32, generator=g) * 0.1).half().to(device)
    z = (1 + torch.randn(32, 32, generator=g) * 0.1).half().to(device)
    ref = (x.float() @ y.float() + z.float())
    _dot_f16_add_kernel[(1, )](x, y, z, BLOCK=32, num_warps=4)
    torch.testing.assert_close(z.float().cpu(), ref.cpu(), rtol=0.01, atol=0.01)


# A `tt.dot` on NVIDIA's mma layout and its operand layouts, as Gluon's mma_v2 or a hand-written test writes it:
# the backend moves it onto simdgroup_matrix with conversions at its edges.
_NVIDIA_MMA_DOT = """
#blk = #ttg.blocked<{sizePerThread = [1, 4], threadsPerWarp = [4, 8], warpsPerCTA = [4, 1], order = [1, 0]}>
#mma = #ttg.nvidia_mma<{versionMajor = 2, versionMinor = 0, warpsPerCTA = [2, 2], instrShape = [16, 8]}>
#opa = #ttg.dot_op<{opIdx = 0, parent = #mma, kWidth = 2}>
#opb = #ttg.dot_op<{opIdx = 1, parent = #mma, kWidth = 2}>
module attributes {"ttg.num-ctas" = 1 : i32, "ttg.num-warps" = 4 : i32, "ttg.threads-per-warp" = 32 : i32} {
  tt.func public @mma_dot(%x: !tt.ptr<f16>, %y: !tt.ptr<f16>, %o: !tt.ptr<f32>) {
    %c32 = arith.constant dense<32> : tensor<32x1xi32, #blk>
    %z = arith.constant dense<1.0> : tensor<32x32xf32, #mma>
    %r = tt.make_range {end = 32 : i32, start = 0 : i32} : tensor<32xi32, #ttg.slice<{dim = 1, parent = #blk}>>
    %c = tt.make_range {end = 32 : i32, start = 0 : i32} : tensor<32xi32, #ttg.slice<{dim = 0, parent = #blk}>>
    %r2 = tt.expand_dims %r {axis = 1 : i32} : tensor<32xi32, #ttg.slice<{dim = 1, parent = #blk}>> -> tensor<32x1xi32, #blk>
    %rs = arith.muli %r2, %c32 : tensor<32x1xi32, #blk>
    %c2 = tt.expand_dims %c {axis = 0 : i32} : tensor<32xi32, #ttg.slice<{dim = 0, parent = #blk}>> -> tensor<1x32xi32, #blk>
    %rb = tt.broadcast %rs : tensor<32x1xi32, #blk> -> tensor<32x32xi32, #blk>
    %cb = tt.broadcast %c2 : tensor<1x32xi32, #blk> -> tensor<32x32xi32, #blk>
    %off = arith.addi %rb, %cb : tensor<32x32xi32, #blk>
    %xs = tt.splat %x : !tt.ptr<f16> -> tensor<32x32x!tt.ptr<f16>, #blk>
    %xp = tt.addptr %xs, %off : tensor<32x32x!tt.ptr<f16>, #blk>, tensor<32x32xi32, #blk>
    %xv = tt.load %xp : tensor<32x32x!tt.ptr<f16>, #blk>
    %ys = tt.splat %y : !tt.ptr<f16> -> tensor<32x32x!tt.ptr<f16>, #blk>
    %yp = tt.addptr %ys, %off : tensor<32x32x!tt.ptr<f16>, #blk>, tensor<32x32xi32, #blk>
    %yv = tt.load %yp : tensor<32x32x!tt.ptr<f16>, #blk>
    %a = ttg.convert_layout %xv : tensor<32x32xf16, #blk> -> tensor<32x32xf16, #opa>
    %b = ttg.convert_layout %yv : tensor<32x32xf16, #blk> -> tensor<32x32xf16, #opb>
    %d = tt.dot %a, %b, %z : tensor<32x32xf16, #opa> * tensor<32x32xf16, #opb> -> tensor<32x32xf32, #mma>
    %db = ttg.convert_layout %d : tensor<32x32xf32, #mma> -> tensor<32x32xf32, #blk>
    %os = tt.splat %o : !tt.ptr<f32> -> tensor<32x32x!tt.ptr<f32>, #blk>
    %op = tt.addptr %os, %off : tensor<32x32x!tt.ptr<f32>, #blk>, tensor<32x32xi32, #blk>
    tt.store %op, %db : tensor<32x32x!tt.ptr<f32>, #blk>
    tt.return
  }
}
"""


def test_dot_on_nvidia_mma_layouts(tmp_path, device):
    path = tmp_path / "mma_dot.ttgir"
    path.write_text(_NVIDIA_MMA_DOT)
    kernel = triton.compile(str(path))
    g = torch.Generator().manual_seed(3)
    x = (torch.randn(32, 32, generator=g) * 0.5).half().to(device)
    y = (torch.randn(32, 32, generator=g) * 0.5).half().to(device)
    out = torch.zeros(32, 32, device=device)
    kernel[(1, 1, 1)](x, y, out)
    torch.testing.assert_close(out.cpu(), (x.float() @ y.float() + 1).cpu(), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("BM,BN,BK,dtype,padded", [(64, 64, 32, torch.float16, True), (32, 32, 32, torch.float32, True),
                                                   (128, 128, 64, torch.float16, False)])
def test_operand_buffers_have_padded_rows_where_they_fit(BM, BN, BK, dtype, padded, device):
    # the buffers simdgroup_load reads fragments from get rows 16 bytes longer (no bank conflicts between the 8
    # rows of a fragment, analysis/padded_rows.py); 128x64 and 64x128 halves fill 32 KB exactly, so they stay
    # unpadded rather than not fit
    torch.manual_seed(0)
    a = torch.randn(200, 3 * BK, device=device).to(dtype)
    b = torch.randn(3 * BK, 150, device=device).to(dtype)
    c = torch.empty((200, 150), device=device)
    M, K = a.shape
    N = b.shape[1]
    kernel = matmul_kernel[(triton.cdiv(M, BM), triton.cdiv(N, BN))](
        a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BM=BM, BN=BN, BK=BK, OUT_F16=False, num_warps=4)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=TOL[dtype], atol=TOL[dtype] * K**0.5)
    text = kernel.asm["msl"]
    eb = a.element_size()
    a_ld, b_ld = (BK + 16 // eb, BN + 16 // eb) if padded else (BK, BN)
    loads = [line for line in text.splitlines() if "simdgroup_load(" in line]
    assert len(loads) == 2 and loads[0].endswith(f", {a_ld});") and loads[1].endswith(f", {b_ld});"), loads
    assert kernel.metadata.shared <= 32768

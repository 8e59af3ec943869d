"""Vector global accesses (load_store_ops): runs of registers move as one 8- or 16-byte access when axis info
proves them contiguous and aligned. A mask that is not provably one value over a run (the masked tail of a
length that is not a multiple of 16) checks the run's mask bits: all set, one vector access; else element by
element, so no byte past the end is read or written (the emulator faults on any out-of-bounds access).
Results are checked exactly against torch."""
import pytest
import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask, other=1)
    tl.store(out_ptr + offs, x + y, mask=mask)


@triton.jit
def other_tensor_kernel(x_ptr, z_ptr, out_ptr, n, BLOCK: tl.constexpr):
    # the fallback of the masked load is a tensor (different in every register)
    offs = tl.arange(0, BLOCK)
    z = tl.load(z_ptr + offs)
    x = tl.load(x_ptr + offs, mask=offs < n, other=z)
    tl.store(out_ptr + offs, x)


@triton.jit
def rows_kernel(x_ptr, out_ptr, M, N, stride, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.arange(0, BLOCK_N)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    offs = rm[:, None] * stride + rn[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=0)
    tl.store(out_ptr + offs, x * 2, mask=mask)


def _msl(kernel) -> str:
    src = kernel.asm["msl"]
    return src


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int16, torch.int8])
@pytest.mark.parametrize("n", [1, 3, 17, 1000, 1001, 1023, 1024, 2047])
def test_masked_tail(dtype, n, device):
    g = torch.Generator().manual_seed(n)
    scale = 30 if dtype == torch.int8 else 100
    x = torch.randn(n, generator=g).mul(scale).to(dtype).to(device)
    y = torch.randn(n, generator=g).mul(scale).to(dtype).to(device)
    out = torch.full((n, ), -7, dtype=dtype, device=device)
    k = add_kernel[(triton.cdiv(n, 1024), )](x, y, out, n, BLOCK=1024)
    assert torch.equal(out.cpu(), (x + y).cpu())
    # 16 bytes per access: 4 x 32-bit, or 8 x 16-bit elements as four 32-bit words; 1024 int8 over 128
    # threads are 8 per thread, so 8 bytes (two words)
    vt = {torch.float32: "float4", torch.int32: "int4", torch.int8: "uint2"}.get(dtype, "uint4")
    src = _msl(k)
    assert f"*(device const {vt}*)" in src and f"*(device {vt}*)" in src
    if n % 16:  # the JIT does not specialise n: the tail checks every mask bit of a run
        assert " && " in src


@pytest.mark.parametrize("n", [0, 5, 64, 127])
def test_masked_tail_with_a_tensor_fallback(n, device):
    x = torch.arange(128, dtype=torch.float32, device=device)
    z = -torch.arange(128, dtype=torch.float32, device=device)
    out = torch.empty(128, device=device)
    other_tensor_kernel[(1, )](x, z, out, n, BLOCK=128)
    ref = torch.where(torch.arange(128) < n, x.cpu(), z.cpu())
    assert torch.equal(out.cpu(), ref)


@pytest.mark.parametrize("M,N", [(5, 7), (16, 64), (33, 100), (8, 129)])
def test_rows_with_masked_tails(M, N, device):
    x = torch.randn(M, N).to(device)
    out = torch.zeros(M, N, device=device)
    rows_kernel[(triton.cdiv(M, 8), )](x, out, M, N, x.stride(0), BLOCK_M=8, BLOCK_N=triton.next_power_of_2(N))
    assert torch.equal(out.cpu(), x.cpu() * 2)


def test_tail_reads_nothing_past_the_end(device):
    # exactly n elements: a vector access crossing the end would be an out-of-bounds fault in the emulator
    for n in (1, 2, 3, 5, 6, 7):
        x = torch.arange(n, dtype=torch.float32, device=device)
        out = torch.empty(n, device=device)
        add_kernel[(1, )](x, x, out, n, BLOCK=128)
        assert torch.equal(out.cpu(), 2 * x.cpu())


# -- axis facts that must not be over-claimed (each once gave vector accesses under the wrong mask or address) --


@triton.jit
def triangle_kernel(x_ptr, out_ptr, PRED: tl.constexpr, ROW_LEFT: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.arange(0, BLOCK)[:, None]
    cols = tl.arange(0, BLOCK)[None, :]
    a, b = (rows, cols) if ROW_LEFT else (cols, rows)
    if PRED == "<":
        mask = a < b
    elif PRED == "<=":
        mask = a <= b
    elif PRED == ">":
        mask = a > b
    else:
        mask = a >= b
    offs = rows * BLOCK + cols
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask, other=0.0), mask=mask)


@pytest.mark.parametrize("pred", ["<", "<=", ">", ">="])
@pytest.mark.parametrize("row_left", [False, True])
def test_triangular_masks(pred, row_left, device):
    """A comparison of a row index with a column index is constant over runs of 4 columns for < and >= with the
    column on the left, and for > and <= with it on the right; the other four flip inside a run."""
    x = torch.randn(64, 64, device=device)
    out = torch.zeros_like(x)
    triangle_kernel[(1, )](x, out, PRED=pred, ROW_LEFT=row_left, BLOCK=64)
    r, c = torch.arange(64)[:, None], torch.arange(64)[None, :]
    a, b = (r, c) if row_left else (c, r)
    mask = {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[pred]
    assert torch.equal(out.cpu(), torch.where(mask, x.cpu(), torch.zeros(())))


@triton.jit
def index_arith_kernel(x_ptr, out_ptr, SHIFT: tl.constexpr, MOD: tl.constexpr, MUL: tl.constexpr,
                       TWICE: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    if TWICE:
        offs = i + i
    elif MOD:
        offs = (i + SHIFT) % MOD
    else:
        offs = i * MUL + SHIFT
    tl.store(out_ptr + i, tl.load(x_ptr + offs))


@pytest.mark.parametrize("shift, mod, mul, twice", [(2, 4, 0, False), (1, 8, 0, False), (6, 8, 0, False),
                                                    (0, 0, 3, False), (4, 0, 2, False), (0, 0, 0, True)])
def test_offsets_from_remainders_and_products(shift, mod, mul, twice, device):
    """(i + 2) % 4 runs 2, 3, 0, 1: contiguous in pairs only; i * 3 and i + i are contiguous nowhere."""
    x = torch.arange(1024, dtype=torch.float32, device=device)
    out = torch.zeros(128, device=device)
    index_arith_kernel[(1, )](x, out, SHIFT=shift, MOD=mod, MUL=mul, TWICE=twice, BLOCK=128, num_warps=1)
    i = torch.arange(128)
    ref = 2 * i if twice else (i + shift) % mod if mod else i * mul + shift
    assert torch.equal(out.cpu(), ref.float())


@triton.jit
def copy3d_kernel(x_ptr, out_ptr, M, N, K, stride_m, stride_n, stride_k, M_BLOCK: tl.constexpr,
                  N_BLOCK: tl.constexpr, K_BLOCK: tl.constexpr):
    m = tl.program_id(0) * M_BLOCK + tl.arange(0, M_BLOCK)[:, None, None]
    n = tl.program_id(1) * N_BLOCK + tl.arange(0, N_BLOCK)[None, :, None]
    k = tl.program_id(2) * K_BLOCK + tl.arange(0, K_BLOCK)[None, None, :]
    mask = (m < M) & (n < N) & (k < K)
    x = tl.load(x_ptr + m * N * K + n * K + k, mask=mask)
    tl.store(out_ptr + m * stride_m + n * stride_n + k * stride_k, x, mask=mask)


def test_3d_copy_with_rows_not_a_multiple_of_the_vector_width(device):
    """Rows of 119 elements: m * N * K + n * K is not a multiple of 4, whatever divides m and n themselves."""
    x = torch.randn(10, 50, 119, device=device)
    out = torch.zeros(10, 64, 128, device=device)
    grid = (triton.cdiv(10, 8), triton.cdiv(50, 8), triton.cdiv(119, 64))
    copy3d_kernel[grid](x, out, 10, 50, 119, *out.stride(), M_BLOCK=8, N_BLOCK=8, K_BLOCK=64)
    assert torch.equal(out[:, :50, :119], x)
    assert not out[:, 50:].any() and not out[:, :, 119:].any()


# What upstream's tensor-descriptor loads become (tutorial 06): the masked load's `other` is an `arith.select`
# between two constant tiles on a scalar i1 (the descriptor's padding flag); axis analysis once crashed on it.
_SELECT_OTHER = """
#blk = #ttg.blocked<{sizePerThread = [4], threadsPerWarp = [32], warpsPerCTA = [1], order = [0]}>
module attributes {"ttg.num-ctas" = 1 : i32, "ttg.num-warps" = 1 : i32, "ttg.threads-per-warp" = 32 : i32} {
  tt.func public @select_other(%x: !tt.ptr<f32>, %o: !tt.ptr<f32>, %n: i32, %pad: i1) {
    %nan = arith.constant dense<0x7FC00000> : tensor<128xf32, #blk>
    %zero = arith.constant dense<0.000000e+00> : tensor<128xf32, #blk>
    %other = arith.select %pad, %nan, %zero : tensor<128xf32, #blk>
    %r = tt.make_range {end = 128 : i32, start = 0 : i32} : tensor<128xi32, #blk>
    %ns = tt.splat %n : i32 -> tensor<128xi32, #blk>
    %m = arith.cmpi slt, %r, %ns : tensor<128xi32, #blk>
    %xs = tt.splat %x : !tt.ptr<f32> -> tensor<128x!tt.ptr<f32>, #blk>
    %xp = tt.addptr %xs, %r : tensor<128x!tt.ptr<f32>, #blk>, tensor<128xi32, #blk>
    %v = tt.load %xp, %m, %other : tensor<128x!tt.ptr<f32>, #blk>
    %os = tt.splat %o : !tt.ptr<f32> -> tensor<128x!tt.ptr<f32>, #blk>
    %op = tt.addptr %os, %r : tensor<128x!tt.ptr<f32>, #blk>, tensor<128xi32, #blk>
    tt.store %op, %v : tensor<128x!tt.ptr<f32>, #blk>
    tt.return
  }
}
"""


@pytest.mark.parametrize("pad", [0, 1])
def test_masked_load_whose_other_selects_on_a_scalar(pad, tmp_path, device):
    path = tmp_path / "select_other.ttgir"
    path.write_text(_SELECT_OTHER)
    kernel = triton.compile(str(path))
    x = torch.randn(128)
    out = torch.empty(128, device=device)
    kernel[(1, 1, 1)](x.to(device), out, 100, pad)
    ref = x.clone()
    ref[100:] = float("nan") if pad else 0.0
    torch.testing.assert_close(out.cpu(), ref, equal_nan=True)


# -- facts that must survive integer width changes (liger-kernel computes row offsets in 64 bits) --


@triton.jit
def rows_64_bit_kernel(x_ptr, out_ptr, stride, n_rows, BLOCK: tl.constexpr, SHIFT: tl.constexpr,
                       ROW_MOD: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    row = pid % n_rows if ROW_MOD else pid  # rope's cos row: program % sequence length
    cols = (tl.arange(0, BLOCK) + SHIFT).to(tl.int64)
    x = tl.load(x_ptr + row * stride + cols)
    tl.store(out_ptr + pid * stride + cols, x * 2)


@pytest.mark.parametrize("stride, shift, row_mod, vector", [(1024, 0, False, "float4"), (1024, 0, True, "float4"),
                                                            (1024, 2, False, "float2"), (1030, 0, False, None)])
def test_row_offsets_in_64_bits(stride, shift, row_mod, vector, device):
    """`pid.to(tl.int64) * stride` keeps the stride's divisibility (16 when the JIT specialises it) and widened
    offsets keep their contiguity: 16-byte accesses, as upstream's NVIDIA backend makes (ld.global.v4) for liger's
    swiglu. Offsets from 2 are aligned in pairs only; a stride of 1030 is not specialised: one float at a time."""
    rows = 8
    x = torch.randn(rows * stride + shift, device=device)
    out = torch.zeros(rows * stride + shift, device=device)
    k = rows_64_bit_kernel[(rows, )](x, out, stride, 4 if row_mod else rows, BLOCK=512, SHIFT=shift,
                                     ROW_MOD=row_mod, num_warps=4)
    ref = torch.zeros(rows * stride + shift)
    for pid in range(rows):
        row = pid % 4 if row_mod else pid
        ref[pid * stride + shift:pid * stride + shift + 512] = 2 * x.cpu()[row * stride + shift:row * stride + shift + 512]
    assert torch.equal(out.cpu(), ref)
    src = _msl(k)
    if vector:
        assert f"*(device const {vector}*)" in src and f"*(device {vector}*)" in src
    else:
        assert "float4*)" not in src and "float2*)" not in src

"""`tl.dot_scaled` by decomposition (passes/decompose_scaled_dot.py) against a float64 reference computed from the
same bits: every operand format, with and without e8m0 block scales, e2m1 packed along K or along M/N,
`fast_math` both ways with NaN (0xFF) and zero scales, an accumulator, `out_dtype` (float32 only in Triton 3.9's
frontend), a K loop; and the bf16 case on
simdgroup_matrix.

The reference follows upstream's decomposition (Triton 3.9, `DecomposeScaledBlocked`), decoded here bit by bit
with numpy, independently of the kernel: operands become the compute type (f16 if either operand is fp16, else
bf16); the e8m0 scale is 2^(s-127) in that type (bf16 keeps 2^-127 as a subnormal; f16 rounds: above 2^15 inf,
below 2^-24 zero), and 0xFF is NaN unless `fast_math`, where it is inf; operand and scale multiply in the compute
type; the dot sums the products in float32.
"""
import numpy as np
import pytest
import torch
import triton
import triton.language as tl

# -- reference upcasts (numpy, from the bits) --------------------------------------------------------------


def _e2m1(codes: np.ndarray) -> np.ndarray:
    mag = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])[codes & 7]
    return np.where(codes & 8, -mag, mag)


def _minifloat(codes: np.ndarray, ebits: int, mbits: int, bias: int, ieee_specials: bool) -> np.ndarray:
    codes = codes.astype(np.int64)
    sign = np.where(codes >> (ebits + mbits) & 1, -1.0, 1.0)
    e = codes >> mbits & ((1 << ebits) - 1)
    m = codes & ((1 << mbits) - 1)
    normal = (1.0 + m / (1 << mbits)) * np.exp2(e.astype(np.float64) - bias)
    sub = (m / (1 << mbits)) * np.exp2(1.0 - bias)
    val = sign * np.where(e == 0, sub, normal)
    top = e == (1 << ebits) - 1
    if ieee_specials:  # e5m2: inf and NaN as IEEE
        val = np.where(top & (m == 0), sign * np.inf, val)
        val = np.where(top & (m != 0), np.nan, val)
    else:  # e4m3fn: only S.1111.111 is NaN, no infinities
        val = np.where(top & (m == (1 << mbits) - 1), np.nan, val)
    return val


def _decode(fmt: str, t: torch.Tensor) -> np.ndarray:
    """float64 values of a stored operand (e2m1 still packed)."""
    if fmt == "bf16":
        return t.float().double().numpy()
    if fmt == "fp16":
        return t.double().numpy()
    codes = t.numpy().astype(np.int64)
    if fmt == "e4m3":
        return _minifloat(codes, 4, 3, 7, False)
    if fmt == "e5m2":
        return _minifloat(codes, 5, 2, 15, True)
    raise ValueError(fmt)


def _unpack_e2m1(t: torch.Tensor, axis: int) -> np.ndarray:
    codes = t.numpy().astype(np.int64)
    lo, hi = _e2m1(codes & 15), _e2m1(codes >> 4)
    out = np.stack([lo, hi], axis=axis + 1)  # low nibble first
    shape = list(codes.shape)
    shape[axis] *= 2
    return out.reshape(shape)


def _e8m0(s: torch.Tensor, ct: torch.dtype, fast_math: bool) -> np.ndarray:
    codes = s.numpy().astype(np.int64)
    val = np.exp2(codes.astype(np.float64) - 127)
    val = np.where(codes == 255, np.inf if fast_math else np.nan, val)
    return _round(val, ct)


def _round(x: np.ndarray, ct: torch.dtype) -> np.ndarray:
    """Round float64 values to the compute type (through float32, exact for the products formed here)."""
    return torch.from_numpy(x.astype(np.float32)).to(ct).double().numpy()


def reference(*args, **kwargs) -> torch.Tensor:
    with np.errstate(invalid="ignore", over="ignore"):  # inf * 0 (fast_math with a NaN scale) is part of it
        return _reference(*args, **kwargs)


def _reference(fa, a, sa, fb, b, sb, lkp, rkp, fast_math, acc=None, out_dtype=torch.float32):
    ct = torch.float16 if "fp16" in (fa, fb) else torch.bfloat16
    va = _unpack_e2m1(a, 1 if lkp else 0) if fa == "e2m1" else _decode(fa, a)
    vb = _unpack_e2m1(b, 0 if rkp else 1) if fb == "e2m1" else _decode(fb, b)
    va, vb = _round(va, ct), _round(vb, ct)
    k = va.shape[1]
    if sa is not None:
        block = k // sa.shape[1]
        va = _round(va * np.repeat(_e8m0(sa, ct, fast_math), block, axis=1), ct)
    if sb is not None:
        block = k // sb.shape[1]
        vb = _round(vb * np.repeat(_e8m0(sb, ct, fast_math), block, axis=1).T, ct)
    out = np.einsum("mk,kn->mn", va, vb)  # not BLAS: its handling of inf/NaN varies
    if acc is not None:
        out = out + acc.double().numpy()
    return torch.from_numpy(out).to(out_dtype).double()


# -- the kernel --------------------------------------------------------------------------------------------


@triton.jit
def scaled_dot_kernel(a_ptr, sa_ptr, b_ptr, sb_ptr, acc_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr,
                      K: tl.constexpr, BLOCK_K: tl.constexpr, FA: tl.constexpr, FB: tl.constexpr,
                      HAS_SA: tl.constexpr, HAS_SB: tl.constexpr, FAST: tl.constexpr, LKP: tl.constexpr,
                      RKP: tl.constexpr, HAS_ACC: tl.constexpr, OUT: tl.constexpr, SB: tl.constexpr):
    PA: tl.constexpr = 2 if FA == "e2m1" else 1
    PB: tl.constexpr = 2 if FB == "e2m1" else 1
    # stored blocks: A is [AM, AK] of a [AM, AK * K / BLOCK_K] tensor, B is [BK, BN] of [BK * K / BLOCK_K, BN]
    AM: tl.constexpr = M if LKP else M // PA
    AK: tl.constexpr = BLOCK_K // PA if LKP else BLOCK_K
    BK: tl.constexpr = BLOCK_K // PB if RKP else BLOCK_K
    BN: tl.constexpr = N if RKP else N // PB
    SK: tl.constexpr = BLOCK_K // SB  # scales per row in one K block
    rows_a = tl.arange(0, AM)[:, None]
    cols_b = tl.arange(0, BN)[None, :]
    m = tl.arange(0, M)[:, None]
    n = tl.arange(0, N)[None, :]
    if HAS_ACC:
        acc = tl.load(acc_ptr + m * N + n)
    else:
        acc = tl.zeros((M, N), dtype=OUT)
    for k0 in range(0, K // BLOCK_K):
        a = tl.load(a_ptr + rows_a * (AK * (K // BLOCK_K)) + k0 * AK + tl.arange(0, AK)[None, :])
        b = tl.load(b_ptr + (k0 * BK + tl.arange(0, BK)[:, None]) * BN + cols_b)
        sa = None
        sb = None
        if HAS_SA:
            sa = tl.load(sa_ptr + tl.arange(0, M)[:, None] * (K // SB) + k0 * SK + tl.arange(0, SK)[None, :])
        if HAS_SB:
            sb = tl.load(sb_ptr + tl.arange(0, N)[:, None] * (K // SB) + k0 * SK + tl.arange(0, SK)[None, :])
        acc = tl.dot_scaled(a, sa, FA, b, sb, FB, acc, fast_math=FAST, lhs_k_pack=LKP, rhs_k_pack=RKP,
                            out_dtype=OUT)
    tl.store(out_ptr + m * N + n, acc)


_TORCH = {"bf16": torch.bfloat16, "fp16": torch.float16}
_TL = {torch.float32: tl.float32, torch.float16: tl.float16, torch.bfloat16: tl.bfloat16}


def _operand(fmt: str, shape, gen: torch.Generator) -> torch.Tensor:
    if fmt in _TORCH:
        return (torch.randn(shape, generator=gen) * 2).to(_TORCH[fmt])
    codes = torch.randint(0, 256, shape, generator=gen, dtype=torch.int32).to(torch.uint8)
    if fmt == "e4m3":  # no NaN codes in the data: NaN comes from the scales only
        codes = torch.where((codes & 0x7F) == 0x7F, codes ^ 1, codes)
    if fmt == "e5m2":  # keep inf/NaN codes out too
        codes = torch.where((codes & 0x7C) == 0x7C, codes & 0xFB, codes)
    return codes


def _scales(rows: int, blocks: int, gen: torch.Generator, special: bool) -> torch.Tensor:
    s = torch.randint(120, 134, (rows, blocks), generator=gen, dtype=torch.int32)
    if special:  # a NaN scale, a zero scale (2^-127) and an extreme one
        s[0, 0] = 255
        s[1, -1] = 0
        s[2, 0] = 140
    return s.to(torch.uint8)


def run_case(fa, fb, *, has_sa=True, has_sb=True, lkp=True, rkp=True, fast_math=False, m=32, n=32, k=64,
             block_k=None, with_acc=False, out_dtype=torch.float32, special=False, device="cpu", seed=0,
             scale_block=32):
    gen = torch.Generator().manual_seed(seed)
    block_k = block_k or k
    pa, pb = (2 if fa == "e2m1" else 1), (2 if fb == "e2m1" else 1)
    a = _operand(fa, (m, k // pa) if lkp else (m // pa, k), gen)
    b = _operand(fb, (k // pb, n) if rkp else (k, n // pb), gen)
    sa = _scales(m, k // scale_block, gen, special) if has_sa else None
    sb = _scales(n, k // scale_block, gen, special) if has_sb else None
    acc = torch.randn((m, n), generator=gen).to(out_dtype) if with_acc else None
    out = torch.empty((m, n), dtype=out_dtype, device=device)
    dummy = torch.zeros(1, dtype=torch.uint8)

    def dev(t):
        return t.to(device) if t is not None else None

    h = scaled_dot_kernel[(1, )](dev(a), dev(sa if sa is not None else dummy), dev(b),
                                 dev(sb if sb is not None else dummy), dev(acc) if acc is not None else out, out,
                                 m, n, k, block_k, fa, fb, has_sa, has_sb, fast_math, lkp, rkp, with_acc,
                                 _TL[out_dtype], scale_block)
    got = out.cpu().double()
    ref = reference(fa, a, sa, fb, b, sb, lkp, rkp, fast_math, acc, out_dtype)
    return got, ref, h


def check(got: torch.Tensor, ref: torch.Tensor, out_dtype=torch.float32) -> None:
    assert torch.equal(torch.isnan(got), torch.isnan(ref)), "NaN positions differ"
    assert torch.equal(torch.isinf(got), torch.isinf(ref)), "inf positions differ"
    fin = torch.isfinite(ref)
    assert torch.equal(got[torch.isinf(ref)], ref[torch.isinf(ref)])
    tol = {torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 5e-2}[out_dtype]
    scale = ref[fin].abs().max().clamp(min=1e-30) if fin.any() else 1.0
    torch.testing.assert_close(got[fin], ref[fin], rtol=tol, atol=tol * float(scale))


FORMATS = ["e2m1", "e4m3", "e5m2", "bf16", "fp16"]


@pytest.mark.parametrize("fa, fb", [("e2m1", "bf16"), ("e4m3", "bf16"), ("e5m2", "bf16"), ("bf16", "e2m1"),
                                    ("bf16", "e4m3"), ("bf16", "e5m2"), ("e2m1", "e2m1"), ("e4m3", "e4m3"),
                                    ("e5m2", "e5m2"), ("e2m1", "e4m3"), ("e5m2", "e2m1"), ("fp16", "e2m1"),
                                    ("e4m3", "fp16"), ("fp16", "fp16"), ("bf16", "bf16"), ("bf16", "fp16")])
def test_format_pairs(fa, fb, device):
    got, ref, _ = run_case(fa, fb, device=device)
    check(got, ref)


@pytest.mark.parametrize("has_sa, has_sb", [(False, False), (True, False), (False, True)])
@pytest.mark.parametrize("fa, fb", [("e2m1", "bf16"), ("e4m3", "e5m2"), ("fp16", "e2m1")])
def test_scales_on_either_operand(fa, fb, has_sa, has_sb, device):
    got, ref, _ = run_case(fa, fb, has_sa=has_sa, has_sb=has_sb, device=device)
    check(got, ref)


@pytest.mark.parametrize("fa, fb, lkp, rkp", [("e2m1", "e2m1", False, True), ("e2m1", "e2m1", True, False),
                                              ("e2m1", "e2m1", False, False), ("e2m1", "bf16", False, True),
                                              ("e4m3", "e2m1", True, False), ("fp16", "e2m1", True, False)])
def test_e2m1_packed_along_m_or_n(fa, fb, lkp, rkp, device):
    got, ref, _ = run_case(fa, fb, lkp=lkp, rkp=rkp, special=True, device=device)
    check(got, ref)


@pytest.mark.parametrize("fast_math", [False, True])
@pytest.mark.parametrize("fa, fb", [("e2m1", "bf16"), ("e4m3", "e4m3"), ("e2m1", "fp16")])
def test_nan_and_zero_scales(fa, fb, fast_math, device):
    got, ref, _ = run_case(fa, fb, fast_math=fast_math, special=True, device=device)
    assert torch.isnan(ref).any() and torch.isnan(got).any()
    check(got, ref)


@pytest.mark.parametrize("fa, fb", [("e2m1", "bf16"), ("e5m2", "fp16")])
def test_accumulator(fa, fb, device):
    got, ref, _ = run_case(fa, fb, with_acc=True, device=device)
    check(got, ref)


@pytest.mark.parametrize("out_dtype", [torch.float16, torch.bfloat16])
def test_out_dtype_other_than_float32_is_refused_by_the_frontend(out_dtype, device):
    # Triton 3.9's frontend accepts only float32 (on every backend); the refusal must stay the frontend's
    with pytest.raises(triton.CompilationError, match="Only float32 is supported for out_dtype"):
        run_case("e2m1", "bf16", with_acc=True, out_dtype=out_dtype, device=device)


@pytest.mark.parametrize("fa, fb", [("e2m1", "bf16"), ("e4m3", "e2m1")])
def test_k_loop(fa, fb, device):
    got, ref, _ = run_case(fa, fb, k=128, block_k=64, with_acc=True, device=device)
    check(got, ref)


@pytest.mark.parametrize("fa, fb", [("e2m1", "bf16"), ("e4m3", "e2m1")])
def test_scale_blocks_of_16(fa, fb, device):
    # Triton 3.9 deduces the block from the scale's shape: [M, K / 16] scales cover 16 elements each
    got, ref, _ = run_case(fa, fb, scale_block=16, special=True, device=device)
    check(got, ref)


@pytest.mark.parametrize("m, n, k", [(64, 32, 32), (16, 64, 128)])
def test_shapes(m, n, k, device):
    got, ref, _ = run_case("e2m1", "e4m3", m=m, n=n, k=k, device=device)
    check(got, ref)


@pytest.mark.parametrize("fa, fb", [("e2m1", "bf16"), ("e4m3", "fp16"), ("e5m2", "e2m1")])
def test_upcast_dot_runs_on_simdgroup_matrix(fa, fb, device):
    got, ref, h = run_case(fa, fb, device=device)
    check(got, ref)
    msl = h.asm["msl"]
    assert "simdgroup_multiply_accumulate" in msl


@pytest.mark.slow
@pytest.mark.parametrize("fa", FORMATS)
@pytest.mark.parametrize("fb", FORMATS)
@pytest.mark.parametrize("fast_math", [False, True])
def test_every_format_pair_with_special_scales(fa, fb, fast_math, device):
    got, ref, _ = run_case(fa, fb, fast_math=fast_math, special=True, m=64, n=64, k=128, device=device)
    check(got, ref)


@triton.jit
def batched_scaled_dot_kernel(a_ptr, sa_ptr, b_ptr, out_ptr, B: tl.constexpr, M: tl.constexpr, N: tl.constexpr,
                              K: tl.constexpr, LKP: tl.constexpr):
    AM: tl.constexpr = M if LKP else M // 2
    AK: tl.constexpr = K // 2 if LKP else K
    z = tl.arange(0, B)[:, None, None]
    a = tl.load(a_ptr + z * (AM * AK) + tl.arange(0, AM)[None, :, None] * AK + tl.arange(0, AK)[None, None, :])
    b = tl.load(b_ptr + z * (K * N) + tl.arange(0, K)[None, :, None] * N + tl.arange(0, N)[None, None, :])
    sa = tl.load(sa_ptr + z * (M * (K // 32)) + tl.arange(0, M)[None, :, None] * (K // 32) +
                 tl.arange(0, K // 32)[None, None, :])
    c = tl.dot_scaled(a, sa, "e2m1", b, None, "bf16", lhs_k_pack=LKP)
    tl.store(out_ptr + z * (M * N) + tl.arange(0, M)[None, :, None] * N + tl.arange(0, N)[None, None, :], c)


@pytest.mark.parametrize("lkp", [True, False])
def test_batched(lkp, device):
    bsz, m, n, k = 2, 32, 32, 64
    gen = torch.Generator().manual_seed(1)
    a = _operand("e2m1", (bsz, m, k // 2) if lkp else (bsz, m // 2, k), gen)
    b = _operand("bf16", (bsz, k, n), gen)
    sa = torch.stack([_scales(m, k // 32, gen, special=True) for _ in range(bsz)])
    out = torch.empty((bsz, m, n), device=device)
    batched_scaled_dot_kernel[(1, )](a.to(device), sa.to(device), b.to(device), out, bsz, m, n, k, lkp)
    for i in range(bsz):
        ref = reference("e2m1", a[i], sa[i], "bf16", b[i], None, lkp, True, False)
        check(out[i].cpu().double(), ref)


@pytest.mark.parametrize("has_sa, has_sb", [(True, False), (False, True), (True, True), (False, False)])
def test_reader_tells_whose_scale_it_is(has_sa, has_sb, device):
    # `%a scale %sa, %b, %c` and `%a, %b scale %sb, %c` have the same operand count: the reader records which
    from triton.backends.apple.ir import parse_module
    _, _, h = run_case("e4m3", "e5m2", has_sa=has_sa, has_sb=has_sb, device=device)
    module = parse_module(h.asm["ttgir"])
    (op, ) = [o for o in module.kernel.walk() if o.name == "tt.dot_scaled"]
    assert (op.attrs["lhs_scaled"], op.attrs["rhs_scaled"]) == (has_sa, has_sb)
    assert len(op.operands) == 3 + has_sa + has_sb


@pytest.mark.parametrize("fa, fb, has_sa, has_sb", [("e2m1", "bf16", True, False), ("fp16", "e5m2", False, True),
                                                    ("e2m1", "e2m1", True, True)])
def test_largest_test_core_shape_fits_threadgroup_memory(fa, fb, has_sa, has_sb, device):
    # test_core's test_scaled_dot goes up to 128x128x128: bf16 operands of 32 KB each, staged in rounds over K
    got, ref, h = run_case(fa, fb, has_sa=has_sa, has_sb=has_sb, m=128, n=128, k=128, device=device)
    check(got, ref)
    assert h.metadata.shared <= 32 * 1024

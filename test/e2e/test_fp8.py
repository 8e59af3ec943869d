"""fp8 (e5m2, e4m3fn) conversions: exact decoding of every code, round-to-nearest-even encoding with
saturation to the largest finite value (Triton's NVIDIA semantics), NaN preserved."""
import pytest
import torch
import triton
import triton.language as tl

FORMATS = {"e5m2": (torch.float8_e5m2, 57344.0), "e4m3fn": (torch.float8_e4m3fn, 448.0)}


@triton.jit
def decode_kernel(codes_ptr, out_ptr, FMT: tl.constexpr):
    i = tl.arange(0, 256)
    c = tl.load(codes_ptr + i)
    if FMT == "e5m2":
        v = c.to(tl.float8e5, bitcast=True)
    else:
        v = c.to(tl.float8e4nv, bitcast=True)
    tl.store(out_ptr + i, v.to(tl.float32))


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_every_code_decodes_exactly(fmt, device):
    dtype, _ = FORMATS[fmt]
    codes = torch.arange(256, dtype=torch.int32, device=device).to(torch.uint8)
    out = torch.empty(256, device=device)
    decode_kernel[(1, )](codes, out, FMT=fmt)
    ref = codes.view(dtype).float()
    torch.testing.assert_close(out, ref, rtol=0, atol=0, equal_nan=True)


@triton.jit
def encode_kernel(x_ptr, out_ptr, n, FMT: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    x = tl.load(x_ptr + i, mask=m)
    if FMT == "e5m2":
        y = x.to(tl.float8e5)
    else:
        y = x.to(tl.float8e4nv)
    tl.store(out_ptr + i, y, mask=m)


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("src", [torch.float32, torch.float16, torch.bfloat16])
def test_encoding_rounds_to_nearest_even_and_saturates(fmt, src, device):
    dtype, max_finite = FORMATS[fmt]
    torch.manual_seed(0)
    special = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1e6, -1e6, max_finite,
                            max_finite * 1.05, 2**-9, 2**-10, 2**-17, 3 * 2**-18, 1.0625, 1.1875, 0.3],
                           device=device)
    x = torch.cat([special, torch.randn(4000, device=device) * 30, torch.randn(1000, device=device) * 1e-3])
    x = x.to(src)
    out = torch.empty(x.numel(), dtype=dtype, device=device)
    encode_kernel[(triton.cdiv(x.numel(), 512), )](x, out, x.numel(), FMT=fmt, BLOCK=512)
    xf = x.float()
    clamped = torch.where(torch.isnan(xf), xf, xf.clamp(-max_finite, max_finite))
    ref = clamped.to(dtype)
    torch.testing.assert_close(out.float(), ref.float(), rtol=0, atol=0, equal_nan=True)


@triton.jit
def fp8_dot_kernel(a_ptr, b_ptr, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * BN + rn[None, :])
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], acc)


@pytest.mark.parametrize("dtype", [torch.float8_e5m2, torch.float8_e4m3fn])
def test_fp8_dot_decodes_its_operands(dtype, device):
    # fp8 values are held as their bytes: the FMA dot must decode them, not multiply the bytes
    torch.manual_seed(0)
    a = torch.randn(16, 32).to(dtype)
    b = torch.randn(32, 16).to(dtype)
    c = torch.zeros(16, 16, device=device)
    fp8_dot_kernel[(1, )](a.to(device), b.to(device), c, 32, BM=16, BN=16, BK=16)
    torch.testing.assert_close(c.cpu(), a.float() @ b.float(), rtol=1e-6, atol=1e-6)

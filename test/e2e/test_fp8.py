"""fp8 (e5m2, e4m3fn) conversions: exact decoding of every code, round-to-nearest-even encoding with
saturation to the largest finite value (Triton's NVIDIA semantics), NaN preserved; fp8e4b15 as Triton
converts it on NVIDIA GPUs."""
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


# fp8e4b15 (Triton's e4m3 with exponent bias 15, which NVIDIA GPUs before sm90 convert in software): every
# byte is finite; conversions give what Triton's NVIDIA conversions give (language/apple/fp8.py).


def _e4b15_value(code: int) -> float:
    sign = -1.0 if code & 0x80 else 1.0
    e, m = (code >> 3) & 0xF, code & 0x7
    return sign * (m / 8 * 2.0**-14 if e == 0 else (1 + m / 8) * 2.0**(e - 15))


def _e4b15_code(x: float) -> int:
    """NVIDIA's encoding, modelled on values: |x| rounded toward zero to float16, clamped to 1.75 (NaN and
    infinities too), then rounded to the nearest fp8e4b15 magnitude, ties away from zero."""
    sign = 0x80 if torch.tensor(x).signbit() else 0
    a = 1.75 if x != x else min(abs(x), 1.75)
    h = torch.tensor([a], dtype=torch.float16)
    if float(h) > a:  # float16 rounded up (a is not negative): one step toward zero
        h = (h.view(torch.int16) - 1).view(torch.float16)
    a = float(h)
    best = max(range(128), key=lambda c: (-abs(_e4b15_value(c) - a), _e4b15_value(c)))
    return sign | best


@triton.jit
def e4b15_decode_kernel(codes_ptr, f32_ptr, f16_ptr):
    i = tl.arange(0, 256)
    v = tl.load(codes_ptr + i).to(tl.float8e4b15, bitcast=True)
    tl.store(f32_ptr + i, v.to(tl.float32))
    tl.store(f16_ptr + i, v.to(tl.float16))


def test_fp8e4b15_every_code_decodes_exactly(device):
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8).to(device)
    f32 = torch.empty(256, device=device)
    f16 = torch.empty(256, dtype=torch.float16, device=device)
    e4b15_decode_kernel[(1, )](codes, f32, f16)
    ref = torch.tensor([_e4b15_value(c) for c in range(256)])
    assert torch.equal(f32.cpu(), ref) and torch.equal(f16.cpu().float(), ref)
    assert f32[0x7F].item() == 1.875  # no NaN code


@triton.jit
def e4b15_encode_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(out_ptr + i, tl.load(x_ptr + i, mask=m).to(tl.float8e4b15).to(tl.int8, bitcast=True), mask=m)


@pytest.mark.parametrize("src", [torch.float32, torch.float16, torch.bfloat16])
def test_fp8e4b15_encoding_matches_nvidia(src, device):
    g = torch.Generator().manual_seed(1)
    special = torch.tensor([0.0, -0.0, float("nan"), float("inf"), -float("inf"), 1.75, 1.8125, 1.875, 5.0, -7.0,
                            2**-14, 2**-17, 3 * 2**-18, 2**-18, 0.0625 * 1.0625, 1.0 + 2**-4, 1.0 + 3 * 2**-4])
    x = torch.cat([special, torch.randn(600, generator=g) * 0.6, torch.randn(200, generator=g) * 1e-4]).to(src)
    out = torch.empty(x.numel(), dtype=torch.int8, device=device)
    e4b15_encode_kernel[(triton.cdiv(x.numel(), 256), )](x.to(device), out, x.numel(), BLOCK=256)
    ref = torch.tensor([_e4b15_code(float(v)) for v in x.float()], dtype=torch.int32).to(torch.uint8)
    assert torch.equal(out.cpu().view(torch.uint8), ref)


def test_fp8e4b15_round_trip_keeps_every_code_but_the_largest(device):
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8).to(device)
    f32 = torch.empty(256, device=device)
    e4b15_decode_kernel[(1, )](codes, f32, torch.empty(256, dtype=torch.float16, device=device))
    back = torch.empty(256, dtype=torch.int8, device=device)
    e4b15_encode_kernel[(1, )](f32, back, 256, BLOCK=256)
    back = back.cpu().view(torch.uint8).to(torch.int32)
    want = torch.arange(256)
    want[0x7F], want[0xFF] = 0x7E, 0xFE  # 1.875 clamps to 1.75, as on NVIDIA GPUs
    assert torch.equal(back, want)


def test_fp8e4b15_dot(device):
    # Triton upcasts fp8e4b15 dot operands to float16
    g = torch.Generator().manual_seed(2)
    codes_a = torch.randint(0, 256, (16, 32), generator=g, dtype=torch.int32).to(torch.uint8)
    codes_b = torch.randint(0, 256, (32, 16), generator=g, dtype=torch.int32).to(torch.uint8)
    a = triton.reinterpret(codes_a.to(device), tl.float8e4b15)
    b = triton.reinterpret(codes_b.to(device), tl.float8e4b15)
    c = torch.zeros(16, 16, device=device)
    fp8_dot_kernel[(1, )](a, b, c, 32, BM=16, BN=16, BK=16)
    va = torch.tensor([_e4b15_value(int(x)) for x in codes_a.flatten()]).view(16, 32)
    vb = torch.tensor([_e4b15_value(int(x)) for x in codes_b.flatten()]).view(32, 16)
    torch.testing.assert_close(c.cpu(), va @ vb, rtol=1e-3, atol=1e-3)

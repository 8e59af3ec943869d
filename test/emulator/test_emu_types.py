"""half / bfloat arithmetic, math and integer functions, Metal-defined results for host UB."""
import math
import os

import numpy as np
import pytest
import torch

from support.emulator_msl import line_of, msl

HALF = msl("""
kernel void halfops(device const half* a [[buffer(0)]],
                    device const half* b [[buffer(1)]],
                    device const half* c [[buffer(2)]],
                    device half* out [[buffer(3)]],
                    device half* out_exp [[buffer(4)]],
                    device float* out_f [[buffer(5)]],
                    uint i [[thread_position_in_grid]]) {
    half p = a[i] * b[i];
    out[i] = p + c[i];                 // two roundings to half, no fma, no excess precision
    out_exp[i] = exp(a[i]) + sqrt(abs(b[i])) + 0.5h;
    half2 v = half2{a[i], b[i]};
    v = max(v, half2(c[i]));
    out_f[i] = float(v.x) + float(v.y);
}
""")


def test_half_arithmetic_matches_torch(emu):
    k = emu.compile_msl(HALF, "halfops")
    n = 4096
    g = torch.Generator().manual_seed(0)
    a = (torch.randn(n, generator=g) * 3).half()
    b = (torch.randn(n, generator=g) * 3).half()
    c = (torch.randn(n, generator=g) * 3).half()
    out, out_exp = torch.zeros(n, dtype=torch.half), torch.zeros(n, dtype=torch.half)
    out_f = torch.zeros(n)
    k.launch(grid=n // 256, threadgroup=256, buffers=[a, b, c, out, out_exp, out_f])
    assert torch.equal(out, a * b + c)  # torch CPU half: each op rounded to half
    ref_exp = ((torch.exp(a.float()).half() + torch.sqrt(b.abs().float()).half()) + 0.5).half()
    torch.testing.assert_close(out_exp, ref_exp, rtol=2e-3, atol=2e-3)
    ref_f = torch.maximum(a, c).float() + torch.maximum(b, c).float()
    assert torch.equal(out_f, ref_f)


BF16 = msl("""
kernel void bfops(device const bfloat* a [[buffer(0)]],
                  device const bfloat* b [[buffer(1)]],
                  device bfloat* out [[buffer(2)]],
                  device float* out_f [[buffer(3)]],
                  uint i [[thread_position_in_grid]]) {
    bfloat s = a[i] + b[i];
    out[i] = s * a[i];
    out_f[i] = float(bfloat(float(a[i]) * 3.0f));
}
""")


def test_bfloat_arithmetic_matches_torch(emu):
    k = emu.compile_msl(BF16, "bfops")
    n = 2048
    g = torch.Generator().manual_seed(1)
    a = torch.randn(n, generator=g).bfloat16()
    b = torch.randn(n, generator=g).bfloat16()
    out = torch.zeros(n, dtype=torch.bfloat16)
    out_f = torch.zeros(n)
    k.launch(grid=n // 128, threadgroup=128, buffers=[a, b, out, out_f])
    assert torch.equal(out, (a + b) * a)
    assert torch.equal(out_f, (a.float() * 3).bfloat16().float())


MATH = msl("""
kernel void mathops(device const float* x [[buffer(0)]],
                    device float* out [[buffer(1)]],
                    uint i [[thread_position_in_grid]]) {
    float v = x[i];
    device float* o = out + i * 12;
    o[0] = exp2(v);
    o[1] = log2(abs(v) + 1.0f);
    o[2] = rsqrt(abs(v) + 1.0f);
    o[3] = fma(v, 2.0f, 1.0f);
    o[4] = precise::tanh(v);
    o[5] = fast::sin(v);
    o[6] = rint(v * 4.0f);
    o[7] = fmod(v, 0.75f);
    o[8] = clamp(v, -0.5f, 0.5f);
    o[9] = copysign(1.0f, v);
    o[10] = select(0.0f, 1.0f, isnan(v / v));
    o[11] = float4{v, 1.0f, 2.0f, 3.0f}.x + dot(float2{v, v}, float2{1.0f, 1.0f});
}
""")


def test_float_math(emu):
    k = emu.compile_msl(MATH, "mathops")
    x = torch.linspace(-3, 3, 64)
    x[0] = 0.0  # 0/0 -> NaN
    out = torch.zeros(64 * 12)
    k.launch(grid=1, threadgroup=64, buffers=[x, out])
    o = out.view(64, 12).double().numpy()
    xd = x.double().numpy()
    np.testing.assert_allclose(o[:, 0], np.exp2(xd), rtol=1e-6)
    np.testing.assert_allclose(o[:, 1], np.log2(np.abs(xd) + 1), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(o[:, 2], 1 / np.sqrt(np.abs(xd) + 1), rtol=1e-6)
    np.testing.assert_allclose(o[:, 3], xd * 2 + 1, rtol=1e-6)
    np.testing.assert_allclose(o[:, 4], np.tanh(xd), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(o[:, 5], np.sin(xd), rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(o[:, 6], np.rint(x.numpy() * 4))
    np.testing.assert_allclose(o[:, 7], np.fmod(xd, 0.75), atol=1e-6)
    np.testing.assert_array_equal(o[:, 8], np.clip(x.numpy(), -0.5, 0.5))
    np.testing.assert_array_equal(o[:, 9], np.copysign(1.0, x.numpy()))
    np.testing.assert_array_equal(o[:, 10], (np.arange(64) == 0).astype(np.float64))
    np.testing.assert_allclose(o[:, 11], 3 * xd, rtol=1e-6)


INTOPS = msl("""
kernel void intops(device const int* a [[buffer(0)]],
                   device const uint* b [[buffer(1)]],
                   device int* out [[buffer(2)]],
                   device long* outl [[buffer(3)]],
                   uint i [[thread_position_in_grid]]) {
    int x = a[i];
    uint y = b[i];
    device int* o = out + i * 10;
    o[0] = clz(x);
    o[1] = ctz(x);
    o[2] = popcount(x);
    o[3] = as_type<int>(reverse_bits(y));
    o[4] = as_type<int>(rotate(y, 5u));
    o[5] = mulhi(x, 123456789);
    o[6] = abs(x);
    o[7] = as_type<int>(mulhi(y, 4000000000u));
    o[8] = x + 2147483647;             // wraps (-fwrapv)
    o[9] = max(min(x, 100), -100);
    outl[i] = mulhi((long)x * 65536l, 1l << 40);
}
""")


def _clz32(v):
    v &= 0xFFFFFFFF
    return 32 - v.bit_length()


def _ctz32(v):
    v &= 0xFFFFFFFF
    return 32 if v == 0 else (v & -v).bit_length() - 1


def _s32(v):
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >= 1 << 31 else v


def test_integer_functions(emu):
    k = emu.compile_msl(INTOPS, "intops")
    vals = [0, 1, -1, 2, 7, -2147483648, 2147483647, 123456, -98765, 1 << 20, 3, 0x55555555]
    a = torch.tensor(vals, dtype=torch.int32)
    b = torch.tensor([v & 0xFFFFFFFF for v in vals], dtype=torch.int64).to(torch.uint32)
    n = len(vals)
    out = torch.zeros(n * 10, dtype=torch.int32)
    outl = torch.zeros(n, dtype=torch.int64)
    k.launch(grid=1, threadgroup=n, buffers=[a, b, out, outl])
    o = out.view(n, 10).tolist()
    for i, x in enumerate(vals):
        y = x & 0xFFFFFFFF
        rev = int(f"{y:032b}"[::-1], 2)
        rot = ((y << 5) | (y >> 27)) & 0xFFFFFFFF
        expect = [_clz32(x), _ctz32(x), bin(y).count("1"), _s32(rev), _s32(rot), (x * 123456789) >> 32,
                  x if x == -2147483648 else abs(x), _s32((y * 4000000000) >> 32), _s32(x + 2147483647),
                  max(min(x, 100), -100)]
        assert o[i] == expect, (x, o[i], expect)
        assert outl[i].item() == ((x * 65536) * (1 << 40)) >> 64


CONV = msl("""
kernel void conv(device const float* x [[buffer(0)]],
                 device int* oi [[buffer(1)]],
                 device uint* ou [[buffer(2)]],
                 device short* os [[buffer(3)]],
                 uint i [[thread_position_in_grid]]) {
    oi[i] = int(x[i]);
    ou[i] = uint(x[i]);
    os[i] = short(half(x[i]));
}
""")


def test_float_to_int_nan_and_saturation(emu):
    k = emu.compile_msl(CONV, "conv")
    x = torch.tensor([float("nan"), float("inf"), float("-inf"), 3e9, -3e9, -1.5, 2.7, -0.0])
    n = x.numel()
    oi, ou, os_ = torch.zeros(n, dtype=torch.int32), torch.zeros(n, dtype=torch.int64), torch.zeros(n, dtype=torch.int16)
    ou32 = torch.zeros(n, dtype=torch.int32)
    k.launch(grid=1, threadgroup=n, buffers=[x, oi, ou32, os_])
    assert oi.tolist() == [0, 2147483647, -2147483648, 2147483647, -2147483648, -1, 2, 0]
    assert [v & 0xFFFFFFFF for v in ou32.tolist()] == [0, 0xFFFFFFFF, 0, 3000000000, 0, 0, 2, 0]
    assert os_.tolist() == [0, 32767, -32768, 32767, -32768, -1, 2, 0]


DIV = msl("""
kernel void divide(device const int* a [[buffer(0)]],
                   device const int* b [[buffer(1)]],
                   device int* q [[buffer(2)]],
                   device int* r [[buffer(3)]],
                   device uint* s [[buffer(4)]],
                   uint i [[thread_position_in_grid]]) {
    q[i] = a[i] / b[i];
    r[i] = a[i] % b[i];
    s[i] = 1u << as_type<uint>(b[i]);
}
""")


def test_division_by_zero_warns_and_does_not_trap(emu, monkeypatch):
    monkeypatch.delenv("TRITON_APPLE_EMULATOR_UB", raising=False)
    k = emu.compile_msl(DIV, "divide")
    a = torch.tensor([7, -7, -2147483648, 9], dtype=torch.int32)
    b = torch.tensor([2, 0, -1, 40], dtype=torch.int32)
    q, r, s = torch.zeros(4, dtype=torch.int32), torch.zeros(4, dtype=torch.int32), torch.zeros(4, dtype=torch.int32)
    with pytest.warns(emu.EmulatorWarning) as rec:
        k.launch(grid=1, threadgroup=4, buffers=[a, b, q, r, s])
    assert q.tolist() == [3, 0, -2147483648, 0]
    assert r.tolist() == [1, -7, 0, 9]
    text = " ".join(str(w.message) for w in rec)
    assert f"MSL line {line_of(DIV, 'q[i] = a[i] / b[i]')}" in text
    assert "division or remainder by zero" in text and "shift" in text
    monkeypatch.setenv("TRITON_APPLE_EMULATOR_UB", "error")
    with pytest.raises(emu.EmulatorLaunchError) as ei:
        k.launch(grid=1, threadgroup=4, buffers=[a, b, q, r, s], schedule="forward")
    assert ei.value.kind == "undefined_behavior"
    assert line_of(DIV, "q[i] = a[i] / b[i]") in ei.value.msl_lines


def test_scalar_packing(emu):
    assert emu.Scalar(1.0, "bfloat").data == b"\x80\x3f"
    assert emu.Scalar(-1, "uint").data == b"\xff\xff\xff\xff"
    assert emu.Scalar((1, 2, 3), "uint3").nbytes == 16
    assert emu.Scalar(1.5, "half").data == np.float16(1.5).tobytes()


BF16_BITS = msl("""
kernel void bf_bits(device const bfloat* x [[buffer(0)]],
                    device int* out [[buffer(1)]],
                    constant int& n [[buffer(2)]],
                    uint i [[thread_position_in_grid]]) {
    bfloat b = (int)i < n ? x[i] : bfloat(0);       // a bfloat in a register (select), as masked loads give
    bfloat c = b * bfloat(2.0f);
    device int* o = out + i * 7;
    o[0] = signbit(float(b)) ? 1 : 0;
    o[1] = as_type<short>(b) < 0 ? 1 : 0;
    o[2] = as_type<int>(float(c)) < 0 ? 1 : 0;
    o[3] = as_type<ushort>(c) >> 15;
    o[4] = (int)as_type<ushort>(b);
    o[5] = as_type<int>(as_type<ushort2>(bfloat2{b, c}));
    float f = float(b);                               // the shape of an fp8 encoder: sign, magnitude, branch
    const uchar sign = signbit(f) ? uchar(0x80) : uchar(0);
    const float a = fmin(fabs(f), 448.0f);
    o[6] = a < 0.015625f ? int(sign | uchar(rint(a * 512.0f))) : int(sign | uchar(a));
}
""")


def test_bfloat_sign_bits_in_registers(emu):
    """Regression test for an LLVM 22 x86 bf16 miscompile the compat header works around (see __tt::opaque)."""
    k = emu.compile_msl(BF16_BITS, "bf_bits")
    x = torch.tensor([1.0, -2.5, -0.0, 3.0, -1e30, float("-inf")], dtype=torch.bfloat16)
    n = x.numel()
    out = torch.zeros(n * 7, dtype=torch.int32)
    k.launch(grid=1, threadgroup=n, buffers=[x, out, n])
    o = out.view(n, 7).tolist()
    bits = x.view(torch.int16).to(torch.int64) & 0xFFFF
    cbits = (x * 2).view(torch.int16).to(torch.int64) & 0xFFFF
    for i in range(n):
        neg = int(bits[i]) >> 15
        assert o[i][:4] == [neg, neg, neg, int(cbits[i]) >> 15], (x[i], o[i])
        assert o[i][4] == bits[i] and (o[i][5] & 0xFFFFFFFF) == bits[i] | (cbits[i] << 16)
        a = min(abs(float(x[i])), 448.0)
        assert o[i][6] == (neg << 7) | (round(a * 512) if a < 2**-6 else min(int(a), 255)), (x[i], o[i][6])


SAT = msl("""
kernel void sat(device const char* a [[buffer(0)]], device const char* b [[buffer(1)]],
                device char* s [[buffer(2)]], device uchar* u [[buffer(3)]], uint i [[thread_position_in_grid]]) {
    s[4 * i + 0] = addsat(a[i], b[i]);
    s[4 * i + 1] = subsat(a[i], b[i]);
    u[4 * i + 0] = addsat(uchar(a[i]), uchar(b[i]));
    u[4 * i + 1] = subsat(uchar(a[i]), uchar(b[i]));
}
""")


def test_saturating_add_and_subtract(emu):
    k = emu.compile_msl(SAT, "sat")
    pairs = [(100, 100), (-100, -100), (-100, 100), (100, -100), (5, 3), (-128, 1), (127, -1), (0, -128)]
    a = torch.tensor([p[0] for p in pairs], dtype=torch.int8)
    b = torch.tensor([p[1] for p in pairs], dtype=torch.int8)
    s = torch.zeros(4 * len(pairs), dtype=torch.int8)
    u = torch.zeros(4 * len(pairs), dtype=torch.uint8)
    k.launch(grid=1, threadgroup=len(pairs), buffers=[a, b, s, u])
    for i, (x, y) in enumerate(pairs):
        ux, uy = x & 0xFF, y & 0xFF
        assert s[4 * i].item() == max(-128, min(127, x + y)), (x, y)
        assert s[4 * i + 1].item() == max(-128, min(127, x - y)), (x, y)
        assert u[4 * i].item() == min(255, ux + uy), (x, y)
        assert u[4 * i + 1].item() == max(0, ux - uy), (x, y)

"""The libdevice functions beyond Metal's math library (extern_ops.py): every function of Triton's CUDA libdevice
exists under the same name; those computed are checked here against float64 / exact integer references, those
refused must say which function and why."""
import numpy as np
import pytest
import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from triton.backends.apple.errors import UnsupportedFeatureError


@triton.jit
def unary(x_ptr, out_ptr, n, NAME: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    if NAME == "sinpi":
        y = libdevice.sinpi(x)
    elif NAME == "cospi":
        y = libdevice.cospi(x)
    elif NAME == "rcbrt":
        y = libdevice.rcbrt(x)
    elif NAME == "saturatef":
        y = libdevice.saturatef(x)
    elif NAME == "logb":
        y = libdevice.logb(x)
    elif NAME == "ilogb":
        y = libdevice.ilogb(x)
    elif NAME == "abs":
        y = libdevice.abs(x)
    elif NAME == "ffs":
        y = libdevice.ffs(x)
    elif NAME == "float_as_int":
        y = libdevice.float_as_int(x)
    elif NAME == "int_as_float":
        y = libdevice.int_as_float(x)
    elif NAME == "llrint":
        y = libdevice.llrint(x)
    elif NAME == "llround":
        y = libdevice.llround(x)
    elif NAME == "float2int_rn":
        y = libdevice.float2int_rn(x)
    elif NAME == "float2int_rz":
        y = libdevice.float2int_rz(x)
    elif NAME == "float2int_rd":
        y = libdevice.float2int_rd(x)
    elif NAME == "float2int_ru":
        y = libdevice.float2int_ru(x)
    elif NAME == "float2uint_rd":
        y = libdevice.float2uint_rd(x)
    elif NAME == "int2float_rn":
        y = libdevice.int2float_rn(x)
    elif NAME == "int2float_rz":
        y = libdevice.int2float_rz(x)
    elif NAME == "int2float_rd":
        y = libdevice.int2float_rd(x)
    elif NAME == "int2float_ru":
        y = libdevice.int2float_ru(x)
    elif NAME == "double_as_longlong":
        y = libdevice.double_as_longlong(x)
    elif NAME == "double2hiint":
        y = libdevice.double2hiint(x)
    elif NAME == "double2int_rd":
        y = libdevice.double2int_rd(x)
    elif NAME == "double2float_rn":
        y = libdevice.double2float_rn(x)
    elif NAME == "isfinited":
        y = libdevice.isfinited(x)
    elif NAME == "j0":
        y = libdevice.j0(x)
    elif NAME == "erfinv":
        y = libdevice.erfinv(x)
    else:
        y = libdevice.add_rd(x, x)
    tl.store(out_ptr + offs, y, mask=m)


@triton.jit
def nary(a_ptr, b_ptr, c_ptr, d_ptr, out_ptr, n, NAME: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    a, b = tl.load(a_ptr + offs, mask=m), tl.load(b_ptr + offs, mask=m)
    c, d = tl.load(c_ptr + offs, mask=m), tl.load(d_ptr + offs, mask=m)
    if NAME == "rhypot":
        y = libdevice.rhypot(a, b)
    elif NAME == "norm3d":
        y = libdevice.norm3d(a, b, c)
    elif NAME == "rnorm3d":
        y = libdevice.rnorm3d(a, b, c)
    elif NAME == "norm4d":
        y = libdevice.norm4d(a, b, c, d)
    elif NAME == "rnorm4d":
        y = libdevice.rnorm4d(a, b, c, d)
    elif NAME == "ldexp":
        y = libdevice.ldexp(a, b)
    elif NAME == "mul24":
        y = libdevice.mul24(a, b)
    elif NAME == "hadd":
        y = libdevice.hadd(a, b)
    elif NAME == "rhadd":
        y = libdevice.rhadd(a, b)
    elif NAME == "sad":
        y = libdevice.sad(a, b, c)
    elif NAME == "byte_perm":
        y = libdevice.byte_perm(a, b, c)
    else:
        y = libdevice.hiloint2double(a, b)
    tl.store(out_ptr + offs, y, mask=m)


def _run(kernel, args, out_dtype, name, device):
    n = args[0].numel()
    out = torch.empty(n, dtype=out_dtype, device=device)
    kernel[(triton.cdiv(n, 256), )](*[a.to(device) for a in args], out, n, NAME=name, BLOCK=256)
    return out.cpu()


def _ulps(got: torch.Tensor, ref: np.ndarray) -> float:
    """Largest distance in float32 units in the last place (NaNs must match; infinities exactly)."""
    g, r = got.double().numpy(), ref.astype(np.float32).astype(np.float64)  # the exact value, rounded to float32
    assert np.array_equal(np.isnan(g), np.isnan(r))
    ok = ~np.isnan(r)
    assert np.array_equal(g[ok & np.isinf(r)], r[ok & np.isinf(r)])
    fin = ok & np.isfinite(r)
    spacing = np.spacing(np.abs(r[fin]).astype(np.float32)).astype(np.float64)
    return float(np.max(np.abs(g[fin] - r[fin]) / spacing)) if fin.any() else 0.0


def _floats(n=4096, scale=8.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.rand(n, generator=g) * 2 - 1) * scale
    x[:12] = torch.tensor([0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, 1e6 + 0.5, 3.0, float("inf"), -float("inf"),
                           float("nan")])
    return x


def _sinpi_ref(x, cos=False):
    """sin(pi x) or cos(pi x) = sin(pi (1/2 - |x|)), reduced exactly (float32 inputs held in float64) to
    [-1/2, 1/2] first, so that integers and halves give exact zeros."""
    r = x - 2 * np.round(x / 2)
    if cos:
        r = 0.5 - np.abs(r)
    r = np.where(np.abs(r) > 0.5, np.sign(r) - r, r)
    return np.sin(np.pi * r)


@pytest.mark.parametrize("name, ref, bound", [
    ("sinpi", lambda x: _sinpi_ref(x), 2), ("cospi", lambda x: _sinpi_ref(x, cos=True), 2),
    ("rcbrt", lambda x: 1 / np.cbrt(x), 3), ("saturatef", lambda x: np.where(np.isnan(x), 0, np.clip(x, 0, 1)), 0),
])
def test_float_functions(name, ref, bound, device):
    x = _floats()
    with np.errstate(all="ignore"):
        expected = ref(x.double().numpy())
    assert _ulps(_run(unary, [x], torch.float32, name, device), expected) <= bound


def test_sinpi_and_cospi_are_exact_at_integers_and_halves(device):
    x = torch.tensor([0.0, 1.0, 2.0, -3.0, 1e6, 0.5, 1.5, -2.5, 4096.5], dtype=torch.float32)
    assert (_run(unary, [x], torch.float32, "sinpi", device)[:5] == 0).all()
    assert (_run(unary, [x], torch.float32, "cospi", device)[5:] == 0).all()


def test_exponents(device):
    x = torch.tensor([1.0, 0.75, 3.0, -1024.5, 1e-40, 6e-39, 3.4e38, 0.0, float("inf"), float("nan")])
    ilogb = _run(unary, [x], torch.int32, "ilogb", device).tolist()
    logb = _run(unary, [x], torch.float32, "logb", device)
    m, e = np.frexp(x[:7].double().numpy())
    assert ilogb == list(e - 1) + [-2**31, 2**31 - 1, -2**31]
    assert logb[:7].tolist() == list((e - 1).astype(float)) and logb[7] == -float("inf") and logb[8] == float("inf")
    assert torch.isnan(logb[9])


def test_float_to_integer_conversions(device):
    x = torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, -2.7, 2.7, 3e9, -3e9, float("nan"), 1e10, -7.0])
    d = x.double().numpy()
    got = {k: _run(unary, [x], torch.int32, k, device).tolist()
           for k in ("float2int_rn", "float2int_rz", "float2int_rd", "float2int_ru")}
    sat = lambda v: [0 if np.isnan(t) else int(max(-2**31, min(2**31 - 1, t))) for t in v]  # noqa: E731
    assert got["float2int_rn"] == sat(np.rint(d))
    assert got["float2int_rz"] == sat(np.trunc(d))
    assert got["float2int_rd"] == sat(np.floor(d))
    assert got["float2int_ru"] == sat(np.ceil(d))
    ll = _run(unary, [x], torch.int64, "llround", device).tolist()
    assert ll[:7] == [1, 2, 3, -1, -2, -3, 3] and ll[7:9] == [3000000000, -3000000000] and ll[9] == 0
    assert _run(unary, [x], torch.int64, "llrint", device).tolist()[:7] == [0, 2, 2, 0, -2, -3, 3]
    u = _run(unary, [x], torch.int32, "float2uint_rd", device).view(torch.int32).tolist()
    assert [v & 0xFFFFFFFF for v in u] == [0, 1, 2, 0, 0, 0, 2, 3000000000, 0, 0, 2**32 - 1, 0]


def test_integer_to_float_conversions_in_each_rounding_mode(device):
    g = torch.Generator().manual_seed(3)
    x = torch.cat([torch.randint(-2**31, 2**31 - 1, (2000, ), generator=g, dtype=torch.int64),
                   torch.tensor([0, 1, -1, 2**24 + 1, -(2**24 + 1), 2**31 - 1, -2**31, 2**25 + 3])]).to(torch.int32)
    for mode in ("rn", "rz", "rd", "ru"):
        got = _run(unary, [x], torch.float32, f"int2float_{mode}", device).double().tolist()
        for v, f in zip(x.tolist(), got):
            k = max(0, abs(v).bit_length() - 24)  # the spacing of floats around v is 2^k
            q, r = divmod(v, 1 << k)  # floor division
            down, up = q << k, (q + (r != 0)) << k
            want = {"rd": down, "ru": up, "rz": down if v >= 0 else up,
                    "rn": float(np.float32(v))}[mode]
            assert f == want, (mode, v, f, want)


def test_bit_patterns(device):
    x = torch.tensor([1.0, -2.5, float("inf"), 0.0, -0.0, 3.4e38])
    bits = _run(unary, [x], torch.int32, "float_as_int", device)
    assert torch.equal(bits, x.view(torch.int32))
    assert torch.equal(_run(unary, [bits], torch.float32, "int_as_float", device).view(torch.int32), bits)
    d = torch.tensor([1.0, -2.5, 1e300, 2.0**-1070, float("nan")], dtype=torch.float64)
    assert torch.equal(_run(unary, [d], torch.int64, "double_as_longlong", device), d.view(torch.int64))
    assert _run(unary, [d], torch.int32, "double2hiint", device).tolist() == (d.view(torch.int64) >> 32).tolist()
    lo, hi = d.view(torch.int32)[0::2].contiguous(), d.view(torch.int32)[1::2].contiguous()
    z = torch.zeros_like(lo)
    back = _run(nary, [hi, lo, z, z], torch.float64, "hiloint2double", device)
    assert torch.equal(back.view(torch.int64), d.view(torch.int64))


def test_float64_conversions(device):
    d = torch.tensor([1.5, -1.5, 2.5e9, -7.25, 1e300, float("nan"), 0.1], dtype=torch.float64)
    assert _run(unary, [d], torch.int32, "double2int_rd", device).tolist() == [1, -2, 2**31 - 1, -8, 2**31 - 1, 0, 0]
    assert torch.equal(_run(unary, [d], torch.float32, "double2float_rn", device), d.float(), equal_nan=True) \
        if hasattr(torch, "equal_nan") else _ulps(_run(unary, [d], torch.float32, "double2float_rn", device),
                                                   d.float().double().numpy()) == 0
    assert _run(unary, [d], torch.int32, "isfinited", device).tolist() == [1, 1, 1, 1, 1, 0, 1]


def test_integer_functions(device):
    g = torch.Generator().manual_seed(5)
    a = torch.cat([torch.randint(-2**31, 2**31 - 1, (1000, ), generator=g, dtype=torch.int64),
                   torch.tensor([0, -2**31, 2**31 - 1, 1, -1, 8388607, -8388608, 16777215])]).to(torch.int32)
    b = torch.randint(-2**31, 2**31 - 1, (a.numel(), ), generator=g, dtype=torch.int64).to(torch.int32)
    c = torch.randint(0, 2**16, (a.numel(), ), generator=g, dtype=torch.int64).to(torch.int32)
    A, B, C = a.tolist(), b.tolist(), c.tolist()
    wrap = lambda v: (v + 2**31) % 2**32 - 2**31  # noqa: E731
    s24 = lambda v: ((v & 0xFFFFFF) ^ 0x800000) - 0x800000  # noqa: E731
    assert _run(unary, [a], torch.int32, "abs", device).tolist() == [wrap(abs(v)) for v in A]
    assert _run(unary, [a], torch.int32, "ffs", device).tolist() == [((v & -v) & 0xFFFFFFFF).bit_length()
                                                                     for v in A]
    assert _run(nary, [a, b, c, c], torch.int32, "mul24", device).tolist() == [wrap(s24(x) * s24(y))
                                                                               for x, y in zip(A, B)]
    assert _run(nary, [a, b, c, c], torch.int32, "hadd", device).tolist() == [(x + y) >> 1 for x, y in zip(A, B)]
    assert _run(nary, [a, b, c, c], torch.int32, "rhadd", device).tolist() == [(x + y + 1) >> 1
                                                                               for x, y in zip(A, B)]
    sad = _run(nary, [a, b, c.view(torch.uint32), c], torch.int32, "sad", device).tolist()
    assert [v & 0xFFFFFFFF for v in sad] == [(abs(x - y) + z) & 0xFFFFFFFF for x, y, z in zip(A, B, C)]
    perm = _run(nary, [a, b, c, c], torch.int32, "byte_perm", device).tolist()
    for x, y, s, got in zip(A, B, C, perm):
        v = (y & 0xFFFFFFFF) << 32 | (x & 0xFFFFFFFF)
        want = sum(((v >> (8 * ((s >> (4 * i)) & 7))) & 0xFF) << (8 * i) for i in range(4))
        assert got & 0xFFFFFFFF == want


@pytest.mark.parametrize("name", ["rhypot", "norm3d", "rnorm3d", "norm4d", "rnorm4d"])
def test_norms(name, device):
    g = torch.Generator().manual_seed(7)
    a, b, c, d = (torch.randn(2048, generator=g) * 10.0**torch.randint(-20, 20, (2048, ), generator=g)
                  for _ in range(4))
    a[:3] = torch.tensor([3e38, float("inf"), 0.0])
    b[:3] = torch.tensor([3e38, float("nan"), 0.0])
    c[:3] = d[:3] = 0.0
    A, B, C, D = (t.double().numpy() for t in (a, b, c, d))
    k = {"rhypot": 2, "norm3d": 3, "rnorm3d": 3, "norm4d": 4, "rnorm4d": 4}[name]
    with np.errstate(all="ignore"):
        norm = np.sqrt(sum(t * t for t in (A, B, C, D)[:k]))
        norm = np.where(np.isinf(A) | np.isinf(B), np.inf, norm)
        ref = 1 / norm if name.startswith("r") else norm
    assert _ulps(_run(nary, [a, b, c, d], torch.float32, name, device), ref) <= 3


def test_ldexp(device):
    x = torch.tensor([1.5, -3.0, 1e-30, 3e38, 0.0, float("inf")])
    n = torch.tensor([3, -2, -20, 2, 100, -5], dtype=torch.int32)
    z = torch.zeros(6)
    got = _run(nary, [x, n, z, z], torch.float32, "ldexp", device)
    assert torch.equal(got, torch.from_numpy(np.ldexp(x.numpy(), n.numpy())))


@pytest.mark.parametrize("name, why", [("j0", "no accurate equivalent"), ("erfinv", "no accurate equivalent"),
                                       ("add_rd", "round-to-nearest only")])
def test_refusals_name_the_function(name, why, device):
    with pytest.raises(UnsupportedFeatureError, match=rf"libdevice\.{name} .*{why}"):
        _run(unary, [torch.ones(8)], torch.float32, name, device)


def test_every_cuda_libdevice_function_exists():
    from triton.language.extra.apple import libdevice as apple
    from triton.language.extra.cuda import libdevice as cuda
    names = {n for n, f in vars(cuda).items() if callable(f) and getattr(f, "__module__", "").endswith("libdevice")
             and not n.startswith("_")}
    assert sorted(n for n in names if not hasattr(apple, n)) == []

"""The demo's kernels (vector add, row softmax, layer norm) against torch, over shapes, dtypes and num_warps."""
import pytest
import torch
import triton
import triton.language as tl

from support import demo_kernels

_demo = demo_kernels.load()
layer_norm, layer_norm_fwd_kernel, softmax = _demo.layer_norm, _demo.layer_norm_fwd_kernel, _demo.softmax
vector_add, vector_add_kernel = _demo.vector_add, _demo.vector_add_kernel


@pytest.mark.parametrize("n", [1, 17, 1024, 1025, 98_432])
def test_vector_add_sizes(n, device):
    x = torch.randn(n, device=device)
    y = torch.randn(n, device=device)
    torch.testing.assert_close(vector_add(x, y), x + y, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.int8, torch.int16, torch.int32,
                                   torch.int64])
@pytest.mark.parametrize("num_warps", [1, 2, 8])
def test_vector_add_dtypes_and_warps(dtype, num_warps, device):
    n = 3000
    if dtype.is_floating_point:
        x = torch.randn(n, device=device).to(dtype)
        y = torch.randn(n, device=device).to(dtype)
    else:
        info = torch.iinfo(dtype)
        x = torch.randint(info.min, info.max, (n, ), device=device, dtype=dtype)
        y = torch.randint(info.min, info.max, (n, ), device=device, dtype=dtype)
    out = torch.empty_like(x)
    vector_add_kernel[(triton.cdiv(n, 256), )](x, y, out, n, BLOCK_SIZE=256, num_warps=num_warps)
    # integer addition wraps like torch's; float addition rounds once in the element type
    torch.testing.assert_close(out, x + y, rtol=0, atol=0)


def test_vector_add_special_values(device):
    vals = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0, 0.0, 1e-45, -1e-45, 3.4e38],
                        device=device)
    x = vals.repeat_interleave(8)
    y = vals.repeat(8)
    out = torch.empty_like(x)
    vector_add_kernel[(1, )](x, y, out, x.numel(), BLOCK_SIZE=64)
    ref = x + y
    assert torch.equal(torch.isnan(out), torch.isnan(ref))
    ok = ~torch.isnan(ref)
    assert torch.equal(out[ok], ref[ok])
    assert torch.equal(torch.signbit(out[ok]), torch.signbit(ref[ok]))  # -0.0 + -0.0 stays -0.0


@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (300, 781), (7, 2048), (2, 4100)])
def test_softmax(shape, device):
    x = torch.randn(*shape, device=device) * 4
    torch.testing.assert_close(softmax(x), torch.softmax(x, dim=1), rtol=1e-5, atol=1e-6)


def test_softmax_handles_infinities(device):
    x = torch.randn(4, 100, device=device)
    x[0, 3] = float("inf")
    x[1, :] = -float("inf")
    x[2, 7] = -float("inf")
    out = softmax(x)
    ref = torch.softmax(x, dim=1)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("shape", [(1, 1), (5, 100), (64, 1500), (3, 4096)])
def test_layer_norm(shape, device):
    m, n = shape
    x = torch.randn(m, n, device=device) + 3
    w = torch.rand(n, device=device)
    b = torch.randn(n, device=device)
    y, mean, rstd = layer_norm(x, w, b)
    torch.testing.assert_close(y, torch.nn.functional.layer_norm(x, (n, ), w, b, eps=1e-5), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(mean, x.mean(dim=1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(rstd, 1 / torch.sqrt(x.var(dim=1, unbiased=False) + 1e-5), rtol=1e-4, atol=1e-5)


def test_second_launch_hits_the_cache(device):
    from triton.backends.apple.compiler import AppleBackend
    calls = []
    saved = AppleBackend.__dict__["make_msl"]
    original = AppleBackend.make_msl

    def counting(mod, metadata, opt):
        calls.append(1)
        return original(mod, metadata, opt)

    AppleBackend.make_msl = staticmethod(counting)
    try:
        x = torch.randn(333, device=device)
        out = torch.empty_like(x)

        @triton.jit
        def copy(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
            i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(o_ptr + i, tl.load(x_ptr + i, mask=i < n), mask=i < n)

        copy[(3, )](x, out, 333, BLOCK=128)
        copy[(3, )](x, out, 333, BLOCK=128)
        assert torch.equal(out, x)
        assert len(calls) <= 1  # compiled at most once (zero when the on-disk cache already had it)
    finally:
        AppleBackend.make_msl = saved

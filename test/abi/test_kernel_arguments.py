"""Kernel arguments beyond flat pointers and scalars (backend/arguments.py): tuples, host tensor descriptors,
and kernels with more arguments than Metal's 31 buffer slots, whose scalars are packed into one buffer. Each
result is checked against torch."""
import pytest
import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from triton.backends.apple.errors import KernelArgError, ResourceLimitError


@triton.jit
def _tuple_kernel(ptrs, coeffs, out, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(ptrs[0] + offs, mask=mask)
    y = tl.load(ptrs[1][0] + offs, mask=mask)
    scale, (shift, power) = coeffs
    v = x * scale + y * shift
    if power == 2:
        v = v * v
    tl.store(out + offs, v, mask=mask)


def test_nested_tuples_with_constexpr_elements(device):
    x, y = torch.randn(100, device=device), torch.randn(100, device=device)
    out = torch.zeros(100, device=device)
    _tuple_kernel[(1, )]((x, (y, )), (2.5, (-0.5, tl.constexpr(2))), out, 100, BLOCK=128)
    torch.testing.assert_close(out, (2.5 * x - 0.5 * y)**2)


def test_tuple_of_wrong_length_names_the_argument(device):
    x = torch.randn(8, device=device)
    out = torch.zeros(8, device=device)
    _tuple_kernel[(1, )]((x, (x, )), (1.0, (1.0, 1)), out, 8, BLOCK=8)  # compile and launch once
    launch = _tuple_kernel.device_caches[0][0]
    kernel = next(iter(launch.values()))
    with pytest.raises(KernelArgError, match=r"kernel '_tuple_kernel' argument 'ptrs\[1\]' expects a tuple of 1"):
        kernel[(1, 1, 1)]((x, x), (1.0, (1.0, 1)), out, 8)


@triton.jit
def _descriptor_copy_kernel(src_desc, dst_desc, BM: tl.constexpr, BN: tl.constexpr):
    m = tl.program_id(0) * BM
    n = tl.program_id(1) * BN
    tile = src_desc.load([m, n])
    dst_desc.store([m, n], tile * 2 + 1)


@pytest.mark.parametrize("shape", [(64, 64), (50, 72)])  # the second has partial tiles at both edges
def test_host_tensor_descriptors(shape, device):
    src = torch.randn(*shape, device=device)
    dst = torch.full(shape, float("nan"), device=device)
    BM, BN = 16, 32
    src_desc = TensorDescriptor.from_tensor(src, [BM, BN])
    dst_desc = TensorDescriptor.from_tensor(dst, [BM, BN])
    _descriptor_copy_kernel[(triton.cdiv(shape[0], BM), triton.cdiv(shape[1], BN))](src_desc, dst_desc, BM=BM, BN=BN)
    torch.testing.assert_close(dst, src * 2 + 1)


@triton.jit
def _padded_load_kernel(desc, out, BM: tl.constexpr, BN: tl.constexpr):
    tile = desc.load([8, 8])  # runs past the 12x12 tensor's end in both dimensions
    r = tl.arange(0, BM)[:, None]
    c = tl.arange(0, BN)[None, :]
    tl.store(out + r * BN + c, tile)


@pytest.mark.parametrize("padding", ["zero", "nan"])
def test_host_descriptor_padding(padding, device):
    src = torch.randn(12, 12, device=device)
    out = torch.empty(8, 8, device=device)
    desc = TensorDescriptor(src, list(src.shape), list(src.stride()), [8, 8], padding=padding)
    _padded_load_kernel[(1, )](desc, out, BM=8, BN=8)
    ref = torch.full((8, 8), 0.0 if padding == "zero" else float("nan"), device=device)
    ref[:4, :4] = src[8:, 8:]
    torch.testing.assert_close(out, ref, equal_nan=True)


def test_descriptor_argument_given_a_tensor_is_named(device):
    src = torch.randn(16, 32, device=device)
    desc = TensorDescriptor.from_tensor(src, [16, 32])
    _descriptor_copy_kernel[(1, 1)](desc, desc, BM=16, BN=32)
    kernel = next(iter(_descriptor_copy_kernel.device_caches[0][0].values()))
    with pytest.raises(KernelArgError, match=r"kernel '_descriptor_copy_kernel' argument 'dst_desc' "
                       r"\(tensordesc<fp32\[16, 32\]>\) expects a triton.tools.tensor_descriptor.TensorDescriptor, "
                       r"got Tensor"):
        kernel[(1, 1, 1)](desc, src)


@triton.jit
def _four_descriptors_kernel(a_desc, b_desc, c_desc, out_desc, alpha, beta, BM: tl.constexpr, BN: tl.constexpr):
    m = tl.program_id(0) * BM
    n = tl.program_id(1) * BN
    v = a_desc.load([m, n]) * alpha + b_desc.load([m, n]) * beta - c_desc.load([m, n])
    out_desc.store([m, n], v)


def test_more_arguments_than_buffer_slots_packs_the_scalars(device):
    # four rank-2 descriptors are 44 kernel arguments; Metal binds 31 buffers, so the 36 scalars share one
    a, b, c = (torch.randn(40, 48, device=device) for _ in range(3))
    out = torch.zeros(40, 48, device=device)
    descs = [TensorDescriptor.from_tensor(t, [16, 16]) for t in (a, b, c, out)]
    k = _four_descriptors_kernel[(3, 3)](*descs, 1.5, -2.0, BM=16, BN=16)
    torch.testing.assert_close(out, a * 1.5 - 2.0 * b - c)
    msl = k.asm["msl"]
    assert "constant uint* tt_scalars [[buffer(4)]]" in msl
    assert msl.count("[[buffer(") == 5  # four base pointers and the packed scalars


@triton.jit
def _many_scalars_kernel(ints, floats, flags, out_i, out_f):
    for i in tl.static_range(len(ints)):
        tl.store(out_i + i, ints[i].to(tl.int64))
    for i in tl.static_range(len(floats)):
        tl.store(out_f + i, floats[i])
    for i in tl.static_range(len(flags)):
        tl.store(out_i + len(ints) + i, flags[i].to(tl.int64))


def test_packed_scalars_of_every_width(device):
    # 36 scalar arguments: i32, i64 (beyond 32 bits, negative), u64 (above 2^63), i1 and f32, all packed
    ints = tuple([7, -3, 2**31 - 1, -2**31, 5_000_000_000, -7_000_000_000, 2**63 + 5, 12, 2**40 + 3] * 2)
    floats = tuple([0.1, -2.5e30, 3.0e-38, float("inf"), -0.0, 1e10] * 2)
    flags = tuple([True, False] * 3)
    out_i = torch.zeros(len(ints) + len(flags), dtype=torch.int64, device=device)
    out_f = torch.zeros(len(floats), dtype=torch.float32, device=device)
    k = _many_scalars_kernel[(1, )](ints, floats, flags, out_i, out_f)
    assert "tt_scalars" in k.asm["msl"]
    want_i = [v - 2**64 if v >= 2**63 else v for v in ints] + [int(f) for f in flags]
    assert out_i.cpu().tolist() == want_i
    assert torch.equal(out_f.cpu(), torch.tensor(floats, dtype=torch.float32))
    # a value that does not fit its packed parameter is named, as for a scalar in a slot of its own
    with pytest.raises(KernelArgError, match=r"kernel '_many_scalars_kernel' argument 'ints\.0' \(i32\): "
                       r"5000000000000 does not fit in int"):
        k[(1, 1, 1)]((5_000_000_000_000, ) + ints[1:], floats, flags, out_i, out_f)


@triton.jit
def _many_pointers_kernel(ptrs):
    for i in tl.static_range(len(ptrs)):
        tl.store(ptrs[i], i)


def test_more_tensors_than_buffer_slots_is_a_resource_error(device):
    ptrs = tuple(torch.zeros(1, dtype=torch.int32, device=device) for _ in range(32))
    with pytest.raises(ResourceLimitError, match=r"kernel '_many_pointers_kernel' has 32 buffer arguments.*"
                       r"Metal binds at most 31"):
        _many_pointers_kernel[(1, )](ptrs)
    _many_pointers_kernel[(1, )](ptrs[:31])
    assert [int(p) for p in ptrs[:31]] == list(range(31))

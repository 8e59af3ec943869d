"""`x.to(dtype, fp_downcast_rounding="rtz")` from float32 to float16, bfloat16 and fp8: the representable value
of largest magnitude not above |x| (a finite value saturates at the largest finite one rather than becoming
infinite, as NVIDIA's `cvt.rz` does; fp8 always saturates, as our round-to-nearest conversion does). The
reference searches the sorted table of every value of the narrow type, independently of how the kernel rounds.
Float64 sources are refused: software float64 rounds to nearest only."""
import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from triton.backends.apple.errors import UnsupportedFeatureError

_NARROW = {"float16": (tl.float16, torch.float16, 16), "bfloat16": (tl.bfloat16, torch.bfloat16, 16),
           "float8e5": (tl.float8e5, torch.float8_e5m2, 8), "float8e4nv": (tl.float8e4nv, torch.float8_e4m3fn, 8)}


@triton.jit
def rtz_kernel(x_ptr, out_ptr, n, DST: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(out_ptr + offs, x.to(DST, fp_downcast_rounding="rtz"), mask=m)


def _reference(x: torch.Tensor, torch_dtype, bits: int) -> torch.Tensor:
    """Bit patterns of the values rounded toward zero, by search in the table of every finite value."""
    codes = torch.arange(1 << (bits - 1), dtype=torch.int32)  # the codes with the sign bit clear
    values = codes.to(torch.int16 if bits == 16 else torch.uint8).view(torch_dtype).double().numpy()
    finite = np.isfinite(values)  # the finite magnitudes and their codes, by value
    order = np.argsort(values[finite], kind="stable")
    mags, mag_codes = values[finite][order], codes.numpy()[finite][order].astype(np.int64)
    xd = x.double().numpy()
    idx = np.searchsorted(mags, np.abs(xd), side="right") - 1  # largest finite magnitude <= |x|
    out = mag_codes[idx] | np.where(np.signbit(xd), 1 << (bits - 1), 0)
    nan_code = torch.tensor([float("nan")]).to(torch_dtype).view(torch.int16 if bits == 16 else torch.uint8)
    out = np.where(np.isnan(xd), int(nan_code.item()) & ((1 << bits) - 1), out)
    if bits == 16:  # infinities stay infinite where the type has them
        inf_code = int(torch.tensor([float("inf")]).to(torch_dtype).view(torch.int16).item()) & 0xFFFF
        out = np.where(np.isinf(xd), inf_code | np.where(np.signbit(xd), 0x8000, 0), out)
    return torch.from_numpy(out.astype(np.int64))


def _inputs() -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    # every exponent of float32 with random mantissas, both signs, and the edges around each type's range
    bits = (torch.arange(256, dtype=torch.int64).repeat_interleave(64) << 23) | torch.randint(0, 1 << 23, (256 * 64, ),
                                                                                              generator=g)
    bits = torch.cat([bits, bits | (1 << 31)])
    x = bits.to(torch.int32).view(torch.float32)
    edges = torch.tensor([0.0, -0.0, 65504.0, 65519.99, 65520.0, 1e30, -1e30, 6e-8, 5.9e-8, 2.9e-8, 57344.0, 61439.0,
                          448.0, 479.0, 1.5e-5, 1.0 + 2**-11, 1.0 - 2**-12, 3.3895e38, 1e-40])
    return torch.cat([x, edges, -edges])


@pytest.mark.parametrize("dst", list(_NARROW))
def test_float32_rounded_toward_zero(dst, device):
    tl_dtype, torch_dtype, bits = _NARROW[dst]
    x = _inputs()
    x = x[~torch.isinf(x)] if bits == 8 else x
    out = torch.empty(x.numel(), dtype=torch_dtype, device=device)
    rtz_kernel[(triton.cdiv(x.numel(), 1024), )](x.to(device), out, x.numel(), DST=tl_dtype, BLOCK=1024)
    got = out.cpu().view(torch.int16 if bits == 16 else torch.uint8).long() & ((1 << bits) - 1)
    ref = _reference(x, torch_dtype, bits)
    nan = torch.isnan(x)
    bad = (got != ref) & ~nan
    assert not bad.any(), [(x[i].item(), hex(got[i].item()), hex(ref[i].item())) for i in bad.nonzero()[:5, 0]]
    assert torch.isnan(out.cpu()[nan].float()).all()


def test_float64_rounded_toward_zero_is_refused():

    @triton.jit
    def k(x_ptr, out_ptr):
        x = tl.load(x_ptr + tl.arange(0, 32))
        tl.store(out_ptr + tl.arange(0, 32), x.to(tl.float32, fp_downcast_rounding="rtz"))

    with pytest.raises(UnsupportedFeatureError, match="round-toward-zero conversion from float64"):
        k[(1, )](torch.zeros(32, dtype=torch.float64), torch.zeros(32))

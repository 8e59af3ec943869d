"""Attributes that ops print in their custom assembly (keywords, strings, `key = value` pairs, loop attributes)
reach the lowering, end to end. Each case here was once dropped silently or refused; the references are torch and
the IEEE rules Triton documents. How the reader itself treats printed forms is in test/ir/test_ir_parser.py."""
import math

import pytest
import torch
import triton
import triton.language as tl


@triton.jit
def clamp_kernel(x_ptr, out_ptr, lo, hi, n, PROPAGATE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    if PROPAGATE:
        y = tl.clamp(x, lo, hi, propagate_nan=tl.PropagateNan.ALL)
    else:
        y = tl.clamp(x, lo, hi)
    tl.store(out_ptr + offs, y, mask=m)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_clamp_propagate_nan_all_returns_nan(dtype, device):
    x = torch.tensor([float("nan"), -3.0, 0.5, 7.0, float("inf"), -float("inf")], dtype=dtype, device=device)
    out = torch.empty_like(x)
    clamp_kernel[(1, )](x, out, -1.0, 2.0, x.numel(), PROPAGATE=True, BLOCK=8)
    ref = torch.clamp(x.float(), -1.0, 2.0).to(dtype)  # torch propagates NaN
    assert math.isnan(out[0].item())
    assert torch.equal(out[1:].cpu(), ref[1:].cpu())


def test_clamp_without_propagation_ignores_nan(device):
    # propagate_nan=NONE: min(max(x, lo), hi) with NaN-ignoring max/min, i.e. NaN clamps to lo
    x = torch.tensor([float("nan"), 5.0], device=device)
    out = torch.empty_like(x)
    clamp_kernel[(1, )](x, out, -1.0, 2.0, 2, PROPAGATE=False, BLOCK=2)
    assert out.cpu().tolist() == [-1.0, 2.0]


@triton.jit
def fp8_sign_kernel(x_ptr, abs_ptr, neg_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(abs_ptr + offs, tl.abs(x))
    tl.store(neg_ptr + offs, -x)


@pytest.mark.parametrize("dtype", [torch.float8_e5m2, torch.float8_e4m3fn])
def test_fp8_abs_and_neg_act_on_the_sign_bit(dtype, device):
    bits = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    x = bits.view(dtype).to(device)
    a, n = torch.empty_like(x), torch.empty_like(x)
    fp8_sign_kernel[(1, )](x, a, n, BLOCK=256)
    got_abs = a.cpu().view(torch.uint8).int()
    got_neg = n.cpu().view(torch.uint8).int()
    assert torch.equal(got_abs, bits.int() & 0x7F)
    assert torch.equal(got_neg, bits.int() ^ 0x80)


@triton.jit
def pipelined_sum(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for i in tl.range(0, n, BLOCK, num_stages=3, loop_unroll_factor=2, flatten=True,
                      disallow_acc_multi_buffer=True):
        offs = i + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.debug_barrier()
    tl.store(out_ptr + tl.arange(0, BLOCK), acc)


def test_loop_hints_and_debug_barrier(device):
    x = torch.randn(1000, device=device)
    out = torch.empty(64, device=device)
    pipelined_sum[(1, )](x, out, 1000, BLOCK=64)
    ref = torch.nn.functional.pad(x.cpu(), (0, 24)).view(-1, 64).sum(0)
    torch.testing.assert_close(out.cpu(), ref, rtol=1e-5, atol=1e-5)


def test_print_prefix_with_symbols_is_kept_verbatim(device, capfd):

    @triton.jit
    def k(x_ptr):
        tl.device_print("rate = x @ 2, y", tl.load(x_ptr))

    k[(1, )](torch.tensor([1.5], device=device))
    out = capfd.readouterr().out
    assert "rate = x @ 2, y" in out and "1.5" in out


@triton.jit
def split_and_assume(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    tl.assume(n > 0)
    tl.assume(n % 16 == 0)
    offs = tl.arange(0, BLOCK)
    a, b = tl.split(tl.load(x_ptr + offs[:, None] * 2 + tl.arange(0, 2)[None, :]))
    tl.store(y_ptr + offs, a * 10 + b)


def test_split_results_and_assume(device):
    # `%a, %b = tt.split %x : T -> U` prints one type for both results; llvm.intr.assume is a hint
    x = torch.randn(64, 2, device=device)
    y = torch.empty(64, device=device)
    split_and_assume[(1, )](x, y, 16, BLOCK=64)
    assert torch.equal(y.cpu(), x.cpu()[:, 0] * 10 + x.cpu()[:, 1])


@triton.jit
def const_pointer_copy(in_ptr: tl.const, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(out_ptr + offs, tl.load(in_ptr + offs))


def test_const_pointer_arguments(device):
    # `tl.const` pointers print as !tt.ptr<f32, "constant">
    x = torch.randn(128, device=device)
    y = torch.empty_like(x)
    const_pointer_copy[(1, )](x, y, N=128)
    assert torch.equal(x.cpu(), y.cpu())


def test_amd_config_hints_are_accepted_and_ignored(device):
    # configs written for HIP (Triton's matmul tutorial uses them on any non-CUDA device) carry these
    x = torch.randn(128, device=device)
    y = torch.empty_like(x)
    const_pointer_copy[(1, )](x, y, N=128, waves_per_eu=2, matrix_instr_nonkdim=16, kpack=2)
    assert torch.equal(x.cpu(), y.cpu())


@triton.jit
def flattened_row_sums(x_ptr, out_ptr, rows, cols, BLOCK: tl.constexpr):
    for i in tl.range(0, rows, flatten=True):
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for j in tl.range(0, cols, BLOCK):
            offs = j + tl.arange(0, BLOCK)
            acc += tl.load(x_ptr + i * cols + offs, mask=offs < cols, other=0.0)
        tl.store(out_ptr + i * BLOCK + tl.arange(0, BLOCK), acc)


@pytest.mark.parametrize("rows, cols", [(5, 100), (3, 64), (1, 10), (0, 32), (4, 0)])
def test_flatten_fuses_nested_loops(rows, cols, device):
    # tl.range(flatten=True) asks for the nest to become one loop (upstream's fuse_nested_loops, as on NVIDIA
    # and AMD); inner trip counts that are not whole blocks, one row, and empty loops keep their meaning
    block = 32
    x = torch.randn(max(rows * cols, 1), device=device)
    out = torch.full((max(rows, 1) * block, ), -7.0, device=device)
    k = flattened_row_sums[(1, )](x, out, rows, cols, BLOCK=block)
    # a fused loop (and a loop over the rows alone, for inner loops of no trip): none nested in another
    loops = [len(l) - len(l.lstrip()) for l in k.asm["ttgir"].splitlines() if "scf.for" in l]
    assert loops and len(set(loops)) == 1, k.asm["ttgir"]
    ref = torch.full((max(rows, 1), block), -7.0)
    if rows:
        padded = torch.nn.functional.pad(x.cpu()[:rows * cols].view(rows, cols), (0, (-cols) % block))
        ref = padded.view(rows, -1, block).sum(1) if cols else torch.zeros(rows, block)
    torch.testing.assert_close(out.cpu().view(-1, block), ref, rtol=1e-5, atol=1e-5)

"""Triton's tutorial 02 (fused softmax) sizes its persistent grid from the device properties and the compiled
kernel: occupancy = max_num_regs // (n_regs * warpSize * num_warps), capped by max_shared_mem // shared. Every
term must be non-zero on the apple backend; the kernel it sizes must still be right."""
import torch

import triton
import triton.language as tl
from triton.runtime import driver


@triton.jit
def persistent_softmax(out_ptr, in_ptr, in_stride, out_stride, n_rows, n_cols, BLOCK: tl.constexpr):
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0)):
        cols = tl.arange(0, BLOCK)
        x = tl.load(in_ptr + row * in_stride + cols, mask=cols < n_cols, other=-float("inf"))
        x = x - tl.max(x, axis=0)
        e = tl.exp(x)
        tl.store(out_ptr + row * out_stride + cols, e / tl.sum(e, axis=0), mask=cols < n_cols)


def test_tutorial_02_occupancy_formula(device):
    props = driver.active.utils.get_device_properties(driver.active.get_current_device())
    n_sm, n_regs_sm, smem, warp = (props["multiprocessor_count"], props["max_num_regs"], props["max_shared_mem"],
                                   props["warpSize"])
    x = torch.randn(301, 781, device=device)
    y = torch.empty_like(x)
    block, num_warps = triton.next_power_of_2(x.shape[1]), 8
    kernel = persistent_softmax.warmup(y, x, x.stride(0), y.stride(0), x.shape[0], x.shape[1], BLOCK=block,
                                       num_warps=num_warps, grid=(1, ))
    kernel._init_handles()
    assert kernel.n_regs > 0 and kernel.metadata.shared > 0
    occupancy = n_regs_sm // (kernel.n_regs * warp * num_warps)
    occupancy = min(occupancy, smem // kernel.metadata.shared)
    programs = min(n_sm * occupancy, x.shape[0])
    assert programs >= 1
    kernel[(programs, 1, 1)](y, x, x.stride(0), y.stride(0), x.shape[0], x.shape[1])
    torch.testing.assert_close(y, torch.softmax(x, dim=1), rtol=1e-5, atol=1e-6)

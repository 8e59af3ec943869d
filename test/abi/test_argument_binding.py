"""Binding launch arguments to the kernel's buffer slots (`AppleLauncher.plan`, `check_arguments`): constexprs take
no slot, and a value of the wrong kind or a signature of the wrong length is refused naming the kernel and the
argument."""
import pytest

from triton.backends.apple import driver as drv

from support.launcher import PARAMS, make_launcher


def test_constexprs_are_not_bound():
    import torch
    la = make_launcher(PARAMS, {"x": "*fp32", "BLOCK": "constexpr", "n": "i32", "s": "fp32"})
    assert [(pos, p.name, p.slot) for pos, p in la.plan] == [(0, "x", 0), (2, "n", 1), (3, "s", 2)]
    la.check_arguments([torch.zeros(4), 128, 7, 2])  # the constexpr 128 is not checked against a slot
    with pytest.raises(drv.KernelArgError, match="argument 'n'"):
        la.check_arguments([torch.zeros(4), 128, 2.5, 2])


def test_wrong_argument_kinds_are_clear_errors():
    la = make_launcher(PARAMS, {"x": "*fp32", "n": "i32", "s": "fp32"})
    with pytest.raises(drv.KernelArgError, match=r"kernel 'k' argument 'x' \(\*fp32\) got the address 0x3, which is not inside any live cpu tensor"):
        la.check_arguments([3, 1, 1.0])
    import torch
    with pytest.raises(drv.KernelArgError, match=r"kernel 'k' argument 'n' \(i32\) expects an integer, got float"):
        la.check_arguments([torch.zeros(1), 1.5, 1.0])


def test_signature_mismatch_is_reported():
    with pytest.raises(drv.KernelArgError, match="2 runtime arguments"):
        make_launcher(PARAMS, {"x": "*fp32", "n": "i32"})


def test_float64_tensor_argument_names_kernel_and_argument():
    import torch
    import triton
    import triton.language as tl
    from triton.backends.apple.errors import UnsupportedFeatureError

    @triton.jit
    def scale_rows(out_ptr, x_ptr, n):
        tl.store(out_ptr, tl.load(x_ptr) * 2)

    # With allow_fp64_demotion float64 is computed in float32, which cannot read or write a float64 tensor
    with pytest.raises(UnsupportedFeatureError, match=r"kernel 'scale_rows' argument 'x_ptr' is a float64 tensor.*"
                       r"Pass `x_ptr` as a\s+float32 tensor"):
        scale_rows[(1, )](torch.zeros(4), torch.zeros(4, dtype=torch.float64), 4, allow_fp64_demotion=True)

"""Integer addresses for pointer parameters (`x.data_ptr()`, as Triton's CUDA and HIP launchers accept them):
each binds the bytes from the address to the end of the live tensor storage that holds it, so the emulator
still checks the kernel's accesses against that storage; an address inside no live tensor is refused."""
import functools

import pytest
import torch
import triton
import triton.language as tl
from triton.compiler import ASTSource

from triton.backends.apple.errors import KernelArgError


@triton.jit
def _copy_plus_one(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    tl.store(dst + offs, tl.load(src + offs, mask=m) + 1, mask=m)


@functools.lru_cache(None)
def _compiled(block: int):
    """The kernel compiled for pointer parameters, as test_core compiles its hand-written kernels: a JIT launch
    would specialise an int argument as an integer, not as an address."""
    sig = {"src": "*fp32", "dst": "*fp32", "n": "i32", "BLOCK": "constexpr"}
    src = ASTSource(fn=_copy_plus_one, signature=sig, constexprs={"BLOCK": block})
    return triton.compile(src, target=triton.runtime.driver.active.get_current_target())


def copy_plus_one(src, dst, n, BLOCK):
    _compiled(BLOCK)[(1, 1, 1)](src, dst, n)


def test_addresses_of_tensors_and_of_views_bind_their_storage():
    x = torch.arange(64, dtype=torch.float32)
    out = torch.zeros(64)
    copy_plus_one(x.data_ptr(), out.data_ptr(), 64, 64)
    assert torch.equal(out, x + 1)
    view = out[16:]  # an address inside the storage: the bytes from there on
    copy_plus_one(x[8:].data_ptr(), view.data_ptr(), 48, 64)
    assert torch.equal(out[16:], x[8:56] + 1) and torch.equal(out[:16], x[:16] + 1)


def test_an_address_and_the_tensor_mix():
    x = torch.randn(32)
    out = torch.zeros(32)
    copy_plus_one(x, out.data_ptr(), 32, 32)
    assert torch.equal(out, x + 1)


def test_accesses_past_the_storage_are_caught_on_the_address_argument():
    from triton.backends.apple.emulator import EmulatorLaunchError
    x = torch.arange(64, dtype=torch.float32)
    out = torch.zeros(40)
    with pytest.raises(EmulatorLaunchError) as e:
        copy_plus_one(x.data_ptr(), out[8:].data_ptr(), 64, 64)  # 32 floats are left after out[8]
    assert e.value.param == "dst" and e.value.kind == "out_of_bounds"
    assert torch.equal(out, torch.zeros(40))  # a failed launch writes nothing back


def test_an_address_inside_no_live_tensor_is_refused_naming_the_argument():
    x = torch.zeros(4)
    with pytest.raises(KernelArgError, match=r"kernel '_copy_plus_one' argument 'dst' \(\*f32\) got the address "
                       r"0x10, which is not inside any live cpu tensor"):
        copy_plus_one(x, 16, 4, 4)
    with pytest.raises(KernelArgError, match=r"argument 'src' \(\*f32\) got the address 0: a pointer argument needs a "
                       r"tensor"):
        copy_plus_one(0, x, 4, 4)

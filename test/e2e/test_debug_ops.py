"""tl.device_print and tl.device_assert through the debug read-back buffer."""
import pytest
import torch
import triton
import triton.language as tl

from triton.backends.apple.abi.debug_buffer import DeviceAssertionError


@triton.jit
def print_kernel(x_ptr, n, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i)
    tl.device_print("x", x, i)
    tl.device_print("n", n)


def test_device_print_every_element_once(capsys, device):
    x = torch.tensor([1.5, -2.0, 3.25, 7.0, 0.0, -0.5, 9.0, 10.0], device=device)
    print_kernel[(2, )](x, -7, BLOCK=8)
    out = capsys.readouterr().out.splitlines()
    elems = sorted(l for l in out if " idx (" in l)
    assert len(elems) == 16  # 8 elements x 2 programs, no duplicates from replicated layouts
    assert "pid (1, 0, 0) idx (2) x: 3.25, 2" in elems
    assert sum(1 for l in out if l.endswith(" n: -7")) == 2


@triton.jit
def print_types_kernel(a_ptr, b_ptr, c_ptr):
    i = tl.arange(0, 2)
    tl.device_print("v", tl.load(a_ptr + i), tl.load(b_ptr + i), tl.load(c_ptr + i))


def test_device_print_types(capsys, device):
    a = torch.tensor([-3, 4], dtype=torch.int64, device=device)
    b = torch.tensor([255, 1], dtype=torch.uint8, device=device)
    c = torch.tensor([0.5, -1.25], dtype=torch.float16, device=device)
    print_types_kernel[(1, )](a, b, c, num_warps=1)
    out = capsys.readouterr().out
    assert "idx (0) v: -3, 255, 0.5" in out
    assert "idx (1) v: 4, 1, -1.25" in out


@triton.jit
def assert_kernel(x_ptr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i)
    tl.device_assert(x < 100, "x must stay below 100")
    tl.store(x_ptr + i, x + 1)


def test_device_assert_names_kernel_line_and_element(device):
    x = torch.zeros(32, device=device)
    x[5] = 1000
    with pytest.raises(DeviceAssertionError) as info:
        assert_kernel[(1, )](x, BLOCK=32, debug=True)
    msg = str(info.value)
    assert "assert_kernel" in msg and "x must stay below 100" in msg
    assert "test_debug_ops.py" in msg and "idx (5)" in msg


def test_device_assert_passes_and_is_dropped_without_debug(device):
    x = torch.zeros(32, device=device)
    assert_kernel[(1, )](x, BLOCK=32, debug=True)
    assert torch.all(x == 1)
    x[3] = 500
    assert_kernel[(1, )](x, BLOCK=32)  # debug=False: Triton removes device_assert
    assert x[3].item() == 501


@triton.jit
def _add_checked(a, b):
    tl.device_assert(a + b < 100, "sum too large")
    return a + b


@triton.jit
def checked_scan(x_ptr, z_ptr, BLOCK: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, BLOCK))
    tl.store(z_ptr + tl.arange(0, BLOCK), tl.associative_scan(x, 0, _add_checked))


def test_device_assert_inside_a_combine_function(device):
    # the combine function's values differ on every thread: each thread checks its own
    x = torch.arange(8, dtype=torch.int32, device=device)
    z = torch.empty_like(x)
    checked_scan[(1, )](x, z, BLOCK=8, debug=True)
    assert torch.equal(z.cpu(), torch.cumsum(x.cpu(), 0).int())
    with pytest.raises(DeviceAssertionError, match="sum too large"):
        checked_scan[(1, )](torch.arange(32, dtype=torch.int32, device=device), torch.empty(32, dtype=torch.int32,
                                                                                             device=device),
                            BLOCK=32, debug=True)

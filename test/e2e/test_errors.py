"""Bad kernels and bad launches give reports that name the kernel, the op or argument, and the source line."""
import inspect

import pytest
import torch
import triton
import triton.language as tl

from triton.backends.apple.emulator import EmulatorLaunchError
from triton.backends.apple.errors import ResourceLimitError, UnsupportedFeatureError
from triton.runtime.errors import OutOfResources


@triton.jit
def unmasked_copy(x_ptr, out_ptr, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + i, tl.load(x_ptr + i))


@pytest.mark.emulator_only
def test_out_of_bounds_load_names_kernel_argument_and_index():
    x = torch.randn(100)
    out = torch.empty(128)
    with pytest.raises(EmulatorLaunchError) as info:
        unmasked_copy[(1, )](x, out, BLOCK=128)
    msg = str(info.value)
    assert "unmasked_copy" in msg and "x_ptr" in msg
    assert info.value.param == "x_ptr"
    assert info.value.index is not None and info.value.index >= 100
    assert "test_errors.py" in msg  # the Triton source line of the faulting load
    # the process is fine and the next launch works
    y = torch.randn(128)
    unmasked_copy[(1, )](y, out, BLOCK=128)
    assert torch.equal(out, y)


@pytest.mark.emulator_only
def test_out_of_bounds_store_is_reported():
    x = torch.randn(256)
    out = torch.empty(200)
    with pytest.raises(EmulatorLaunchError) as info:
        unmasked_copy[(2, )](x, out, BLOCK=128)
    assert info.value.param == "out_ptr" and info.value.is_write


@triton.jit
def f64_kernel(x_ptr, out_ptr):
    x = tl.load(x_ptr)
    y = x.to(tl.float64) * 2
    tl.store(out_ptr, y.to(tl.float32))


def test_float64_values_are_computed_in_software_with_a_warning(device):
    x = torch.tensor([1.5], device=device)
    out = torch.zeros(1, device=device)
    with pytest.warns(UserWarning, match="computes float64 in software"):
        f64_kernel[(1, )](x, out)
    assert out.item() == 3.0


def test_shared_memory_over_32kb_is_refused():
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl

    @gluon.jit
    def big_buffer(x_ptr, out_ptr, BLOCK: gl.constexpr):
        layout: gl.constexpr = gl.BlockedLayout([1, 4], [8, 4], [4, 1], [1, 0])
        offs = gl.arange(0, BLOCK, layout=gl.SliceLayout(1, layout))[:, None] * BLOCK + \
            gl.arange(0, BLOCK, layout=gl.SliceLayout(0, layout))[None, :]
        buf = gl.allocate_shared_memory(gl.float32, [BLOCK, BLOCK], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]),
                                        gl.load(x_ptr + offs))
        gl.store(out_ptr + offs, buf.load(layout))

    # the kernel asks for a 64 KB shared buffer itself (what the backend stages on its own, such as dot
    # operands or layout conversions, goes in rounds instead)
    x = torch.zeros(128 * 128)
    with pytest.raises(ResourceLimitError, match="big_buffer' needs 65536 bytes of threadgroup memory") as info:
        big_buffer[(1, )](x, torch.empty_like(x), BLOCK=128, num_warps=4)
    # Triton's autotuner skips configs that raise OutOfResources
    assert isinstance(info.value, OutOfResources)
    assert (info.value.required, info.value.limit) == (65536, 32768)


def test_unsupported_op_names_op_and_line():

    from triton.language.extra import libdevice

    @triton.jit
    def k(x_ptr):
        x = tl.load(x_ptr + tl.arange(0, 32))
        tl.store(x_ptr + tl.arange(0, 32), libdevice.erfc(x))

    with pytest.raises(UnsupportedFeatureError, match=r"extern_elementwise.*libdevice\.erfc.*\n.*test_errors.py"):
        k[(1, )](torch.zeros(32))


def test_float64_demotion_is_an_explicit_opt_in(device):
    x = torch.tensor([1.5], device=device)
    out = torch.zeros(1, device=device)
    f64_kernel[(1, )](x, out, allow_fp64_demotion=True)
    assert out.item() == 3.0


def test_float64_tensors_are_refused_even_with_demotion():

    @triton.jit
    def k(x_ptr):
        tl.store(x_ptr, tl.load(x_ptr) + 1)

    with pytest.raises(UnsupportedFeatureError, match="float64 tensors are not supported with allow_fp64_demotion"):
        k[(1, )](torch.zeros(4, dtype=torch.float64), allow_fp64_demotion=True)


@pytest.mark.parametrize("name", ["kernel", "half", "main", "device", "uint"])
def test_kernel_names_that_msl_reserves_still_compile(name, device):
    src = f"""
import triton
import triton.language as tl


@triton.jit
def {name}(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1.0, mask=mask)
"""
    import importlib.util
    import pathlib
    import tempfile
    path = pathlib.Path(tempfile.mkdtemp()) / f"reserved_{name}.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(f"reserved_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    x = torch.randn(10, device=device)
    out = torch.zeros(10, device=device)
    getattr(mod, name)[(1, )](x, out, 10, BLOCK=16)
    assert torch.equal(out, x + 1)


@triton.jit
def doubled(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(y_ptr + offs, x * 2)


@pytest.mark.emulator_only
def test_stack_overflow_names_the_per_thread_arrays_and_says_the_limit_is_the_emulators(monkeypatch):
    # 32768 elements over one simdgroup: 1024 of each tensor per thread, about 28 KB of arrays on a 16 KB stack
    monkeypatch.setenv("TRITON_APPLE_EMULATOR_STACK_KB", "16")
    x = torch.randn(32768)
    y = torch.zeros(32768)
    with pytest.raises(EmulatorLaunchError) as ei:
        doubled[(1,)](x, y, BLOCK=32768, num_warps=1)
    e = ei.value
    msg = str(e)
    assert e.kind == "stack_overflow" and "kernel 'doubled'" in msg
    assert "the emulator's limit, not Metal's" in msg and "TRITON_APPLE_EMULATOR_STACK_KB" in msg
    assert "[1024] = 8 KB" in msg  # a tensor of pointers: 1024 per thread, 8 bytes each
    assert "More warps than 1 (num_warps)" in msg
    # the largest arrays are mapped back to the lines of `doubled` that made them
    src, first = inspect.getsourcelines(doubled.fn)
    load_line = first + next(i for i, t in enumerate(src) if "tl.load" in t)
    assert f"generated from tt.addptr at {__file__}:{load_line}:" in msg
    assert torch.equal(y, torch.zeros(32768))  # a failed launch leaves the arguments as they were
    monkeypatch.setenv("TRITON_APPLE_EMULATOR_STACK_KB", "64")
    doubled[(1,)](x, y, BLOCK=32768, num_warps=1)
    assert torch.equal(y, x * 2)

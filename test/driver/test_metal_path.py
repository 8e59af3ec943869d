"""The driver's metal mode, run unmodified on the MPS stand-in (test/support/mps_standin.py, docs/mps_standin.md):
`load_binary`'s metal branch, `AppleLauncher.__call__` in metal mode, `_dispatch_metal`'s argument binding
and grid arithmetic, debug-buffer readback and the metal error paths, each checked against torch."""
import struct

import pytest
import torch
import triton
import triton.language as tl

from triton.backends.apple import driver as drv
from triton.backends.apple.abi.lock_table import LOCK_WORDS
from triton.backends.apple.abi.debug_buffer import DeviceAssertionError

from support.mps_standin import SetBytes, StandinLimit


def test_the_fixture_runs_the_metal_driver(mps):
    active = triton.runtime.driver.active
    assert isinstance(active, drv.AppleDriver) and active.mode == "metal"
    assert active.get_current_target().backend == "mps"
    assert active.get_device_interface() is drv.MPS_INTERFACE
    props = active.utils.get_device_properties(0)
    assert props["multiprocessor_count"] > 0 and props["warpSize"] == 32


# ------------------------------------------------------------------------------------------------
# Kernels against torch


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@pytest.mark.parametrize("num_warps", [1, 4, 8])
def test_vector_add(mps, num_warps):
    n, block = 1000, 256
    x, y = torch.randn(n), torch.randn(n)
    out = torch.full((n, ), float("nan"))
    grid = triton.cdiv(n, block)
    add_kernel[(grid, )](x, y, out, n, BLOCK=block, num_warps=num_warps)
    torch.testing.assert_close(out, x + y)
    assert mps.sources and "kernel void add_kernel" in mps.sources[-1]
    d = mps.dispatches[-1]
    assert d.kernel == "add_kernel"
    assert d.threads == (grid * 32 * num_warps, 1, 1) and d.group == (32 * num_warps, 1, 1)
    assert all(a is b for a, b in zip(d.args[:3], (x, y, out)))  # the tensors themselves, in order
    n_arg = d.args[3]  # a scalar binds by value (setBytes), not as a tensor: what PyTorch got and bound
    assert isinstance(n_arg, SetBytes) and (n_arg.value, n_arg.cast, n_arg.data) == (n, "int32", struct.pack("<i", n))


@triton.jit
def row_sum_kernel(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
    tl.store(out_ptr + row, tl.sum(x, axis=0))


@pytest.mark.parametrize("num_warps", [1, 4])
def test_reduction(mps, num_warps):
    x = torch.randn(37, 300)
    out = torch.empty(37)
    row_sum_kernel[(37, )](x, out, 300, x.stride(0), BLOCK=512, num_warps=num_warps)
    torch.testing.assert_close(out, x.sum(dim=1), rtol=1e-5, atol=1e-4)


@triton.jit
def scalars_kernel(x_ptr, out_f_ptr, out_i_ptr, n_i32, f_f32, big_i64, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.store(out_f_ptr + i, tl.load(x_ptr + i) * f_f32 + n_i32)
    tl.store(out_i_ptr + i, big_i64 + i)


def test_scalars_of_several_types(mps):
    x = torch.randn(16)
    out_f, out_i = torch.empty(16), torch.empty(16, dtype=torch.int64)
    big = 3 * 2**33 + 5  # beyond int32: Triton's signature makes it i64
    scalars_kernel[(1, )](x, out_f, out_i, -7, 0.5, big, BLOCK=16)
    torch.testing.assert_close(out_f, x * 0.5 - 7)
    assert out_i.tolist() == [big + k for k in range(16)]
    d = mps.dispatches[-1]
    assert [type(a) for a in d.args[3:6]] == [SetBytes] * 3
    assert [d.bytes_at(i) for i in (3, 4, 5)] == [struct.pack("<i", -7), struct.pack("<f", 0.5), struct.pack("<q", big)]
    assert [a.cast for a in d.args[3:6]] == ["int32", "int32", ""]  # int64 needs no cast


@triton.jit
def grid_kernel(out_ptr, BLOCK: tl.constexpr):
    x, y, z = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    nx, ny = tl.num_programs(0), tl.num_programs(1)
    linear = (z * ny + y) * nx + x
    lane = tl.arange(0, BLOCK)
    value = x * 1000000 + y * 1000 + z + lane * 0
    tl.store(out_ptr + linear * BLOCK + lane, value)


@pytest.mark.parametrize("grid", [(3, 5, 1), (2, 3, 4), (1, 1, 7)])
@pytest.mark.parametrize("num_warps", [1, 4, 8])
def test_2d_and_3d_grids(mps, grid, num_warps):
    gx, gy, gz = grid
    block = 32
    out = torch.full((gx * gy * gz * block, ), -1, dtype=torch.int32)
    grid_kernel[grid](out, BLOCK=block, num_warps=num_warps)
    z, y, x = torch.meshgrid(torch.arange(gz), torch.arange(gy), torch.arange(gx), indexing="ij")
    expected = (x * 1000000 + y * 1000 + z).to(torch.int32).reshape(-1, 1).expand(-1, block).reshape(-1)
    assert torch.equal(out, expected)
    d = mps.dispatches[-1]
    assert d.threads == (gx * 32 * num_warps, gy, gz) and d.group == (32 * num_warps, 1, 1)


# ------------------------------------------------------------------------------------------------
# Debug buffer readback


@triton.jit
def print_kernel(x_ptr, n, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.device_print("x", tl.load(x_ptr + i))
    tl.device_print("n", n)


def test_device_print_is_read_back(mps, capsys):
    x = torch.tensor([1.5, -2.0, 3.25, 7.0])
    print_kernel[(2, )](x, -3, BLOCK=4)
    out = capsys.readouterr().out.splitlines()
    assert "pid (1, 0, 0) idx (2) x: 3.25" in out
    assert sum(1 for line in out if line.endswith(" n: -3")) == 2
    assert mps.synchronizations == 1  # the launcher waits for the MPS stream before reading the buffer
    assert mps.dispatches[-1].args[-1].numel() == drv.debug_buffer.BUFFER_WORDS  # debug buffer: last slot


@triton.jit
def assert_kernel(x_ptr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i)
    tl.device_assert(x < 100, "x must stay below 100")
    tl.store(x_ptr + i, x + 1)


def test_device_assert_is_read_back(mps):
    x = torch.zeros(32)
    assert_kernel[(1, )](x, BLOCK=32, debug=True)
    assert torch.equal(x, torch.ones(32))
    x[5] = 1000
    with pytest.raises(DeviceAssertionError, match=r"(?s)assert_kernel.*x must stay below 100.*idx \(5\)"):
        assert_kernel[(1, )](x, BLOCK=32, debug=True)


@triton.jit
def ticket_kernel(counter_ptr, out_ptr, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + i, tl.atomic_add(counter_ptr + tl.zeros_like(i), 1, sem="relaxed"))


def test_locked_64bit_atomics_bind_the_lock_table(mps):
    counter = torch.tensor([2**32 - 3], dtype=torch.int64)
    out = torch.zeros(64, dtype=torch.int64)
    ticket_kernel[(2, )](counter, out, BLOCK=32)
    assert counter.item() == 2**32 - 3 + 64
    assert sorted(out.tolist()) == list(range(2**32 - 3, 2**32 - 3 + 64))
    table = mps.dispatches[-1].args[-1]  # the lock table: the last slot, all free again
    assert table.numel() == LOCK_WORDS and not table.any()


# ------------------------------------------------------------------------------------------------
# Error paths


def test_a_tensor_not_on_the_metal_device_is_refused(mps):
    x, out = torch.randn(8), torch.empty(8)
    y = torch.empty(8, device="meta")
    with pytest.raises(drv.KernelArgError, match=r"kernel 'add_kernel' argument 'y_ptr' is on meta; the Metal "
                       r"device needs mps tensors"):
        add_kernel[(1, )](x, y, out, 8, BLOCK=8)
    assert not mps.dispatches


def test_scalar_out_of_range_is_refused_before_dispatch(mps):
    x = torch.randn(16)
    with pytest.raises(drv.KernelArgError, match="does not fit in float"):
        scalars_kernel[(1, )](x, torch.empty(16), torch.empty(16, dtype=torch.int64), 1, 1e39, 2**40, BLOCK=16)
    assert not mps.dispatches


def test_damaged_msl_is_named(mps):
    with pytest.raises(drv.KernelArgError, match="MSL of kernel 'k' is not UTF-8 text"):
        drv.AppleUtils("metal").load_binary("k", b"\xff\xfe", 0, 0)


def test_load_binary_reports_the_pipeline_limits(mps):
    src = "kernel void k(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) { x[i] = 1; }"
    lib, fn, n_regs, n_spills, max_threads = drv.AppleUtils("metal").load_binary("k", src.encode(), 0, 0)
    assert max_threads == fn.max_threads_per_threadgroup == 1024
    assert n_regs == drv.registers_per_thread(1024, "apple7") and n_spills == 0
    x = torch.zeros(64)
    fn(x)  # no threads: one per element of the first tensor
    assert torch.equal(x, torch.ones(64))


# ------------------------------------------------------------------------------------------------
# The stand-in's own documented behaviour (docs/mps_standin.md)

FILL = """
kernel void fill(device float* out [[buffer(0)]], constant float& v [[buffer(1)]],
                 constant long& k [[buffer(2)]], uint3 i [[thread_position_in_grid]],
                 uint3 n [[threads_per_grid]]) {
  out[(i.z * n.y + i.y) * n.x + i.x] = v + float(k);
}
"""
SCALE = """
kernel void scale(device float* out [[buffer(0)]], constant half& h [[buffer(1)]],
                  constant int& k [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  out[i] = float(h) * float(k);
}
"""


def test_standin_binds_python_scalars_as_float_and_int64(mps):
    fill = torch.mps.compile_shader(FILL).fill
    out = torch.zeros(4, 3, 2)
    fill(out, 1.5, 2, threads=[2, 3, 4], group_size=[2, 1, 2])
    assert torch.equal(out, torch.full((4, 3, 2), 3.5))
    assert mps.dispatches[-1].group == (2, 1, 2)


def test_standin_arg_casts(mps):
    scale = torch.mps.compile_shader(SCALE).scale
    out = torch.zeros(8)
    scale(out, 0.5, 6, arg_casts={1: "fp16", 2: "int32"})
    assert torch.equal(out, torch.full((8, ), 3.0))
    with pytest.raises(RuntimeError, match="Unsupported cast instruction fp8"):
        scale(out, 0.5, 6, arg_casts="fp8")
    with pytest.raises(RuntimeError, match="Unexpected caster arg type"):
        scale(out, 0.5, 6, arg_casts=[1])


def test_standin_dispatch_errors(mps):
    fill = torch.mps.compile_shader(FILL).fill
    out = torch.zeros(8)
    with pytest.raises(RuntimeError, match="Number of threads is undefined"):
        fill(1.0, 2)
    with pytest.raises(RuntimeError, match="same number of dimensions"):
        fill(out, 1.0, 2, threads=[8, 1], group_size=[8])
    with pytest.raises(ValueError, match="Threadgroup size exceeds 1024 limit"):
        fill(out, 1.0, 2, threads=[2048], group_size=[2048])
    with pytest.raises(ValueError, match="Threadgroup size exceeds 1024 limit"):
        fill(out, 1.0, 2, threads=[64, 64], group_size=[64, 32])
    with pytest.raises(RuntimeError, match="Unsupported argument type"):
        fill(out, "1.0", 2)
    with pytest.raises(RuntimeError, match="Empty list"):
        fill(out, [], 2)
    with pytest.raises(StandinLimit, match="partial threadgroup"):
        fill(out, 1.0, 2, threads=[8], group_size=[3])
    with pytest.raises(RuntimeError, match="^Failed to create function state object for: nope$"):
        torch.mps.compile_shader(FILL).nope


@triton.jit
def four_descriptors_kernel(a_desc, b_desc, c_desc, out_desc, alpha, BM: tl.constexpr, BN: tl.constexpr):
    m = tl.program_id(0) * BM
    n = tl.program_id(1) * BN
    out_desc.store([m, n], a_desc.load([m, n]) * alpha + b_desc.load([m, n]) - c_desc.load([m, n]))


def test_host_descriptors_with_packed_scalars(mps):
    # 41 kernel arguments: the four base pointers bind as tensors, the 37 scalars as one list of int32 words (setBytes)
    from triton.tools.tensor_descriptor import TensorDescriptor
    a, b, c = (torch.randn(32, 48) for _ in range(3))
    out = torch.zeros(32, 48)
    descs = [TensorDescriptor.from_tensor(t, [16, 16]) for t in (a, b, c, out)]
    four_descriptors_kernel[(2, 3)](*descs, 0.5, BM=16, BN=16)
    torch.testing.assert_close(out, a * 0.5 + b - c)
    d = mps.dispatches[-1]
    assert len(d.args) == 5 and all(x is t for x, t in zip(d.args[:4], (a, b, c, out)))
    packed = d.args[4]
    assert isinstance(packed, SetBytes) and packed.cast == "int32" and isinstance(packed.value, list)
    words = torch.frombuffer(bytearray(packed.data), dtype=torch.int32)
    assert words.numel() == 4 * 16 + 1  # 16 words per descriptor, then alpha
    assert words[8:10].tolist() == [0, 0]  # padding "zero", no tf32 rounding
    assert words[-1:].view(torch.float32).item() == 0.5


# ------------------------------------------------------------------------------------------------
# Scalars by value, and the grid Metal can dispatch


@triton.jit
def widths_kernel(out_ptr, a: tl.uint32, b: tl.uint64, c: tl.int8, d: tl.uint16, e: tl.float16, f: tl.float64):
    tl.store(out_ptr + 0, a.to(tl.int64))
    tl.store(out_ptr + 1, b.to(tl.int64, bitcast=True))
    tl.store(out_ptr + 2, c.to(tl.int64))
    tl.store(out_ptr + 3, d.to(tl.int64))
    tl.store(out_ptr + 4, e.to(tl.int16, bitcast=True).to(tl.int64) & 0xFFFF)
    tl.store(out_ptr + 5, f.to(tl.int64, bitcast=True))


def test_scalars_of_every_width_bind_by_value_with_their_cast(mps):
    # unsigned values above the signed maximum (a tensor of the signed dtype of their size cannot hold them),
    # the narrow integers, a half and a float64 (its 8 bytes): each a Python int PyTorch takes, cast by size
    out = torch.zeros(6, dtype=torch.int64)
    widths_kernel[(1, )](out, 2**32 - 1, 2**64 - 1, -128, 65535, -2.5, -0.0)
    assert out.tolist() == [2**32 - 1, -1, -128, 65535, 0xC100, -2**63]
    d = mps.dispatches[-1]
    assert [a.cast for a in d.args[1:7]] == ["int32", "", "int8", "int16", "int16", ""]
    assert [d.bytes_at(i) for i in range(1, 7)] == [b"\xff" * 4, b"\xff" * 8, b"\x80", b"\xff\xff", b"\x00\xc1",
                                                   struct.pack("<d", -0.0)]
    assert all(-2**63 <= a.value < 2**63 for a in d.args[1:7])  # what pybind11's cast<int64_t> accepts


def test_standin_refuses_what_pybind_refuses(mps):
    fill = torch.mps.compile_shader(FILL).fill
    with pytest.raises(RuntimeError, match="Unable to cast Python instance of type <class 'int'>"):
        fill(torch.zeros(4), 1.0, 2**63)
    with pytest.raises(RuntimeError, match="Unable to cast Python instance of type <class 'int'>"):
        fill(torch.zeros(4), 1.0, 2**64 - 1, arg_casts={2: "int32"})  # the cast comes after the int64 one


@pytest.mark.parametrize("grid, message", [
    ((2**32 // 128, 1, 1), r"dimension x has 33554432 programs x 128 threads = 4294967296 threads"),
    ((1, 2**32, 1), r"dimension y has 4294967296 programs"),
    ((1, 1, -1), r"dimension z has -1 programs"),
])
def test_a_grid_metal_cannot_dispatch_is_refused_naming_the_kernel(mps, grid, message):
    out = torch.zeros(32, dtype=torch.int32)
    with pytest.raises(drv.KernelArgError, match=rf"kernel 'grid_kernel': grid .* does not fit Metal's dispatch: "
                       rf"{message}; each dimension takes 1 to 4294967295 threads"):
        grid_kernel[grid](out, BLOCK=32, num_warps=4)
    assert not mps.dispatches and not out.any()


def test_the_emulator_refuses_the_same_grids():
    out = torch.zeros(32, dtype=torch.int32)
    with pytest.raises(drv.KernelArgError, match=r"grid \(1, 1, 4294967296\) does not fit Metal's dispatch"):
        grid_kernel[(1, 1, 2**32)](out, BLOCK=32, num_warps=1)
    assert not out.any()

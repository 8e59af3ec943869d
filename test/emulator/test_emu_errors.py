"""Out-of-bounds and other launch errors, compile errors with MSL lines, the on-disk cache."""
import os
import subprocess
import sys
import textwrap
import time

import pytest
import torch

from support.emulator_msl import line_of, msl

OOB = msl("""
kernel void oob(device const float* x [[buffer(0)]],
                device float* out [[buffer(1)]],
                constant int& read_off [[buffer(2)]],
                constant int& write_off [[buffer(3)]],
                constant uint& n [[buffer(4)]],
                uint gid [[thread_position_in_grid]]) {
    if (gid >= n) return;
    float v = x[(int)gid + read_off];
    out[(int)gid + write_off] = v * 2.0f;
}
""")
READ_LINE = line_of(OOB, "float v = x[")
WRITE_LINE = line_of(OOB, "out[(int)gid + write_off]")


def _run_oob(emu, n, read_off, write_off, x=None, out=None, host_threads=1):
    k = emu.compile_msl(OOB, "oob")
    x = torch.arange(n, dtype=torch.float32) if x is None else x
    out = torch.zeros(n) if out is None else out
    k.launch(grid=(n + 63) // 64, threadgroup=64,
             buffers={0: x, 1: out, 2: emu.Scalar(read_off, "int"), 3: emu.Scalar(write_off, "int"), 4: n},
             host_threads=host_threads, schedule="forward")
    return x, out


def test_in_bounds_ok(emu):
    x, out = _run_oob(emu, 1000, 0, 0)
    assert torch.equal(out, 2 * x)


@pytest.mark.parametrize("n", [1000, 1001, 1024])
def test_oob_read_reported(emu, n):
    with pytest.raises(emu.EmulatorLaunchError) as ei:
        _run_oob(emu, n, 5, 0)
    e = ei.value
    assert e.kind == "out_of_bounds" and e.param == "x" and e.slot == 0 and e.is_write is False
    # The copy keeps the host pointer's alignment modulo 16, so the end of the data abuts the guard page
    # only when the size is a multiple of 16 bytes; a read of the (< 16 byte) tail padding is not caught.
    first_caught = (n * 4 + 15) // 16 * 4
    assert e.index == first_caught  # host_threads=1: threads run in order
    msg = str(e)
    assert f"out-of-bounds read of buffer 'x' [[buffer(0)]] at element index {first_caught}" in msg
    assert f"buffer has {n} elements of 4 bytes" in msg and "kernel 'oob'" in msg
    assert e.msl_lines == [READ_LINE] and f"at MSL line {READ_LINE}" in msg
    # the process survives and the next launch works
    x, out = _run_oob(emu, n, 0, 0)
    assert torch.equal(out, 2 * x)


def _launch_oob(emu, k, n, read_off):
    x, out = torch.arange(n, dtype=torch.float32), torch.zeros(n)
    k.launch(grid=(n + 63) // 64, threadgroup=64,
             buffers={0: x, 1: out, 2: emu.Scalar(read_off, "int"), 3: emu.Scalar(0, "int"), 4: n}, host_threads=1)


def test_a_quick_library_s_fault_is_located_through_its_build_with_line_tables(emu):
    """Quick (-O0) libraries are built without line tables; a fault's MSL line comes from the same build with
    them, whose code is checked to be the same bytes at the same addresses."""
    from triton.backends.apple.emulator import objfile
    k = emu.compile_msl(OOB, "oob", quick=True)
    assert k.quick
    data = k.so_path.read_bytes()
    if data[:4] == b"\x7fELF":
        assert b".debug_line" not in data  # no line tables in the library that runs
    with pytest.raises(emu.EmulatorLaunchError) as ei:
        _launch_oob(emu, k, 1000, 5)
    e = ei.value
    assert e.kind == "out_of_bounds" and e.param == "x"
    assert e.msl_lines == [READ_LINE] and f"at MSL line {READ_LINE}" in str(e)
    twin, _ = k._build_lines()
    assert twin != k.so_path and objfile.same_code(k.so_path, twin)
    optimised = emu.compile_msl(OOB, "oob", quick=False)
    assert not objfile.same_code(k.so_path, optimised.so_path)


def test_a_quick_library_s_fault_gets_no_line_when_its_twin_s_code_differs(emu, monkeypatch):
    from triton.backends.apple.emulator import objfile
    k = emu.compile_msl(OOB, "oob", quick=True)
    monkeypatch.setattr(objfile, "same_code", lambda a, b: False)
    with pytest.raises(emu.EmulatorLaunchError) as ei:
        _launch_oob(emu, k, 1000, 5)
    e = ei.value
    assert e.kind == "out_of_bounds" and e.param == "x" and e.index is not None
    assert e.msl_lines == [] and "at MSL line" not in str(e)  # no line rather than a wrong one


def test_oob_write_reported_and_nothing_copied_back(emu):
    out = torch.zeros(1000)
    with pytest.raises(emu.EmulatorLaunchError) as ei:
        _run_oob(emu, 1000, 0, 1, out=out)
    e = ei.value
    assert e.kind == "out_of_bounds" and e.param == "out" and e.slot == 1 and e.is_write is True
    assert e.index == 1000 and e.msl_lines == [WRITE_LINE]
    assert e.threadgroup == (15, 0, 0) and e.thread == 39
    assert torch.count_nonzero(out) == 0


def test_oob_write_into_tail_padding_found_after_launch(emu):
    with pytest.raises(emu.EmulatorLaunchError) as ei:
        _run_oob(emu, 1001, 0, 1)  # writes out[1001], inside the 12 bytes of padding before the guard page
    e = ei.value
    assert e.kind == "out_of_bounds" and e.param == "out" and e.index == 1001 and e.is_write
    assert "found after the launch" in str(e) and e.threadgroup is None


def test_oob_far_past_the_end_and_before_the_start(emu):
    with pytest.raises(emu.EmulatorLaunchError) as ei:
        _run_oob(emu, 256, 5000, 0)
    assert ei.value.index == 5000 and ei.value.param == "x"
    # a write just before the start lands in the padding in front of the data: found after the launch
    with pytest.raises(emu.EmulatorLaunchError) as ei:
        _run_oob(emu, 256, 0, -1)
    assert ei.value.kind == "out_of_bounds" and ei.value.param == "out" and ei.value.index == -1
    assert "found after the launch" in str(ei.value)
    # far before the start: leading guard zone
    with pytest.raises(emu.EmulatorLaunchError) as ei:
        _run_oob(emu, 256, -3000, 0)
    assert ei.value.param == "x" and ei.value.index == -3000


def test_oob_on_tensor_view_uses_the_view_bounds(emu):
    storage = torch.arange(2048, dtype=torch.float32)
    view = storage[100:612]  # 512 elements inside a larger storage
    with pytest.raises(emu.EmulatorLaunchError) as ei:
        _run_oob(emu, 512, 1, 0, x=view)
    assert ei.value.param == "x" and ei.value.index == 512


def test_oob_with_concurrent_host_threads(emu):
    with pytest.raises(emu.EmulatorLaunchError) as ei:
        _run_oob(emu, 4096, 64, 0, host_threads=4)
    assert ei.value.param == "x" and ei.value.index >= 4096


RO = msl("""
kernel void ro(device const float* x [[buffer(0)]], uint gid [[thread_position_in_grid]]) {
    device float* w = (device float*)x;
    w[gid] = 1.0f;
}
""")


def test_write_to_const_buffer_reported(emu):
    k = emu.compile_msl(RO, "ro")
    x = torch.zeros(32)
    with pytest.raises(emu.EmulatorLaunchError) as ei:
        k.launch(grid=1, threadgroup=32, buffers=[x], schedule="forward")
    assert ei.value.kind == "readonly_write" and ei.value.param == "x" and ei.value.index == 0
    assert ei.value.msl_lines == [line_of(RO, "w[gid] = 1.0f")]


LOCAL = msl("""
kernel void local_oob(device float* out [[buffer(0)]], uint tid [[thread_index_in_threadgroup]]) {
    float acc[8];
    for (int i = 0; i < 8; ++i) acc[i] = i;
    out[tid] = acc[tid];
}
""")


def test_local_array_index_out_of_bounds(emu):
    k = emu.compile_msl(LOCAL, "local_oob")
    with pytest.raises(emu.EmulatorLaunchError) as ei:
        k.launch(grid=1, threadgroup=16, buffers=[torch.zeros(16)], schedule="forward")
    e = ei.value
    assert e.kind == "local_out_of_bounds" and e.thread == 8 and e.msl_lines == [line_of(LOCAL, "acc[tid]")]


STACK = msl("""
static float deep(thread float* p, int n) {
    float local[1024];
    for (int i = 0; i < 1024; ++i) local[i] = p[i % 4] + n;
    return n > 0 ? deep(local, n - 1) + local[n % 1024] : local[0];
}
kernel void stack_hog(device float* out [[buffer(0)]], constant int& depth [[buffer(1)]],
                      uint tid [[thread_index_in_threadgroup]]) {
    float seed[4] = {1, 2, 3, 4};
    out[tid] = deep(seed, depth);
}
""")


def test_stack_overflow_reported(emu):
    k = emu.compile_msl(STACK, "stack_hog")
    out = torch.zeros(4)
    k.launch(grid=1, threadgroup=4, buffers=[out, emu.Scalar(4, "int")])
    with pytest.raises(emu.EmulatorLaunchError) as ei:
        k.launch(grid=1, threadgroup=4, buffers=[out, emu.Scalar(10_000, "int")])
    assert ei.value.kind == "stack_overflow" and "TRITON_APPLE_EMULATOR_STACK_KB" in str(ei.value)
    k.launch(grid=1, threadgroup=4, buffers=[out, emu.Scalar(4, "int")])


# ---- compile errors ------------------------------------------------------------------------------

def test_address_space_mismatch_is_a_compile_error(emu):
    src = msl("""
static float first(thread float* p) { return p[0]; }
kernel void mix_spaces(device float* x [[buffer(0)]], uint tid [[thread_index_in_threadgroup]]) {
    TT_THREADGROUP_BUFFER(tt_smem, 64);
    threadgroup float* s = x;
    x[tid] = first(x);
}
""")
    with pytest.raises(emu.EmulatorCompileError) as ei:
        emu.compile_msl(src, "mix_spaces")
    e = ei.value
    assert e.msl_lines == [line_of(src, "threadgroup float* s = x;"), line_of(src, "x[tid] = first(x);")]
    assert "mix_spaces.metal:%d" % line_of(src, "threadgroup float* s = x;") in str(e)
    assert "address space" in str(e) or "address_space" in str(e)


def test_compile_error_points_at_msl_line(emu):
    src = msl("""
kernel void typo(device float* x [[buffer(0)]],
                 uint tid [[thread_index_in_threadgroup]]) {
    float a = x[tid];
    x[tid] = a + undefined_thing;
}
""")
    with pytest.raises(emu.EmulatorCompileError) as ei:
        emu.compile_msl(src, "typo")
    n = line_of(src, "undefined_thing")
    assert ei.value.msl_lines == [n]
    assert f"typo.metal:{n}:" in str(ei.value) and f"{n:5d} |     x[tid] = a + undefined_thing;" in str(ei.value)
    assert "/tmp" not in str(ei.value) and ".triton" not in str(ei.value)


def test_signature_errors(emu):
    with pytest.raises(emu.EmulatorCompileError, match="no kernel function named 'nope'.*kernels found: typo"):
        emu.compile_msl(msl("kernel void typo(device float* x [[buffer(0)]]) {}\n"), "nope")
    src = msl("kernel void k(device float* x [[buffer(0)]],\n  float4 bad [[thread_position_in_grid]]) {}\n")
    with pytest.raises(emu.EmulatorCompileError, match="must be uint/ushort") as ei:
        emu.compile_msl(src, "k")
    assert ei.value.msl_lines == [line_of(src, "float4 bad")]
    with pytest.raises(emu.EmulatorCompileError, match="threadgroup memory kernel arguments"):
        emu.compile_msl(msl("kernel void k(threadgroup float* t [[threadgroup(0)]]) {}\n"), "k")


# ---- cache -----------------------------------------------------------------------------------------

def test_disk_cache_hit(emu, tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    unique = time.time_ns() % 1000003 + 1
    src = msl(f"""
kernel void cached(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) {{
    x[i] = x[i] + {unique}.0f;   // unique source: cold compile
}}
""")
    t0 = time.perf_counter()
    k1 = emu.compile_msl(src, "cached")
    cold = time.perf_counter() - t0
    assert not k1.cache_hit and str(k1.so_path).startswith(str(tmp_path))
    emu.clear_memory_cache()
    t0 = time.perf_counter()
    k2 = emu.compile_msl(src, "cached")
    warm = time.perf_counter() - t0
    assert k2.cache_hit and k2.so_path == k1.so_path
    assert warm < 0.25 and warm < cold
    t0 = time.perf_counter()
    assert emu.compile_msl(src, "cached") is k2  # in-memory
    assert time.perf_counter() - t0 < 0.05
    x = torch.zeros(4)
    k2.launch(grid=1, threadgroup=4, buffers=[x])
    assert x.tolist() == [float(unique)] * 4


def test_ucontext_fallback_runtime(tmp_path):
    """The portable ucontext build of the runtime runs barriers and collectives too."""
    code = textwrap.dedent("""
        import torch
        from triton.backends.apple import emulator
        from triton.backends.apple.emulator import library
        assert library.runtime_library().tt_emu_uses_ucontext() == 1
        src = '''#include <metal_stdlib>
        using namespace metal;
        kernel void k(device float* x [[buffer(0)]], uint tid [[thread_index_in_threadgroup]]) {
            threadgroup float s[128];
            s[tid] = x[tid];
            threadgroup_barrier(mem_flags::mem_threadgroup);
            x[tid] = s[127 - tid] + simd_sum(1.0f);
        }
        '''
        k = emulator.compile_msl(src, "k")
        x = torch.arange(128, dtype=torch.float32)
        k.launch(grid=1, threadgroup=128, buffers=[x])
        assert torch.equal(x, torch.arange(127, -1, -1, dtype=torch.float32) + 32), x
        print("ok")
    """)
    env = dict(os.environ, TRITON_APPLE_EMULATOR_UCONTEXT="1")
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr

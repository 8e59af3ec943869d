"""Threadgroup memory, barriers (incl. divergence and deadlock reports)."""
import pytest
import torch

from support.emulator_msl import line_of, msl

REVERSE = msl("""
kernel void reverse(device float* x [[buffer(0)]],
                    uint tid [[thread_index_in_threadgroup]],
                    uint tg [[threadgroup_position_in_grid]],
                    uint n [[threads_per_threadgroup]]) {
    TT_THREADGROUP_BUFFER(tt_smem, 4096);
    threadgroup float* s = (threadgroup float*)tt_smem;
    s[tid] = x[tg * n + tid];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    x[tg * n + tid] = s[n - 1 - tid];
}
""")


@pytest.mark.parametrize("n", [32, 96, 256, 1024])
def test_reverse_in_threadgroup(emu, n):
    k = emu.compile_msl(REVERSE, "reverse")
    x = torch.randn(3 * n)
    ref = x.view(3, n).flip(1).reshape(-1).clone()
    k.launch(grid=3, threadgroup=n, buffers=[x])
    assert torch.equal(x, ref)


TREE = msl("""
kernel void tree_sum(device const float* x [[buffer(0)]],
                     device float* out [[buffer(1)]],
                     device int* order [[buffer(2)]],
                     uint tid [[thread_index_in_threadgroup]],
                     uint tg [[threadgroup_position_in_grid]],
                     uint2 tptg [[threads_per_threadgroup]]) {
    threadgroup float buf[512];
    threadgroup int flag;
    const uint n = tptg.x * tptg.y;
    buf[tid] = x[tg * n + tid];
    if (tid == 0) flag = 0;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint s = n / 2; s > 0; s >>= 1) {
        if (tid < s) buf[tid] += buf[tid + s];
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    if (tid == 0) out[tg] = buf[0];
    if (tid >= 64) return;                  // returned threads no longer count at barriers
    threadgroup_barrier(mem_flags::mem_threadgroup);
    order[tg * 64 + tid] = flag + tid;
}
""")


def test_tree_reduction_with_loop_barriers_and_early_return(emu):
    k = emu.compile_msl(TREE, "tree_sum")
    x = torch.arange(4 * 512, dtype=torch.float32) % 7
    out = torch.zeros(4)
    order = torch.zeros(4 * 64, dtype=torch.int32)
    k.launch(grid=4, threadgroup=(32, 16, 1), buffers=[x, out, order])
    assert torch.equal(out, x.view(4, 512).sum(1))
    assert order.view(4, 64).tolist() == [list(range(64))] * 4


DIVERGENT = msl("""
kernel void divergent(device float* x [[buffer(0)]],
                      uint tid [[thread_index_in_threadgroup]]) {
    if (tid < 16) {
        threadgroup_barrier(mem_flags::mem_threadgroup);
    } else {
        threadgroup_barrier(mem_flags::mem_device);
    }
    x[tid] = 1.0f;
}
""")


def test_divergent_barrier_reported(emu):
    k = emu.compile_msl(DIVERGENT, "divergent")
    x = torch.zeros(64)
    with pytest.raises(emu.EmulatorLaunchError) as ei:
        k.launch(grid=(1, 2, 1), threadgroup=64, buffers=[x])
    e = ei.value
    a, b = line_of(DIVERGENT, "mem_threadgroup"), line_of(DIVERGENT, "mem_device")
    assert e.kind == "divergence" and sorted(e.msl_lines) == [a, b]
    msg = str(e)
    assert "kernel 'divergent'" in msg and "threadgroup (0," in msg
    assert f"threads 0-15 wait at threadgroup_barrier (MSL line {a}" in msg
    assert f"threads 16-63 wait at threadgroup_barrier (MSL line {b}" in msg
    assert torch.count_nonzero(x) == 0
    # the process survives and the next launch works
    emu.compile_msl(REVERSE, "reverse").launch(grid=1, threadgroup=32, buffers=[torch.zeros(32)])


DEADLOCK = msl("""
kernel void deadlock(device float* x [[buffer(0)]],
                     uint tid [[thread_index_in_threadgroup]],
                     uint lane [[thread_index_in_simdgroup]]) {
    float v = x[tid];
    if (lane == 0) {
        v = simd_sum(v);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    x[tid] = v;
}
""")


def test_deadlock_reported_not_hung(emu):
    k = emu.compile_msl(DEADLOCK, "deadlock")
    with pytest.raises(emu.EmulatorLaunchError) as ei:
        k.launch(grid=1, threadgroup=64, buffers=[torch.zeros(64)])
    e = ei.value
    assert e.kind == "deadlock"
    assert sorted(e.msl_lines) == sorted([line_of(DEADLOCK, "simd_sum"), line_of(DEADLOCK, "threadgroup_barrier")])
    assert "threads 0,32 wait at simd_sum" in str(e)


TG_LIMIT = msl("""
kernel void too_big(device float* x [[buffer(0)]], uint tid [[thread_index_in_threadgroup]]) {
    threadgroup float a[6000];
    threadgroup float b[4000];
    a[tid] = 1.0f;
    b[tid] = 2.0f;
    x[tid] = a[tid] + b[tid];
}
""")


def test_threadgroup_memory_limit(emu):
    k = emu.compile_msl(TG_LIMIT, "too_big")
    with pytest.raises(emu.EmulatorLaunchError, match="threadgroup memory exhausted: 'b' needs 16000 bytes") as ei:
        k.launch(grid=1, threadgroup=32, buffers=[torch.zeros(32)])
    assert ei.value.kind == "threadgroup_memory"


TG_OOB = msl("""
kernel void tg_oob(device float* x [[buffer(0)]], constant int2& off [[buffer(1)]],
                   uint tid [[thread_index_in_threadgroup]]) {
    TT_THREADGROUP_BUFFER(tt_smem, 1024);
    threadgroup float* s = (threadgroup float*)tt_smem;
    s[tid + off.x] = x[tid];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    x[tid] = s[tid] + tt_smem[off.y];
}
""")


@pytest.mark.parametrize("past_end", [0, 7000])
def test_threadgroup_out_of_bounds(emu, past_end):
    k = emu.compile_msl(TG_OOB, "tg_oob")
    x = torch.ones(64)
    k.launch(grid=1, threadgroup=64, buffers=[x, emu.Scalar((0, 0), "int2")])
    # pointer arithmetic past the end of the buffer: guard zone after the (topmost) allocation
    with pytest.raises(emu.EmulatorLaunchError) as ei:
        k.launch(grid=1, threadgroup=4, buffers=[torch.ones(4), emu.Scalar((256 + past_end // 4, 0), "int2")],
                 schedule="forward")
    e = ei.value
    assert e.kind == "threadgroup_out_of_bounds" and e.is_write
    assert "'tt_smem' has 1024 bytes; access at byte offset %d" % (1024 + past_end // 4 * 4) in str(e)
    assert e.msl_lines == [line_of(TG_OOB, "s[tid + off.x] = x[tid]")]
    assert e.thread == 0
    # direct indexing of the array: bounds check with the MSL line
    with pytest.raises(emu.EmulatorLaunchError) as ei:
        k.launch(grid=1, threadgroup=4, buffers=[torch.ones(4), emu.Scalar((0, 1024 + past_end), "int2")])
    assert ei.value.kind == "local_out_of_bounds"
    assert f"index {1024 + past_end} out of bounds" in str(ei.value)
    assert ei.value.msl_lines == [line_of(TG_OOB, "tt_smem[off.y]")]


RACE = msl("""
kernel void race(device float* out [[buffer(0)]], uint tid [[thread_index_in_threadgroup]]) {
    threadgroup float s[64];
    s[tid] = float(tid);
    // BUG: missing threadgroup_barrier(mem_flags::mem_threadgroup);
    out[tid] = s[tid ^ 1];
}
""")


def test_missing_barrier_exposed_by_poison_and_schedule(emu):
    """Threadgroup memory starts as 0xFF bytes (NaN) and the thread order is selectable, so a missing
    barrier gives visibly wrong results in at least one schedule."""
    k = emu.compile_msl(RACE, "race")
    tid = torch.arange(64)
    out = torch.zeros(64)
    k.launch(grid=1, threadgroup=64, buffers=[out], schedule="forward")
    assert torch.isnan(out[0::2]).all() and torch.equal(out[1::2], (tid[1::2] ^ 1).float())
    k.launch(grid=1, threadgroup=64, buffers=[out], schedule="reverse")
    assert torch.isnan(out[1::2]).all() and torch.equal(out[0::2], (tid[0::2] ^ 1).float())
    k.launch(grid=1, threadgroup=64, buffers=[out], schedule="random:7")
    assert 0 < torch.isnan(out).sum() < 64


@pytest.mark.parametrize("schedule", ["forward", "reverse", "random", "random:123"])
def test_correct_kernels_do_not_depend_on_schedule(emu, schedule):
    x = torch.randn(4 * 512)
    out = torch.zeros(4)
    order = torch.zeros(4 * 64, dtype=torch.int32)
    emu.compile_msl(TREE, "tree_sum").launch(grid=4, threadgroup=(32, 16, 1), buffers=[x, out, order],
                                             schedule=schedule)
    torch.testing.assert_close(out, x.view(4, 512).sum(1))
    assert order.view(4, 64).tolist() == [list(range(64))] * 4
    with pytest.raises(emu.EmulatorLaunchError, match="unknown emulator schedule"):
        emu.compile_msl(TREE, "tree_sum").launch(grid=4, threadgroup=512, buffers=[x, out, order],
                                                 schedule="sideways")

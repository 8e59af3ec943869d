"""Threads run as a range: with no other thread of the threadgroup alive, the kernel's entry point runs the threads
one after the other by itself until one reaches a barrier, a SIMD-group function or a simdgroup_matrix op. The
threads that returned inside the range must count as returned for what follows: barriers and collectives that
wait only for the live threads, and the reports that say where every thread is."""
import pytest
import torch

from support.emulator_msl import line_of, msl

LATE_SYNC = msl("""
kernel void late_sync(device const float* x [[buffer(0)]],
                      device float* out [[buffer(1)]],
                      constant uint& first [[buffer(2)]],
                      uint tid [[thread_index_in_threadgroup]],
                      uint tg [[threadgroup_position_in_grid]],
                      uint n [[threads_per_threadgroup]]) {
    threadgroup float s[1024];
    const uint i = tg * n + tid;
    if (tid < first) {                      // these return inside the range
        out[i] = x[i];
        return;
    }
    float v = simd_sum(x[i]);               // the lanes of a partly returned simdgroup sum without the others
    s[tid] = v;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[i] = v + s[first];
}
""")


@pytest.mark.parametrize("schedule", ["forward", "reverse", "random:3"])
@pytest.mark.parametrize("first", [0, 1, 40, 64, 127])
def test_threads_returned_in_a_range_do_not_count_at_barriers_and_collectives(emu, schedule, first):
    n, grid = 128, 3
    k = emu.compile_msl(LATE_SYNC, "late_sync")
    x = torch.arange(grid * n, dtype=torch.float32) % 13
    out = torch.zeros(grid * n)
    k.launch(grid=grid, threadgroup=n, buffers=[x, out, emu.Scalar(first, "uint")], schedule=schedule)
    ref = x.clone().view(grid, n)
    xs = x.view(grid, n, 1).expand(grid, n, 1).reshape(grid, n // 32, 32)
    live = (torch.arange(n) >= first).view(n // 32, 32)
    sums = (xs * live).sum(-1, keepdim=True).expand(grid, n // 32, 32).reshape(grid, n)
    late = torch.arange(n) >= first
    ref[:, late] = sums[:, late] + sums[:, first:first + 1]
    assert torch.equal(out.view(grid, n), ref)


STUCK = msl("""
kernel void stuck(device float* x [[buffer(0)]],
                  uint tid [[thread_index_in_threadgroup]],
                  uint lane [[thread_index_in_simdgroup]]) {
    if (tid < 40) return;
    float v = x[tid];
    if (tid == 40) {
        v = simd_sum(v);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    x[tid] = v;
}
""")


def test_deadlock_report_counts_the_threads_a_range_ran(emu):
    k = emu.compile_msl(STUCK, "stuck")
    with pytest.raises(emu.EmulatorLaunchError) as ei:
        k.launch(grid=1, threadgroup=96, buffers=[torch.zeros(96)], schedule="forward")
    e = ei.value
    msg = str(e)
    assert e.kind == "deadlock", msg
    assert f"threads 40 wait at simd_sum (MSL line {line_of(STUCK, 'simd_sum')}" in msg
    assert f"threads 41-95 wait at threadgroup_barrier (MSL line {line_of(STUCK, 'threadgroup_barrier')}" in msg
    assert "threads 0-39 have returned" in msg


SPIN_AT = msl("""
kernel void spin_at(device int* flag [[buffer(0)]],
                    device int* out [[buffer(1)]],
                    uint tid [[thread_index_in_threadgroup]]) {
    if (tid == 300) {
        while (flag[0] == 0) { }
    }
    out[tid] = 1;
}
""")


def test_timeout_inside_a_range_says_where_every_thread_is(emu, monkeypatch):
    monkeypatch.setenv("TRITON_APPLE_EMULATOR_TIMEOUT", "0.2")
    k = emu.compile_msl(SPIN_AT, "spin_at")
    out = torch.zeros(512, dtype=torch.int32)
    with pytest.raises(emu.EmulatorLaunchError) as ei:
        k.launch(grid=1, threadgroup=512, buffers=[torch.zeros(1, dtype=torch.int32), out], schedule="forward")
    msg = str(ei.value)
    assert ei.value.kind == "timeout" and ei.value.thread == 300, msg
    assert "threads 300 are still running" in msg and "threads 301-511 have not started" in msg
    assert "threads 0-299 have returned" in msg
    assert torch.count_nonzero(out) == 0  # nothing copied back
    k.launch(grid=2, threadgroup=512, buffers=[torch.ones(1, dtype=torch.int32), out], schedule="forward")
    assert torch.count_nonzero(out) == 512

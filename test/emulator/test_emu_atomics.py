"""Device and threadgroup atomics (threadgroups run concurrently on several host threads)."""
import numpy as np
import pytest
import torch

from support.emulator_msl import line_of, msl

ATOMICS = msl("""
kernel void atomics(device atomic_int* counter [[buffer(0)]],
                    device atomic_uint* maxv [[buffer(1)]],
                    device const uint* vals [[buffer(2)]],
                    device atomic_uint* fsum_bits [[buffer(3)]],
                    device atomic_float* fsum [[buffer(4)]],
                    device uint* olds [[buffer(5)]],
                    device uint* totals [[buffer(6)]],
                    uint gid [[thread_position_in_grid]],
                    uint tid [[thread_index_in_threadgroup]],
                    uint tg [[threadgroup_position_in_grid]],
                    uint n [[threads_per_threadgroup]]) {
    atomic_fetch_add_explicit(counter, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(counter + 1, (int)tid, memory_order_relaxed);
    atomic_fetch_max_explicit(maxv, vals[gid], memory_order_relaxed);
    atomic_fetch_min_explicit(maxv + 1, vals[gid], memory_order_relaxed);
    // float add through a CAS loop on the bit pattern (the portable Metal idiom)
    uint old = atomic_load_explicit(fsum_bits, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(fsum_bits, &old, as_type<uint>(as_type<float>(old) + 1.0f),
                                                  memory_order_relaxed, memory_order_relaxed)) {
    }
    atomic_fetch_add_explicit(fsum, 0.5f, memory_order_relaxed);
    // threadgroup counter
    TT_THREADGROUP_BUFFER(tt_smem, 16);
    threadgroup atomic_uint* c = (threadgroup atomic_uint*)tt_smem;
    if (tid == 0) atomic_store_explicit(c, 0u, memory_order_relaxed);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    olds[gid] = atomic_fetch_add_explicit(c, 1u, memory_order_relaxed);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (tid == 0) totals[tg] = atomic_load_explicit(c, memory_order_relaxed);
}
""")


@pytest.mark.parametrize("host_threads", [1, 4])
def test_atomics(emu, host_threads):
    k = emu.compile_msl(ATOMICS, "atomics")
    ntg, n = 64, 96
    total = ntg * n
    rng = np.random.default_rng(3)
    vals = torch.from_numpy(rng.integers(0, 2**31, total).astype(np.int64)).to(torch.uint32)
    counter = torch.zeros(2, dtype=torch.int32)
    maxv = torch.tensor([0, 0xFFFFFFFF], dtype=torch.int64).to(torch.uint32)
    fbits = torch.zeros(1, dtype=torch.int32)
    fsum = torch.zeros(1)
    olds = torch.zeros(total, dtype=torch.int32)
    totals = torch.zeros(ntg, dtype=torch.int32)
    k.launch(grid=ntg, threadgroup=n, buffers=[counter, maxv, vals, fbits, fsum, olds, totals],
             host_threads=host_threads)
    assert counter.tolist() == [total, ntg * n * (n - 1) // 2]
    v = vals.to(torch.int64)
    assert maxv.to(torch.int64).tolist() == [v.max().item(), v.min().item()]
    assert fbits.view(torch.float32).item() == float(total)
    assert fsum.item() == total * 0.5
    assert totals.tolist() == [n] * ntg
    for t in range(ntg):
        assert sorted(olds[t * n:(t + 1) * n].tolist()) == list(range(n))


def test_threadgroup_atomic_float_is_a_compile_error(emu):
    src = msl("""
kernel void tgf(device float* out [[buffer(0)]], uint tid [[thread_index_in_threadgroup]]) {
    TT_THREADGROUP_BUFFER(tt_smem, 16);
    threadgroup atomic_float* f = (threadgroup atomic_float*)tt_smem;
    atomic_fetch_add_explicit(f, 1.0f, memory_order_relaxed);
    out[tid] = 0;
}
""")
    with pytest.raises(emu.EmulatorCompileError) as ei:
        emu.compile_msl(src, "tgf")
    assert "atomic_float is only supported in device memory" in str(ei.value)
    assert line_of(src, "atomic_fetch_add_explicit") in ei.value.msl_lines


def test_non_relaxed_memory_order_is_a_compile_error(emu):
    src = msl("""
kernel void seqcst(device atomic_int* c [[buffer(0)]]) {
    atomic_fetch_add_explicit(c, 1, memory_order_seq_cst);
}
""")
    with pytest.raises(emu.EmulatorCompileError, match="memory_order_relaxed only") as ei:
        emu.compile_msl(src, "seqcst")
    assert ei.value.msl_lines == [line_of(src, "memory_order_seq_cst")]

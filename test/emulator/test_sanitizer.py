"""racecheck and initcheck (emulator/tools.py, native/include/emulator_tools.h) on seeded bugs in hand-written MSL:
each finding must name its kind, both threads and both MSL lines, and the correct version of each kernel must be
silent. Triton-level seeded bugs are in test_sanitizer_triton.py."""
import warnings

import pytest
import torch

from support.emulator_msl import line_of, msl

# A block sum: every thread stores its element, thread 0 adds them up. BARRIER is the barrier between the two.
BLOCK_SUM = msl("""
kernel void block_sum(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                      uint tid [[thread_index_in_threadgroup]], uint n [[threads_per_threadgroup]]) {
    threadgroup float part[256];
    part[tid] = x[tid];                                  // the store
    BARRIER
    if (tid == 0) {
        float s = 0.0f;
        for (uint i = 0; i < n; ++i) s += part[i];       // the load
        out[0] = s;
    }
}
""")


def _block_sum(emu, barrier: str):
    return emu.compile_msl(BLOCK_SUM.replace("BARRIER", barrier), "block_sum")


def test_missing_barrier_is_a_race_with_both_sides(emu):
    k = _block_sum(emu, "")
    x, out = torch.arange(64, dtype=torch.float32), torch.full((1, ), -1.0)
    with emu.sanitize("race"), pytest.raises(emu.EmulatorLaunchError) as info:
        k.launch(grid=1, threadgroup=64, buffers=[x, out])
    e = info.value
    store, load = line_of(k.source, "// the store"), line_of(k.source, "// the load")
    assert e.kind == "race" and e.kernel_name == "block_sum"
    assert set(e.msl_lines) == {store, load}
    # thread 0 reads part[1] before thread 1 (same simdgroup, nothing between them) stores it: a WAR hazard
    war = next(f for f in e.findings if f.kind == "WAR")
    assert war.space == "threadgroup" and war.variable == "part" and war.offset == 4
    assert (war.first.thread, war.first.is_write, war.first.msl_line) == (0, False, load)
    assert (war.second.thread, war.second.is_write, war.second.msl_line) == (1, True, store)
    assert "WAR hazard on threadgroup memory 'part' at byte 4" in str(e)
    assert f"read by thread 0 (simdgroup 0 lane 0) at MSL line {load}" in str(e)
    assert f"write by thread 1 (simdgroup 0 lane 1) at MSL line {store}" in str(e)
    assert out.item() == -1.0  # a failed launch copies nothing back


def test_barrier_makes_it_silent(emu):
    k = _block_sum(emu, "threadgroup_barrier(mem_flags::mem_threadgroup);")
    x, out = torch.arange(256, dtype=torch.float32), torch.zeros(1)
    with emu.sanitize("race,init"):
        k.launch(grid=1, threadgroup=256, buffers=[x, out])
    assert out.item() == x.sum().item()


def test_a_barrier_without_mem_threadgroup_orders_no_threadgroup_memory(emu):
    k = _block_sum(emu, "threadgroup_barrier(mem_flags::mem_device);")
    x, out = torch.arange(64, dtype=torch.float32), torch.zeros(1)
    with emu.sanitize("race"), pytest.raises(emu.EmulatorLaunchError) as info:
        k.launch(grid=1, threadgroup=64, buffers=[x, out])
    assert info.value.kind == "race" and "RAW hazard" in str(info.value)


def test_warn_mode_warns_and_copies_back(emu):
    k = _block_sum(emu, "")
    x, out = torch.ones(64), torch.zeros(1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with emu.sanitize("race", report="warn"):
            k.launch(grid=1, threadgroup=64, buffers=[x, out])
    msgs = [str(w.message) for w in caught if issubclass(w.category, emu.EmulatorSanitizerWarning)]
    assert len(msgs) == 1 and "WAR hazard" in msgs[0]
    assert torch.isnan(out).item()  # thread 0 summed bytes no thread had written yet (NaN): copied back


def test_across_simdgroups_the_hazard_is_raw(emu):
    """Thread 0 reads after thread 32 (another simdgroup) wrote, with a shuffle in between: shuffles order nothing."""
    src = msl("""
kernel void cross(device float* out [[buffer(0)]], uint tid [[thread_index_in_threadgroup]]) {
    threadgroup float v[64];
    if (tid >= 32) v[tid - 32] = float(tid);             // written by simdgroup 1
    float s = simd_shuffle_xor(float(tid), ushort(1));
    if (tid < 32) out[tid] = v[tid] + s;                 // read by simdgroup 0
}
""")
    k = emu.compile_msl(src, "cross")
    out = torch.zeros(64)
    with emu.sanitize("race"), pytest.raises(emu.EmulatorLaunchError) as info:
        k.launch(grid=1, threadgroup=64, schedule="reverse", buffers=[out])
    raw = info.value.findings[0]
    assert raw.kind == "RAW" and raw.first.thread // 32 == 1 and raw.second.thread // 32 == 0
    assert raw.first.msl_line == line_of(src, "written by simdgroup 1")
    assert raw.second.msl_line == line_of(src, "read by simdgroup 0")
    assert "no threadgroup_barrier(mem_flags::mem_threadgroup) between them" in str(info.value)


SIMD_EXCHANGE = msl("""
kernel void lanes(device float* out [[buffer(0)]], uint lane [[thread_index_in_simdgroup]]) {
    threadgroup float v[32];
    v[lane] = float(lane);                               // each lane writes its slot
    BARRIER
    out[lane] = v[31 - lane];                            // and reads another lane's
}
""")


@pytest.mark.parametrize("barrier, race", [("", True), ("simdgroup_barrier(mem_flags::mem_none);", True),
                                           ("simdgroup_barrier(mem_flags::mem_threadgroup);", False)])
def test_lanes_of_one_simdgroup_need_a_simdgroup_barrier(emu, barrier, race):
    """The rule for lanes of one simdgroup: program order between them is not enough (Metal orders their
    threadgroup-memory accesses only through a barrier with mem_threadgroup)."""
    k = emu.compile_msl(SIMD_EXCHANGE.replace("BARRIER", barrier), "lanes")
    out = torch.zeros(32)
    with emu.sanitize("race", report="warn"), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        k.launch(grid=1, threadgroup=32, buffers=[out])
    found = [w for w in caught if issubclass(w.category, emu.EmulatorSanitizerWarning)]
    assert bool(found) == race
    if race:
        assert "lanes of one simdgroup" in str(found[0].message)


def test_same_value_stores_are_benign_other_values_are_waw(emu):
    src = msl("""
kernel void flags(device uint* out [[buffer(0)]], constant uint& differ [[buffer(1)]],
                  uint tid [[thread_index_in_threadgroup]]) {
    threadgroup uint f;
    f = differ ? tid : 7u;                               // every thread stores
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[tid] = f;
}
""")
    k = emu.compile_msl(src, "flags")
    out = torch.zeros(64, dtype=torch.int32)
    with emu.sanitize("race"):
        k.launch(grid=1, threadgroup=64, buffers=[out, emu.Scalar(0, "uint")])  # all store 7: silent
    assert out.eq(7).all()
    with emu.sanitize("race"), pytest.raises(emu.EmulatorLaunchError) as info:
        k.launch(grid=1, threadgroup=64, buffers=[out, emu.Scalar(1, "uint")])
    waw = info.value.findings[0]
    assert waw.kind == "WAW" and waw.first.thread == 0 and waw.second.thread == 1
    assert waw.first.msl_line == waw.second.msl_line == line_of(src, "every thread stores")


def test_atomics_do_not_race_each_other_but_a_plain_read_does(emu):
    src = msl("""
kernel void count(device uint* out [[buffer(0)]], uint tid [[thread_index_in_threadgroup]]) {
    threadgroup atomic_uint c;
    if (tid == 0) atomic_store_explicit(&c, 0u, memory_order_relaxed);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    atomic_fetch_add_explicit(&c, 1u, memory_order_relaxed);      // every thread adds
    PEEK
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (tid == 0) out[0] = atomic_load_explicit(&c, memory_order_relaxed);
}
""")
    k = emu.compile_msl(src.replace("PEEK", ""), "count")
    out = torch.zeros(1, dtype=torch.int32)
    with emu.sanitize("race,init"):
        k.launch(grid=2, threadgroup=128, buffers=[out])
    assert out.item() == 128
    peek = "if (tid == 5) out[1] = *(threadgroup uint*)&c;          // a plain read"
    k = emu.compile_msl(src.replace("PEEK", peek), "count")
    out = torch.zeros(2, dtype=torch.int32)
    with emu.sanitize("race"), pytest.raises(emu.EmulatorLaunchError) as info:
        k.launch(grid=1, threadgroup=128, buffers=[out])
    f = next(f for f in info.value.findings if f.second.thread == 5 or f.first.thread == 5)
    plain = f.second if f.second.thread == 5 else f.first
    other = f.first if plain is f.second else f.second
    assert not plain.atomic and other.atomic
    assert plain.msl_line == line_of(k.source, "a plain read")


def test_uninitialised_threadgroup_scratch(emu):
    src = msl("""
kernel void scratch(device float* out [[buffer(0)]], uint tid [[thread_index_in_threadgroup]]) {
    threadgroup float tmp[128];
    if (tid < 64) tmp[tid] = 1.0f;                       // only half is written
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[tid] = tmp[127 - tid];                           // the other half is read
}
""")
    k = emu.compile_msl(src, "scratch")
    out = torch.zeros(128)
    with emu.sanitize("init"), pytest.raises(emu.EmulatorLaunchError) as info:
        k.launch(grid=1, threadgroup=128, buffers=[out])
    e = info.value
    assert e.kind == "uninitialized" and e.msl_lines == [line_of(src, "the other half is read")]
    f = e.findings[0]
    assert f.space == "threadgroup" and f.variable == "tmp" and f.first is None
    assert f.second.thread == 0 and f.offset == 127 * 4
    assert "uninitialized read of threadgroup memory 'tmp' at byte 508" in str(e)
    # racecheck alone does not look at it
    with emu.sanitize("race"):
        k.launch(grid=1, threadgroup=128, buffers=[out])


def test_threadgroup_memory_is_uninitialised_again_in_every_threadgroup(emu):
    src = msl("""
kernel void first_only(device float* out [[buffer(0)]], uint tg [[threadgroup_position_in_grid]],
                       uint tid [[thread_index_in_threadgroup]]) {
    threadgroup float t[32];
    if (tg == 0) t[tid] = 2.0f;                          // written by threadgroup 0 only
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[tg * 32 + tid] = t[tid];                         // read by every threadgroup
}
""")
    k = emu.compile_msl(src, "first_only")
    out = torch.zeros(64)
    with emu.sanitize("init"), pytest.raises(emu.EmulatorLaunchError) as info:
        k.launch(grid=2, threadgroup=32, buffers=[out])
    assert info.value.findings[0].threadgroup == (1, 0, 0)


def test_uninitialised_private_array(emu):
    src = msl("""
kernel void priv(device const int* idx [[buffer(0)]], device float* out [[buffer(1)]],
                 uint tid [[thread_index_in_threadgroup]]) {
    float a[16];
    for (int i = 0; i < idx[0]; ++i) a[i] = float(i);    // writes a[0 .. idx[0])
    out[tid] = a[idx[1 + tid]];                          // reads a[idx[1 + tid]]
}
""")
    k = emu.compile_msl(src, "priv")
    out = torch.zeros(4)
    idx = torch.tensor([8, 0, 3, 7, 5], dtype=torch.int32)
    with emu.sanitize("init"):
        k.launch(grid=1, threadgroup=4, buffers=[idx, out])
    assert out.tolist() == [0.0, 3.0, 7.0, 5.0]
    idx = torch.tensor([8, 0, 3, 12, 5], dtype=torch.int32)  # thread 2 reads a[12], never written
    with emu.sanitize("init"), pytest.raises(emu.EmulatorLaunchError) as info:
        k.launch(grid=1, threadgroup=4, buffers=[idx, out])
    f = info.value.findings[0]
    assert f.kind == "uninitialized" and f.space == "private" and f.second.thread == 2
    assert f.second.msl_line == line_of(src, "reads a[idx[1 + tid]]")
    assert "a private array" in str(info.value)


DEVICE_WRITES = msl("""
kernel void scatter(device const int* to [[buffer(0)]], device float* out [[buffer(1)]],
                    uint gid [[thread_position_in_grid]]) {
    out[to[gid]] = float(gid % 3);                       // the write
}
""")


def test_device_write_write_race_across_threadgroups(emu):
    k = emu.compile_msl(DEVICE_WRITES, "scatter")
    out = torch.zeros(64)
    with emu.sanitize("race"):  # a permutation: silent
        k.launch(grid=2, threadgroup=32, buffers=[torch.arange(64, dtype=torch.int32).flip(0), out])
    to = torch.arange(64, dtype=torch.int32)
    to[41] = 1  # thread 9 of threadgroup 1 stores 2.0 to out[1], where thread 1 of threadgroup 0 stored 1.0
    with emu.sanitize("race"), pytest.raises(emu.EmulatorLaunchError) as info:
        k.launch(grid=2, threadgroup=32, buffers=[to, out])
    f = info.value.findings[0]
    assert (f.kind, f.space, f.param, f.slot, f.offset) == ("WAW", "device", "out", 1, 4)
    assert f.first.threadgroup == (0, 0, 0) and f.first.thread == 1
    assert f.threadgroup == (1, 0, 0) and f.second.thread == 9
    assert f.first.msl_line == f.second.msl_line == line_of(DEVICE_WRITES, "the write")
    assert "buffer 'out' [[buffer(1)]] at byte offset 4" in str(info.value)
    assert "the first write is in threadgroup (0,0,0)" in str(info.value)
    to[41], to[40] = 41, 1  # gid 40 stores 1.0 to out[1], as gid 1 does: the same bytes, benign
    with emu.sanitize("race"):
        k.launch(grid=2, threadgroup=32, buffers=[to, out])


def test_device_writes_ordered_by_a_device_barrier_or_a_lock_are_silent(emu):
    src = msl("""
kernel void handoff(device float* out [[buffer(0)]], device atomic_int* lock [[buffer(1)]],
                    uint tid [[thread_index_in_threadgroup]], uint tg [[threadgroup_position_in_grid]]) {
    if (tid == 0) out[2 * tg] = 1.0f;                    // thread 0 writes
    threadgroup_barrier(mem_flags::mem_device);
    if (tid == 1) out[2 * tg] = 2.0f;                    // then thread 1, after a device barrier
    if (tid == 0) {                                      // one thread per threadgroup adds under a lock
        while (atomic_exchange_explicit(lock, 1, memory_order_relaxed) == 1) {}
        out[8] = out[8] + float(tg);
        atomic_store_explicit(lock, 0, memory_order_relaxed);
    }
}
""")
    k = emu.compile_msl(src, "handoff")
    out, lock = torch.zeros(9), torch.zeros(1, dtype=torch.int32)
    with emu.sanitize("race,init"):
        k.launch(grid=4, threadgroup=32, buffers=[out, lock])
    assert out[0:8:2].tolist() == [2.0] * 4 and out[8].item() == 6.0


def test_sanitize_rejects_unknown_checks(emu):
    with pytest.raises(ValueError, match="checks must be among"):
        emu.sanitize("races")
    with pytest.raises(ValueError, match="report 'error' or 'warn'"):
        emu.sanitize("race", report="loud")


def test_knobs_are_read_when_the_kernel_is_compiled(emu, monkeypatch):
    monkeypatch.setenv("TRITON_APPLE_EMULATOR_SANITIZE", "race")
    k = _block_sum(emu, "")
    x, out = torch.ones(64), torch.zeros(1)
    with pytest.raises(emu.EmulatorLaunchError) as info:
        k.launch(grid=1, threadgroup=64, buffers=[x, out])
    assert info.value.kind == "race"
    monkeypatch.setenv("TRITON_APPLE_EMULATOR_SANITIZE_REPORT", "warn")
    k = _block_sum(emu, "")
    with pytest.warns(emu.EmulatorSanitizerWarning, match="WAR hazard"):
        k.launch(grid=1, threadgroup=64, buffers=[x, out])
    monkeypatch.delenv("TRITON_APPLE_EMULATOR_SANITIZE")
    monkeypatch.delenv("TRITON_APPLE_EMULATOR_SANITIZE_REPORT")
    k = _block_sum(emu, "")
    k.launch(grid=1, threadgroup=64, buffers=[x, out])  # off again: the plain library, nothing checked


def test_bad_knob_names_the_variable(emu, monkeypatch):
    from triton.backends.apple import knobs
    monkeypatch.setenv("TRITON_APPLE_EMULATOR_SANITIZE", "race,memcheck")
    with pytest.raises(knobs.KnobError, match="TRITON_APPLE_EMULATOR_SANITIZE.*'memcheck'"):
        knobs.emulator_sanitize.get()

"""What library code meets on `mps`, on the MPS stand-in: `do_bench` and autotuning timed without
`torch.mps.Event` (whose host-callback timing fails on short intervals; the stand-in refuses any use of it),
peak-memory statistics, the device properties libraries read, and pointer tables refused with the reason."""
import time
from types import SimpleNamespace

import pytest
import torch
import triton
import triton.language as tl

from triton.backends.apple import driver as drv
from triton.backends.apple import mps_host

from support.mps_standin import StandinLimit


def test_the_standin_refuses_torch_mps_event(mps):
    with pytest.raises(StandinLimit, match="host callbacks"):
        torch.mps.Event(enable_timing=True)


@pytest.fixture
def device_work(monkeypatch):
    """A device that runs asynchronously: work issued by `issue(ms)` is done only when torch.mps.synchronize()
    returns, so a timer that does not wait for the device measures nothing."""
    pending = [0.0]

    def synchronize():  # a busy wait: sleep() overshoots by a scheduler tick on a loaded machine
        end = time.perf_counter() + pending[0] / 1000
        while time.perf_counter() < end:
            pass
        pending[0] = 0.0

    def issue(ms):
        pending[0] += ms

    monkeypatch.setattr(torch.mps, "synchronize", synchronize)
    return issue


@pytest.mark.parametrize("bench", ["driver", "triton"])
def test_do_bench_times_the_device_work(mps, device_work, bench):
    di = triton.runtime.driver.active.get_device_interface()
    assert di.Event is mps_host.MetalEvent
    run = triton.runtime.driver.active.get_benchmarker() if bench == "driver" else triton.testing.do_bench
    ms = run(lambda: device_work(0.5), warmup=2, rep=20)
    # the device's 0.5 ms, not the microseconds it takes to issue (the upper bound leaves room for a loaded machine)
    assert 0.45 < ms < 10
    q = run(lambda: device_work(0.5), warmup=2, rep=20, quantiles=[0.2, 0.5, 0.8])
    assert len(q) == 3 and q[0] <= q[1] <= q[2] and 0.45 < q[1] < 10


def test_the_driver_benchmarker_amortises_synchronisation(mps, monkeypatch):
    syncs = [0]
    monkeypatch.setattr(torch.mps, "synchronize", lambda: syncs.__setitem__(0, syncs[0] + 1))
    calls = [0]
    # mps_host's clock advances by 2**-13 s (0.12 ms, exact in binary) per call and not otherwise, so the batch sizes
    # it picks do not depend on how busy the machine running the test is (on the wall clock, a preempted call made
    # batches of two calls)
    clock = [0.0]
    monkeypatch.setattr(mps_host, "time", SimpleNamespace(perf_counter=lambda: clock[0]))

    def fn():
        calls[0] += 1
        clock[0] += 2.0**-13

    ms = mps_host.do_bench(fn, warmup=1, rep=20)
    assert ms >= 0.1
    # batches of calls between synchronisations: at least MIN_SAMPLES of them, each of several calls
    assert calls[0] >= 5 * mps_host.MIN_SAMPLES and syncs[0] * 5 < calls[0]
    assert mps_host.summarize([3.0, 1.0, 2.0], [0.5], "mean") == 2.0
    assert mps_host.summarize([1.0, 2.0, 3.0, 4.0], [0.0, 0.25, 1.0], "mean") == [1.0, 1.75, 4.0]
    assert mps_host.summarize([1.0, 3.0], None, "all") == [1.0, 3.0]


@triton.autotune(configs=[triton.Config({"BLOCK": 64}, num_warps=1), triton.Config({"BLOCK": 128}, num_warps=2)],
                 key=["n"])
@triton.jit
def tuned_add(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1.0, mask=offs < n)


def test_autotune_on_mps_times_without_mps_events(mps):
    x = torch.randn(1000)
    out = torch.empty_like(x)
    tuned_add[lambda meta: (triton.cdiv(1000, meta["BLOCK"]), )](x, out, 1000)
    torch.testing.assert_close(out, x + 1)
    assert tuned_add.best_config.kwargs["BLOCK"] in (64, 128)
    assert len(tuned_add.configs_timings) == 2 and all(t[0] > 0 for t in tuned_add.configs_timings.values())


def test_peak_memory_is_sampled_at_launches(mps, monkeypatch):
    monkeypatch.setattr(mps_host._Peak, "tracking", False)  # restored after the test: sampling is per process
    di = triton.runtime.driver.active.get_device_interface()
    assert not mps_host.tracking_memory()
    x, out = torch.ones(64), torch.empty(64)
    di.reset_peak_memory_stats()
    base = di.memory_allocated()
    big = torch.empty(1 << 22)  # 16 MiB alive across a launch, freed before anyone asks
    tuned_add[lambda meta: (triton.cdiv(64, meta["BLOCK"]), )](x, out, 64)
    del big
    assert di.memory_allocated() < base + (1 << 24) <= di.max_memory_allocated()
    mps.cached_bytes = 1 << 20
    assert di.memory_reserved() == di.memory_allocated() + (1 << 20) <= di.max_memory_reserved()
    di.reset_peak_memory_stats()
    assert di.max_memory_allocated() < base + (1 << 24)
    assert di.current_device() == 0 and di.empty_cache is torch.mps.empty_cache  # the rest is torch.mps's


def test_device_properties_on_a_mac(mps, monkeypatch):
    monkeypatch.setattr(torch.backends.mps, "get_core_count", lambda: 38)
    monkeypatch.setattr(drv, "mac_peak_bandwidth", lambda: (400.0, "M2 Max"))
    props = triton.runtime.driver.active.utils.get_device_properties(None)  # torch.device("mps").index is None
    assert props["multiprocessor_count"] == 38 and props["max_shared_mem"] == 32768 and props["warpSize"] == 32
    # what tutorials' rooflines compute: the chip's peak, to the bus width's whole bits
    assert triton.testing.get_dram_gbps() == pytest.approx(400.0, rel=1e-3)
    monkeypatch.setattr(drv, "mac_peak_bandwidth", lambda: (None, "not in the table"))
    assert triton.testing.get_dram_gbps() == pytest.approx(2 * 2133 * 128 / 8 / 1000)  # the family's base chip


def _gather_rows(table_ptr, out_ptr, BLOCK: tl.constexpr):
    g = tl.program_id(0)
    src = tl.load(table_ptr + g).to(tl.pointer_type(tl.float32))  # tutorial 08's pointer table
    i = tl.arange(0, BLOCK)
    tl.store(out_ptr + g * BLOCK + i, tl.load(src + i))


# one JIT function per target: Triton keeps a function's kernels for the target active at its first launch
gather_rows, gather_rows_on_the_emulator = triton.jit(_gather_rows), triton.jit(_gather_rows)


@triton.jit
def through_an_integer(x_ptr, out_ptr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    p = (x_ptr.to(tl.int64) + 4 * i).to(tl.pointer_type(tl.float32))  # an address the kernel made itself
    tl.store(out_ptr + i, tl.load(p) * 2)


def test_pointer_tables_are_refused_on_mps_with_the_reason(mps):
    rows = [torch.randn(16) for _ in range(3)]
    table = torch.tensor([r.data_ptr() for r in rows], dtype=torch.int64)
    out = torch.zeros(48)
    with pytest.raises(drv.KernelArgError, match=r"(?s)kernel '_gather_rows' turns integers it loads or is given "
                       r"into pointers.*data_ptr\(\) is the address of its MTLBuffer object.*TRITON_APPLE_DEVICE="
                       r"emulator"):
        gather_rows[(3, )](table, out, BLOCK=16)
    assert not mps.dispatches and not out.any()
    x = torch.randn(16)
    through_an_integer[(1, )](x, out, BLOCK=16)  # ptr_to_int then int_to_ptr: a bound buffer's address
    assert torch.equal(out[:16], x * 2)


def test_pointer_tables_run_on_the_emulator():
    rows = [torch.randn(16) for _ in range(3)]
    table = torch.tensor([r.data_ptr() for r in rows], dtype=torch.int64)
    out = torch.zeros(48)
    compiled = gather_rows_on_the_emulator[(3, )](table, out, BLOCK=16)
    assert torch.equal(out, torch.cat(rows)) and compiled.metadata.reads_addresses

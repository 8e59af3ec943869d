"""Benchmarking and autotuning on the apple backend: `triton.testing.do_bench`, `@triton.autotune` (configs
that need more threadgroup memory than Apple GPUs have are skipped, as upstream skips OutOfResources),
`@triton.heuristics`, and the autotuner's `pre_hook`, `reset_to_zero` and `restore_value`, each checked
against torch."""
import pytest
import torch

import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.backends.apple.errors import ResourceLimitError


@triton.jit
def add_one_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1, mask=mask)


def test_do_bench_times_a_launch(device):
    x = torch.zeros(4096, device=device)
    ms = triton.testing.do_bench(lambda: add_one_kernel[(4, )](x, 4096, BLOCK=1024), warmup=5, rep=20)
    assert isinstance(ms, float) and 0 < ms < 1000
    lo, mid, hi = triton.testing.do_bench(lambda: add_one_kernel[(4, )](x, 4096, BLOCK=1024), warmup=5, rep=20,
                                          quantiles=[0.2, 0.5, 0.8])
    assert 0 < lo <= mid <= hi
    assert x[0].item() == x[-1].item() > 5  # the kernel really ran, once per call


def test_device_interface_events_measure_host_time():
    from triton.runtime import driver
    di = driver.active.get_device_interface()
    start, end = di.Event(enable_timing=True), di.Event(enable_timing=True)
    start.record()
    torch.randn(200, 200) @ torch.randn(200, 200)
    end.record()
    di.synchronize()
    assert start.elapsed_time(end) > 0


def buffer_configs():
    # BLOCK=128: a 128x128 fp32 shared buffer the kernel asks for is 64 KB > 32 KB
    return [triton.Config({"BLOCK": b}, num_warps=4) for b in (128, 32, 64)]


@triton.autotune(configs=buffer_configs(), key=["n"])
@gluon.jit
def staged_double(x_ptr, out_ptr, n, BLOCK: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([1, 4], [8, 4], [4, 1], [1, 0])
    r = gl.arange(0, BLOCK, layout=gl.SliceLayout(1, layout))
    c = gl.arange(0, BLOCK, layout=gl.SliceLayout(0, layout))
    offs = gl.program_id(0) * BLOCK * BLOCK + r[:, None] * BLOCK + c[None, :]
    buf = gl.allocate_shared_memory(gl.float32, [BLOCK, BLOCK], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]),
                                    gl.load(x_ptr + offs, mask=offs < n, other=0.0))
    gl.store(out_ptr + offs, buf.load(layout) * 2, mask=offs < n)


def test_autotune_skips_configs_over_the_threadgroup_memory_limit(device):
    x = torch.randn(128 * 128 + 100, device=device)
    out = torch.empty_like(x)
    staged_double[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]**2), )](x, out, x.numel())
    assert torch.equal(out, x * 2)
    timings = {cfg.kwargs["BLOCK"]: t for cfg, t in staged_double.configs_timings.items()}
    assert timings[128][0] == float("inf")  # skipped: ResourceLimitError is Triton's OutOfResources
    assert all(t[0] < float("inf") for b, t in timings.items() if b != 128)
    assert staged_double.best_config.kwargs["BLOCK"] in (32, 64)


def test_a_kernel_no_config_fits_reports_the_limit(device):

    @triton.autotune(configs=[triton.Config({"BLOCK": 128}), triton.Config({"BLOCK": 256})], key=["M"])
    @triton.jit
    def too_big(x_ptr, out_ptr, M, BLOCK: tl.constexpr):
        r = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + r[:, None] * BLOCK + r[None, :])
        tl.store(out_ptr + r[:, None] * BLOCK + r[None, :], tl.dot(x, x))

    x = torch.zeros(256 * 256, device=device)
    with pytest.raises(ResourceLimitError, match="threadgroup memory"):
        too_big[(1, )](x, torch.empty_like(x), 1)


def test_heuristics_compute_meta_parameters(device):

    @triton.heuristics({"BLOCK": lambda args: triton.next_power_of_2(args["n"]),
                        "EVEN": lambda args: args["n"] == triton.next_power_of_2(args["n"])})
    @triton.jit
    def row_sum(x_ptr, out_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        if EVEN:
            x = tl.load(x_ptr + offs)
        else:
            x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
        tl.store(out_ptr, tl.sum(x, axis=0))
        tl.store(out_ptr + 1, BLOCK)
        tl.store(out_ptr + 2, EVEN)

    for n, block, even in ((64, 64, 1), (100, 128, 0)):
        x = torch.randn(n, device=device)
        out = torch.empty(3, device=device)
        row_sum[(1, )](x, out, n)
        torch.testing.assert_close(out[0], x.sum(), rtol=1e-5, atol=1e-5)
        assert out[1:].tolist() == [block, even]


@triton.jit
def accumulate_kernel(x_ptr, acc_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(acc_ptr + offs, tl.load(acc_ptr + offs, mask=mask) + tl.load(x_ptr + offs, mask=mask), mask=mask)


def _two_configs(**kw):
    return [triton.Config({"BLOCK": 64}, **kw), triton.Config({"BLOCK": 256}, **kw)]


def test_restore_value_undoes_benchmark_runs(device):
    tuned = triton.autotune(configs=_two_configs(), key=["n"], restore_value=["acc_ptr"])(accumulate_kernel)
    n = 1000
    x, acc = torch.randn(n, device=device), torch.randn(n, device=device)
    want = acc + x
    tuned[lambda m: (triton.cdiv(n, m["BLOCK"]), )](x, acc, n)
    torch.testing.assert_close(acc, want)  # accumulated once, not once per benchmark run


def test_reset_to_zero_and_pre_hook(device):
    seen = []

    def pre_hook(args):
        seen.append(args["n"])

    tuned = triton.autotune(configs=_two_configs(pre_hook=pre_hook), key=["n"],
                            reset_to_zero=["acc_ptr"])(accumulate_kernel)
    n = 700
    x, acc = torch.randn(n, device=device), torch.full((n, ), 5.0, device=device)
    tuned[lambda m: (triton.cdiv(n, m["BLOCK"]), )](x, acc, n)
    torch.testing.assert_close(acc, x)  # zeroed before each run, then x added once
    assert seen and set(seen) == {n}  # the config's pre_hook ran for the benchmark runs and the final launch


def test_autotune_skips_configs_a_pipeline_cannot_run(device, monkeypatch):
    """On a Mac a pipeline whose registers lower maxTotalThreadsPerThreadgroup below num_warps x 32 is reported
    by load_binary, and Triton's own check raises OutOfResources("threads"): the autotuner skips the config.
    Here load_binary reports 128 threads for every kernel, as Metal would for a register-hungry one."""
    from triton.runtime import driver
    utils = driver.active.utils
    real = utils.load_binary

    def at_most_128_threads(*args):
        module, fn, n_regs, n_spills, _ = real(*args)
        return module, fn, n_regs, n_spills, 128

    monkeypatch.setattr(utils, "load_binary", at_most_128_threads)
    configs = [triton.Config({"BLOCK": 256}, num_warps=8), triton.Config({"BLOCK": 256}, num_warps=4)]
    tuned = triton.autotune(configs=configs, key=["n"], restore_value=["acc_ptr"])(accumulate_kernel)
    n = 600
    x, acc = torch.randn(n, device=device), torch.zeros(n, device=device)
    tuned[lambda m: (triton.cdiv(n, m["BLOCK"]), )](x, acc, n)
    torch.testing.assert_close(acc, x)
    assert tuned.best_config.num_warps == 4
    timings = {cfg.num_warps: t[0] for cfg, t in tuned.configs_timings.items()}
    assert timings[8] == float("inf") and timings[4] < float("inf")

"""How the emulator's benchmarker times autotune configs (driver._time_configs_on_the_emulator, emulator/lookahead.py):
a config whose compile produced a kernel already timed in the same autotuner run (configs differing only in
num_stages) gets that timing instead of another launch; nothing else is shared (a heuristic reading num_stages makes
another kernel, a new run times anew even with the same arguments); a config listed twice, and an invalid
num_stages after a valid one, behave as without any of this."""
import collections
import gc
import weakref

import pytest
import torch
import triton
import triton.language as tl

pytestmark = pytest.mark.emulator_only

calls = collections.Counter()


def _count(nargs):
    calls[(nargs["BLOCK"], nargs["num_warps"], nargs["num_stages"])] += 1


CONFIGS = [triton.Config({"BLOCK": b}, num_warps=w, num_stages=s, pre_hook=_count)
           for b in (32, 64) for w in (1, 2) for s in (1, 2, 3)]


@triton.jit
def _twice_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2.0, mask=offs < n)


_twice = triton.autotune(configs=CONFIGS, key=["n"])(_twice_kernel)


def _grid(n):
    return lambda meta: (triton.cdiv(n, meta["BLOCK"]), )


def _run(tuned, n, grid=None, factor=2.0):
    x = torch.randn(n, generator=torch.Generator().manual_seed(n))
    y = torch.zeros(n)
    tuned[grid or _grid(n)](x, y, n)
    torch.testing.assert_close(y, factor * x, rtol=0, atol=0)
    return x, y


def _first_of_its_kernel(c, configs):
    return next(o for o in configs if o.kwargs == c.kwargs and o.num_warps == c.num_warps)


@pytest.mark.parametrize("grid", ["function", "tuple"])
def test_configs_differing_only_in_num_stages_are_timed_once_per_run(fresh_cache, grid):
    _twice.cache.clear()
    calls.clear()
    x, y = _run(_twice, 300, None if grid == "function" else (10, ))  # a tuple grid: 10 programs cover 300 elements
    timings = _twice.configs_timings
    assert len(timings) == len(CONFIGS)
    for c in CONFIGS:
        first = _first_of_its_kernel(c, CONFIGS)
        assert timings[c] == timings[first]  # the repeat got the timing of the config it repeats
        launched = calls[(c.kwargs["BLOCK"], c.num_warps, c.num_stages)]
        # the first of each kernel is launched (its first call, more while under 5 ms); a repeat never, except the
        # best config's launch for the result itself
        assert launched >= 1 if c is first else launched <= 1, (c, launched)
    assert _twice.best_config.num_stages == 1  # ties go to the first config, which is the one that was timed

    calls.clear()
    del x, y
    gc.collect()
    x, y = _run(_twice, 500)  # a new key: a new run, with other tensors, timed anew
    assert sum(calls.values()) >= 4
    refs = [weakref.ref(x), weakref.ref(y)]
    del x, y
    gc.collect()
    assert all(r() is None for r in refs)  # nothing of a run keeps a tensor alive


def test_a_new_run_with_the_same_arguments_is_timed_anew(fresh_cache):
    tuned = triton.autotune(configs=CONFIGS, key=["n"])(_twice_kernel)
    n = 200
    x, y, grid = torch.randn(n), torch.zeros(n), _grid(n)
    for _ in range(2):
        tuned.cache.clear()  # the same key tuned again, with the same tensors and grid
        calls.clear()
        tuned[grid](x, y, n)
        assert all(calls[(c.kwargs["BLOCK"], c.num_warps, 1)] >= 1 for c in CONFIGS), calls
    torch.testing.assert_close(y, 2 * x, rtol=0, atol=0)


def test_a_heuristic_reading_num_stages_makes_another_kernel_timed_on_its_own(fresh_cache):
    @triton.autotune(configs=[triton.Config({"BLOCK": 64}, num_stages=s, pre_hook=_count) for s in (1, 2)],
                     key=["n"])
    @triton.heuristics({"SCALE": lambda args: float(args["num_stages"])})
    @triton.jit
    def _scaled(x_ptr, y_ptr, n, BLOCK: tl.constexpr, SCALE: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * SCALE, mask=offs < n)

    calls.clear()
    x, y = torch.randn(100), torch.zeros(100)
    _scaled[_grid(100)](x, y, 100)
    assert calls[(64, 4, 1)] >= 1 and calls[(64, 4, 2)] >= 1, calls  # both kernels launched for their timing
    best = _scaled.best_config.num_stages
    torch.testing.assert_close(y, best * x, rtol=0, atol=0)


def test_a_config_listed_twice_is_timed_as_the_autotuner_asks(fresh_cache):
    c, d = triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64})
    tuned = triton.autotune(configs=[c, d, c], key=["n"])(_twice_kernel)
    _run(tuned, 150)
    assert set(tuned.configs_timings) == {c, d}


def test_an_invalid_num_stages_after_a_valid_one_is_still_refused(fresh_cache):
    tuned = triton.autotune(configs=[triton.Config({"BLOCK": 32}, num_stages=2),
                                     triton.Config({"BLOCK": 32}, num_stages=0)], key=["n"])(_twice_kernel)
    with pytest.raises(ValueError, match="num_stages must be >= 1, got 0"):
        _run(tuned, 100)

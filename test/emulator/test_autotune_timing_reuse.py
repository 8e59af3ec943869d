"""Autotune configs that compile to the same kernel on this backend (they differ only in num_stages) are timed once
per autotuner run on the emulator (emulator/timing_reuse.py): the repeats get the earlier config's timing, nothing
else is shared, and a new run with other arguments times its configs anew."""
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


@triton.autotune(configs=CONFIGS, key=["n"])
@triton.jit
def _twice(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2.0, mask=offs < n)


def _run(n, grid=None):
    x = torch.randn(n, generator=torch.Generator().manual_seed(n))
    y = torch.zeros(n)
    _twice[grid or (lambda meta: (triton.cdiv(n, meta["BLOCK"]), ))](x, y, n)
    torch.testing.assert_close(y, 2 * x, rtol=0, atol=0)
    return x, y


@pytest.mark.parametrize("grid", ["function", "tuple"])
def test_configs_differing_only_in_num_stages_are_timed_once_per_run(fresh_cache, grid):
    _twice.cache.clear()
    calls.clear()
    x, y = _run(300, None if grid == "function" else (10, ))  # a tuple grid: 10 programs cover 300 elements
    timings = _twice.configs_timings
    assert len(timings) == len(CONFIGS)
    for c in CONFIGS:
        first = next(o for o in CONFIGS if o.kwargs == c.kwargs and o.num_warps == c.num_warps)
        assert timings[c] == timings[first]  # the repeat got the timing of the config it repeats
        timed = calls[(c.kwargs["BLOCK"], c.num_warps, c.num_stages)]
        # launched: the first of each kernel (its first call is timed, more calls while under 5 ms); a repeat never,
        # except the best config's launch for the result itself
        assert timed >= 1 if c is first else timed <= 1, (c, timed)
    best = _twice.best_config
    assert best.num_stages == 1  # ties go to the first config, which is the one that was timed

    calls.clear()
    del x, y
    gc.collect()
    x, y = _run(500)  # a new key: a new run, with other tensors, timed anew
    assert sum(calls.values()) >= 4
    refs = [weakref.ref(x), weakref.ref(y)]
    del x, y
    gc.collect()
    assert all(r() is None for r in refs)  # the timings remembered keep no tensor alive

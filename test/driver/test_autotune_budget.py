"""`@triton.autotune` on the emulator times each config briefly (TRITON_APPLE_EMULATOR_AUTOTUNE_MS): a first call,
whose launch the launcher times (not the config's compile, build or load), then timed calls until the budget is
spent. The ranking is of CPU emulation, so upstream's do_bench (25 + 100
ms and at least eight launches per config) only slowed a model's first call. Counted by a kernel that adds one to
its config's slot on every launch."""
import pytest
import torch
import triton
import triton.language as tl

from triton.backends.apple import knobs
from triton.backends.apple.knobs import KnobError


@triton.jit
def _count_launches(counts, n, SLOT: tl.constexpr):
    if tl.program_id(0) == 0:
        tl.atomic_add(counts + SLOT, 1)


def _launch_counts(n: int) -> list:
    # a new autotuner each time: upstream's Autotuner asks the driver for its benchmarker once, at its first
    # timing, and keeps it (so the knob is read then)
    tuned = triton.autotune(configs=[triton.Config({"SLOT": 0}), triton.Config({"SLOT": 1})], key=["n"])(
        _count_launches)
    counts = torch.zeros(2, dtype=torch.int32)
    tuned[(1, )](counts, n)
    return counts.tolist()


def test_a_zero_budget_launches_each_config_once(monkeypatch):
    monkeypatch.setenv("TRITON_APPLE_EMULATOR_AUTOTUNE_MS", "0")
    # the first call per config, its launch timed; then the chosen config runs once more for the caller
    assert sorted(_launch_counts(1)) == [1, 2]


def test_a_budget_is_spent_in_timed_calls(monkeypatch):
    monkeypatch.setenv("TRITON_APPLE_EMULATOR_AUTOTUNE_MS", "200")
    counts = sorted(_launch_counts(1))
    # each launch of this kernel takes well under 200 ms, so each config is timed more than once
    assert counts[0] >= 3, counts


@pytest.mark.parametrize("quantiles, mode, expect", [((0.5, 0.2, 0.8), "mean", list), ((0.5, ), "mean", float),
                                                     (None, "all", list), (None, "median", float)])
def test_results_have_do_benchs_shapes(quantiles, mode, expect):
    bench = triton.runtime.driver.active.get_benchmarker()
    calls = []
    got = bench(lambda: calls.append(1), quantiles=quantiles, return_mode=mode)
    assert isinstance(got, expect) and len(calls) >= 2
    if expect is list and quantiles:
        assert len(got) == len(quantiles) and got[1] <= got[0] <= got[2]


@pytest.mark.parametrize("env, rep", [(None, 5.0), ("0.5", 0.5), ("40", 40.0)])
def test_the_budget_is_the_knobs(monkeypatch, env, rep):
    if env is None:
        monkeypatch.delenv("TRITON_APPLE_EMULATOR_AUTOTUNE_MS", raising=False)
    else:
        monkeypatch.setenv("TRITON_APPLE_EMULATOR_AUTOTUNE_MS", env)
    assert triton.runtime.driver.active.get_benchmarker().keywords == {"rep": rep}


def test_a_bad_budget_is_refused_naming_the_variable(monkeypatch):
    monkeypatch.setenv("TRITON_APPLE_EMULATOR_AUTOTUNE_MS", "soon")
    with pytest.raises(KnobError, match="TRITON_APPLE_EMULATOR_AUTOTUNE_MS"):
        knobs.emulator_autotune_ms.get()

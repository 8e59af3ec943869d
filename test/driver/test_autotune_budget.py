"""`@triton.autotune` on the emulator times each config with a short budget (TRITON_APPLE_EMULATOR_AUTOTUNE_MS):
the ranking is of CPU emulation, so upstream's 25 + 100 ms of launches per config only slowed a model's first
call. Counted by a kernel that adds one to its config's slot on every launch."""
import pytest
import torch
import triton
import triton.language as tl

from triton.backends.apple import knobs
from triton.backends.apple.knobs import KnobError


@triton.autotune(configs=[triton.Config({"SLOT": 0}), triton.Config({"SLOT": 1})], key=["n"])
@triton.jit
def _count_launches(counts, n, SLOT: tl.constexpr):
    if tl.program_id(0) == 0:
        tl.atomic_add(counts + SLOT, 1)


def _launch_counts(n: int) -> list:
    counts = torch.zeros(2, dtype=torch.int32)
    _count_launches[(1, )](counts, n)
    return counts.tolist()


def test_a_zero_budget_launches_each_config_as_few_times_as_do_bench_allows(monkeypatch):
    monkeypatch.setenv("TRITON_APPLE_EMULATOR_AUTOTUNE_MS", "0")
    # triton.testing.do_bench (3.9): one call, five to estimate, at least one warm-up and one timed call = 8;
    # then the chosen config runs once more for the caller
    assert sorted(_launch_counts(1)) == [8, 9]


@pytest.mark.parametrize("env, warmup, rep", [(None, 1.0, 5.0), ("0.5", 0.5, 0.5), ("40", 1.0, 40.0)])
def test_the_budget_is_the_knobs(monkeypatch, env, warmup, rep):
    if env is None:
        monkeypatch.delenv("TRITON_APPLE_EMULATOR_AUTOTUNE_MS", raising=False)
    else:
        monkeypatch.setenv("TRITON_APPLE_EMULATOR_AUTOTUNE_MS", env)
    bench = triton.runtime.driver.active.get_benchmarker()
    assert bench.keywords == {"warmup": warmup, "rep": rep}


def test_a_bad_budget_is_refused_naming_the_variable(monkeypatch):
    monkeypatch.setenv("TRITON_APPLE_EMULATOR_AUTOTUNE_MS", "soon")
    with pytest.raises(KnobError, match="TRITON_APPLE_EMULATOR_AUTOTUNE_MS"):
        knobs.emulator_autotune_ms.get()

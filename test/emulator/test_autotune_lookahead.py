"""An autotuned kernel's later configs are compiled while the autotuner times the current one
(emulator/lookahead.py): the same configs timed, the same results, failures reported as the autotuner always does,
and nothing of a run kept once it is over."""
import gc
import threading
import time
import weakref

import pytest
import torch
import triton
import triton.language as tl

from triton.backends.apple import compile_log

pytestmark = pytest.mark.emulator_only

LOOKAHEAD_THREAD = "apple-emulator-autotune-lookahead"


def _configs(scale: int):
    return [triton.Config({"BLOCK": b, "SCALE": scale}, num_warps=w) for b in (32, 64) for w in (1, 2)]


@triton.autotune(configs=_configs(3), key=["n"])
@triton.jit
def _scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr, SCALE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * SCALE + 1.0, mask=offs < n)


@triton.autotune(configs=_configs(5), key=["n"])
@triton.jit
def _scale_small_blocks_only(x_ptr, y_ptr, n, BLOCK: tl.constexpr, SCALE: tl.constexpr):
    tl.static_assert(BLOCK <= 32, "this kernel takes blocks of at most 32")  # the 64 configs fail to compile
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * SCALE, mask=offs < n)


@triton.autotune(configs=_configs(2), key=["n"])
@triton.heuristics({"EVEN": lambda args: args["n"] % args["BLOCK"] == 0})
@triton.jit
def _scale_with_heuristics(x_ptr, y_ptr, n, BLOCK: tl.constexpr, SCALE: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        tl.store(y_ptr + offs, tl.load(x_ptr + offs) * SCALE)
    else:
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * SCALE, mask=offs < n)


def _prune_nothing(configs, named_args, **kwargs):
    return configs


@triton.autotune(configs=_configs(7), key=["n"], prune_configs_by={"early_config_prune": _prune_nothing})
@triton.jit
def _scale_pruned(x_ptr, y_ptr, n, BLOCK: tl.constexpr, SCALE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * SCALE, mask=offs < n)


def _tune(kernel, n: int, monkeypatch, lookahead: bool = True, frontend_seconds: float = 0.0):
    """Runs `kernel` autotuned afresh on `n` elements; returns (input, output, names of the threads that lowered
    each of its compiles). Checks that Triton's frontend (which parses Python with `ast`, not safe in two threads at
    once on CPython 3.11) never ran in two threads at once (`frontend_seconds`: each frontend takes at least that
    long, so that one running beside another would be seen)."""
    from triton.compiler import compiler
    monkeypatch.setenv("TRITON_APPLE_EMULATOR_AUTOTUNE_LOOKAHEAD", "1" if lookahead else "0")
    in_frontend, overlaps = [], []
    make_ir = compiler.ASTSource.make_ir

    def one_frontend_at_a_time(self, *args, **kwargs):
        if in_frontend:
            overlaps.append((threading.current_thread().name, list(in_frontend)))
        in_frontend.append(threading.current_thread().name)
        try:
            time.sleep(frontend_seconds)
            return make_ir(self, *args, **kwargs)
        finally:
            in_frontend.remove(threading.current_thread().name)

    monkeypatch.setattr(compiler.ASTSource, "make_ir", one_frontend_at_a_time)
    threads = []
    stop = compile_log.listen(lambda e: threads.append(threading.current_thread().name)
                              if e.what == compile_log.LOWERED else None)
    try:
        x = torch.randn(n, generator=torch.Generator().manual_seed(n))
        y = torch.zeros(n)
        kernel.cache.clear()  # a new autotuner run: every config timed again
        jit = kernel.fn.fn if isinstance(kernel.fn, triton.runtime.Heuristics) else kernel.fn
        jit.device_caches.clear()  # and compiled again (the JIT's in-memory kernels of earlier tests)
        kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]), )](x, y, n)
    finally:
        stop()
    assert not overlaps, overlaps
    return x, y, threads


def test_later_configs_compile_on_the_lookahead_thread_and_every_config_is_timed(monkeypatch, fresh_cache):
    x, y, threads = _tune(_scale, 200, monkeypatch)
    torch.testing.assert_close(y, x * 3 + 1.0, rtol=0, atol=0)
    assert threads.count(LOOKAHEAD_THREAD) == 3 and threads.count("MainThread") == 1, threads  # no compile twice
    timings = _scale.configs_timings
    assert len(timings) == 4 and all(t[0] < float("inf") for t in timings.values())


def test_the_next_config_compiles_while_the_first_config_s_library_builds(monkeypatch, fresh_cache):
    """The lookahead starts once the first config is compiled and loaded, not after its first launch: every
    library build here waits (at most a minute) for the lookahead thread to have lowered a config, so the first
    config's build only proceeds promptly when the lookahead compiles beside it."""
    from triton.backends.apple.emulator import build
    lowered_ahead = threading.Event()
    waited = []
    original = build.build_kernel

    def build_kernel(*args, **kwargs):
        waited.append(lowered_ahead.wait(timeout=60))
        return original(*args, **kwargs)

    def on_event(e):
        if e.what == compile_log.LOWERED and threading.current_thread().name == LOOKAHEAD_THREAD:
            lowered_ahead.set()

    monkeypatch.setattr(build, "build_kernel", build_kernel)
    stop = compile_log.listen(on_event)
    try:
        x, y, threads = _tune(_scale, 130, monkeypatch)
    finally:
        stop()
    torch.testing.assert_close(y, x * 3 + 1.0, rtol=0, atol=0)
    assert waited and waited[0], waited  # config 0's library: the lookahead lowered config 1 during its build
    assert threads.count("MainThread") == 1 and threads.count(LOOKAHEAD_THREAD) == 3, threads


def test_a_kernel_under_heuristics_looks_ahead_with_each_config_s_heuristic_values(monkeypatch, fresh_cache):
    x, y, threads = _tune(_scale_with_heuristics, 96, monkeypatch)  # EVEN for 32, not for 64
    torch.testing.assert_close(y, x * 2, rtol=0, atol=0)
    assert threads.count(LOOKAHEAD_THREAD) == 3 and threads.count("MainThread") == 1, threads


def test_a_config_that_fails_to_compile_is_skipped_as_without_the_lookahead(monkeypatch, fresh_cache):
    # the autotuner compiles a config that failed on the lookahead thread again, to meet the error itself: the
    # lookahead must not be compiling beside it then (slow frontends make any overlap show)
    x, y, threads = _tune(_scale_small_blocks_only, 100, monkeypatch, frontend_seconds=0.2)
    torch.testing.assert_close(y, x * 5, rtol=0, atol=0)
    timings = _scale_small_blocks_only.configs_timings
    failed = [c for c, t in timings.items() if t[0] == float("inf")]
    assert sorted(c.kwargs["BLOCK"] for c in failed) == [64, 64]
    assert _scale_small_blocks_only.best_config.kwargs["BLOCK"] == 32


def test_the_knob_turns_it_off(monkeypatch, fresh_cache):
    x, y, threads = _tune(_scale, 300, monkeypatch, lookahead=False)
    torch.testing.assert_close(y, x * 3 + 1.0, rtol=0, atol=0)
    assert threads and set(threads) == {"MainThread"}


def test_an_autotuner_that_prunes_its_configs_compiles_only_what_it_times(monkeypatch, fresh_cache):
    x, y, threads = _tune(_scale_pruned, 150, monkeypatch)
    torch.testing.assert_close(y, x * 7, rtol=0, atol=0)
    assert threads and set(threads) == {"MainThread"}


def test_each_run_looks_ahead_and_keeps_no_tensor_afterwards(monkeypatch, fresh_cache):
    for n in (64, 100):  # two keys (and specialisations): two runs of the same autotuner, compiling anew
        x, y, threads = _tune(_scale, n, monkeypatch)
        torch.testing.assert_close(y, x * 3 + 1.0, rtol=0, atol=0)
        assert threads.count(LOOKAHEAD_THREAD) == 3, (n, threads)
    for t in threading.enumerate():
        if t.name == LOOKAHEAD_THREAD:
            t.join(timeout=300)
    refs = [weakref.ref(x), weakref.ref(y)]
    del x, y
    gc.collect()
    assert all(r() is None for r in refs)

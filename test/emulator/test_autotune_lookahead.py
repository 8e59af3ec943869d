"""An autotuned kernel's configs are compiled two at a time, ahead of the autotuner's timing of each
(emulator/lookahead.py): the same configs timed, the same results, failures reported as the autotuner always does,
Triton's frontend never in two threads at once, and nothing of a run kept once it is over."""
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


@triton.autotune(configs=[triton.Config({"BLOCK": b}, num_stages=s) for b in (32, 64) for s in (1, 2, 3)], key=["n"])
@triton.jit
def _copy_stages(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


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


def _ahead(threads):
    return sum(t.startswith(LOOKAHEAD_THREAD) for t in threads)


def test_every_config_compiles_on_the_lookahead_threads_and_is_timed(monkeypatch, fresh_cache):
    x, y, threads = _tune(_scale, 200, monkeypatch)
    torch.testing.assert_close(y, x * 3 + 1.0, rtol=0, atol=0)
    assert _ahead(threads) == 4 and "MainThread" not in threads, threads  # nothing compiled twice
    timings = _scale.configs_timings
    assert len(timings) == 4 and all(t[0] < float("inf") for t in timings.values())


def test_configs_compile_two_at_a_time(monkeypatch, fresh_cache):
    """While one lookahead thread lowers a config (made to take 0.3 s here), the other compiles the next one."""
    from triton.backends.apple.compiler import AppleBackend
    spans = []
    make_msl = AppleBackend.make_msl

    def slow_make_msl(*args, **kwargs):
        started = time.perf_counter()
        time.sleep(0.3)
        try:
            return make_msl(*args, **kwargs)
        finally:
            spans.append((threading.current_thread().name, started, time.perf_counter()))

    monkeypatch.setattr(AppleBackend, "make_msl", staticmethod(slow_make_msl))
    x, y, threads = _tune(_scale, 130, monkeypatch)
    torch.testing.assert_close(y, x * 3 + 1.0, rtol=0, atol=0)
    assert _ahead(threads) == 4, threads
    overlapping = [(a, b) for a in spans for b in spans if a[0] != b[0] and a[1] < b[2] and b[1] < a[2]]
    assert overlapping, spans


def test_configs_differing_only_in_num_stages_compile_once(monkeypatch, fresh_cache):
    """The second of two such configs waits for the first, whose compile Triton's cache then serves."""
    x, y, threads = _tune(_copy_stages, 100, monkeypatch)
    torch.testing.assert_close(y, x, rtol=0, atol=0)
    assert len(threads) == 2 and _ahead(threads) == 2, threads


def test_a_kernel_under_heuristics_looks_ahead_with_each_config_s_heuristic_values(monkeypatch, fresh_cache):
    x, y, threads = _tune(_scale_with_heuristics, 96, monkeypatch)  # EVEN for 32, not for 64
    torch.testing.assert_close(y, x * 2, rtol=0, atol=0)
    assert _ahead(threads) == 4 and "MainThread" not in threads, threads


def test_a_config_that_fails_to_compile_is_skipped_as_without_the_lookahead(monkeypatch, fresh_cache):
    # the autotuner compiles a config that failed on the lookahead thread again, to meet the error itself: the
    # lookahead must not be compiling beside it then (slow frontends make any overlap show)
    x, y, threads = _tune(_scale_small_blocks_only, 100, monkeypatch, frontend_seconds=0.2)
    torch.testing.assert_close(y, x * 5, rtol=0, atol=0)
    timings = _scale_small_blocks_only.configs_timings
    failed = [c for c, t in timings.items() if t[0] == float("inf")]
    assert sorted(c.kwargs["BLOCK"] for c in failed) == [64, 64]
    assert _scale_small_blocks_only.best_config.kwargs["BLOCK"] == 32


def test_a_config_whose_load_failed_on_a_lookahead_thread_is_loaded_again_by_the_autotuner(monkeypatch, fresh_cache):
    from triton.backends.apple.emulator import EmulatorCompileError
    from triton.runtime import driver
    utils = driver.active.utils
    load_binary = utils.load_binary
    failed = []

    def fails_ahead(name, *args):
        if threading.current_thread().name.startswith(LOOKAHEAD_THREAD):
            failed.append(name)
            raise EmulatorCompileError(f"kernel '{name}': a load failure planted on the lookahead thread",
                                       kernel_name=name)
        return load_binary(name, *args)

    monkeypatch.setattr(utils, "load_binary", fails_ahead)
    x, y, threads = _tune(_scale, 150, monkeypatch)
    torch.testing.assert_close(y, x * 3 + 1.0, rtol=0, atol=0)
    assert len(failed) == 4 and "MainThread" not in threads  # compiled ahead, loaded by the autotuner's calls
    assert all(t[0] < float("inf") for t in _scale.configs_timings.values())


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
        assert _ahead(threads) == 4, (n, threads)
    for t in threading.enumerate():
        if t.name.startswith(LOOKAHEAD_THREAD):
            t.join(timeout=300)
    refs = [weakref.ref(x), weakref.ref(y)]
    del x, y
    gc.collect()
    assert all(r() is None for r in refs)

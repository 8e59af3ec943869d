"""TRITON_APPLE_LOG_COMPILES and compile_log's events: one line per kernel when the backend lowers it (the
target, our passes + lowering's time) and when the emulator compiles its library with clang or loads it from the
cache; nothing without the knob."""
import random

import pytest
import torch

import triton
import triton.language as tl


@triton.jit
def _scaled_copy(x_ptr, y_ptr, n, SCALE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * SCALE, mask=offs < n)


def _run(scale):
    x = torch.arange(8, dtype=torch.float32)
    y = torch.empty_like(x)
    _scaled_copy[(1, )](x, y, 8, SCALE=scale, BLOCK=8)
    torch.testing.assert_close(y, x * scale)


@pytest.fixture
def events():
    from triton.backends.apple import compile_log
    seen = []
    stop = compile_log.listen(seen.append)
    yield seen
    stop()


def test_a_new_kernel_is_lowered_then_compiled_and_each_logged_once(monkeypatch, capfd, events):
    from triton.backends.apple import compile_log
    monkeypatch.setenv("TRITON_APPLE_LOG_COMPILES", "1")
    scale = float(random.Random().randrange(1 << 20) + 3)  # a constexpr no cache has seen: a real compile
    _run(scale)
    _run(scale)  # the second launch compiles nothing
    mine = [e for e in events if e.kernel == "_scaled_copy"]
    assert [e.what for e in mine] == [compile_log.LOWERED, compile_log.COMPILED]
    lowered, compiled = mine
    assert lowered.target == "cpu:apple7" and 0 < lowered.seconds < 60
    assert compiled.target == "emulator" and 0 < compiled.seconds < 120 and compiled.where
    err = capfd.readouterr().err
    assert err.count("apple backend: kernel '_scaled_copy' lowered for cpu:apple7 (our passes + MSL lowering) in ") == 1
    assert err.count("apple backend: kernel '_scaled_copy' emulator library compiled by clang in ") == 1


def test_a_cached_library_is_logged_as_loaded(monkeypatch, capfd, events):
    from triton.backends.apple import compile_log
    from triton.backends.apple.emulator import clear_memory_cache
    scale = float(random.Random().randrange(1 << 20) + 3)
    _run(scale)
    clear_memory_cache()  # a new process would find the library on disk; so does this one now
    _scaled_copy.device_caches.clear()  # and Triton compiles again (its own cache has the MSL: no lowering)
    monkeypatch.setenv("TRITON_APPLE_LOG_COMPILES", "1")
    capfd.readouterr()
    events.clear()
    _run(scale)
    assert [e.what for e in events if e.kernel == "_scaled_copy"] == [compile_log.LOADED]
    err = capfd.readouterr().err
    assert "apple backend: kernel '_scaled_copy' emulator library loaded from the cache (" in err
    assert "lowered" not in err


def test_nothing_is_printed_without_the_knob(monkeypatch, capfd, events):
    monkeypatch.delenv("TRITON_APPLE_LOG_COMPILES", raising=False)
    _run(float(random.Random().randrange(1 << 20) + 3))
    assert [e.kernel for e in events].count("_scaled_copy") == 2  # listeners see the events all the same
    assert "apple backend: kernel" not in capfd.readouterr().err

"""Which library of a kernel runs (emulator/tuning.py): autotune configs being timed run on quick (-O0)
libraries; other launches start on the optimised library if it exists, else on the quick one, and move to the
optimised one once the kernel has run long enough. The premise: the two libraries of one MSL compute the same
bits."""
import re

import pytest
import torch
import triton
import triton.language as tl

from triton.backends.apple.emulator import tuning


@triton.jit
def _float_mix(x_ptr, out_ptr, h_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = tl.exp(x) / (1.0 + tl.sqrt(tl.abs(x))) - tl.log(1.0 + x * x) * tl.sin(x)
    y = tl.where(x > 1.5, y * 3.0 + x, y - x * 0.25)
    total = tl.sum(tl.where(mask, y, 0.0), axis=0)
    tl.store(out_ptr + offs, y * total + tl.cumsum(y, axis=0), mask=mask)
    tl.store(h_ptr + offs, (y * 1000.0).to(tl.float16), mask=mask)


@triton.jit
def _int_mix(a_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask, other=1)
    b = a * 1103515245 + 12345  # wraps
    c = (b >> 7) ^ (b << 3) ^ (a // 7) ^ (a % 13)
    tl.store(out_ptr + offs, tl.cumsum(c, axis=0) + tl.max(c, axis=0), mask=mask)


@triton.jit
def _dot_mix(a_ptr, b_ptr, out_ptr, low_ptr, q_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    c = tl.dot(a, b)  # fp16 operands, fp32 accumulation (simdgroup_matrix)
    c = tl.dot(c.to(tl.float16), b.trans().to(tl.float16)) if N == K else c
    offs = rm[:, None] * N + rn[None, :]
    tl.store(out_ptr + offs, c)
    tl.store(low_ptr + offs, c.to(tl.bfloat16).to(tl.float32) + c.to(tl.float8e5).to(tl.float32))
    ci = (c * 100.0).to(tl.int32)
    tl.store(q_ptr + offs, ci // 7 + ci % -5 + (ci.to(tl.uint32) // 3).to(tl.int32))


def _run_dot(block: int):
    g = torch.Generator().manual_seed(block)
    a = torch.randn(block, block, generator=g).half()
    b = torch.randn(block, block, generator=g).half()
    out, low = torch.zeros(block, block), torch.zeros(block, block)
    q = torch.zeros(block, block, dtype=torch.int32)
    compiled = _dot_mix[(1, )](a, b, out, low, q, M=block, N=block, K=block)
    ref = (a.float() @ b.float()).half().float() @ b.float().T
    torch.testing.assert_close(out, ref, rtol=2e-2, atol=2e-1)  # it computed the product, whichever library
    return compiled, [out, low, q]


def _run_float(block: int):
    g = torch.Generator().manual_seed(block)
    x = torch.randn(block, generator=g) * 3
    out, h = torch.zeros(block), torch.zeros(block, dtype=torch.float16)
    compiled = _float_mix[(1, )](x, out, h, block - 3, BLOCK=block)
    return compiled, [out, h]


def _run_int(block: int):
    g = torch.Generator().manual_seed(block)
    a = torch.randint(-2**31, 2**31 - 1, (block, ), generator=g, dtype=torch.int32)
    out = torch.zeros(block, dtype=torch.int32)
    compiled = _int_mix[(1, )](a, out, block - 5, BLOCK=block)
    return compiled, [out]


@pytest.mark.parametrize("run, block", [(_run_float, 256), (_run_float, 1024), (_run_int, 512), (_run_dot, 32)])
def test_the_quick_and_the_optimised_library_compute_the_same_bits(monkeypatch, run, block):
    monkeypatch.setenv("TRITON_APPLE_EMULATOR_AUTOTUNE_QUICK", "1")
    with tuning.timing_configs():  # loaded and launched while "timing configs": the -O0 library
        compiled, quick_out = run(block)
    function = compiled.function
    assert function._kernel.quick
    quick_out = [t.clone() for t in quick_out]
    monkeypatch.setenv("TRITON_APPLE_EMULATOR_OPTIMISE_AFTER_MS", "0")
    _, optimised_out = run(block)  # the same compiled kernel outside, optimised at once: its optimised library
    assert not function._kernel.quick
    for q, o in zip(quick_out, optimised_out):
        assert torch.equal(q.view(torch.uint8), o.view(torch.uint8))


@triton.autotune(configs=[triton.Config({"SCALE": 2}, num_warps=1), triton.Config({"SCALE": 2}, num_warps=2),
                          triton.Config({"SCALE": 2}, num_warps=4)], key=["n"])
@triton.jit
def _scaled(x_ptr, out_ptr, n, SCALE: tl.constexpr):
    offs = tl.arange(0, 128)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * SCALE, mask=mask)


def _tune_scaled(monkeypatch, capfd, quick: str, n: int) -> str:
    """Runs `_scaled` autotuned afresh (its configs compiled again) on `n` elements; returns the compile log."""
    monkeypatch.setenv("TRITON_APPLE_EMULATOR_AUTOTUNE_QUICK", quick)
    monkeypatch.setenv("TRITON_APPLE_EMULATOR_OPTIMISE_AFTER_MS", "0")  # the chosen config optimised at once
    monkeypatch.setenv("TRITON_APPLE_LOG_COMPILES", "1")
    monkeypatch.setenv("TRITON_ALWAYS_COMPILE", "1")
    x = torch.arange(100, dtype=torch.float32)
    out = torch.zeros(100)
    _scaled.cache.clear()
    _scaled[(1, )](x, out, n)
    assert torch.equal(out[:n], x[:n] * 2) and not out[n:].any()
    return capfd.readouterr().err


def test_configs_are_timed_on_quick_libraries_and_the_chosen_one_runs_optimised(monkeypatch, capfd):
    log = _tune_scaled(monkeypatch, capfd, "1", 100)
    libraries = re.findall(r"kernel '_scaled' emulator library (?:compiled by clang in \d+ ms|loaded from the cache)"
                           r" \(([^)]*)\)", log)
    quick = [w for w in libraries if w.endswith("-O0: a quick library")]
    assert len(quick) == 3, log  # every config, timed on an -O0 library
    assert len(libraries) == 4, log  # and the chosen one's optimised library for the call's own launch
    best = _scaled.best_config
    assert best in _scaled.configs_timings


@triton.autotune(configs=[triton.Config({"SCALE": 3}, num_warps=1), triton.Config({"SCALE": 3}, num_warps=2)],
                 key=["n"])
@triton.jit
def _scaled_once(x_ptr, out_ptr, n, SCALE: tl.constexpr):  # compiled by the next test only
    offs = tl.arange(0, 128)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * SCALE, mask=mask)


def test_the_chosen_config_stays_on_its_quick_library_while_it_runs_briefly(monkeypatch, capfd, fresh_cache):
    monkeypatch.setenv("TRITON_APPLE_EMULATOR_AUTOTUNE_QUICK", "1")
    monkeypatch.setenv("TRITON_APPLE_EMULATOR_OPTIMISE_AFTER_MS", "60000")
    monkeypatch.setenv("TRITON_APPLE_LOG_COMPILES", "1")
    x = torch.arange(100, dtype=torch.float32)
    out = torch.zeros(100)
    _scaled_once[(1, )](x, out, 90)
    assert torch.equal(out[:90], x[:90] * 3) and not out[90:].any()
    log = capfd.readouterr().err
    libraries = re.findall(r"kernel '_scaled_once' emulator library [^(]*\(([^)]*)\)", log)
    assert len(libraries) == 2 and all(w.endswith("-O0: a quick library") for w in libraries), log


def test_the_knob_times_configs_on_optimised_libraries(monkeypatch, capfd):
    log = _tune_scaled(monkeypatch, capfd, "0", 77)
    assert "kernel '_scaled' emulator library" in log and "-O0" not in log


@pytest.fixture
def quick_libraries_overflow(monkeypatch):
    """Every launch of a quick library fails as a stack overflow (-O0 frames are larger than -O2 ones, so a kernel
    near the emulated stack's limit may overflow only quick); yields the real `EmulatorKernel.run`."""
    from triton.backends.apple.emulator import EmulatorLaunchError
    from triton.backends.apple.emulator.kernel import EmulatorKernel
    real_run = EmulatorKernel.run

    def run(self, *args, **kwargs):
        if self.quick:
            raise EmulatorLaunchError("stack overflow of an emulated thread (planted)", kind="stack_overflow")
        return real_run(self, *args, **kwargs)

    monkeypatch.setattr(EmulatorKernel, "run", run)
    yield real_run


def test_a_config_whose_quick_library_overflows_the_stack_is_timed_on_the_optimised_one(monkeypatch,
                                                                                         quick_libraries_overflow):
    monkeypatch.setenv("TRITON_APPLE_EMULATOR_AUTOTUNE_QUICK", "1")
    with tuning.timing_configs():
        compiled, out = _run_int(128)
    assert not compiled.function._kernel.quick  # it went on, on the optimised library
    _, again = _run_int(128)
    assert torch.equal(out[0], again[0])


def test_other_failures_of_a_quick_library_are_reported_as_they_are(monkeypatch):
    from triton.backends.apple.emulator import EmulatorLaunchError
    from triton.backends.apple.emulator.kernel import EmulatorKernel

    def run(self, *args, **kwargs):
        raise EmulatorLaunchError("out-of-bounds read (planted)", kind="out_of_bounds")

    monkeypatch.setattr(EmulatorKernel, "run", run)
    monkeypatch.setenv("TRITON_APPLE_EMULATOR_AUTOTUNE_QUICK", "1")
    with tuning.timing_configs(), pytest.raises(EmulatorLaunchError, match="planted"):
        _run_int(64)


def _float_mix_function(block: int):
    compiled, out = _run_float(block)
    return compiled.function, [t.clone() for t in out]


def test_a_kernel_starts_quick_and_moves_to_its_optimised_library_after_running_long_enough(monkeypatch,
                                                                                            fresh_cache):
    monkeypatch.setenv("TRITON_ALWAYS_COMPILE", "1")  # a fresh load: no library of this process is reused
    monkeypatch.setenv("TRITON_APPLE_EMULATOR_OPTIMISE_AFTER_MS", "0.000001")  # any launch is long enough
    block = 128
    function, first = _float_mix_function(block)
    assert function._kernel.quick and function._optimised is None
    _, second = _run_float(block)  # has run long enough: the optimised build starts; this launch stays quick
    assert function._kernel.quick and function._optimised is not None
    assert not function._optimised.result().quick
    _, third = _run_float(block)  # built: from now on the optimised library
    assert not function._kernel.quick
    for a, b, c in zip(first, second, third):
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))
        assert torch.equal(a.view(torch.uint8), c.view(torch.uint8))
    # a later load of the same kernel finds the optimised library in the cache and starts on it
    function, again = _float_mix_function(block)
    assert not function._kernel.quick
    assert all(torch.equal(a.view(torch.uint8), b.view(torch.uint8)) for a, b in zip(first, again))


def test_a_kernel_that_runs_briefly_is_never_built_optimised(monkeypatch, fresh_cache):
    monkeypatch.setenv("TRITON_ALWAYS_COMPILE", "1")
    monkeypatch.setenv("TRITON_APPLE_EMULATOR_OPTIMISE_AFTER_MS", "60000")
    function, first = _float_mix_function(64)
    for _ in range(3):
        _, out = _run_float(64)
        assert all(torch.equal(a, b) for a, b in zip(first, out))
    assert function._kernel.quick and function._optimised is None


def test_with_the_knob_at_zero_every_kernel_runs_optimised_from_its_first_launch(monkeypatch):
    monkeypatch.setenv("TRITON_ALWAYS_COMPILE", "1")
    monkeypatch.setenv("TRITON_APPLE_EMULATOR_OPTIMISE_AFTER_MS", "0")
    function, _ = _float_mix_function(32)
    assert not function._kernel.quick


def test_a_quick_library_overflowing_outside_timing_is_reported_and_the_next_launch_runs_optimised(
        monkeypatch, fresh_cache, quick_libraries_overflow):
    # outside autotune timing a launch is the caller's: threads that ran before the overflow may have stored, so
    # running it again could apply their writes twice; it is reported, and the kernel moves to its optimised library
    from triton.backends.apple.emulator import EmulatorLaunchError
    from triton.backends.apple.emulator.kernel import EmulatorKernel
    monkeypatch.setenv("TRITON_ALWAYS_COMPILE", "1")
    monkeypatch.setenv("TRITON_APPLE_EMULATOR_OPTIMISE_AFTER_MS", "60000")
    with pytest.raises(EmulatorLaunchError, match=r"(?s)planted.*quick -O0 library"):
        _run_int(32)
    compiled, out = _run_int(32)
    assert not compiled.function._kernel.quick
    monkeypatch.setattr(EmulatorKernel, "run", quick_libraries_overflow)
    _, again = _run_int(32)
    assert torch.equal(out[0], again[0])


def test_an_optimised_build_that_fails_leaves_the_kernel_on_its_quick_library(monkeypatch, fresh_cache):
    from triton.backends.apple.emulator import EmulatorCompileError, kernel as emu_kernel
    real_compile = emu_kernel.compile_msl

    def compile_msl(source, name, quick=False):
        if quick is False:
            raise EmulatorCompileError(f"kernel '{name}': clang failed (planted)", kernel_name=name)
        return real_compile(source, name, quick)

    monkeypatch.setattr(emu_kernel, "compile_msl", compile_msl)
    monkeypatch.setenv("TRITON_ALWAYS_COMPILE", "1")
    monkeypatch.setenv("TRITON_APPLE_EMULATOR_OPTIMISE_AFTER_MS", "0.000001")
    function, first = _float_mix_function(16)
    _run_float(16)  # has run long enough: the optimised build starts, and fails in the background
    function._optimised.exception()  # waits for it
    with pytest.warns(UserWarning, match=r"'_float_mix'.*did not build.*planted.*keeps running on its quick"):
        _, out = _run_float(16)
    assert function._kernel.quick and not function._optimising
    assert all(torch.equal(a, b) for a, b in zip(first, out))
    import warnings as _warnings
    with _warnings.catch_warnings():
        _warnings.simplefilter("error")  # said once
        _run_float(16)

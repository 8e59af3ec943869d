"""Kernel libraries built in the background from `load_binary` on (emulator/background.py): the first launch
gets the library that build made (or its error, explained as before), several loads build side by side, and a
child forked while a build is pending builds on its own instead of waiting for the parent's threads."""
import os
import random

import pytest
import torch

import triton
import triton.language as tl

pytestmark = pytest.mark.emulator_only


@triton.jit
def _add_const(x_ptr, y_ptr, n, C: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + C, mask=offs < n)


def _fresh_constant() -> float:
    return float(random.Random().randrange(1 << 20) + 7)  # a kernel no cache has seen


def _function_of(compiled):
    compiled._init_handles()  # what Triton does before the first launch: load_binary
    return compiled.function


def test_load_starts_the_build_and_the_first_launch_uses_it():
    from triton.backends.apple.driver import EmulatorFunction
    c = _fresh_constant()
    x = torch.arange(8, dtype=torch.float32)
    y = torch.empty_like(x)
    compiled = _add_const.warmup(x, y, 8, C=c, BLOCK=8, grid=(1, ))
    fn = _function_of(compiled)
    assert isinstance(fn, EmulatorFunction) and fn._build is not None  # started at load time
    kernel = fn._build.result(timeout=300)
    _add_const[(1, )](x, y, 8, C=c, BLOCK=8)
    assert fn._kernel is kernel and fn._build is None
    torch.testing.assert_close(y, x + c)


def test_several_loads_build_side_by_side_and_each_launch_is_right():
    x = torch.arange(8, dtype=torch.float32)
    constants = [_fresh_constant() for _ in range(3)]
    functions = [_function_of(_add_const.warmup(x, x, 8, C=c, BLOCK=8, grid=(1, ))) for c in constants]
    assert all(f._build is not None for f in functions)  # all three were queued before any launch
    for c in constants:
        y = torch.empty_like(x)
        _add_const[(1, )](x, y, 8, C=c, BLOCK=8)
        torch.testing.assert_close(y, x + c)


def test_a_child_forked_with_a_build_pending_builds_on_its_own():
    c = _fresh_constant()
    x = torch.arange(8, dtype=torch.float32)
    fn = _function_of(_add_const.warmup(x, x, 8, C=c, BLOCK=8, grid=(1, )))
    assert fn._build is not None
    pid = os.fork()
    if pid == 0:  # the child: the parent's pool threads do not exist here
        code = 1
        try:
            y = torch.empty_like(x)
            _add_const[(1, )](x, y, 8, C=c, BLOCK=8)
            code = 0 if torch.equal(y, x + c) else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    y = torch.empty_like(x)
    _add_const[(1, )](x, y, 8, C=c, BLOCK=8)
    torch.testing.assert_close(y, x + c)


def test_the_driver_starts_building_the_runtime_before_any_kernel_is_compiled(tmp_path):
    # a fresh process and cache: making the driver is enough for the runtime to be built and loaded, so its
    # one-time build runs while the first kernels are lowered rather than before their first launch
    import subprocess
    import sys
    code = ("import triton\n"
            "from triton.backends.apple.driver import AppleDriver\n"
            "from triton.backends.apple.emulator import background, library\n"
            "assert not library.runtime_loaded()\n"
            "AppleDriver('emulator')\n"
            "background._runtime.result(timeout=300)\n"
            "assert library.runtime_loaded()\n"
            "print('ok')\n")
    env = dict(os.environ, TRITON_CACHE_DIR=str(tmp_path / "cache"), TRITON_APPLE_DEVICE="emulator")
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr
    assert list((tmp_path / "cache" / "apple_emulator").glob("runtime-*"))

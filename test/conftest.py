"""Fixtures shared by every test folder: the device kernels run on, compiling for the apple target, and the
emulator package for the hand-written MSL tests. Plain helpers live in test/support (`support.*`); tests import
them from there, never from this module by name, so that a folder may add a conftest.py of its own without
shadowing this one."""
import os
import signal

import pytest

from support.device import compile_for_apple, device_name

os.environ.setdefault("TRITON_APPLE_DEVICE", "emulator")


@pytest.fixture
def device():
    return device_name()


@pytest.fixture
def apple_compile():
    return compile_for_apple


@pytest.fixture
def sigint_raises(monkeypatch):
    """SIGINT raises KeyboardInterrupt during the test, as in an interactive Python, also where the test process
    started with SIGINT ignored (a shell runs background jobs so, and Python then installs no handler); the
    emulator's timeout fails the test instead of letting it spin if the signal is lost anyway."""
    monkeypatch.setenv("TRITON_APPLE_EMULATOR_TIMEOUT", "60")
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


@pytest.fixture(scope="session")
def emu():
    """The emulator package (`emu.compile_msl`, `emu.Scalar`, ...)."""
    from triton.backends.apple import emulator
    return emulator


@pytest.fixture
def mps(monkeypatch):
    """The driver in metal mode on the MPS stand-in (support/mps_standin.py): kernels compile for the `mps` target
    and launch through `torch.mps.compile_shader`'s interface; CPU tensors stand in for MPS tensors."""
    import triton
    from triton.backends.apple import driver as drv

    from support.mps_standin import MPSStandin
    standin = MPSStandin().install(monkeypatch)
    triton.runtime.driver.set_active(drv.AppleDriver(mode="metal"))
    try:
        yield standin
    finally:
        triton.runtime.driver.reset_active()

"""Fixtures of the emulator's tests (the `emu` fixture is in test/conftest.py)."""
import pytest


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch, emu):
    """An empty cache directory for kernels (the runtime and the native launcher stay loaded from the normal
    cache); yields the emulator's directory inside it."""
    from triton.backends.apple.emulator import launcher
    emu.library.runtime_library()
    launcher.launcher()
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
    emu.clear_memory_cache()
    yield tmp_path / "cache" / "apple_emulator"
    emu.clear_memory_cache()

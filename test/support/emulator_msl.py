"""Helpers and the `emu` fixture for the Metal-on-CPU emulator tests (hand-written MSL kernels).

There is deliberately no conftest.py here: other test directories import their own `conftest` module by
name, and a second one would shadow it."""
import pytest

PRELUDE = """#include <metal_stdlib>
using namespace metal;
#pragma METAL fp math_mode(safe)
#ifndef TT_THREADGROUP_BUFFER
#define TT_THREADGROUP_BUFFER(name, nbytes) threadgroup alignas(16) uchar name[nbytes]
#endif
"""


def msl(body: str) -> str:
    """PRELUDE + body; the prelude has 6 lines, so body line k is MSL line k + 6."""
    return PRELUDE + body


def line_of(source: str, needle: str) -> int:
    """1-based line of the first line containing `needle`."""
    for i, text in enumerate(source.splitlines(), 1):
        if needle in text:
            return i
    raise AssertionError(f"{needle!r} not in source")


@pytest.fixture(scope="session")
def emu():
    """The emulator package (test modules import this fixture by name)."""
    from triton.backends.apple import emulator
    return emulator

"""Hand-written MSL for the emulator tests: the prelude every kernel source starts with, and line lookup for
checking the MSL lines that reports name. (The `emu` fixture is in test/conftest.py.)"""
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


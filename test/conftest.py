"""Shared fixtures: compile kernels for the apple target and run them on the emulator (or a Mac's GPU)."""
import os

import pytest

os.environ.setdefault("TRITON_APPLE_DEVICE", "emulator")


def device_name() -> str:
    from triton.backends.apple.driver import device_mode
    return "mps" if device_mode() == "metal" else "cpu"


def compile_for_apple(fn, signature: dict, constexprs: dict = None, num_warps: int = 4, family: str = "apple7",
                      **options):
    """Compile `fn` for the apple target without launching it; returns triton's CompiledKernel."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    names = list(signature)
    consts = {(names.index(k), ): v for k, v in (constexprs or {}).items()}
    sig = dict(signature)
    for k in (constexprs or {}):
        sig[k] = "constexpr"
    src = ASTSource(fn, sig, consts)
    from triton.backends.apple.driver import device_mode, target_name
    target = GPUTarget(target_name(device_mode()), family, 32)  # `cpu` on the emulator, `mps` on a Mac
    return triton.compile(src, target=target, options={"num_warps": num_warps, **options})


def updates_in_one_order(start, olds: list, vals: list, final, f) -> bool:
    """The reference check of an atomic read-modify-write whose updates ran in an order nobody knows: if they
    happened one at a time, the values read ("old") and the values written (f(old, v)) are the same sequence
    shifted by one, so {start} + {f(old, v)} and {old} + {final} are equal multisets."""
    import collections
    return collections.Counter([start] + [f(o, v) for o, v in zip(olds, vals)]) == collections.Counter(olds + [final])


@pytest.fixture
def device():
    return device_name()


@pytest.fixture
def apple_compile():
    return compile_for_apple

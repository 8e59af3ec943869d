"""Portability warnings: a kernel this backend accepts but NVIDIA's backend refuses is told so once."""
import warnings

import pytest
import triton
import triton.language as tl

from support.device import compile_for_apple
from triton.backends.apple.portability import NVIDIA_MIN_DOT_K, PortabilityWarning


@triton.jit
def small_k_dot(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    m = tl.arange(0, M)
    n = tl.arange(0, N)
    k = tl.arange(0, K)
    a = tl.load(a_ptr + m[:, None] * K + k[None, :])
    b = tl.load(b_ptr + k[:, None] * N + n[None, :])
    tl.store(c_ptr + m[:, None] * N + n[None, :], tl.dot(a, b))


def _compile(dtype: str, K: int):
    return compile_for_apple(small_k_dot, {"a_ptr": f"*{dtype}", "b_ptr": f"*{dtype}", "c_ptr": "*fp32",
                                           "M": "constexpr", "N": "constexpr", "K": "constexpr"},
                             {"M": 16, "N": 16, "K": K})


@pytest.mark.parametrize("dtype,bits", [("fp16", 16), ("bf16", 16), ("fp32", 32), ("fp8e5", 8)])
def test_dot_below_nvidias_smallest_k_warns_once_with_kernel_and_line(dtype, bits, monkeypatch):
    monkeypatch.setenv("TRITON_ALWAYS_COMPILE", "1")  # the warning comes from compiling: not from a cached kernel
    least = NVIDIA_MIN_DOT_K[bits]
    with pytest.warns(PortabilityWarning) as record:
        _compile(dtype, least // 2)
    (w, ) = [r for r in record if issubclass(r.category, PortabilityWarning)]
    msg = str(w.message)
    assert "kernel 'small_k_dot'" in msg and f"K={least // 2} on {bits}-bit operands" in msg
    assert f"NVIDIA's backend requires K >= {least}" in msg
    assert f"{__file__}:" in msg  # the tl.dot's source line
    with warnings.catch_warnings():
        warnings.simplefilter("error", PortabilityWarning)
        _compile(dtype, least)  # NVIDIA's smallest K: no warning


def test_portability_warnings_can_be_silenced(monkeypatch):
    monkeypatch.setenv("TRITON_APPLE_PORTABILITY_WARNINGS", "0")
    with warnings.catch_warnings():
        warnings.simplefilter("error", PortabilityWarning)
        _compile("fp16", 4)

"""Fixtures of the whole-model tests: what proves that a library's Triton kernels ran through the apple backend,
the host-side shims a library needs off CUDA (each documented in docs/integration.md), and inductor's Triton
route for CPU tensors."""
import collections
import sys
import types

import pytest
import torch

import triton


@pytest.fixture
def apple_launches():
    """A Counter of kernel name -> launches that went through the apple backend while the test ran: Triton's
    launch hook sees every launch of a compiled kernel, and a launch counts only when the function Triton got
    from `load_binary` is the apple backend's (an `EmulatorFunction`). A hook already installed keeps running."""
    from triton.backends.apple.driver import EmulatorFunction
    counts = collections.Counter()
    previous = triton.knobs.runtime.launch_enter_hook

    def hook(metadata):
        data = metadata.get()
        if isinstance(data.get("function"), EmulatorFunction):
            counts[data["name"]] += 1
        if previous is not None:
            previous(metadata)

    triton.knobs.runtime.launch_enter_hook = hook
    try:
        yield counts
    finally:
        triton.knobs.runtime.launch_enter_hook = previous


class _NoCudaDevice:
    """`torch.cuda.device(None)` as a no-op. mamba-ssm wraps every kernel launch in
    `with torch.cuda.device(x.device.index)`; a CPU tensor's index is None, which torch's CPU build turns into a
    TypeError on entry. Only None is accepted: any real index would mean a CUDA tensor reached this test."""

    def __init__(self, index):
        assert index is None, f"a CUDA device index ({index!r}) on a CPU-only test"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.fixture
def cuda_host_shims(monkeypatch):
    """The smallest shims mamba-ssm 2.3.2.post1's host code needs on CPU tensors (docs/integration.md, "Library
    host code that assumes CUDA"): `torch.cuda.device(None)` is a no-op, and `torch.cuda.get_device_properties`
    of a CPU device answers `multi_processor_count` from the apple driver's device properties (what its backward
    sizes its grids by). The library itself is unmodified."""
    original = torch.cuda.get_device_properties

    def properties(device=None):
        if device is not None and torch.device(device).type == "cpu":
            props = triton.runtime.driver.active.utils.get_device_properties(0)
            return types.SimpleNamespace(multi_processor_count=props["multiprocessor_count"])
        return original(device)

    monkeypatch.setattr(torch.cuda, "device", _NoCudaDevice)
    monkeypatch.setattr(torch.cuda, "get_device_properties", properties)


@pytest.fixture(scope="session")
def mamba_ssm_importable():
    """mamba-ssm with its CUDA build skipped (MAMBA_SKIP_CUDA_BUILD=TRUE) has no `selective_scan_cuda` extension,
    and its package root imports it unconditionally (for Mamba 1's selective scan, which these tests never call):
    an empty module stands in for it so that the pure-Python Triton ops can be imported. Must happen before
    transformers' Mamba2 module is imported, which picks mamba-ssm's functions at import time."""
    sys.modules.setdefault("selective_scan_cuda", types.ModuleType("selective_scan_cuda"))
    import mamba_ssm
    return mamba_ssm


@pytest.fixture
def inductor_triton_cpu():
    """torch.compile with inductor's Triton backend for CPU tensors (served by the apple backend through the `cpu`
    entry point), compiling in this process."""
    import torch._dynamo
    import torch._inductor.config as cfg
    torch._dynamo.reset()
    with cfg.patch(cpu_backend="triton", compile_threads=1):
        yield
    torch._dynamo.reset()


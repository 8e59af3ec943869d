"""Fixtures of the whole-model tests: what proves that a library's Triton kernels ran through the apple backend,
the host-side shims a library needs off CUDA (each documented in docs/integration.md), and inductor's Triton
route for CPU tensors."""
import collections

import pytest
import torch

import triton

from support.tiny_models import NoCudaDevice, cpu_device_properties, stub_selective_scan_cuda


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


@pytest.fixture
def cuda_host_shims(monkeypatch):
    """The smallest shims mamba-ssm 2.3.2.post1's host code needs on CPU tensors (support/tiny_models.py): a no-op
    `torch.cuda.device(None)`, and `torch.cuda.get_device_properties` of a CPU device answered from the apple
    driver. The library itself is unmodified."""
    monkeypatch.setattr(torch.cuda, "device", NoCudaDevice)
    monkeypatch.setattr(torch.cuda, "get_device_properties", cpu_device_properties(torch.cuda.get_device_properties))


@pytest.fixture(scope="session")
def mamba_ssm_importable():
    """mamba-ssm, importable without the CUDA extension its build skipped."""
    stub_selective_scan_cuda()
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


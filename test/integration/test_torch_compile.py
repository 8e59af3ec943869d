"""torch.compile through Triton on the emulator: inductor's `cpu_backend="triton"` finds Triton's `cpu` backend
through the `cpu` entry point alone (no code here registers anything) and runs every kernel it generates
through the apple backend. Each case is compared against eager.

The in-process cases compile with `compile_threads=1`; `test_subprocess_compile_workers` checks the same path
in inductor's compile worker processes, which see only what the entry points register.
"""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import triton


@pytest.fixture
def inductor_triton_cpu():
    import torch._dynamo
    import torch._inductor.config as cfg
    torch._dynamo.reset()
    with cfg.patch(cpu_backend="triton", compile_threads=1):
        yield
    torch._dynamo.reset()


def _close(got, want, atol, rtol=1e-5):
    err = (got - want).abs().max().item()
    assert torch.allclose(got, want, atol=atol, rtol=rtol), f"max |error| {err:.3e}"
    print(f"max |error| {err:.3e}")
    return err


def _compiled(fn, *args, **kwargs):
    """`torch.compile(fn)(*args)`, checking that inductor generated Triton kernels for the CPU device (and not
    its C++ code, or nothing at all) in every graph it compiled."""
    from torch._inductor.utils import run_and_get_code
    out, codes = run_and_get_code(torch.compile(fn, **kwargs), *args)
    assert codes and all("@triton.jit" in c and "set_driver_to_cpu()" in c for c in codes)
    return out


def test_cpu_name_is_served_by_the_apple_backend():
    from triton.backends.apple.cpu.compiler import AppleCpuBackend
    from triton.backends.apple.cpu.driver import AppleCpuDriver
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend
    assert triton.backends.backends["cpu"].compiler is AppleCpuBackend
    assert triton.backends.backends["cpu"].driver is AppleCpuDriver
    assert not AppleCpuDriver.is_active()  # the `apple` driver stays the only active one
    backend = make_backend(GPUTarget("cpu", "", 32))  # what inductor compiles for on a CPU device
    assert isinstance(backend, AppleCpuBackend) and backend.family == "apple7"
    assert backend.parse_options({}).backend_name == "cpu"
    assert AppleCpuDriver().get_current_target() == GPUTarget("cpu", "apple7", 32)


def test_pointwise_chain(inductor_triton_cpu):

    def f(x, y):
        return torch.relu(x * 2 + y).sin() - torch.exp(y) * 0.5

    x, y = torch.randn(1000, 33), torch.randn(1000, 33)
    _close(_compiled(f, x, y), f(x, y), atol=1e-5)


@pytest.mark.slow
def test_softmax(inductor_triton_cpu):
    x = torch.randn(37, 300) * 4
    _close(_compiled(lambda t: torch.softmax(t, dim=-1), x), torch.softmax(x, dim=-1), atol=1e-6)


@pytest.mark.slow
def test_layer_norm(inductor_triton_cpu):
    ln = torch.nn.LayerNorm(96).eval()
    with torch.no_grad():
        ln.weight.normal_()
        ln.bias.normal_()
    x = torch.randn(50, 96)
    with torch.no_grad():
        _close(_compiled(ln, x), ln(x), atol=1e-5)


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 16))


@pytest.mark.slow
def test_two_layer_mlp(inductor_triton_cpu):
    model = _mlp().eval()
    x = torch.randn(40, 32)
    with torch.no_grad():
        _close(_compiled(model, x), model(x), atol=1e-5)


@pytest.mark.slow
def test_transformer_encoder_layer_eval(inductor_triton_cpu):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(64, 4, dim_feedforward=128, batch_first=True).eval()
    x = torch.randn(2, 10, 64)
    # Without this, eval + no_grad takes PyTorch's fused fast path: one opaque op that inductor calls as is.
    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with torch.no_grad():
            _close(_compiled(layer, x), layer(x), atol=2e-5)
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)


@pytest.mark.slow
def test_mlp_backward(inductor_triton_cpu):
    ref, model = _mlp(), _mlp()
    x, target = torch.randn(24, 32), torch.randn(24, 16)

    def step(m):
        loss = torch.nn.functional.mse_loss(m(x), target)
        loss.backward()
        return loss.detach()

    _close(_compiled(step, model), step(ref), atol=1e-6)
    for p, q in zip(model.parameters(), ref.parameters()):
        _close(p.grad, q.grad, atol=1e-5)


@pytest.mark.slow
def test_dynamic_shapes(inductor_triton_cpu):

    def f(x):
        return (x * torch.sigmoid(x)).sum(dim=-1) + x.amax(dim=-1)

    from unittest import mock

    from torch._inductor.graph import GraphLowering
    codes = []
    cf = torch.compile(f, dynamic=True)
    with mock.patch.object(GraphLowering, "save_output_code", codes.append):
        for rows, cols in ((7, 50), (19, 130), (4, 3)):  # one graph, sizes passed as kernel arguments
            x = torch.randn(rows, cols)
            _close(cf(x), f(x), atol=1e-4)
    assert len(codes) == 1  # compiled once, for symbolic sizes
    assert "@triton.jit" in codes[0] and "ks0" in codes[0]


SUBPROCESS_SCRIPT = textwrap.dedent("""
    import torch
    import torch._inductor.config as cfg
    from torch._inductor.async_compile import AsyncCompile
    cfg.cpu_backend = "triton"
    cfg.compile_threads = 2
    AsyncCompile.use_process_pool()
    AsyncCompile._ready_future.result(timeout=300)  # the worker pool is up: kernels compile in workers
    assert AsyncCompile.use_process_pool()

    def f(x):
        return torch.softmax(x * 3, dim=-1) + 1

    x = torch.randn(64, 100)
    err = (torch.compile(f)(x) - f(x)).abs().max().item()
    print("max error", err)
    assert err < 1e-6, err
""")


@pytest.mark.slow
def test_subprocess_compile_workers(tmp_path):
    """Inductor's worker processes compile the kernels (a worker that cannot find the `cpu` backend fails the
    compile in the parent); nothing in the script registers a backend."""
    env = dict(os.environ, TRITON_CACHE_DIR=str(tmp_path / "triton"), TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "ind"))
    out = subprocess.run([sys.executable, "-c", SUBPROCESS_SCRIPT], capture_output=True, text=True, env=env,
                         timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "max error" in out.stdout


@pytest.mark.slow
def test_default_cpp_backend_is_unchanged():
    """The `cpu` Triton backend makes inductor's has_triton() true; its default CPU code generator stays C++."""
    import torch._dynamo
    from torch._inductor.utils import run_and_get_code
    torch._dynamo.reset()

    def f(x):
        return torch.softmax(x.sin(), dim=-1)

    x = torch.randn(8, 100)
    out, (code, ) = run_and_get_code(torch.compile(f), x)
    torch._dynamo.reset()
    assert "@triton.jit" not in code and "cpp_fused" in code
    _close(out, f(x), atol=1e-6)


MPS_REGISTRATION_SCRIPT = textwrap.dedent("""
    from triton.backends.apple.inductor import enable_mps_when_inductor_loads
    enable_mps_when_inductor_loads()  # before inductor is imported: deferred until its registry has loaded
    from torch._inductor.codegen.common import get_scheduling_for_device, init_backend_registration
    from torch._inductor.codegen.triton import TritonScheduling
    init_backend_registration()  # inductor's defaults keep a registration they find
    assert get_scheduling_for_device("mps") is TritonScheduling, get_scheduling_for_device("mps")
    print("mps -> TritonScheduling")
""")


def test_inductor_mps_registration_when_inductor_is_loaded():
    """What TRITON_APPLE_INDUCTOR_MPS=1 does on a Mac, minus running a model there (never done)."""
    from torch._inductor.codegen import common
    from torch._inductor.codegen.triton import TritonScheduling
    from triton.backends.apple.inductor import enable_mps_when_inductor_loads
    common.init_backend_registration()
    before = common.device_codegens.get("mps")
    try:
        enable_mps_when_inductor_loads()
        assert common.get_scheduling_for_device("mps") is TritonScheduling
    finally:
        common.device_codegens["mps"] = before
    assert common.get_scheduling_for_device("mps") is not TritonScheduling


@pytest.mark.slow
def test_inductor_mps_registration_before_inductor_loads():
    """The driver module asks for the registration while Triton discovers its backends, which can be before
    (or halfway through) inductor's imports: it waits until inductor's codegen registry has loaded."""
    out = subprocess.run([sys.executable, "-c", MPS_REGISTRATION_SCRIPT], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert "mps -> TritonScheduling" in out.stdout

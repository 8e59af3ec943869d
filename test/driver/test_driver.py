"""Driver selection, target naming, device properties and the launch path shared by the emulator and Metal
paths. How launch arguments bind to buffer slots is in test/abi."""
import subprocess
import sys

import pytest

from triton.backends.apple import driver as drv

from support.launcher import PARAMS, make_launcher


def test_backend_is_discovered_by_plain_import():
    out = subprocess.run([sys.executable, "-c", "import triton; print(sorted(triton.backends.backends))"],
                         capture_output=True, text=True, timeout=120)
    assert "'apple'" in out.stdout


def test_emulator_is_active_on_a_machine_without_gpus(monkeypatch):
    monkeypatch.delenv("TRITON_APPLE_DEVICE", raising=False)
    monkeypatch.setattr(drv, "mps_available", lambda: False)
    monkeypatch.setattr(drv, "_other_driver_active", lambda: False)
    assert drv.device_mode() == "emulator"
    assert drv.AppleDriver.is_active()


def test_emulator_steps_aside_for_cuda_or_rocm(monkeypatch):
    monkeypatch.delenv("TRITON_APPLE_DEVICE", raising=False)
    monkeypatch.setattr(drv, "mps_available", lambda: False)
    monkeypatch.setattr(drv, "_other_driver_active", lambda: True)
    assert drv.device_mode() == "off"
    assert not drv.AppleDriver.is_active()


def test_knob_forces_the_choice(monkeypatch):
    monkeypatch.setattr(drv, "_other_driver_active", lambda: True)
    monkeypatch.setenv("TRITON_APPLE_DEVICE", "emulator")
    assert drv.device_mode() == "emulator"
    monkeypatch.setenv("TRITON_APPLE_DEVICE", "off")
    assert not drv.AppleDriver.is_active()
    monkeypatch.setenv("TRITON_APPLE_DEVICE", "gpu")
    with pytest.raises(ValueError, match="TRITON_APPLE_DEVICE"):
        drv.device_mode()


def test_mac_with_mps_uses_metal(monkeypatch):
    monkeypatch.delenv("TRITON_APPLE_DEVICE", raising=False)
    monkeypatch.setattr(drv, "mps_available", lambda: True)
    assert drv.device_mode() == "metal"


# ------------------------------------------------------------------------------------------------
# Target naming (docs/conventions.md): the target is named after the torch device type kernels run on


def test_target_is_named_after_the_torch_device_type():
    import torch
    from triton.backends.compiler import GPUTarget
    assert drv.AppleDriver(mode="emulator").get_current_target() == GPUTarget("cpu", "apple7", 32)
    assert drv.AppleDriver(mode="metal").get_current_target() == GPUTarget("mps", "apple7", 32)
    target = drv.AppleDriver(mode="emulator").get_current_target()
    # what libraries do with it (fla: getattr(torch, backend); autocast's device_type)
    assert getattr(torch, target.backend) is torch.cpu

    class Double(torch.autograd.Function):

        @staticmethod
        @torch.amp.custom_fwd(device_type=target.backend)
        def forward(ctx, x):
            return x * 2

        @staticmethod
        @torch.amp.custom_bwd(device_type=target.backend)
        def backward(ctx, grad):
            return grad * 2

    x = torch.ones(3, requires_grad=True)
    Double.apply(x).sum().backward()
    assert x.grad.tolist() == [2.0, 2.0, 2.0]
    assert drv.AppleDriver(mode="emulator").get_active_torch_device() == torch.device(target.backend)


def test_family_knob_sets_the_target_arch(monkeypatch):
    monkeypatch.setenv("TRITON_APPLE_FAMILY", "apple9")
    assert drv.AppleDriver(mode="emulator").get_current_target().arch == "apple9"


def test_each_target_name_has_exactly_one_backend():
    from triton.backends.apple.compiler import AppleBackend
    from triton.backends.apple.cpu.compiler import AppleCpuBackend
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend
    for name, cls in (("mps", AppleBackend), ("metal", AppleBackend), ("cpu", AppleCpuBackend)):
        for arch in ("apple8", ""):
            backend = make_backend(GPUTarget(name, arch, 32))
            assert type(backend) is cls
            assert backend.family == (arch or "apple7")
            assert backend.parse_options({}).arch == backend.family
            assert backend.parse_options({}).backend_name == name  # as upstream: "cuda", "hip"
    assert not AppleBackend.supports_target(GPUTarget("cuda", 90, 32))
    assert not AppleBackend.supports_target(GPUTarget("cpu", "apple7", 32))


def test_unknown_family_or_width_is_refused():
    from triton.backends.apple.compiler import AppleBackend
    from triton.backends.compiler import GPUTarget
    with pytest.raises(ValueError, match="unknown GPU family 'apple3' for target 'mps'"):
        AppleBackend(GPUTarget("mps", "apple3", 32))
    with pytest.raises(ValueError, match="SIMD-group width is 32, got warp_size=64"):
        AppleBackend(GPUTarget("mps", "apple7", 64))


def test_internal_testing_helpers_see_no_cuda_or_hip():
    from triton import _internal_testing as it
    target = it.get_current_target()
    assert target.backend == "cpu"
    assert not (it.is_cuda() or it.is_hip() or it.is_xpu() or it.is_interpreter())


FAKE_CPU_COMPILER = '''
from triton.backends.compiler import BaseBackend
class FakeCpuBackend(BaseBackend):
    @staticmethod
    def supports_target(target):
        return target.backend == "cpu"
    def __init__(self, target):
        super().__init__(target)
    def hash(self): return "fake"
    def parse_options(self, o): return None
    def add_stages(self, s, o, l): pass
    def load_dialects(self, c): pass
    def get_module_map(self): return {}
    def pack_metadata(self, m): return m
    def get_codegen_implementation(self, o): return {}
'''
FAKE_CPU_DRIVER = '''
from triton.backends.driver import DriverBase
class FakeCpuDriver(DriverBase):
    @staticmethod
    def is_active(): return False
    def get_current_target(self): pass
    def get_active_torch_device(self): pass
    def get_device_interface(self): pass
    def get_benchmarker(self): pass
    def map_python_to_cpp_type(self, t): return t
'''


def test_a_real_cpu_backend_keeps_the_cpu_name(tmp_path):
    """Priority rule: with another distribution's `cpu` backend installed (triton-cpu), `backends["cpu"]` is
    that backend whichever entry point Triton reads last, and the emulator names its target `metal`."""
    pkg = tmp_path / "fake_triton_cpu"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "compiler.py").write_text(FAKE_CPU_COMPILER)
    (pkg / "driver.py").write_text(FAKE_CPU_DRIVER)
    dist = tmp_path / "fake_triton_cpu-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-triton-cpu\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[triton.backends]\ncpu = fake_triton_cpu\n")
    script = ("import triton\nfrom triton.backends import backends\n"
              "print(backends['cpu'].compiler.__name__, backends['cpu'].driver.__name__)\n"
              "print(triton.runtime.driver.active.get_current_target().backend)\n")
    import os
    env = dict(os.environ, PYTHONPATH=str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               TRITON_DEFAULT_BACKEND="apple")  # skips asking CUDA/ROCm drivers, which imports torch (slow)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["FakeCpuBackend", "FakeCpuDriver", "metal"]


# ------------------------------------------------------------------------------------------------
# Device properties


def test_device_properties_are_non_zero_and_per_family(monkeypatch):
    from triton.backends.apple.target import GPU_FAMILIES
    monkeypatch.setenv("TRITON_APPLE_EMULATOR_THREADS", "3")
    for fam in GPU_FAMILIES:
        monkeypatch.setenv("TRITON_APPLE_FAMILY", fam)
        props = drv.AppleUtils("emulator").get_device_properties(0)
        for key in ("multiprocessor_count", "max_shared_mem", "max_num_regs", "warpSize", "sm_clock_rate",
                    "mem_clock_rate", "mem_bus_width"):
            assert isinstance(props[key], int) and props[key] > 0, key
        assert props["multiprocessor_count"] == 3  # emulator profile: the host threads it runs on
        assert props["max_shared_mem"] == 32 * 1024 and props["warpSize"] == 32
        assert props["sm_clock_rate"] == GPU_FAMILIES[fam].gpu_clock_mhz * 1000
    # M1's memory bandwidth through the formula Triton's tools use (2 x clock x bus width / 8): 68.25 GB/s
    props = drv.device_properties("emulator", "apple7")
    assert 2 * props["mem_clock_rate"] * 1e3 * props["mem_bus_width"] / 8 / 1e9 == pytest.approx(68.25, abs=0.01)


def test_n_regs_is_a_bound_never_zero():
    fn, _, n_regs, n_spills, max_threads = drv.AppleUtils("emulator").load_binary("k", b"kernel void k() {}", 0, 0)
    assert n_regs == drv.registers_per_thread(1024, "apple7") == 208 * 1024 // 4 // 1024
    assert (n_spills, max_threads) == (0, 1024)
    assert drv.registers_per_thread(256, "apple7") == 128  # bounded by what one thread can address
    assert drv.registers_per_thread(512, "apple7") == 104


MSL_K = """#include <metal_stdlib>
using namespace metal;
kernel void k(device float* x [[buffer(0)]], constant int& n [[buffer(1)]], constant float& s [[buffer(2)]],
              uint i [[thread_position_in_grid]], uint3 ntg [[threadgroups_per_grid]],
              uint3 tptg [[threads_per_threadgroup]]) {
    if ((int)i < n) x[i] = s * float(ntg.x * 1000 + tptg.x);
}
"""


def test_launch_runs_where_load_binary_put_the_kernel(monkeypatch):
    """The `cpu` driver on a Mac: the kernel was loaded for the emulator, so it runs there and scalars are
    bound for the emulator (packed by the native launcher), whatever the machine's own device."""
    import torch
    monkeypatch.setattr(drv, "device_mode", lambda: "metal")
    la = make_launcher(PARAMS, {"x": "*fp32", "n": "i32", "s": "fp32"})
    fn = drv.EmulatorFunction("k", MSL_K)  # what load_binary gives the `cpu` driver
    x = torch.zeros(300)
    la(2, 1, 1, 0, fn, None, None, None, None, x, 3, 0.5)
    assert isinstance(la._launch, drv.EmulatorLaunch)  # chosen by the function, once
    # grid (2, 1, 1) of 128 threads (num_warps 4), n = 3, s = 0.5
    assert x[:3].tolist() == [0.5 * (2 * 1000 + 128)] * 3 and not x[3:].any()


def test_empty_grid_launches_nothing():
    """A grid with a zero dimension launches nothing: neither launch hook is called and no thread writes. The same
    launcher and kernel on a one-threadgroup grid first show that a launch does both, so their absence means
    the launch was skipped (not that the kernel ran zero threadgroups unseen)."""
    import torch
    la = make_launcher(PARAMS, {"x": "*fp32", "n": "i32", "s": "fp32"})
    fn = drv.EmulatorFunction("k", MSL_K)
    calls = []

    def enter_hook(metadata):
        calls.append("enter")

    def exit_hook(metadata):
        calls.append("exit")

    x = torch.zeros(300)
    la(1, 1, 1, 0, fn, None, None, enter_hook, exit_hook, x, 3, 0.5)
    assert calls == ["enter", "exit"] and x[:3].tolist() == [0.5 * (1 * 1000 + 128)] * 3

    class NotAKernel:
        """What a Metal launch would be handed: any use of it is a launch that should not have happened."""

        def __getattr__(self, name):
            raise AssertionError(f"zero-sized grid reached the launch path ({name})")

    for function in (fn, NotAKernel()):
        for grid in ((0, 1, 1), (1, 0, 1), (1, 1, 0), (0, 0, 0)):
            calls.clear()
            x.zero_()
            la(*grid, 0, function, None, None, enter_hook, exit_hook, x, 3, 0.5)
            assert calls == [] and not x.any(), (grid, type(function).__name__)

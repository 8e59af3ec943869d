"""Driver selection, argument binding and the launcher seam shared by the emulator and Metal paths."""
import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from triton.backends.apple import driver as drv


def test_backend_is_discovered_by_plain_import():
    out = subprocess.run([sys.executable, "-c", "import triton; print(sorted(triton.backends.backends))"],
                         capture_output=True, text=True, timeout=120)
    assert "'apple'" in out.stdout


def test_emulator_is_active_on_a_machine_without_gpus(monkeypatch):
    monkeypatch.delenv("TRITON_APPLE_DEVICE", raising=False)
    monkeypatch.setattr(drv, "_mps_available", lambda: False)
    monkeypatch.setattr(drv, "_other_driver_active", lambda: False)
    assert drv.device_mode() == "emulator"
    assert drv.AppleDriver.is_active()


def test_emulator_steps_aside_for_cuda_or_rocm(monkeypatch):
    monkeypatch.delenv("TRITON_APPLE_DEVICE", raising=False)
    monkeypatch.setattr(drv, "_mps_available", lambda: False)
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
    monkeypatch.setattr(drv, "_mps_available", lambda: True)
    assert drv.device_mode() == "metal"


def _launcher(params, signature):
    meta = SimpleNamespace(name="k", num_warps=4, kernel_signature=json.dumps(params))
    return drv.AppleLauncher(SimpleNamespace(signature=signature), meta)


PARAMS = [
    {"name": "x", "slot": 0, "kind": "pointer", "msl_type": "device float*", "triton_type": "*fp32"},
    {"name": "n", "slot": 1, "kind": "scalar", "msl_type": "int", "triton_type": "i32"},
    {"name": "s", "slot": 2, "kind": "scalar", "msl_type": "float", "triton_type": "fp32"},
]


def test_constexprs_are_not_bound():
    import torch
    from triton.backends.apple.emulator import Scalar
    la = _launcher(PARAMS, {"x": "*fp32", "BLOCK": "constexpr", "n": "i32", "s": "fp32"})
    x = torch.zeros(4)
    bound = la.bind([x, 128, 7, 2])
    assert bound[0] is x
    assert isinstance(bound[1], Scalar) and isinstance(bound[2], Scalar)


def test_wrong_argument_kinds_are_clear_errors():
    la = _launcher(PARAMS, {"x": "*fp32", "n": "i32", "s": "fp32"})
    with pytest.raises(drv.KernelArgError, match=r"kernel 'k' argument 'x' \(\*fp32\) expects a tensor, got int"):
        la.bind([3, 1, 1.0])
    import torch
    with pytest.raises(drv.KernelArgError, match=r"kernel 'k' argument 'n' \(i32\) expects an integer, got float"):
        la.bind([torch.zeros(1), 1.5, 1.0])


def test_signature_mismatch_is_reported():
    with pytest.raises(drv.KernelArgError, match="2 runtime arguments"):
        _launcher(PARAMS, {"x": "*fp32", "n": "i32"})


def test_empty_grid_launches_nothing():
    la = _launcher(PARAMS, {"x": "*fp32", "n": "i32", "s": "fp32"})

    class Boom:

        def launch(self, **kw):
            raise AssertionError("launched")

    la(0, 1, 1, 0, Boom(), None, None, None, None, None, 1, 1.0)

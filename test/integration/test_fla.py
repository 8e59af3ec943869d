"""flash-linear-attention (fla-core 0.6.0, unmodified) on the emulator: it decides its device from
`triton.runtime.driver.active.get_current_target().backend` (`getattr(torch, backend)`, autocast device
types) and its kernels autotune over num_warps. Slow: importing fla alone takes ~15 s here."""
import pytest
import torch

pytestmark = pytest.mark.slow


def test_fla_imports_and_sees_a_cpu_target():
    import fla
    from fla.utils import hardware
    assert fla.__version__ == "0.6.0"
    assert (hardware.device_platform, hardware.device_name) == ("cpu", "cpu")  # the target's backend name
    assert not (hardware.IS_NVIDIA or hardware.IS_AMD or hardware.IS_INTEL)


def _l2norm_ref(x):
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6)


@pytest.mark.parametrize("op,direction", [("l2norm", "fwd"), ("l2norm", "bwd")])
def test_fla_op(op, direction):
    """l2norm with D > 512: fla's row kernels, autotuned over num_warps 1..32."""
    from fla.modules.l2norm import l2norm
    torch.manual_seed(0)
    x = torch.randn(6, 1000, requires_grad=direction == "bwd")
    y = l2norm(x)
    x_ref = x.detach().clone().requires_grad_(direction == "bwd")
    y_ref = _l2norm_ref(x_ref)
    torch.testing.assert_close(y, y_ref, rtol=1e-5, atol=1e-6)
    if direction == "bwd":
        dy = torch.randn_like(y)
        y.backward(dy)
        y_ref.backward(dy)
        torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-4, atol=1e-5)

"""flash-linear-attention (fla-core 0.6.0, unmodified) on the emulator: it decides its device from
`triton.runtime.driver.active.get_current_target().backend` (`getattr(torch, backend)`, autocast device
types) and its kernels autotune over num_warps. Slow: importing fla alone takes ~15 s here."""
import pytest
import torch


@pytest.mark.slow
def test_fla_imports_and_l2norm_matches_torch():
    import fla
    from fla.modules.l2norm import l2norm
    from fla.utils import hardware
    assert fla.__version__ == "0.6.0"
    assert (hardware.device_platform, hardware.device_name) == ("cpu", "cpu")  # the target's backend name
    assert not (hardware.IS_NVIDIA or hardware.IS_AMD or hardware.IS_INTEL)
    torch.manual_seed(0)
    x = torch.randn(6, 1000)  # D > 512: fla's row kernel, autotuned over num_warps 1..32
    y = l2norm(x)
    ref = x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6)
    torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-6)

"""A Mamba2 model end to end: transformers' own `Mamba2ForCausalLM`, tiny, seeded and randomly initialised, on CPU
tensors, whose SSD layers call mamba-ssm's Triton kernels (mamba-ssm 2.3.2.post1 installed with
MAMBA_SKIP_CUDA_BUILD=TRUE: no CUDA extension, only its pure-Python Triton ops).

transformers picks `mamba_chunk_scan_combined` and `selective_state_update` from mamba-ssm when its module is
imported, else its own PyTorch functions (kept as `__wrapped__`); the reference of every test is that torch-only
path of the same model. In training mode without a cache transformers calls mamba-ssm's
`mamba_split_conv1d_scan_combined`, which needs the causal-conv1d CUDA extension: the tests run the model in eval
mode (it has no dropout), where the chunked scan and its backward run. mamba-ssm's host code assumes CUDA in two
places (the `cuda_host_shims` fixture, docs/integration.md).

Slow: the SSD kernels autotune; a cold cache compiles several dozen kernels."""

import pytest
import torch

from support.model_checks import assert_close_tree, torch_only_path
from support.tiny_models import MAMBA_PATH, mamba2_config, tokens as model_tokens

pytestmark = pytest.mark.slow

FORWARD_KERNELS = {"_chunk_cumsum_fwd_kernel", "_bmm_chunk_fwd_kernel", "_chunk_state_fwd_kernel",
                   "_state_passing_fwd_kernel", "_chunk_scan_fwd_kernel"}
BACKWARD_KERNELS = {"_chunk_cumsum_bwd_kernel", "_bmm_chunk_bwd_kernel", "_state_passing_bwd_kernel",
                    "_chunk_scan_chunk_state_bwd_dx_kernel", "_chunk_scan_bwd_dc_kernel", "_chunk_state_bwd_db_kernel"}
DECODE_KERNEL = "_selective_scan_update_kernel"


@pytest.fixture(scope="module")
def modeling(mamba_ssm_importable):
    from transformers.models.mamba2 import modeling_mamba2
    assert mamba_ssm_importable.__version__ == "2.3.2.post1"
    for name in MAMBA_PATH:  # mamba-ssm's functions were picked; transformers' torch functions stay reachable
        assert getattr(modeling_mamba2, name).__wrapped__.__name__ == name
    return modeling_mamba2


@pytest.fixture(scope="module")
def model(modeling):
    torch.manual_seed(0)
    return modeling.Mamba2ForCausalLM(mamba2_config()).eval()


@pytest.fixture(scope="module")
def tokens():
    return model_tokens(32)  # two chunks of 16


def test_forward_matches_the_torch_path(modeling, model, tokens, cuda_host_shims, apple_launches):
    with torch.no_grad():
        got = model(tokens).logits
        with torch_only_path(modeling, MAMBA_PATH):
            want = model(tokens).logits
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert FORWARD_KERNELS <= set(apple_launches), sorted(apple_launches)


def test_loss_and_backward_match_the_torch_path(modeling, model, tokens, cuda_host_shims, apple_launches):
    def loss_and_grads():
        model.zero_grad()
        out = model(tokens, labels=tokens)
        out.loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        model.zero_grad()
        return out.loss.detach(), grads

    loss, grads = loss_and_grads()
    assert BACKWARD_KERNELS <= set(apple_launches), sorted(apple_launches)
    with torch_only_path(modeling, MAMBA_PATH):
        want_loss, want_grads = loss_and_grads()
    torch.testing.assert_close(loss, want_loss, rtol=1e-5, atol=1e-6)
    assert grads and "backbone.layers.0.mixer.A_log" in grads
    assert_close_tree(grads, want_grads, rtol=1e-3, atol=1e-5)


def test_greedy_generation_matches_the_torch_path(modeling, model, tokens, cuda_host_shims, apple_launches):
    """Prefill through the chunked scan, then one token at a time through mamba-ssm's selective state update."""
    prompt = tokens[:, :8]
    with torch.no_grad():
        got = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=6, do_sample=False,
                             pad_token_id=0)
        assert apple_launches[DECODE_KERNEL] >= 5 * 2, sorted(apple_launches)  # each step, each layer
        with torch_only_path(modeling, MAMBA_PATH):
            want = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=6,
                                  do_sample=False, pad_token_id=0)
    assert got.shape == (2, 14)
    assert got.tolist() == want.tolist()


def test_torch_compile_forward(modeling, model, tokens, cuda_host_shims, apple_launches, inductor_triton_cpu):
    """torch.compile of the whole model: inductor's kernels and mamba-ssm's (user-defined Triton kernels, float64
    scalar arguments among them) through the apple backend, against the eager torch-only path."""
    with torch.no_grad():
        with torch_only_path(modeling, MAMBA_PATH):
            want = model(tokens).logits
        got = torch.compile(model)(tokens).logits
    inductor = {name for name in apple_launches if name.startswith("triton_")}
    assert inductor and FORWARD_KERNELS <= set(apple_launches), sorted(apple_launches)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)

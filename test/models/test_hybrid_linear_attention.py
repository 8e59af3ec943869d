"""A hybrid linear-attention model end to end: transformers' own Qwen3.5 text model (`Qwen3_5ForCausalLM`,
gated-delta-net layers interleaved with full attention), tiny, seeded and randomly initialised, on CPU tensors.

transformers picks each gated-delta-rule implementation when its module is imported
(`use_kernel_func_from_hub_with_fallback`): fla-core's `chunk_gated_delta_rule` and
`fused_recurrent_gated_delta_rule` when `fla` imports, else its own PyTorch functions, which the decorated names
keep as `__wrapped__`. The reference of every test is that torch-only path of the same model, selected by pointing
the module's names at the functions transformers itself would fall back to; the model under test runs fla's Triton
kernels through the apple backend, and each test checks that they did.

Slow: fla's kernels autotune over several configs each; a cold cache compiles about fifty kernels."""

import pytest
import torch

from support.model_checks import assert_close_tree, torch_only_path
from support.tiny_models import FLA_PATH, hybrid_config, tokens as model_tokens

pytestmark = pytest.mark.slow

CHUNK_KERNELS = {"chunk_gated_delta_rule_fwd_kkt_solve_kernel", "chunk_gated_delta_rule_fwd_kernel_h_blockdim64",
                 "chunk_fwd_kernel_o", "recompute_w_u_fwd_kernel", "l2norm_fwd_kernel"}
BACKWARD_KERNELS = {"chunk_gated_delta_rule_bwd_kernel_dhu_blockdim64", "chunk_bwd_kernel_dqkwg",
                    "prepare_wy_repr_bwd_kernel", "l2norm_bwd_kernel"}
DECODE_KERNEL = "fused_recurrent_gated_delta_rule_fwd_kernel"


@pytest.fixture(scope="module")
def modeling():
    from transformers.models.qwen3_5 import modeling_qwen3_5
    import fla
    assert fla.__version__ == "0.6.0"
    for name in FLA_PATH:  # fla's functions were picked, and transformers' torch functions are still reachable
        assert getattr(modeling_qwen3_5, name).__module__.startswith("transformers")
        assert getattr(modeling_qwen3_5, name).__wrapped__.__name__ == name
    return modeling_qwen3_5


def make_model(modeling):
    torch.manual_seed(0)
    return modeling.Qwen3_5ForCausalLM(hybrid_config())


@pytest.fixture(scope="module")
def model(modeling):
    return make_model(modeling)


@pytest.fixture(scope="module")
def tokens():
    return model_tokens(16)


def _loss_and_grads(model, tokens):
    model.zero_grad()
    out = model(tokens, labels=tokens)
    out.loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    return out.logits.detach(), out.loss.detach(), grads


def test_forward_matches_the_torch_path(modeling, model, tokens, apple_launches):
    model.eval()
    with torch.no_grad():
        got = model(tokens).logits
        with torch_only_path(modeling, FLA_PATH):
            want = model(tokens).logits
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert CHUNK_KERNELS <= set(apple_launches), sorted(apple_launches)


def test_loss_and_backward_match_the_torch_path(modeling, model, tokens, apple_launches):
    model.train()
    logits, loss, grads = _loss_and_grads(model, tokens)
    assert BACKWARD_KERNELS <= set(apple_launches), sorted(apple_launches)
    with torch_only_path(modeling, FLA_PATH):
        want_logits, want_loss, want_grads = _loss_and_grads(model, tokens)
    torch.testing.assert_close(loss, want_loss, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(logits, want_logits, rtol=1e-4, atol=1e-5)
    assert grads  # every parameter the loss reaches has a gradient on both paths
    assert_close_tree(grads, want_grads, rtol=1e-3, atol=1e-5)


def test_greedy_generation_matches_the_torch_path(modeling, model, tokens, apple_launches):
    """Prefill through the chunked kernels, then one token at a time through fla's recurrent decode kernel."""
    model.eval()
    prompt = tokens[:, :8]
    with torch.no_grad():
        got = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=6, do_sample=False,
                             pad_token_id=0)
        assert apple_launches[DECODE_KERNEL] >= 5, sorted(apple_launches)  # every step after the first
        with torch_only_path(modeling, FLA_PATH):
            want = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=6,
                                  do_sample=False, pad_token_id=0)
    assert got.shape == (2, 14)
    assert got.tolist() == want.tolist()


def test_torch_compile_forward_and_training_step(modeling, tokens, apple_launches, inductor_triton_cpu):
    """torch.compile of the whole model (inductor generates Triton kernels for the CPU tensors around fla's own
    kernels, all through the apple backend): the forward, and one SGD step, against the eager torch-only path."""
    eager = make_model(modeling).train()
    compiled_model = make_model(modeling).train()
    with torch_only_path(modeling, FLA_PATH):
        want_logits, want_loss, want_grads = _loss_and_grads(eager, tokens)
    compiled = torch.compile(compiled_model)
    opt = torch.optim.SGD(compiled_model.parameters(), lr=0.1)
    out = compiled(tokens, labels=tokens)
    out.loss.backward()
    grads = {n: p.grad.clone() for n, p in compiled_model.named_parameters() if p.grad is not None}
    opt.step()
    inductor = {name for name in apple_launches if name.startswith("triton_")}
    assert inductor and CHUNK_KERNELS | BACKWARD_KERNELS <= set(apple_launches), sorted(apple_launches)
    torch.testing.assert_close(out.loss.detach(), want_loss, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out.logits.detach(), want_logits, rtol=1e-4, atol=1e-5)
    assert_close_tree(grads, want_grads, rtol=1e-3, atol=1e-5)
    with torch.no_grad():  # the step moved every trained weight as SGD says
        for name, p in eager.named_parameters():
            if name in want_grads:
                torch.testing.assert_close(dict(compiled_model.named_parameters())[name], p - 0.1 * want_grads[name],
                                           rtol=1e-4, atol=1e-5)

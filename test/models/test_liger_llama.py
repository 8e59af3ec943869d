"""A Llama model patched by Liger: transformers' own `LlamaForCausalLM`, tiny, seeded and randomly initialised,
with `apply_liger_kernel_to_llama(model=...)` (liger-kernel 0.8.5, unmodified: RMSNorm, RoPE, SwiGLU and the fused
linear cross entropy become Liger's Triton kernels), against the same weights unpatched. Liger patches
transformers' Llama module globally (RoPE, the MLP class, the loss); the `liger_llama` fixture restores the
module afterwards so no other test sees it."""
import copy

import pytest
import torch

from support.model_checks import assert_close_tree
from support.tiny_models import llama_config, tokens as model_tokens

pytestmark = pytest.mark.slow

TRAINING_KERNELS = {"_rms_norm_forward_kernel", "_rms_norm_backward_kernel", "_swiglu_forward_kernel",
                    "_swiglu_backward_kernel", "_triton_rope"}


@pytest.fixture
def llama():
    from transformers.models.llama import modeling_llama
    torch.manual_seed(0)
    return modeling_llama, modeling_llama.LlamaForCausalLM(llama_config())


@pytest.fixture
def liger_llama(llama):
    """(reference model, the same weights patched by Liger); transformers' Llama module restored afterwards."""
    from liger_kernel.transformers import apply_liger_kernel_to_llama
    modeling, reference = llama
    saved = dict(vars(modeling))
    patched = copy.deepcopy(reference)
    apply_liger_kernel_to_llama(model=patched)
    try:
        yield reference, patched
    finally:
        for name in [n for n in vars(modeling) if n not in saved]:
            delattr(modeling, name)
        for name, value in saved.items():
            setattr(modeling, name, value)


@pytest.fixture
def tokens():
    return model_tokens(16)


def test_training_step_matches_the_unpatched_model(liger_llama, tokens, apple_launches):
    reference, patched = liger_llama
    results = []
    for model in (patched, reference):
        model.train()
        out = model(tokens, labels=tokens)
        out.loss.backward()
        results.append((out.loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
        if model is patched:  # the reference's own kernels are torch's: count only Liger's run
            launched = set(apple_launches)
    (loss, grads), (want_loss, want_grads) = results
    assert TRAINING_KERNELS <= launched, sorted(launched)
    assert {"liger_cross_entropy_kernel"} <= launched  # the fused linear cross entropy's kernel
    torch.testing.assert_close(loss, want_loss, rtol=1e-5, atol=1e-6)
    assert_close_tree(grads, want_grads, rtol=1e-4, atol=1e-6)


def test_greedy_generation_matches_the_unpatched_model(liger_llama, tokens, apple_launches):
    reference, patched = liger_llama
    prompt = tokens[:, :8]
    kwargs = dict(attention_mask=torch.ones_like(prompt), max_new_tokens=6, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        got = patched.eval().generate(prompt, **kwargs)
        launched = set(apple_launches)
        logits = patched(tokens).logits
        want_logits = reference.eval()(tokens).logits
        want = reference.generate(prompt, **kwargs)
    assert {"_rms_norm_forward_kernel", "_swiglu_forward_kernel", "_triton_rope"} <= launched, sorted(launched)
    torch.testing.assert_close(logits, want_logits, rtol=1e-4, atol=1e-5)
    assert got.tolist() == want.tolist()


def test_torch_compile_forward(liger_llama, tokens, apple_launches, inductor_triton_cpu):
    """torch.compile of the patched model's forward: inductor's kernels and Liger's, all through the apple
    backend, against the unpatched eager model."""
    reference, patched = liger_llama
    with torch.no_grad():
        got = torch.compile(patched.eval())(tokens).logits
        want = reference.eval()(tokens).logits
    launched = set(apple_launches)
    assert {n for n in launched if n.startswith("triton_")}, sorted(launched)
    assert {"_rms_norm_forward_kernel", "_swiglu_forward_kernel", "_triton_rope"} <= launched, sorted(launched)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_torch_compile_training_step_reads_past_a_buffer_in_inductors_code(liger_llama, tokens, inductor_triton_cpu):
    """torch.compile of the patched model's training step does not run, and not because of the backend: around
    Liger's fused linear cross entropy (a user-defined kernel that mutates its inputs), inductor 2.13 generates a
    copy kernel that reads 32 floats from a 16-float buffer (`triton_poi_fused_2(buf5, buf6, 32)` with `buf5`
    allocated as 16 floats). On a GPU that read lands in whatever follows the allocation; the emulator reports it
    (docs/integration.md). When inductor stops generating it, this test fails: then compare the step instead."""
    from triton.backends.apple.emulator import EmulatorLaunchError
    _, patched = liger_llama
    with pytest.raises(EmulatorLaunchError) as err:
        torch.compile(patched.train())(tokens, labels=tokens).loss.backward()
    assert err.value.kind == "out_of_bounds" and not err.value.is_write, err.value
    assert "buffer has 16 elements" in str(err.value) and "element index 16" in str(err.value), err.value

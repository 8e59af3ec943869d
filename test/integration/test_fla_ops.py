"""fla-core 0.6.0 ops, unmodified, forward and backward against torch references written here (test_fla.py has
the import check and l2norm). Same scheme as test_liger.py: `fwd` compares outputs, `bwd` back-propagates a
fixed random cotangent and compares input gradients. All slow: the first test pays fla's import (~15 s) and
fla's kernels autotune over num_warps on the emulator."""
import pytest
import torch

pytestmark = pytest.mark.slow

FLA_CASES = {}


def fla_case(name, atol=1e-4, rtol=1e-4):
    def deco(fn):
        FLA_CASES[name] = dict(build=fn, atol=atol, rtol=rtol)
        return fn
    return deco


def _randn(g, *shape, device, scale=1.0):
    return (torch.randn(*shape, generator=g) * scale).to(device)


@fla_case("layer_norm")
def _fla_layer_norm(g, dev):
    from fla.modules.norm.layernorm import layer_norm
    x, w, b = _randn(g, 6, 96, device=dev), _randn(g, 96, device=dev), _randn(g, 96, device=dev)
    return (lambda x, w, b: layer_norm(x, w, b, eps=1e-5),
            lambda x, w, b: torch.nn.functional.layer_norm(x, (96, ), w, b, 1e-5), [x, w, b])


@fla_case("rms_norm_residual")
def _fla_rms_norm(g, dev):
    from fla.modules.norm.layernorm import rms_norm
    x, r, w = _randn(g, 6, 80, device=dev), _randn(g, 6, 80, device=dev), _randn(g, 80, device=dev)

    def ref(x, r, w):
        s = x + r
        return s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + 1e-5) * w
    return (lambda x, r, w: rms_norm(x, w, None, residual=r, eps=1e-5), ref, [x, r, w])


def _linear_attn_ref(q, k, v, scale, log_g=None):
    """o_t = scale * sum_{i<=t} exp(G_t - G_i) (q_t . k_i) v_i with G = cumsum(log_g) (0 without gates);
    q, k, v: [B, T, H, D]."""
    T = q.shape[1]
    s = torch.einsum("bthd,bshd->bhts", q, k) * scale
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool, device=q.device))
    if log_g is not None:
        G = log_g.cumsum(1).transpose(1, 2)  # [B, H, T]
        s = s * torch.exp((G[..., :, None] - G[..., None, :]).masked_fill(~causal, 0.0))
    return torch.einsum("bhts,bshd->bthd", s.masked_fill(~causal, 0.0), v)


def _qkv(g, dev, B=1, T=40, H=2, K=32, V=32):
    return _randn(g, B, T, H, K, device=dev), _randn(g, B, T, H, K, device=dev), _randn(g, B, T, H, V, device=dev)


@fla_case("fused_recurrent_linear_attn")
def _fla_frla(g, dev):
    from fla.ops.linear_attn import fused_recurrent_linear_attn
    q, k, v = _qkv(g, dev)
    return (lambda q, k, v: fused_recurrent_linear_attn(q, k, v, normalize=False)[0],
            lambda q, k, v: _linear_attn_ref(q, k, v, 32**-0.5), [q, k, v])


@fla_case("chunk_linear_attn")
def _fla_chunk_la(g, dev):
    from fla.ops.linear_attn import chunk_linear_attn
    q, k, v = _qkv(g, dev)
    return (lambda q, k, v: chunk_linear_attn(q, k, v, normalize=False)[0],
            lambda q, k, v: _linear_attn_ref(q, k, v, 32**-0.5), [q, k, v])


@fla_case("fused_recurrent_simple_gla")
def _fla_fr_sgla(g, dev):
    from fla.ops.simple_gla import fused_recurrent_simple_gla
    q, k, v = _qkv(g, dev)
    lg = -torch.rand(1, 40, 2, generator=g).to(dev) * 0.2
    return (lambda q, k, v, lg: fused_recurrent_simple_gla(q, k, v, g=lg)[0],
            lambda q, k, v, lg: _linear_attn_ref(q, k, v, 32**-0.5, lg), [q, k, v, lg])


@fla_case("chunk_simple_gla")
def _fla_chunk_sgla(g, dev):
    from fla.ops.simple_gla import chunk_simple_gla
    q, k, v = _qkv(g, dev)
    lg = -torch.rand(1, 40, 2, generator=g).to(dev) * 0.2
    return (lambda q, k, v, lg: chunk_simple_gla(q, k, v, g=lg)[0],
            lambda q, k, v, lg: _linear_attn_ref(q, k, v, 32**-0.5, lg), [q, k, v, lg])


def _fla_params():
    out = []
    for name in FLA_CASES:
        for p in ("fwd", "bwd"):
            # every op forward and backward (the chunk backward kernel needed 33-61 KB of threadgroup memory
            # before operands stayed in registers and buffers were filled late and packed again: issue 8 7b)
            out.append(pytest.param(name, p, id=f"{name}-{p}"))
    return out


@pytest.mark.parametrize("name, which", _fla_params())
def test_fla_ops(name, which, device):
    spec = FLA_CASES[name]
    gen = torch.Generator().manual_seed(4321)
    fla_fn, torch_fn, inputs = spec["build"](gen, device)
    tol = dict(atol=spec["atol"], rtol=spec["rtol"])
    args_f = [t.detach().clone().requires_grad_() for t in inputs]
    args_r = [t.detach().clone().requires_grad_() for t in inputs]
    out_f, out_r = fla_fn(*args_f), torch_fn(*args_r)
    assert out_f.shape == out_r.shape
    if which == "fwd":
        torch.testing.assert_close(out_f.detach().float(), out_r.detach().float(), **tol)
        return
    cot = torch.randn(out_r.shape, generator=torch.Generator().manual_seed(7)).to(device)
    (out_f.float() * cot).sum().backward()
    (out_r.float() * cot).sum().backward()
    for i, (a, r) in enumerate(zip(args_f, args_r)):
        assert a.grad is not None, f"input {i} got no gradient"
        torch.testing.assert_close(a.grad.float(), r.grad.float(), **tol, msg=lambda m: f"grad {i}: {m}")

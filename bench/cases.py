"""The tutorial-style cases the reports in bench/ run: kernels of bench/kernels.py with the arguments each is
launched with, its problem sizes and its check against torch.

A `Case` knows how to build one launch of its kernel for a problem size on a torch device: the
arguments by parameter name, the constexprs, grid, num_warps, and the expected outputs computed by
torch (in float64 where the inputs allow) with the tolerance the check uses. Sizes are multiples of 16
where a real workload's would be, so the JIT's specialisation (tt.divisibility = 16 on pointers and such
ints) is the one real launches get; rows are not multiples of the block, so masked tails are exercised.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Tuple

import torch
import triton

from . import kernels as kn


# ------------------------------------------------------------------------------------------------ cases


@dataclass
class Launch:
    fn: object
    args: Dict[str, object]  # every runtime argument by parameter name
    constexprs: Dict[str, object]
    grid: Tuple[int, ...]
    num_warps: int
    expected: Callable[[], Dict[str, torch.Tensor]]  # output argument name -> expected values
    tol: float
    flops: float = 0.0  # useful floating-point operations of one launch (for TFLOP/s)
    bytes: float = 0.0  # bytes one launch must move to and from memory, at least (for GB/s)
    note: str = ""

    def call(self):
        """Launches through the JIT; returns the CompiledKernel."""
        ordered = [self.args[n] if n in self.args else self.constexprs[n] for n in self.fn.arg_names]
        return self.fn[self.grid](*ordered, num_warps=self.num_warps)

    def error(self) -> float:
        """max |out - expected| / (1 + |expected|) over every output (after a launch)."""
        worst = 0.0
        for name, exp in self.expected().items():
            out = self.args[name].detach().to("cpu", torch.float64)
            exp = exp.detach().to("cpu", torch.float64)
            worst = max(worst, ((out - exp).abs() / (1 + exp.abs())).max().item())
        return worst


@dataclass
class Case:
    name: str
    build: Callable[..., Launch]  # build(device, **size)
    sizes: Dict[str, Dict[str, int]] = field(default_factory=dict)  # profile name -> size keywords

    def launch(self, device, profile: str) -> Launch:
        return self.build(device, **self.sizes[profile])


def _gen(device, seed: int):
    g = torch.Generator(device="cpu")
    g.manual_seed(seed)
    return lambda *shape, dtype=torch.float32: torch.randn(*shape, generator=g).to(device=device, dtype=dtype)


def vector_add(device, n: int) -> Launch:
    rnd = _gen(device, 0)
    x, y = rnd(n), rnd(n)
    out = torch.empty_like(x)
    return Launch(kn.vector_add_kernel, dict(x_ptr=x, y_ptr=y, out_ptr=out, n_elements=n),
                  dict(BLOCK_SIZE=1024), (triton.cdiv(n, 1024), ), 4, lambda: {"out_ptr": x + y}, 0.0,
                  bytes=3 * 4 * n)


def softmax(device, rows: int, cols: int, programs: int = 0) -> Launch:
    rnd = _gen(device, 1)
    x = rnd(rows, cols)
    out = torch.empty_like(x)
    block = triton.next_power_of_2(cols)
    grid = (min(programs or rows, rows), )
    return Launch(kn.softmax_kernel,
                  dict(out_ptr=out, in_ptr=x, in_row_stride=x.stride(0), out_row_stride=out.stride(0), n_rows=rows,
                       n_cols=cols), dict(BLOCK_SIZE=block), grid, 4 if block <= 2048 else 8,
                  lambda: {"out_ptr": torch.softmax(x.double(), dim=1)}, 1e-6, bytes=2 * 4 * rows * cols)


def layer_norm(device, rows: int, cols: int) -> Launch:
    rnd = _gen(device, 2)
    x, w, b = rnd(rows, cols), rnd(cols), rnd(cols)
    y = torch.empty_like(x)
    mean = torch.empty(rows, device=device)
    rstd = torch.empty(rows, device=device)

    def expected():
        xd = x.double()
        mu = xd.mean(dim=1)
        var = xd.var(dim=1, unbiased=False)
        r = 1 / torch.sqrt(var + 1e-5)
        return {"y_ptr": (xd - mu[:, None]) * r[:, None] * w.double() + b.double(), "mean_ptr": mu, "rstd_ptr": r}

    return Launch(kn.layer_norm_fwd_kernel,
                  dict(x_ptr=x, y_ptr=y, w_ptr=w, b_ptr=b, mean_ptr=mean, rstd_ptr=rstd, stride=x.stride(0), N=cols,
                       eps=1e-5), dict(BLOCK_SIZE=min(1024, triton.next_power_of_2(cols))), (rows, ), 4, expected, 1e-5,
                  bytes=4 * (3 * rows * cols + 2 * cols + 2 * rows))


def cumsum(device, rows: int, cols: int) -> Launch:
    rnd = _gen(device, 3)
    x = rnd(rows, cols)
    y = torch.empty_like(x)
    return Launch(kn.row_cumsum_kernel, dict(x_ptr=x, y_ptr=y, N=cols, stride=x.stride(0)),
                  dict(BLOCK=1024), (rows, ), 4, lambda: {"y_ptr": torch.cumsum(x.double(), dim=1)}, 1e-4,
                  bytes=2 * 4 * rows * cols)


def argmax(device, rows: int, cols: int) -> Launch:
    rnd = _gen(device, 4)
    x = rnd(rows, cols)
    idx = torch.empty(rows, dtype=torch.int32, device=device)
    return Launch(kn.row_argmax_kernel, dict(x_ptr=x, idx_ptr=idx, N=cols, stride=x.stride(0)),
                  dict(BLOCK=triton.next_power_of_2(cols)), (rows, ), 4,
                  lambda: {"idx_ptr": torch.argmax(x, dim=1).to(torch.int32)}, 0.0, bytes=4 * rows * (cols + 1))


def bias_gelu(device, rows: int, cols: int) -> Launch:
    rnd = _gen(device, 5)
    x, b = rnd(rows, cols), rnd(cols)
    y = torch.empty_like(x)
    bm, bn = 16, 128
    return Launch(kn.bias_gelu_kernel, dict(x_ptr=x, b_ptr=b, y_ptr=y, M=rows, N=cols, stride_m=x.stride(0)),
                  dict(BLOCK_M=bm, BLOCK_N=bn), (triton.cdiv(rows, bm), triton.cdiv(cols, bn)), 4,
                  lambda: {"y_ptr": torch.nn.functional.gelu(x.double() + b.double())}, 1e-5,
                  bytes=4 * (2 * rows * cols + cols))


MATMUL_CONFIGS = [  # (BLOCK_M, BLOCK_N, BLOCK_K, num_warps): tiles that fit Metal's 32 KB of threadgroup memory
    (64, 64, 32, 4),
    (128, 64, 32, 4),
    (64, 128, 32, 4),
    (32, 32, 32, 4),
]


def matmul(device, m: int, n: int, k: int, dtype=torch.float16, config=MATMUL_CONFIGS[0]) -> Launch:
    rnd = _gen(device, 6)
    a, b = rnd(m, k, dtype=dtype), rnd(k, n, dtype=dtype)
    c = torch.empty(m, n, dtype=dtype, device=device)
    bm, bn, bk, warps = config
    return Launch(kn.matmul_kernel,
                  dict(a_ptr=a, b_ptr=b, c_ptr=c, M=m, N=n, K=k, stride_am=a.stride(0), stride_ak=a.stride(1),
                       stride_bk=b.stride(0), stride_bn=b.stride(1), stride_cm=c.stride(0), stride_cn=c.stride(1)),
                  dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, ACC_F16=False),
                  (triton.cdiv(m, bm) * triton.cdiv(n, bn), ), warps,
                  lambda: {"c_ptr": a.double() @ b.double()}, 2e-2 if dtype == torch.float16 else 8e-2,
                  flops=2.0 * m * n * k, bytes=(m * k + k * n + m * n) * a.element_size(),
                  note=f"{bm}x{bn}x{bk}, {warps} warps")


def attention(device, heads: int, ctx: int, head_dim: int = 64, causal: bool = False, block_m: int = 32,
              block_n: int = 32, warps: int = 4) -> Launch:
    rnd = _gen(device, 7)
    q, k, v = (rnd(heads, ctx, head_dim, dtype=torch.float16) for _ in range(3))
    o = torch.empty_like(q)
    scale = head_dim**-0.5

    def expected():
        return {"Out": torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(),
                                                                        is_causal=causal, scale=scale)}

    flops = 4.0 * heads * ctx * ctx * head_dim * (0.5 if causal else 1.0)
    return Launch(kn.attn_fwd_kernel,
                  dict(Q=q, K=k, V=v, Out=o, sm_scale=scale, stride_qh=q.stride(0), stride_qm=q.stride(1),
                       stride_kh=k.stride(0), stride_kn=k.stride(1), stride_vh=v.stride(0), stride_vn=v.stride(1),
                       stride_oh=o.stride(0), stride_om=o.stride(1), N_CTX=ctx),
                  dict(HEAD_DIM=head_dim, BLOCK_M=block_m, BLOCK_N=block_n, CAUSAL=causal),
                  (triton.cdiv(ctx, block_m), heads), warps, expected, 2e-2, flops=flops,
                  bytes=4 * heads * ctx * head_dim * 2, note=f"{block_m}x{block_n}, {warps} warps")


def compile_like_jit(fn, args: Dict[str, object], constexprs: Dict[str, object], num_warps: int, target=None):
    """triton.compile(ASTSource(...)) for an apple target (default: the active driver's, so that what is analysed
    is what the JIT runs) with the specialisation Triton's JIT derives from `args`."""
    from triton._C.libtriton import native_specialize_impl
    from triton.compiler import ASTSource, make_backend
    target = target or triton.runtime.driver.active.get_current_target()
    backend = make_backend(target)
    signature, consts, attrs = {}, {}, {}
    for i, name in enumerate(fn.arg_names):
        # as JITFunction._pack_args: constexprs get an (empty) attribute entry too, floats and bools none
        if name in constexprs:
            ty, key = "constexpr", constexprs[name]
        else:
            ty, key = native_specialize_impl(backend, args[name], False, True, True)
        signature[name] = ty
        if ty == "constexpr":
            consts[(i, )] = key
        if isinstance(key, str) or ty == "constexpr":
            attrs[(i, )] = backend.parse_attr(key if ty != "constexpr" else "")
    src = ASTSource(fn, signature, consts, attrs)
    return triton.compile(src, target=target, options={"num_warps": num_warps})


# Profiles: "report" is what the code-generation report compiles and checks (typical shapes with masked
# tails); "speed" is what bench/emulator_speed.py times.
CASES: List[Case] = [
    Case("vector add", vector_add, {"report": dict(n=1_000_000), "speed": dict(n=1 << 20)}),
    Case("softmax", softmax, {"report": dict(rows=256, cols=1536, programs=64), "speed": dict(rows=512, cols=1000,
                                                                                                programs=64)}),
    Case("layer norm fwd", layer_norm, {"report": dict(rows=256, cols=1536), "speed": dict(rows=512, cols=1000)}),
    Case("cumsum", cumsum, {"report": dict(rows=64, cols=1536), "speed": dict(rows=512, cols=1000)}),
    Case("argmax", argmax, {"report": dict(rows=256, cols=1536), "speed": dict(rows=512, cols=1000)}),
    Case("fused bias+GELU", bias_gelu, {"report": dict(rows=256, cols=1536), "speed": dict(rows=512, cols=1000)}),
    Case("matmul fp16", matmul, {"report": dict(m=192, n=160, k=96), "speed": dict(m=256, n=256, k=256)}),
    Case("attention fwd fp16", attention, {"report": dict(heads=2, ctx=112), "speed": dict(heads=2, ctx=256)}),
]


def case(name: str) -> Case:
    for c in CASES:
        if c.name == name:
            return c
    raise KeyError(name)


def fmt_size(size: Dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in size.items())


def describe_error(e: BaseException) -> str:
    """First line of an exception, for a table cell."""
    msg = str(e).strip().splitlines()
    return f"{type(e).__name__}: {msg[0][:160]}" if msg else type(e).__name__


"""float64 scalar arguments: passed as their 64 bits and used as software float64 in the kernel, bit-exact,
in a buffer slot of their own, in the packed-scalars buffer, and under torch.compile (which passes a Python
float argument of a user-defined Triton kernel as a float64 scalar)."""
import struct

import pytest
import torch
import triton
import triton.language as tl

VALUES = [0.1, -1e300, 5e-324, 2.0**-1074 * 3, 1.0 + 2.0**-52, float("inf"), 123456789.123456789]


@triton.jit
def _axpy(x_ptr, out_ptr, a: tl.float64, b: tl.float64, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * a + b, mask=mask)


@pytest.mark.parametrize("a", VALUES)
def test_float64_scalars_are_exact(a):
    x = torch.tensor([1.0, -2.5, 1e-300, 3.0], dtype=torch.float64)
    out = torch.empty_like(x)
    b = 2.0**-60
    _axpy[(1, )](x, out, a, b, 4, BLOCK=4)
    assert torch.equal(out, x * a + b), (out, x * a + b)  # software float64 rounds as the host's doubles


def test_float64_scalar_keeps_its_bits():

    @triton.jit
    def bits(out_ptr, s: tl.float64):
        tl.store(out_ptr, s.to(tl.int64, bitcast=True))

    out = torch.zeros(1, dtype=torch.int64)
    for v in (0.1, -0.0, float("nan"), 1.7976931348623157e308, 5e-324):
        bits[(1, )](out, v)
        assert out.item() == struct.unpack("<q", struct.pack("<d", v))[0]


def test_float64_scalar_that_is_not_a_number_is_named():

    @triton.jit
    def k(out_ptr, s: tl.float64):
        tl.store(out_ptr, s)

    from triton.backends.apple.errors import KernelArgError
    with pytest.raises(KernelArgError, match=r"kernel 'k' argument 's' \(f64\) expects a float, got str"):
        k[(1, )](torch.zeros(1, dtype=torch.float64), "2.0")


@triton.jit
def _many(o, p0, p1, p2, p3, p4, p5, p6, p7, p8, p9, p10, p11, p12, p13, p14, p15, p16, p17, p18, p19, p20, p21, p22,
          p23, p24, p25, p26, p27, p28, s0: tl.float64, i0, s1: tl.float64, h: tl.float16, s2: tl.float64):
    tl.store(o + 0, s0)
    tl.store(o + 1, s1 + i0.to(tl.float64))
    tl.store(o + 2, s2 * h.to(tl.float64))
    tl.store(p28, tl.load(p0) + 1.0)


def test_float64_scalars_in_the_packed_buffer():
    """A kernel over Metal's 31 buffer slots: its scalars are packed, float64 ones in two aligned words."""
    o = torch.zeros(3, dtype=torch.float64)
    ptrs = [torch.full((1, ), float(i)) for i in range(29)]
    compiled = _many[(1, )](o, *ptrs, 0.1, 7, -1e-300, 0.5, 3.0)
    kinds = {p["name"]: (p["kind"], p.get("word")) for p in __import__("json").loads(compiled.metadata.kernel_signature)}
    assert kinds["s0"][0] == "packed" and kinds["s0"][1] % 2 == 0 and kinds["s2"][1] % 2 == 0
    assert o.tolist() == [0.1, -1e-300 + 7.0, 3.0 * 0.5]
    assert ptrs[28].item() == 1.0


# Runs in a subprocess: inductor repoints Triton's cache directory for the rest of its process.
COMPILED_MODEL = """
import warnings
import torch, triton, triton.language as tl
import torch._inductor.config as inductor_config


@triton.jit
def scale_shift_f64_args(x_ptr, out_ptr, scale, shift, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * scale + shift, mask=mask)


class ScaleShift(torch.nn.Module):

    def __init__(self, scale, shift):
        super().__init__()
        self.scale, self.shift = scale, shift

    def forward(self, x):
        y = torch.relu(x) + 1.0
        out = torch.empty_like(y)
        n = y.numel()
        scale_shift_f64_args[(triton.cdiv(n, 64), )](y, out, self.scale, self.shift, n, BLOCK=64)
        return out.sum(dim=-1)


model = ScaleShift(0.3, -1.25)
x = torch.randn(8, 50)
eager = model(x)
with inductor_config.patch(cpu_backend="triton", compile_threads=1), warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    compiled = torch.compile(model, fullgraph=True)(x)
torch.testing.assert_close(compiled, eager)
# eager passes the floats as float32; the compiled graph's launch passed them as float64
assert any("kernel 'scale_shift_f64_args' computes float64 in software" in str(w.message) for w in seen)
print("compiled matches eager")
"""


@pytest.mark.slow
def test_user_kernel_taking_a_python_float_under_torch_compile(tmp_path):
    """torch.compile passes the Python float of a user-defined Triton kernel as a float64 scalar (inductor's
    triton_utils); the compiled graph must match eager."""
    import os
    import subprocess
    import sys
    script = tmp_path / "compiled_model.py"
    script.write_text(COMPILED_MODEL)
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"))
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, env=env)
    assert res.returncode == 0 and "compiled matches eager" in res.stdout, res.stdout + res.stderr

"""tl.rand / tl.randint (Philox) give bit-identical streams to Triton's interpreter."""
import os
import subprocess
import sys
import textwrap

import torch
import triton
import triton.language as tl


@triton.jit
def rand_kernel(out_i_ptr, out_f_ptr, seed, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_i_ptr + offs, tl.randint(seed, offs), mask=m)
    tl.store(out_f_ptr + offs, tl.rand(seed, offs), mask=m)


_INTERPRETER_RUN = textwrap.dedent("""
    import os, torch
    os.environ["TRITON_INTERPRET"] = "1"
    from test_random import rand_kernel
    ints = torch.zeros(1000, dtype=torch.int32)
    floats = torch.zeros(1000)
    rand_kernel[(8, )](ints, floats, 1234, 1000, BLOCK=128)
    torch.save((ints, floats), {out!r})
""")


def test_rand_and_randint_match_the_interpreter(tmp_path, device):
    ints = torch.zeros(1000, dtype=torch.int32, device=device)
    floats = torch.zeros(1000, device=device)
    rand_kernel[(8, )](ints, floats, 1234, 1000, BLOCK=128)
    out = str(tmp_path / "ref.pt")
    # The script imports this module by name: its folder reaches the subprocess through PYTHONPATH.
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    path = [os.path.dirname(os.path.abspath(__file__))] + inherited
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=os.pathsep.join(path))
    code = _INTERPRETER_RUN.format(out=out)
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=300, capture_output=True)
    ref_i, ref_f = torch.load(out)
    assert torch.equal(ints.cpu(), ref_i)
    torch.testing.assert_close(floats.cpu(), ref_f, rtol=0, atol=0)
    assert 0.45 < floats.mean().item() < 0.55 and floats.min().item() >= 0 and floats.max().item() < 1


@triton.jit
def wide_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i)
    tl.store(out_ptr + i, x * 2 + tl.sum(x, axis=0))


def test_num_warps_16_and_32(device):
    x = torch.randn(2048, device=device)
    for nw in (16, 32):
        out = torch.empty_like(x)
        wide_kernel[(1, )](x, out, BLOCK=2048, num_warps=nw)
        torch.testing.assert_close(out, x * 2 + x.sum(), rtol=1e-5, atol=1e-4)

"""Runs three ordinary Triton kernels through the apple backend and prints their error against torch.

On Linux they run on the Metal-on-CPU emulator with torch CPU tensors; on a Mac with MPS, on the GPU.
"""
import os
import sys
import time

import torch
import triton

# `python examples/demo.py` puts this file's directory first on sys.path, so its kernels import as `kernels`
from kernels import layer_norm, softmax, vector_add


def main() -> int:
    from triton.backends.apple.driver import device_mode
    mode = device_mode()
    device = "mps" if mode == "metal" else "cpu"
    print(f"triton {triton.__version__}, backends: {sorted(triton.backends.backends)}; apple device: {mode}")
    torch.manual_seed(0)
    failures = 0

    def report(name, got, ref, tol, seconds):
        nonlocal failures
        err = (got.float().cpu() - ref.float().cpu()).abs().max().item()
        ok = err <= tol
        failures += not ok
        print(f"  {name:<28} max |error| = {err:.3e}  (tol {tol:.0e})  {seconds * 1e3:8.1f} ms  "
              f"{'ok' if ok else 'FAILED'}")

    x = torch.randn(98_432, device=device)
    y = torch.randn(98_432, device=device)
    t = time.perf_counter()
    out = vector_add(x, y)
    report("vector add (98432)", out, x + y, 0.0, time.perf_counter() - t)

    a = torch.randn(300, 781, device=device)
    t = time.perf_counter()
    out = softmax(a)
    report("row softmax (300 x 781)", out, torch.softmax(a, dim=1), 1e-6, time.perf_counter() - t)

    xn = torch.randn(64, 1500, device=device)
    w = torch.rand(1500, device=device)
    b = torch.randn(1500, device=device)
    t = time.perf_counter()
    yn, mean, rstd = layer_norm(xn, w, b)
    ref = torch.nn.functional.layer_norm(xn, (1500, ), w, b, eps=1e-5)
    report("layer norm fwd (64 x 1500)", yn, ref, 1e-5, time.perf_counter() - t)
    print("(times include compiling each kernel on first use; compiled kernels are cached in "
          f"{os.environ.get('TRITON_CACHE_DIR', '~/.triton/cache')})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

"""Checks an installed Triton with this backend as a user gets it: the macOS workflow runs it in a fresh
virtualenv that holds only the Triton wheel it built (v3.9.0 with this plugin), torch and numpy.

    python tools/check_installed_triton.py [--expect-device mps|cpu] [--installed]

It imports triton, checks that the `apple` backend is registered and is the active driver, runs a vector add on the
torch device the driver chose (`mps` on a Mac with MPS; CPU tensors on the Metal-on-CPU emulator, e.g. with
TRITON_APPLE_DEVICE=emulator) and compares it with torch, bit for bit. `--expect-device` fails the check when the
kernel ran elsewhere; `--installed` fails it when the backend is not loaded from this interpreter's own
site-packages (an editable install, or a symlink into a checkout, would prove nothing about a wheel). It prints
what it found and exits 1 on any failure.
"""
from __future__ import annotations

import argparse
import os
import sys
import sysconfig
from typing import List, Optional


def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)

    return add


def check(expect_device: Optional[str], installed: bool) -> List[str]:
    """What is wrong with the installation (empty when nothing is); prints what it finds."""
    import torch
    import triton
    problems = []
    print(f"python {sys.version.split()[0]} at {sys.executable}")
    print(f"triton {triton.__version__} from {os.path.dirname(triton.__file__)}")
    print(f"backends: {sorted(triton.backends.backends)}")
    if "apple" not in triton.backends.backends:
        return problems + ["the `apple` backend is not registered (no triton.backends entry point named apple)"]
    import triton.backends.apple as apple
    where = os.path.realpath(os.path.dirname(apple.__file__))
    print(f"apple backend from {where}")
    site = os.path.realpath(sysconfig.get_paths()["purelib"])
    if installed and not where.startswith(site + os.sep):
        problems.append(f"the apple backend is loaded from {where}, not from this interpreter's site-packages "
                        f"{site}: an editable install or a link into a checkout, not the installed files")
    from triton.backends.apple.driver import AppleDriver
    driver = triton.runtime.driver.active
    if not isinstance(driver, AppleDriver):
        return problems + [f"the active driver is {type(driver).__module__}.{type(driver).__name__}, not the apple "
                           f"backend's"]
    device = driver.get_active_torch_device()
    print(f"apple driver mode {driver.mode!r}, target {driver.get_current_target()}, tensors on {device}")
    if expect_device and device.type != expect_device:
        problems.append(f"the kernel runs on {device.type}, expected {expect_device}")
    n = 1000
    x = torch.randn(n, device=device)
    y = torch.randn(n, device=device)
    out = torch.empty_like(x)
    _kernel()[(triton.cdiv(n, 256), )](x, y, out, n, BLOCK=256)
    if not torch.equal(out.cpu(), (x + y).cpu()):
        bad = (out.cpu() != (x + y).cpu()).sum().item()
        problems.append(f"vector add on {device}: {bad} of {n} elements differ from torch")
    else:
        print(f"vector add of {n} float32 on {device}: equal to torch")
    return problems


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--expect-device", choices=("mps", "cpu"), help="the torch device the kernel must run on")
    ap.add_argument("--installed", action="store_true",
                    help="the backend must load from this interpreter's site-packages")
    args = ap.parse_args(argv)
    problems = check(args.expect_device, args.installed)
    for p in problems:
        print(f"check_installed_triton: FAILED: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

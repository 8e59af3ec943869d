"""An `AppleLauncher` made without compiling: the metadata a compiled kernel would carry, written by hand, for
tests of argument binding and of the launch path."""
import json
from types import SimpleNamespace

# The kernel signature of `k(x: *fp32, n: i32, s: fp32)`, one buffer slot each, as the lowering writes it.
PARAMS = [
    {"name": "x", "slot": 0, "kind": "pointer", "msl_type": "device float*", "triton_type": "*fp32"},
    {"name": "n", "slot": 1, "kind": "scalar", "msl_type": "int", "triton_type": "i32"},
    {"name": "s", "slot": 2, "kind": "scalar", "msl_type": "float", "triton_type": "fp32"},
]


def make_launcher(params: list, signature: dict):
    """The driver's launcher for kernel 'k' (num_warps 4) with these MSL parameters and Triton signature."""
    from triton.backends.apple import driver as drv
    meta = SimpleNamespace(name="k", num_warps=4, kernel_signature=json.dumps(params))
    return drv.AppleLauncher(SimpleNamespace(signature=signature), meta)

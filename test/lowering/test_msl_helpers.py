"""The MSL helper text the lowering emits, compiled and run on the emulator: every shuffle overload moves
values of its type between lanes exactly (the reference is the same permutation done in numpy)."""
import numpy as np
import pytest
import torch

from triton.backends.apple.lowering.target_info import MetalTargetInfo
from triton.backends.apple.lowering.msl_helpers import shuffle_helper

# MSL type -> torch dtype of the buffer that holds 32 values of it
_TYPES = {"float": torch.float32, "half": torch.float16, "int": torch.int32, "uint": torch.int32,
          "short": torch.int16, "ushort": torch.int16, "char": torch.int8, "uchar": torch.uint8, "bool": torch.bool,
          "bfloat": torch.bfloat16, "long": torch.int64, "ulong": torch.int64}


def _run(source: str, name: str, *buffers):
    from triton.backends.apple import emulator
    emulator.compile_msl(source, name).launch(grid=(1, 1, 1), threadgroup=(32, 1, 1), buffers=list(buffers))


@pytest.mark.parametrize("ctype", sorted(_TYPES))
@pytest.mark.parametrize("metal_fn", ["simd_shuffle", "simd_shuffle_xor"])
def test_shuffle_overloads_move_values_exactly(ctype, metal_fn):
    _, fn, text = shuffle_helper(metal_fn, ctype)
    arg = "(lane * 7 + 3) & 31" if metal_fn == "simd_shuffle" else "5"
    src = MetalTargetInfo.prelude(fast_math=False) + text + f"""
kernel void shuffle_{ctype}(device {ctype}* x [[buffer(0)]], device {ctype}* y [[buffer(1)]],
                        uint lane [[thread_index_in_simdgroup]]) {{
    y[lane] = {fn}(x[lane], ushort({arg}));
}}
"""
    dt = _TYPES[ctype]
    if dt == torch.bool:
        x = torch.arange(32) % 3 == 0
    elif dt.is_floating_point:
        x = torch.randn(32).to(dt)
    else:
        x = torch.randint(-100 if dt != torch.uint8 else 0, 100, (32, )).to(dt)
    y = torch.zeros_like(x)
    _run(src, f"shuffle_{ctype}", x, y)
    lanes = np.arange(32)
    src_lane = (lanes * 7 + 3) & 31 if metal_fn == "simd_shuffle" else lanes ^ 5
    assert torch.equal(y, x[torch.from_numpy(src_lane)])


def test_pointers_shuffle_as_addresses():
    _, fn, text = shuffle_helper("simd_shuffle", "device float*")
    src = MetalTargetInfo.prelude(fast_math=False) + text + f"""
kernel void shuffle_ptr(device float* x [[buffer(0)]], device float* y [[buffer(1)]],
                        uint lane [[thread_index_in_simdgroup]]) {{
    device float* mine = x + lane;
    device float* theirs = {fn}(mine, ushort(31 - lane));
    y[lane] = *theirs;
}}
"""
    x = torch.randn(32)
    y = torch.zeros(32)
    _run(src, "shuffle_ptr", x, y)
    assert torch.equal(y, x.flip(0))

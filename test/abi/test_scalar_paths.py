"""One rule for scalar bytes on every launch path: a kernel sees the bits `abi.scalars.pack` gives, whether the
scalar is bound by the emulator launcher's C fast path, by its Python hook, in the packed-scalars buffer of a
kernel over 31 buffer slots, or by the Metal launch (on the MPS stand-in). The corners are the ones the packers
used to disagree on: a bfloat NaN with a payload and the values between bfloat's largest finite value and the
point where it would round to infinity."""
import struct

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from triton.backends.apple.abi.scalars import pack

NAN_PAYLOAD = struct.unpack("<d", struct.pack("<Q", 0xFFF4_0000_0000_0001))[0]
# bfloat's largest finite value, a value above it that still rounds down to it, and float32/half corners
BF16 = [3.3895313892515355e38, 3.39e38, 3.3961e38, -1e-40, NAN_PAYLOAD, float("-inf"), 1.0 + 2.0**-8 + 2.0**-30]
F16 = [65519.99, 5.96e-8, NAN_PAYLOAD, 1.0 + 2.0**-11]
F32 = [NAN_PAYLOAD, 3.4028235e38, 1e-45]


def _bits_body(out_ptr, b: tl.bfloat16, h: tl.float16, f: tl.float32):
    tl.store(out_ptr + 0, b.to(tl.int16, bitcast=True).to(tl.int32) & 0xFFFF)
    tl.store(out_ptr + 1, h.to(tl.int16, bitcast=True).to(tl.int32) & 0xFFFF)
    tl.store(out_ptr + 2, f.to(tl.int32, bitcast=True))


# Two JIT functions of one body: Triton keeps a function's compiled kernels per device for the target that was
# active when it first ran, so the Metal tests need one the emulator tests have not compiled.
_bits = triton.jit(_bits_body)
_bits_on_metal = triton.jit(_bits_body)


@triton.jit
def _bits_packed(out_ptr, q0, q1, q2, q3, q4, q5, q6, q7, q8, q9, q10, q11, q12, q13, q14, q15, q16, q17, q18, q19,
                 q20, q21, q22, q23, q24, q25, q26, q27, q28, b: tl.bfloat16, h: tl.float16, f: tl.float32):
    tl.store(out_ptr + 0, b.to(tl.int16, bitcast=True).to(tl.int32) & 0xFFFF)
    tl.store(out_ptr + 1, h.to(tl.int16, bitcast=True).to(tl.int32) & 0xFFFF)
    tl.store(out_ptr + 2, f.to(tl.int32, bitcast=True))
    tl.store(q28, tl.load(q0))


def _expected(b, h, f):
    def word(msl, v):
        data = pack(msl, v)
        return int.from_bytes(data, "little", signed=len(data) == 4)
    return [word("bfloat", b), word("half", h), word("float", f)]


def _cases():
    return [(b, F16[i % len(F16)], F32[i % len(F32)]) for i, b in enumerate(BF16)]


@pytest.mark.parametrize("path", ["fast", "hook"])
def test_slot_of_its_own(path):
    """The C fast path takes Python floats; numpy floats go through the Python hook."""
    out = torch.zeros(3, dtype=torch.int32)
    for b, h, f in _cases():
        args = (b, h, f) if path == "fast" else tuple(np.float64(v) for v in (b, h, f))
        _bits[(1, )](out, *args)
        assert out.tolist() == _expected(b, h, f), (b, h, f)


def test_packed_buffer():
    out = torch.zeros(3, dtype=torch.int32)
    qs = [torch.zeros(1) for _ in range(29)]
    for b, h, f in _cases():
        compiled = _bits_packed[(1, )](out, *qs, b, h, f)
        assert out.tolist() == _expected(b, h, f), (b, h, f)
    assert '"kind": "packed"' in compiled.metadata.kernel_signature


def test_metal_launch(mps):
    out = torch.zeros(3, dtype=torch.int32)
    for b, h, f in _cases():
        _bits_on_metal[(1, )](out, b, h, f)
        assert out.tolist() == _expected(b, h, f), (b, h, f)
        d = mps.dispatches[-1]  # the scalars bind by value: the bytes PyTorch hands setBytes are the packed ones
        assert [d.bytes_at(i) for i in (1, 2, 3)] == [pack("bfloat", b), pack("half", h), pack("float", f)]


def test_values_that_would_become_infinity_are_refused_on_every_path(mps):
    from triton.backends.apple.errors import KernelArgError
    out = torch.zeros(3, dtype=torch.int32)
    with pytest.raises(KernelArgError, match=r"argument 'b' \(bf16\): 3.3962e\+38 does not fit in bfloat"):
        _bits_on_metal[(1, )](out, 3.3962e38, 0.0, 0.0)  # on the stand-in's Metal path
    assert not out.any() and not mps.dispatches


def test_values_that_would_become_infinity_are_refused_on_the_emulator():
    from triton.backends.apple.errors import KernelArgError
    out = torch.zeros(3, dtype=torch.int32)
    _bits[(1, )](out, 1.0, 1.0, 1.0)  # compiled: the C fast path binds from now on
    for bad, name in ((3.3962e38, "b"), (65520.0, "h"), (3.4028236e38, "f")):
        args = [1.0, 1.0, 1.0]
        args["bhf".index(name)] = bad
        with pytest.raises(KernelArgError, match=f"argument '{name}' .*does not fit in .*it would become infinity"):
            _bits[(1, )](out, *args)
        qs = [torch.zeros(1) for _ in range(29)]
        with pytest.raises(KernelArgError, match=f"argument '{name}' .*does not fit in .*it would become infinity"):
            _bits_packed[(1, )](out, *qs, *args)

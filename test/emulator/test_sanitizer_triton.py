"""racecheck and initcheck on Triton kernels: a lowering mutated here to drop a barrier, a Gluon kernel that reads
threadgroup memory it never wrote; each report names the Triton op and source line of both accesses, and the
unmutated kernels are silent."""
import sys

import pytest
import torch
import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from triton.backends.apple import emulator as emu
from triton.backends.apple.lowering.emitter import FunctionEmitter


@triton.jit
def row_sums_kernel(x_ptr, out_ptr, N: tl.constexpr, TAG: tl.constexpr):
    # TAG is unused: it keeps the mutated lowering's MSL under a cache key of its own
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + tl.program_id(0) * N + offs)
    tl.store(out_ptr + tl.program_id(0), tl.sum(x, axis=0))  # the reduction


SUM_LINE = next(i for i, text in enumerate(open(__file__).read().splitlines(), 1) if "# the reduction" in text)


@pytest.fixture
def drop_reduction_barrier(monkeypatch):
    """The reduction lowering loses the barrier between its stores to threadgroup memory and the loads of the
    other simdgroups' partial sums (the barrier `emitter.scratch` puts before reusing the memory stays)."""
    original = FunctionEmitter.barrier

    def barrier(self):
        if sys._getframe(1).f_code.co_filename.endswith("reduce_ops.py"):
            return
        original(self)

    monkeypatch.setattr(FunctionEmitter, "barrier", barrier)
    monkeypatch.setenv("TRITON_ALWAYS_COMPILE", "1")


def _sums(tag: int):
    x = torch.arange(4 * 256, dtype=torch.float32).reshape(4, 256) % 5
    out = torch.zeros(4)
    row_sums_kernel[(4, )](x, out, N=256, TAG=tag, num_warps=4)
    return x, out


def test_the_reduction_is_silent(device):
    with emu.sanitize("race,init"):
        x, out = _sums(0)
    assert torch.equal(out, x.sum(1))


def test_a_reduction_whose_lowering_lost_its_barrier(device, drop_reduction_barrier):
    with emu.sanitize("race"), pytest.raises(emu.EmulatorLaunchError) as info:
        _sums(1)
    e = info.value
    assert e.kind == "race"
    f = e.findings[0]
    assert f.space == "threadgroup" and f.first.thread // 32 != f.second.thread // 32
    assert {f.first.is_write, f.second.is_write} == {True, False}
    for side in (f.first, f.second):  # both sides: the MSL line and the Triton op and source line
        assert side.origin == f"tt.reduce at test_sanitizer_triton.py:{SUM_LINE}"
    text = str(e)
    assert text.count(f"[tt.reduce at test_sanitizer_triton.py:{SUM_LINE}]") >= 2
    assert f"was generated from tt.reduce at {__file__}:{SUM_LINE}" in text  # the driver's note, with columns


@gluon.jit
def unwritten_scratch_kernel(out_ptr, N: gl.constexpr, WRITE: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    buf = gl.allocate_shared_memory(gl.float32, [N], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    offs = gl.arange(0, N, layout=layout)
    if WRITE:
        buf.store(offs.to(gl.float32))
    gl.store(out_ptr + offs, buf.load(layout))  # the read


READ_LINE = next(i for i, text in enumerate(open(__file__).read().splitlines(), 1) if "# the read" in text)


def test_gluon_scratch_read_before_written(device):
    out = torch.zeros(128)
    with emu.sanitize("init"), pytest.raises(emu.EmulatorLaunchError) as info:
        unwritten_scratch_kernel[(1, )](out, N=128, WRITE=False, num_warps=4)
    e = info.value
    assert e.kind == "uninitialized" and e.findings[0].space == "threadgroup"
    assert e.findings[0].second.origin == f"ttg.local_load at test_sanitizer_triton.py:{READ_LINE}"
    with emu.sanitize("race,init"):
        unwritten_scratch_kernel[(1, )](out, N=128, WRITE=True, num_warps=4)
    assert torch.equal(out, torch.arange(128, dtype=torch.float32))


@triton.jit
def argmax_rows_kernel(x_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr, AXIS: tl.constexpr):
    rm = tl.arange(0, M)[:, None]
    rn = tl.arange(0, N)[None, :]
    x = tl.load(x_ptr + rm * N + rn)
    o = tl.arange(0, N if AXIS == 0 else M)
    tl.store(out_ptr + o, tl.argmax(x, axis=AXIS))


@pytest.mark.parametrize("M,N,axis,num_warps", [(1, 256, 1, 8), (4, 256, 1, 4), (256, 4, 0, 8), (64, 64, 0, 4)])
def test_argmax_meeting_a_nan_has_one_writer_per_partial(M, N, axis, num_warps, device):
    # argmax's combine is not commutative once a NaN is in play (`NaN > b` and `a > NaN` are both false), so the
    # lanes of a simdgroup end their butterfly with different partial results: only one of them may store it to
    # threadgroup memory for the other simdgroups (a racecheck finding before, with a result that depended on
    # which store landed last)
    x = torch.randn(M, N)
    x[:, 5 % N] = float("nan")
    x[3 % M, :] = float("nan")
    out = torch.zeros(N if axis == 0 else M, dtype=torch.int32)
    with emu.sanitize("race,init"):
        argmax_rows_kernel[(1, )](x, out, M=M, N=N, AXIS=axis, num_warps=num_warps)
    assert ((out >= 0) & (out < x.shape[axis])).all()
    # lines without a NaN have one answer
    clean = ~torch.isnan(x).any(axis)
    assert torch.equal(out[clean], torch.argmax(x, axis).to(torch.int32)[clean])

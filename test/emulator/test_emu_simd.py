"""SIMD-group functions: shuffles, reductions, scans, votes, strict lane checks."""
import numpy as np
import pytest
import torch

from support.emulator_msl import line_of, msl

SIMD = msl("""
kernel void simd_ops(device const float* x [[buffer(0)]],
                     device const int* xi [[buffer(1)]],
                     device float* out [[buffer(2)]],
                     device int* outi [[buffer(3)]],
                     uint gid [[thread_position_in_grid]],
                     uint lane [[thread_index_in_simdgroup]]) {
    float v = x[gid];
    float b = v;
    for (ushort m = 16; m > 0; m >>= 1) {
        b += simd_shuffle_xor(b, m);           // butterfly: every lane ends with the total
    }
    int w = xi[gid];
    device float* o = out + gid * 4;
    o[0] = b;
    o[1] = simd_sum(v);
    o[2] = simd_max(v);
    o[3] = simd_prefix_inclusive_sum(v);
    device int* oi = outi + gid * 10;
    oi[0] = simd_prefix_exclusive_sum(w);
    oi[1] = simd_prefix_inclusive_sum(w);
    oi[2] = simd_shuffle_up(w, 3);
    oi[3] = simd_shuffle_down(w, 5);
    oi[4] = simd_broadcast(w, 7);
    oi[5] = simd_shuffle(w, (ushort)(31 - lane));
    oi[6] = simd_min(w);
    oi[7] = simd_or(w);
    oi[8] = int(ulong(simd_ballot((w & 1) != 0)));
    oi[9] = (simd_all(w > -1000) ? 1 : 0) + (simd_any(w == 5) ? 2 : 0) + (simd_is_first() ? 4 : 0);
}
""")


def test_simd_functions_match_numpy(emu):
    k = emu.compile_msl(SIMD, "simd_ops")
    nsg = 4
    n = 32 * nsg
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.integers(-50, 50, n).astype(np.float32))
    xi = torch.from_numpy(rng.integers(-100, 100, n).astype(np.int32))
    out = torch.zeros(n * 4)
    outi = torch.zeros(n * 10, dtype=torch.int32)
    k.launch(grid=2, threadgroup=n // 2, buffers=[x, xi, out, outi])
    o = out.view(nsg, 32, 4).numpy()
    oi = outi.view(nsg, 32, 10).numpy()
    xs = x.view(nsg, 32).numpy()
    ws = xi.view(nsg, 32).numpy().astype(np.int64)
    lanes = np.arange(32)
    for s in range(nsg):
        v, w = xs[s], ws[s]
        np.testing.assert_array_equal(o[s, :, 0], np.full(32, v.sum()))
        np.testing.assert_array_equal(o[s, :, 1], np.full(32, v.sum()))
        np.testing.assert_array_equal(o[s, :, 2], np.full(32, v.max()))
        np.testing.assert_array_equal(o[s, :, 3], np.cumsum(v))
        np.testing.assert_array_equal(oi[s, :, 0], np.cumsum(w) - w)
        np.testing.assert_array_equal(oi[s, :, 1], np.cumsum(w))
        np.testing.assert_array_equal(oi[s, :, 2], np.where(lanes < 3, w, np.roll(w, 3)))
        np.testing.assert_array_equal(oi[s, :, 3], np.where(lanes + 5 >= 32, w, np.roll(w, -5)))
        np.testing.assert_array_equal(oi[s, :, 4], np.full(32, w[7]))
        np.testing.assert_array_equal(oi[s, :, 5], w[::-1])
        np.testing.assert_array_equal(oi[s, :, 6], np.full(32, w.min()))
        np.testing.assert_array_equal(oi[s, :, 7], np.full(32, np.bitwise_or.reduce(w)))
        ballot = sum(1 << l for l in range(32) if w[l] & 1)
        np.testing.assert_array_equal(oi[s, :, 8].astype(np.int64) & 0xFFFFFFFF, np.full(32, ballot))
        flags = 1 + (2 if (w == 5).any() else 0)
        np.testing.assert_array_equal(oi[s, :, 9], flags + 4 * (lanes == 0))


HALF_VEC = msl("""
kernel void simd_half(device const half4* x [[buffer(0)]],
                      device half4* out [[buffer(1)]],
                      device ushort2* out2 [[buffer(2)]],
                      uint gid [[thread_position_in_grid]]) {
    out[gid] = simd_shuffle_xor(x[gid], 1) + simd_sum(x[gid]);
    out2[gid] = simd_broadcast(ushort2{(ushort)gid, (ushort)(gid * 2)}, 3);
}
""")


def test_simd_half_vectors(emu):
    k = emu.compile_msl(HALF_VEC, "simd_half")
    x = torch.arange(32 * 4, dtype=torch.float16) / 8
    out = torch.zeros(32 * 4, dtype=torch.float16)
    out2 = torch.zeros(32 * 2, dtype=torch.int16)
    k.launch(grid=1, threadgroup=32, buffers=[x, out, out2])
    xv = x.view(32, 4)
    # the emulator folds lanes in order, rounding to half after every add
    total = xv[0].clone()
    for l in range(1, 32):
        total = total + xv[l]
    expect = xv[torch.arange(32) ^ 1] + total
    assert torch.equal(out.view(32, 4), expect)
    assert out2.view(32, 2).tolist() == [[3, 6]] * 32


PARTIAL = msl("""
kernel void partial(device int* out [[buffer(0)]],
                    uint tid [[thread_index_in_threadgroup]]) {
    out[tid] = simd_sum(1) * 100 + int(simd_active_threads_mask().all());
}
""")


def test_partial_simdgroup(emu):
    k = emu.compile_msl(PARTIAL, "partial")
    out = torch.zeros(40, dtype=torch.int32)
    k.launch(grid=1, threadgroup=40, buffers=[out])
    assert out.tolist() == [3201] * 32 + [801] * 8


EXITED = msl("""
kernel void exited(device int* out [[buffer(0)]],
                   uint lane [[thread_index_in_simdgroup]]) {
    if (lane == 31) {
        return;
    }
    out[lane] = simd_shuffle_down((int)lane, 1);
}
""")


def test_shuffle_from_exited_lane_is_an_error(emu):
    k = emu.compile_msl(EXITED, "exited")
    out = torch.zeros(32, dtype=torch.int32)
    with pytest.raises(emu.EmulatorLaunchError) as ei:
        k.launch(grid=1, threadgroup=32, buffers=[out])
    e = ei.value
    assert e.kind == "simd"
    assert "lane 30 reads lane 31" in str(e) and "not active" in str(e)
    assert e.msl_lines == [line_of(EXITED, "simd_shuffle_down")]
    assert e.thread == 30 and e.threadgroup == (0, 0, 0)
    assert torch.count_nonzero(out) == 0  # nothing copied back after a failed launch


DIVERGENT = msl("""
kernel void divergent(device float* out [[buffer(0)]],
                      uint lane [[thread_index_in_simdgroup]]) {
    float v = lane;
    if (lane < 16) {
        v = simd_sum(v);
    } else {
        v = simd_max(v);
    }
    out[lane] = v;
}
""")


def test_divergent_collectives_reported(emu):
    k = emu.compile_msl(DIVERGENT, "divergent")
    with pytest.raises(emu.EmulatorLaunchError) as ei:
        k.launch(grid=1, threadgroup=32, buffers=[torch.zeros(32)])
    e = ei.value
    assert e.kind == "divergence"
    assert sorted(e.msl_lines) == sorted([line_of(DIVERGENT, "simd_sum"), line_of(DIVERGENT, "simd_max")])
    assert "threads 0-15 wait at simd_sum" in str(e) and "threads 16-31 wait at simd_max" in str(e)


def test_64bit_and_bool_shuffles_do_not_compile(emu):
    src = msl("""
kernel void bad(device long* out [[buffer(0)]], uint lane [[thread_index_in_simdgroup]]) {
    long v = out[lane];
    out[lane] = simd_shuffle_xor(v, 1);
}
""")
    with pytest.raises(emu.EmulatorCompileError) as ei:
        emu.compile_msl(src, "bad")
    assert "64-bit" in str(ei.value)
    assert ei.value.msl_lines == [line_of(src, "simd_shuffle_xor")]
    src_bool = msl("""
kernel void badb(device int* out [[buffer(0)]], uint lane [[thread_index_in_simdgroup]]) {
    bool b = out[lane] > 0;
    out[lane] = simd_shuffle(b, 0) ? 1 : 0;
}
""")
    with pytest.raises(emu.EmulatorCompileError, match="bool"):
        emu.compile_msl(src_bool, "badb")

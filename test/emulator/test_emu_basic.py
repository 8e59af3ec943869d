"""Vector add, builtins over 3-D grids, argument binding (tensors, views, numpy, scalars, aliasing)."""
import numpy as np
import pytest
import torch

from support.emulator_msl import msl

VADD = msl("""
kernel void vadd(device const float* x [[buffer(0)]],
                 device const float* y [[buffer(1)]],
                 device float* out [[buffer(2)]],
                 constant uint& n [[buffer(3)]],
                 uint gid [[thread_position_in_grid]]) {
    if (gid < n) {
        out[gid] = x[gid] + y[gid];
    }
}
""")


@pytest.mark.parametrize("n", [1, 1000, 4096, 100_003])
def test_vector_add(emu, n):
    k = emu.compile_msl(VADD, "vadd")
    x, y = torch.randn(n), torch.randn(n)
    out = torch.full((n,), -1.0)
    tg = 128
    k.launch(grid=((n + tg - 1) // tg, 1, 1), threadgroup=(tg, 1, 1),
             buffers={0: x, 1: y, 2: out, 3: emu.Scalar(n, "uint")})
    torch.testing.assert_close(out, x + y, rtol=0, atol=0)


def test_params_parsed(emu):
    k = emu.compile_msl(VADD, "vadd")
    kinds = [(p.name, p.kind, p.index, p.msl_type, p.address_space) for p in k.params]
    assert kinds == [
        ("x", "buffer", 0, "device const float*", "device"),
        ("y", "buffer", 1, "device const float*", "device"),
        ("out", "buffer", 2, "device float*", "device"),
        ("n", "buffer", 3, "constant uint&", "constant"),
        ("gid", "builtin", None, "uint", None),
    ]


def test_buffers_as_list_numpy_and_python_scalar(emu):
    k = emu.compile_msl(VADD, "vadd")
    x = np.arange(300, dtype=np.float32)
    y = np.ones(300, dtype=np.float32)
    out = np.zeros(300, dtype=np.float32)
    k.launch(grid=3, threadgroup=128, buffers=[x, y, out, 300])
    np.testing.assert_array_equal(out, x + 1)


BUILTINS = msl("""
kernel void builtins(device uint* out [[buffer(0)]],
                     uint3 gpos [[thread_position_in_grid]],
                     uint3 tgpos [[threadgroup_position_in_grid]],
                     uint3 tpos [[thread_position_in_threadgroup]],
                     uint3 tptg [[threads_per_threadgroup]],
                     uint3 ntg [[threadgroups_per_grid]],
                     uint3 gsize [[threads_per_grid]],
                     uint tid [[thread_index_in_threadgroup]],
                     ushort lane [[thread_index_in_simdgroup]],
                     uint sg [[simdgroup_index_in_threadgroup]],
                     uint nsg [[simdgroups_per_threadgroup]],
                     uint width [[threads_per_simdgroup]],
                     uint gx [[thread_position_in_grid]],
                     ushort2 tg2 [[threadgroup_position_in_grid]]) {
    uint linear = gpos.x + gpos.y * gsize.x + gpos.z * gsize.x * gsize.y;
    device uint* o = out + linear * 24;
    o[0] = gpos.x; o[1] = gpos.y; o[2] = gpos.z;
    o[3] = tgpos.x; o[4] = tgpos.y; o[5] = tgpos.z;
    o[6] = tpos.x; o[7] = tpos.y; o[8] = tpos.z;
    o[9] = tptg.x; o[10] = tptg.y; o[11] = tptg.z;
    o[12] = ntg.x; o[13] = ntg.y; o[14] = ntg.z;
    o[15] = gsize.x; o[16] = gsize.y; o[17] = gsize.z;
    o[18] = tid; o[19] = lane; o[20] = sg; o[21] = nsg * 1000 + width;
    o[22] = gx; o[23] = tg2.x + 100 * tg2.y;
}
""")


def test_builtins_3d_grid(emu):
    k = emu.compile_msl(BUILTINS, "builtins")
    grid, tg = (3, 2, 2), (4, 3, 5)
    size = [g * t for g, t in zip(grid, tg)]
    total = size[0] * size[1] * size[2]
    out = torch.zeros(total * 24, dtype=torch.int32)
    k.launch(grid=grid, threadgroup=tg, buffers={0: out})
    got = out.view(total, 24).numpy().astype(np.int64)
    nthreads = tg[0] * tg[1] * tg[2]
    expect = np.zeros_like(got)
    for gz in range(size[2]):
        for gy in range(size[1]):
            for gx in range(size[0]):
                lin = gx + gy * size[0] + gz * size[0] * size[1]
                tgp = (gx // tg[0], gy // tg[1], gz // tg[2])
                tp = (gx % tg[0], gy % tg[1], gz % tg[2])
                tid = tp[0] + tp[1] * tg[0] + tp[2] * tg[0] * tg[1]
                expect[lin] = [gx, gy, gz, *tgp, *tp, *tg, *grid, *size, tid, tid % 32, tid // 32,
                               ((nthreads + 31) // 32) * 1000 + 32, gx, tgp[0] + 100 * tgp[1]]
    np.testing.assert_array_equal(got, expect)


def test_tensor_view_bounds_and_copy_back(emu):
    k = emu.compile_msl(VADD, "vadd")
    base = torch.zeros(64)
    view = base[8:24]  # storage offset 8, 16 elements
    x = torch.arange(16, dtype=torch.float32)
    k.launch(grid=1, threadgroup=16, buffers={0: x, 1: x, 2: view, 3: emu.Scalar(16, "uint")})
    assert torch.equal(base[8:24], 2 * x)
    assert torch.count_nonzero(base[:8]) == 0 and torch.count_nonzero(base[24:]) == 0


INPLACE = msl("""
kernel void scale(device const float* src [[buffer(0)]],
                  device float* dst [[buffer(1)]],
                  uint i [[thread_position_in_grid]]) {
    dst[i] = src[i] * 2.0f + (i > 0 ? dst[i - 1] * 0.0f : 0.0f);
}
""")


def test_aliased_arguments_share_memory(emu):
    k = emu.compile_msl(INPLACE, "scale")
    x = torch.arange(100, dtype=torch.float32)
    ref = x * 2
    k.launch(grid=1, threadgroup=100, buffers={0: x, 1: x})  # same tensor bound twice
    assert torch.equal(x, ref)


def test_zero_sized_grid_is_noop(emu):
    k = emu.compile_msl(VADD, "vadd")
    out = torch.zeros(4)
    k.launch(grid=(0, 1, 1), threadgroup=32, buffers={0: out, 1: out, 2: out, 3: 4})
    assert torch.count_nonzero(out) == 0


def test_launch_argument_errors(emu):
    k = emu.compile_msl(VADD, "vadd")
    x = torch.zeros(4)
    with pytest.raises(emu.EmulatorLaunchError, match="'n' \\[\\[buffer\\(3\\)\\]\\] is not bound"):
        k.launch(grid=1, threadgroup=4, buffers={0: x, 1: x, 2: x})
    with pytest.raises(emu.EmulatorLaunchError, match="not parameters"):
        k.launch(grid=1, threadgroup=4, buffers={0: x, 1: x, 2: x, 3: 4, 7: x})
    with pytest.raises(emu.EmulatorLaunchError, match="1 to 1024"):
        k.launch(grid=1, threadgroup=(32, 33, 1), buffers={0: x, 1: x, 2: x, 3: 4})
    with pytest.raises(emu.EmulatorLaunchError, match="constant uint&"):
        k.launch(grid=1, threadgroup=4, buffers={0: x, 1: x, 2: x, 3: emu.Scalar(1.0, "float")})
    with pytest.raises(emu.EmulatorLaunchError, match="takes 4 bytes"):
        k.launch(grid=1, threadgroup=4, buffers={0: x, 1: x, 2: x, 3: emu.Scalar(1, "long")})


STYLES = msl("""
struct Params {
    float scale;
    uint n;
};

template <typename T> static inline T twice(T v) { return v + v; }

kernel void other(device float* a) { a[0] = 1.0f; }

kernel void styles(const device float4 *in,            // no attribute: buffer(0)
                   device float *out /* buffer(1) */,
                   constant Params &p [[ buffer(2) ]],
                   ushort2 tpos [[thread_position_in_threadgroup]],
                   uint2 tg [[threadgroup_position_in_grid]]) {
    threadgroup float tile[16][17];
    tile[tpos.y][tpos.x] = in[tg.x].x * p.scale + tpos.x;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    uint i = tg.x * 256 + tpos.y * 16 + tpos.x;
    if (i < p.n) out[i] = twice(tile[tpos.x][tpos.y]) + 0.25h;
}
""")


def test_hand_written_msl_styles(emu):
    k = emu.compile_msl(STYLES, "styles")
    assert [(p.name, p.index, p.msl_type) for p in k.params if p.kind == "buffer"] == [
        ("in", 0, "const device float4*"), ("out", 1, "device float*"), ("p", 2, "constant Params&")]
    inp = torch.tensor([[1.0, 0, 0, 0], [2.0, 0, 0, 0]])
    out = torch.zeros(512)
    params = emu.Scalar(0.5, "float").data + emu.Scalar(500, "uint").data
    k.launch(grid=(2, 1, 1), threadgroup=(16, 16, 1), buffers={0: inp, 1: out, 2: params})
    ty, tx = torch.meshgrid(torch.arange(16), torch.arange(16), indexing="ij")
    for g in range(2):
        expect = 2 * (inp[g, 0] * 0.5 + ty.float()) + 0.25  # transposed read of tile[x][y] = ... + y
        n = 256 if g == 0 else 500 - 256
        assert torch.equal(out[g * 256:g * 256 + n], expect.reshape(-1)[:n])
    assert torch.count_nonzero(out[500:]) == 0

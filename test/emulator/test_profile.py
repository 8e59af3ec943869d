"""The emulator's profiler (emulator.profile(), TRITON_APPLE_EMULATOR_PROFILE=1): every number of a launch's profile
on hand-written MSL whose traffic, access widths, bank conflicts, barriers and FLOPs are known exactly."""
import pytest
import torch

from support.emulator_msl import line_of, msl


def _profile(emu, k, **launch):
    with emu.profile() as p:
        k.launch(**launch)
    assert len(p.launches) == 1
    return p.launches[0]


COPY4 = msl("""
kernel void copy4(device const float4* x [[buffer(0)]], device float4* y [[buffer(1)]],
                  uint gid [[thread_position_in_grid]]) {
    y[gid] = x[gid];
}
""")


def test_16_byte_copy_moves_each_byte_once(emu):
    k = emu.compile_msl(COPY4, "copy4")
    x, y = torch.randn(4 * 256), torch.zeros(4 * 256)
    d = _profile(emu, k, grid=2, threadgroup=128, buffers=[x, y])
    assert torch.equal(x, y)
    assert d["global_loads_by_width"] == {1: 0, 2: 0, 4: 0, 8: 0, 16: 256}
    assert d["global_stores_by_width"] == {1: 0, 2: 0, 4: 0, 8: 0, 16: 256}
    assert d["global_bytes_read"] == d["global_bytes_written"] == 4096
    assert d["global_bytes_minimal"] == d["global_bytes_moved"] == d["global_bytes_threadgroup_distinct"] == 8192
    assert d["moved_over_minimal"] == 1.0 and d["share_16_byte"] == 1.0
    assert d["moved_over_threadgroup_distinct"] == d["threadgroup_distinct_over_minimal"] == 1.0
    assert d["simd_memory_instructions"] == 2 * 2 * 4 and d["simd_lane_utilisation"] == 1.0
    assert d["threadgroups"] == 2 and d["barriers"] == 0 and d["threadgroup_loads"] == 0


def test_vector_load_of_halves_stays_one_16_byte_access(emu):
    """Eight halves loaded as one uint4 and taken apart lane by lane (what the lowering emits for a run of 16-bit
    elements) count as one 16-byte load: the tools' build keeps the host compiler from splitting it."""
    src = msl("""
static inline void unpack8(thread half* regs, uint4 v) {
    for (int j = 0; j < 8; ++j) regs[j] = as_type<half2>(v[j / 2])[j % 2];
}
kernel void halves(device const half* x [[buffer(0)]], device half* y [[buffer(1)]], constant int& n [[buffer(2)]],
                   uint gid [[thread_position_in_grid]]) {
    half r[8];
    if (int(gid) < n) {
        unpack8(r, *(device const uint4*)(x + gid * 8));
    } else {
        for (int j = 0; j < 8; ++j) r[j] = 0;
    }
    for (int j = 0; j < 8; ++j) y[gid * 8 + j] = r[j] * 2;
}
""")
    k = emu.compile_msl(src, "halves")
    x, y = torch.randn(8 * 64).half(), torch.zeros(8 * 64).half()
    d = _profile(emu, k, grid=1, threadgroup=64, buffers=[x, y, emu.Scalar(48, "int")])
    assert torch.equal(y[:8 * 48], x[:8 * 48] * 2) and not y[8 * 48:].any()
    assert d["global_loads_by_width"] == {1: 0, 2: 0, 4: 0, 8: 0, 16: 48}


def test_every_lane_reading_one_word_moves_it_once_per_instruction(emu):
    src = msl("""
kernel void bcast(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                  uint gid [[thread_position_in_grid]]) {
    y[gid] = x[0] + x[gid];
}
""")
    k = emu.compile_msl(src, "bcast")
    x, y = torch.randn(64), torch.zeros(64)
    d = _profile(emu, k, grid=1, threadgroup=64, buffers=[x, y])
    # per lane: 2 loads of 4 bytes and a store; per SIMD instruction x[0] counts once
    assert d["global_bytes_read"] == 2 * 64 * 4
    assert d["global_read_distinct"] == 64 * 4 and d["global_written_distinct"] == 64 * 4
    assert d["global_bytes_moved"] == 2 * 4 + 64 * 4 + 64 * 4


def test_re_reads_inside_and_across_threadgroups(emu):
    """moved/minimal = (moved / per-threadgroup distinct) x (per-threadgroup distinct / minimal): two simdgroups of
    a threadgroup each read w[0..31] (a re-read inside it), and both threadgroups read all of w (one across them)."""
    src = msl("""
kernel void weights(device const float* x [[buffer(0)]], device const float* w [[buffer(1)]],
                    device float* y [[buffer(2)]], uint gid [[thread_position_in_grid]],
                    uint lane [[thread_index_in_simdgroup]]) {
    y[gid] = x[gid] * w[lane];
}
""")
    k = emu.compile_msl(src, "weights")
    x, w, y = torch.randn(128), torch.randn(32), torch.zeros(128)
    d = _profile(emu, k, grid=2, threadgroup=64, buffers=[x, w, y])
    assert torch.equal(y, x * w.repeat(4))
    assert d["global_bytes_minimal"] == 128 * 4 + 32 * 4 + 128 * 4
    assert d["global_bytes_threadgroup_distinct"] == 128 * 4 + 2 * 32 * 4 + 128 * 4  # w once per threadgroup
    assert d["global_bytes_moved"] == 128 * 4 + 4 * 32 * 4 + 128 * 4                # w once per simdgroup
    assert d["moved_over_threadgroup_distinct"] * d["threadgroup_distinct_over_minimal"] == \
        pytest.approx(d["moved_over_minimal"])


BANKS = msl("""
kernel void banks(device float* out [[buffer(0)]], constant uint& stride [[buffer(1)]],
                  uint tid [[thread_index_in_threadgroup]]) {
    threadgroup float t[32 * 33];
    t[(tid * stride) % (32 * 33)] = float(tid);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[tid] = t[0];                                     // every lane reads one word: a broadcast
}
""")


@pytest.mark.parametrize("stride, degree", [(1, 1), (2, 2), (4, 4), (32, 32), (33, 1)])
def test_bank_conflict_degree_of_strided_stores(emu, stride, degree):
    k = emu.compile_msl(BANKS, "banks")
    out = torch.zeros(32)
    d = _profile(emu, k, grid=1, threadgroup=32, buffers=[out, emu.Scalar(stride, "uint")])
    assert d["bank_model"] == {"banks": 32, "bank_bytes": 4}
    assert d["threadgroup_simd_accesses"] == 2 and d["threadgroup_stores"] == 32 and d["threadgroup_loads"] == 32
    # the store takes `degree` cycles (32 lanes over 32 / degree banks), the broadcast load one
    assert d["bank_cycles"] == degree + 1 and d["bank_cycles_ideal"] == 2
    assert d["bank_conflict_worst"] == degree
    assert d["threadgroup_conflicted_accesses"] == (degree > 1)
    # the instruction named by its MSL line (the store), with its degree and the cycles it lost
    assert d["bank_conflict_lines"] == ([] if degree == 1 else [{
        "msl_line": line_of(BANKS, "t[(tid * stride)"), "msl_text": "t[(tid * stride) % (32 * 33)] = float(tid);",
        "origin": "", "accesses": 1, "degree": degree, "excess_cycles": degree - 1}])
    assert d["barriers"] == 1 and d["barriers_per_threadgroup"] == 1.0


def test_half_the_lanes_in_a_branch(emu):
    src = msl("""
kernel void half_lanes(device float* y [[buffer(0)]], uint lane [[thread_index_in_simdgroup]],
                       uint gid [[thread_position_in_grid]]) {
    if (lane < 16) y[gid] = 1.0f;
}
""")
    k = emu.compile_msl(src, "half_lanes")
    d = _profile(emu, k, grid=1, threadgroup=128, buffers=[torch.zeros(128)])
    assert d["simd_memory_instructions"] == 4 and d["simd_lane_utilisation"] == 0.5


MMA = msl("""
kernel void mma(device const float* a [[buffer(0)]], device float* c [[buffer(1)]],
                uint lane [[thread_index_in_simdgroup]]) {
    simdgroup_float8x8 A, C = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    simdgroup_load(A, a, 8);
    for (int i = 0; i < 3; ++i) simdgroup_multiply_accumulate(C, A, A, C);
    simdgroup_store(C, c, 8);
    c[64 + lane] = fma(a[lane], 2.0f, 1.0f);
}
""")


def test_simdgroup_matrix_and_fma_flops(emu):
    k = emu.compile_msl(MMA, "mma")
    a, c = torch.randn(64), torch.zeros(96)
    d = _profile(emu, k, grid=2, threadgroup=64, buffers=[a, c])
    A = a.view(8, 8).double()
    assert torch.allclose(c[:64].view(8, 8).double(), 3 * (A @ A), rtol=1e-4, atol=1e-4)
    assert torch.equal(c[64:], a[:32] * 2 + 1)
    assert d["simdgroup_matrix_ops"] == 3 * 2 * 2  # 3 per simdgroup, 2 simdgroups, 2 threadgroups
    assert d["simdgroup_matrix_flops"] == 1024 * 12
    assert d["fma_calls"] == 2 * 64 and d["fma_flops"] == 2 * 2 * 64
    assert d["simdgroup_matrix_share"] == pytest.approx(1024 * 12 / (1024 * 12 + 4 * 64))


def test_profile_knob_prints_a_line_per_launch(emu, monkeypatch, capfd):
    monkeypatch.setenv("TRITON_APPLE_EMULATOR_PROFILE", "1")
    k = emu.compile_msl(COPY4, "copy4")
    x, y = torch.randn(4 * 128), torch.zeros(4 * 128)
    k.launch(grid=1, threadgroup=128, buffers=[x, y])
    k.launch(grid=1, threadgroup=128, buffers=[x, y])
    err = capfd.readouterr().err
    assert err.count("emulator profile: copy4 grid=(1, 1, 1)") == 2
    assert "moved/minimal 1.00, 16-byte share 1.00" in err
    monkeypatch.delenv("TRITON_APPLE_EMULATOR_PROFILE")
    k = emu.compile_msl(COPY4, "copy4")
    k.launch(grid=1, threadgroup=128, buffers=[x, y])
    assert "emulator profile" not in capfd.readouterr().err


def test_profile_of_a_triton_kernel(emu, device):
    import triton
    import triton.language as tl

    @triton.jit
    def scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, 2.0 * tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)

    x = torch.randn(4096)
    y = torch.empty_like(x)
    with emu.profile() as p:
        scale_kernel[(4, )](x, y, 4096, BLOCK=1024, num_warps=4)
    assert torch.equal(y, 2 * x)
    (d, ) = p.launches
    assert d["kernel"] == "scale_kernel" and d["grid"] == (4, 1, 1) and d["threadgroup"] == (128, 1, 1)
    assert d["global_read_distinct"] == d["global_written_distinct"] == 4096 * 4
    assert d["share_16_byte"] > 0.9 and d["moved_over_minimal"] < 1.01


# ------------------------------------------------------------------------------------------------ the roofline


def test_roofs_and_bounds_follow_the_chip_table(emu):
    from triton.backends.apple.emulator import roofline
    from triton.backends.apple.host import PEAK_GBPS
    from triton.backends.apple.target import GPU_FAMILIES
    rs = roofline.roofs()
    assert [(r.family, r.chip) for r in rs] == [("apple7", "M1"), ("apple8", "M2"), ("apple9", "M3")]
    for r in rs:
        f = GPU_FAMILIES[r.family]
        assert r.peak_flops == f.gpu_cores * 128 * 2 * f.gpu_clock_mhz * 1e6
        assert r.peak_bytes_per_s == PEAK_GBPS[r.chip] * 1e9
        assert r.attainable(r.ridge / 2) == pytest.approx(r.peak_flops / 2)
        assert r.attainable(r.ridge * 2) == r.peak_flops
    assert rs[0].peak_flops == pytest.approx(2.617e12, rel=1e-3)  # Apple's 2.6 TFLOPS for M1
    # 1 MB and no FLOPs: memory-bound; 1 MB and 1e12 FLOPs: compute-bound on every chip
    d = {"global_bytes_minimal": 10**6, "simdgroup_matrix_flops": 0, "fma_flops": 0}
    for b in roofline.bounds(d):
        assert b.memory_bound and b.seconds == pytest.approx(1e6 / b.roof.peak_bytes_per_s)
    d["simdgroup_matrix_flops"] = 10**12
    for b in roofline.bounds(d):
        assert not b.memory_bound and b.seconds == pytest.approx(1e12 / b.roof.peak_flops)


def _decoded(path):
    """The PNG's pixels (rows x columns x RGBA floats) and its text chunks, read back by matplotlib and Pillow."""
    import matplotlib.image
    from PIL import Image
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    with Image.open(path) as im:
        text = dict(im.text)
    return matplotlib.image.imread(path), text


def _pixels_of(img, colour: str, tol: float = 0.02) -> int:
    import numpy as np
    from matplotlib.colors import to_rgb
    return int((np.abs(img[..., :3] - np.array(to_rgb(colour))).max(axis=-1) < tol).sum())


def _assert_marker_at(img, point, colour: str):
    import numpy as np
    from matplotlib.colors import to_rgb
    col, row = (int(round(v)) for v in point.pixel)
    centre = img[row - 1:row + 2, col - 1:col + 2, :3].reshape(-1, 3)
    assert (np.abs(centre - np.array(to_rgb(colour))).max(axis=-1) < 0.05).all(), (point, centre)


def test_roofline_png_of_a_dot_launch(emu, tmp_path):
    """The plot of a launch with counted FLOPs: a PNG of the figure's size, every family's roof in its colour, the
    launch's marker where the roofline puts it, and the numbers in its text chunks."""
    from triton.backends.apple.emulator import roofline
    k = emu.compile_msl(MMA, "mma")
    d = _profile(emu, k, grid=2, threadgroup=64, buffers=[torch.randn(64), torch.zeros(96)])
    path = str(tmp_path / "mma.png")
    plot = roofline.plot(d, path)
    img, text = _decoded(path)
    assert img.shape == (600, 800, 4) and (plot.height, plot.width) == (600, 800)
    assert text["Title"] == plot.title == "mma grid=(2, 1, 1) threadgroup=(64, 1, 1)"
    assert text["Description"] == plot.description == roofline.describe(d)
    assert "counted FLOPs 1.254e+04" in plot.description and "moved/minimal 4.80" in plot.description
    assert (img[..., :3] < 0.5).any(axis=-1).sum() > 2000  # not blank: axes, lines, text
    for family, colour in roofline.COLOURS.items():
        assert _pixels_of(img, colour) > 300, family  # each roof drawn (a line across the plot)
    ai = (1024 * 12 + 2 * 2 * 64) / d["global_bytes_minimal"]
    assert [p.family for p in plot.points] == ["apple7", "apple8", "apple9"]
    for p, r in zip(plot.points, roofline.roofs()):
        assert not p.clipped and p.intensity == pytest.approx(ai) and p.flops_per_s == pytest.approx(r.attainable(ai))
        _assert_marker_at(img, p, roofline.KERNEL_COLOUR)
    # M1's point lies below M2's (less bandwidth), at the same intensity (same column)
    assert plot.points[0].pixel[1] > plot.points[1].pixel[1] and plot.points[0].pixel[0] == plot.points[1].pixel[0]


def test_roofline_png_of_a_launch_without_flops(emu, tmp_path):
    """A copy counts no FLOPs: its markers sit on the left edge, on each roof's bandwidth slope."""
    from triton.backends.apple.emulator import roofline
    k = emu.compile_msl(COPY4, "copy4")
    d = _profile(emu, k, grid=2, threadgroup=128, buffers=[torch.randn(1024), torch.zeros(1024)])
    path = str(tmp_path / "copy4.png")
    plot = roofline.plot(d, path)
    img, text = _decoded(path)
    assert img.shape == (600, 800, 4)
    assert "counted FLOPs 0 " in text["Description"] and "M1 0.12 us (memory)" in text["Description"]
    left = min(p.pixel[0] for p in plot.points)
    for p, r in zip(plot.points, roofline.roofs()):
        assert p.clipped and p.pixel[0] == left and p.flops_per_s == pytest.approx(r.attainable(p.intensity))
        _assert_marker_at(img, p, roofline.KERNEL_COLOUR)

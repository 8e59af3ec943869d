"""simdgroup_matrix without a rendezvous per operation (include/metal_simdgroup_matrix.h, tt_sgm_state in
include/emulator_runtime.h): lanes issue loads, stores and multiplies on their own; loads with uniform arguments
share one whole-tile read; multiplies are deferred and computed by the lane that completes them.

Checked against numpy models of the emulator's numerics (products and sums in float, k increasing from C, one
rounding to the destination type; half and bfloat): chains of multiplies whose results are operands of later
ones, copies of pending results, operands that differ per lane (some lanes a shared record, some another
record, some their own elements), non-uniform load arguments, a run of multiplies longer than the op window,
a pending result read by one lane only; and the errors: an op skipped by some lanes (at a barrier, at a SIMD
function, by returning), a read of a result the other lanes never compute (deadlock), the lane named by an
out-of-bounds whole-tile load.
"""
import numpy as np
import pytest
import torch

from support.emulator_msl import line_of, msl


def frag_row(lane):
    return 4 * (lane >> 4) + ((lane >> 1) & 3)


def frag_col(lane, j):
    return 4 * ((lane >> 3) & 1) + 2 * (lane & 1) + j


TORCH = {"float": torch.float32, "half": torch.float16, "bfloat": torch.bfloat16}


def rnd(dtype: str, f: np.ndarray) -> np.ndarray:
    """float32 values rounded to `dtype` (round to nearest even), back as float32."""
    return torch.from_numpy(np.ascontiguousarray(f, dtype=np.float32)).to(TORCH[dtype]).float().numpy()


def mma(A, B, C, out: str) -> np.ndarray:
    """The emulator's multiply: float32 products and sums, k increasing from C, then rounded to `out`."""
    acc = np.asarray(C, dtype=np.float32).copy()
    for kk in range(8):
        acc = (acc + (np.float32(1) * A[:, kk:kk + 1] * B[kk:kk + 1, :]).astype(np.float32)).astype(np.float32)
    return rnd(out, acc)


def inputs(seed, n, dtype):
    rng = np.random.default_rng(seed)
    return [rnd(dtype, rng.standard_normal((8, 8)).astype(np.float32)) for _ in range(n)]


# ---------------------------------------------------------------------------------------------------------
# chains: results as A, B and C of later multiplies, copies, per-lane operand choices

CHAIN = msl("""
template <typename T>
void chain(device const T* x, device T* out, uint lane) {
    simdgroup_matrix<T, 8, 8> a, b, c, d, e;
    simdgroup_load(a, x, 8);
    simdgroup_load(b, x + 64, 8);
    simdgroup_load(c, x + 128, 8);
    simdgroup_multiply_accumulate(d, a, b, c);              // d = a b + c            (pending)
    simdgroup_matrix<T, 8, 8> dcopy = d;                    // a copy of a pending result
    simdgroup_multiply_accumulate(e, d, a, dcopy);          // e = d a + d            (A and C pending)
    simdgroup_multiply_accumulate(d, b, e, d);              // d = b e + d            (B and C pending, d is c)
    simdgroup_store(d, out, 8);
    simdgroup_store(dcopy, out + 64, 8);                    // the copy kept the first d
    // operand C differs per lane: even lanes pass e (pending), odd lanes dcopy, lanes >= 24 their own elements
    simdgroup_matrix<T, 8, 8> own;
    own.thread_elements()[0] = T(lane);
    own.thread_elements()[1] = T(-1.0f * lane);
    simdgroup_matrix<T, 8, 8> f;
    simdgroup_multiply_accumulate(f, a, a, lane >= 24 ? own : (lane & 1) ? dcopy : e);
    simdgroup_store(f, out + 128, 8);
    // A differs per lane between two loaded tiles: lanes < 16 a, others c
    simdgroup_matrix<T, 8, 8> g;
    simdgroup_multiply(g, lane < 16 ? a : c, b);
    simdgroup_store(g, out + 192, 8);
    simdgroup_store(e, out + 256, 8);
}

kernel void chains(device const float* xf [[buffer(0)]], device float* of [[buffer(1)]],
                   device const half* xh [[buffer(2)]], device half* oh [[buffer(3)]],
                   device const bfloat* xb [[buffer(4)]], device bfloat* ob [[buffer(5)]],
                   uint lane [[thread_index_in_simdgroup]]) {
    chain(xf, of, lane);
    chain(xh, oh, lane);
    chain(xb, ob, lane);
}
""")


def _per_lane(mats_by_lane) -> np.ndarray:
    """The 8x8 matrix whose lane-l elements come from mats_by_lane(l)."""
    out = np.zeros((8, 8), np.float32)
    for lane in range(32):
        m = mats_by_lane(lane)
        for j in range(2):
            out[frag_row(lane), frag_col(lane, j)] = m[frag_row(lane), frag_col(lane, j)]
    return out


def _chain_model(t, x):
    a, b, c = x
    d1 = mma(a, b, c, t)
    e = mma(d1, a, d1, t)
    d2 = mma(b, e, d1, t)
    own = np.zeros((8, 8), np.float32)
    for lane in range(32):
        own[frag_row(lane), frag_col(lane, 0)] = lane
        own[frag_row(lane), frag_col(lane, 1)] = -lane
    cmix = _per_lane(lambda lane: own if lane >= 24 else d1 if lane & 1 else e)
    f = mma(a, a, rnd(t, cmix), t)
    g = mma(_per_lane(lambda lane: a if lane < 16 else c), b, np.zeros((8, 8), np.float32), t)
    return [d2, d1, f, g, e]


@pytest.mark.parametrize("schedule", ["forward", "reverse", "random:3"])
def test_chains_copies_and_per_lane_operands(emu, schedule):
    k = emu.compile_msl(CHAIN, "chains")
    bufs, xs = [], {}
    for i, t in enumerate(("float", "half", "bfloat")):
        x = [v * 0.5 for v in inputs(10 + i, 3, t)]
        xs[t] = x
        bufs += [torch.from_numpy(np.stack(x)).to(TORCH[t]), torch.zeros(5, 8, 8, dtype=TORCH[t])]
    k.launch(grid=1, threadgroup=32, buffers=bufs, schedule=schedule)
    for i, t in enumerate(("float", "half", "bfloat")):
        got = bufs[2 * i + 1].float().numpy()
        for n, want in enumerate(_chain_model(t, xs[t])):
            np.testing.assert_array_equal(got[n], want, err_msg=f"{t} result {n}")


# ---------------------------------------------------------------------------------------------------------
# a run of multiplies longer than the op window, half accumulator, several simdgroups and threadgroups

LONG = msl("""
kernel void long_run(device const half* x [[buffer(0)]], device half* out [[buffer(1)]],
                     constant uint& iters [[buffer(2)]],
                     uint sg [[simdgroup_index_in_threadgroup]], uint3 tg [[threadgroup_position_in_grid]],
                     uint nsg [[simdgroups_per_threadgroup]]) {
    simdgroup_half8x8 a, b, acc = make_filled_simdgroup_matrix<half, 8, 8>(half(0.0f));
    simdgroup_load(a, x + 64 * sg, 8);
    simdgroup_load(b, x + 64 * (sg + 1), 8);
    for (uint i = 0; i < iters; ++i) {
        simdgroup_multiply_accumulate(acc, a, b, acc);
        if (i % 7 == 3)
            simdgroup_load(b, x + 64 * ((i + sg) % 5), 8);
    }
    simdgroup_store(acc, out + 64 * (tg.x * nsg + sg), 8);
}
""")


def test_run_longer_than_the_op_window(emu):
    iters = 300  # > TT_SGM_WINDOW (128) ops issued before any lane reads a result
    k = emu.compile_msl(LONG, "long_run")
    x = np.stack(inputs(4, 6, "half")) * 0.25
    out = torch.zeros(2 * 2, 8, 8, dtype=torch.float16)
    k.launch(grid=2, threadgroup=64, buffers=[torch.from_numpy(x).half(), out, emu.Scalar(iters, "uint")])
    for tg in range(2):
        for sg in range(2):
            a, b = rnd("half", x[sg]), rnd("half", x[sg + 1])
            acc = np.zeros((8, 8), np.float32)
            for i in range(iters):
                acc = mma(a, b, acc, "half")
                if i % 7 == 3:
                    b = rnd("half", x[(i + sg) % 5])
            np.testing.assert_array_equal(out[tg * 2 + sg].float().numpy(), acc)


# ---------------------------------------------------------------------------------------------------------
# per-lane reads and loads

ONE_LANE_READS = msl("""
kernel void one_lane(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                     uint lane [[thread_index_in_simdgroup]]) {
    simdgroup_float8x8 a, d;
    simdgroup_load(a, x, 8);
    simdgroup_multiply(d, a, a);
    if (lane == 0)                             // only lane 0 reads the (pending) result: not a SIMD operation
        out[0] = d.thread_elements()[0];
    if (lane == 31)
        out[1] = d.thread_elements()[1];
}
""")


def test_pending_result_read_by_some_lanes_only(emu):
    k = emu.compile_msl(ONE_LANE_READS, "one_lane")
    (x,) = inputs(5, 1, "float")
    out = torch.zeros(2)
    k.launch(grid=1, threadgroup=32, buffers=[torch.from_numpy(x), out])
    d = mma(x, x, np.zeros((8, 8), np.float32), "float")
    assert out[0].item() == d[frag_row(0), frag_col(0, 0)]
    assert out[1].item() == d[frag_row(31), frag_col(31, 1)]


NONUNIFORM_LOAD = msl("""
kernel void nonuniform(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                       uint lane [[thread_index_in_simdgroup]]) {
    simdgroup_float8x8 m;
    // lanes pass different arguments: each lane reads its own two elements with its own arguments
    simdgroup_load(m, x + (lane & 3), 8 + (lane >> 4), ulong2{lane % 2, 0}, lane % 3 == 0);
    out[2 * lane] = m.thread_elements()[0];
    out[2 * lane + 1] = m.thread_elements()[1];
}
""")


def test_load_with_per_lane_arguments(emu):
    k = emu.compile_msl(NONUNIFORM_LOAD, "nonuniform")
    x = np.arange(200, dtype=np.float32)
    out = torch.zeros(64)
    k.launch(grid=1, threadgroup=32, buffers=[torch.from_numpy(x), out])
    for lane in range(32):
        base, ld, ox, transpose = lane & 3, 8 + (lane >> 4), lane % 2, lane % 3 == 0
        for j in range(2):
            r, c = frag_row(lane), frag_col(lane, j)
            off = (c * ld + ox + r) if transpose else (r * ld + ox + c)
            assert out[2 * lane + j].item() == x[base + off], (lane, j)


# ---------------------------------------------------------------------------------------------------------
# errors: nothing that a rendezvous per op reported goes unreported

SKIPPED_AT_BARRIER = msl("""
kernel void skipped(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                    uint lane [[thread_index_in_simdgroup]]) {
    simdgroup_float8x8 a, d;
    simdgroup_load(a, x, 8);
    if (lane < 16)
        simdgroup_multiply(d, a, a);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[lane] = 1.0f;
}
""")

SKIPPED_AT_SIMD = msl("""
kernel void skipped_simd(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                         uint lane [[thread_index_in_simdgroup]]) {
    simdgroup_float8x8 a;
    if (lane >= 8)
        simdgroup_load(a, x, 8);
    out[lane] = simd_sum(1.0f);
}
""")

RETURNS_BEFORE_MULTIPLY = msl("""
kernel void returns(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                    uint lane [[thread_index_in_simdgroup]]) {
    simdgroup_float8x8 a, d;
    simdgroup_load(a, x, 8);
    if (lane == 5)
        return;
    simdgroup_multiply(d, a, a);
    simdgroup_store(d, out, 8);
}
""")

READ_NEVER_COMPUTED = msl("""
kernel void never(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                  uint lane [[thread_index_in_simdgroup]]) {
    simdgroup_float8x8 a, d;
    simdgroup_load(a, x, 8);
    if (lane < 16) {
        simdgroup_multiply(d, a, a);
        out[lane] = d.thread_elements()[0];       // waits for lanes 16-31, which never multiply
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
}
""")


def _fails(emu, src, name, threads=32):
    k = emu.compile_msl(src, name)
    out = torch.zeros(64)
    with pytest.raises(emu.EmulatorLaunchError) as ei:
        k.launch(grid=1, threadgroup=threads, buffers=[torch.zeros(64), out])
    assert torch.count_nonzero(out) == 0  # nothing copied back
    return ei.value


def test_op_skipped_by_some_lanes_before_a_barrier(emu):
    e = _fails(emu, SKIPPED_AT_BARRIER, "skipped")
    assert e.kind == "divergence"
    assert "threads 0-15 issued simdgroup_multiply_accumulate" in str(e) and "threads 16-31" in str(e)
    assert "threadgroup barrier" in str(e)
    assert line_of(SKIPPED_AT_BARRIER, "simdgroup_multiply(") in e.msl_lines


def test_op_skipped_by_some_lanes_before_a_simd_function(emu):
    e = _fails(emu, SKIPPED_AT_SIMD, "skipped_simd")
    assert e.kind == "divergence"
    assert "threads 8-31 issued simdgroup_load" in str(e) and "threads 0-7" in str(e)
    assert line_of(SKIPPED_AT_SIMD, "simdgroup_load") in e.msl_lines


@pytest.mark.parametrize("schedule", ["forward", "reverse"])
def test_lane_returning_before_a_multiply(emu, schedule):
    k = emu.compile_msl(RETURNS_BEFORE_MULTIPLY, "returns")
    out = torch.zeros(64)
    with pytest.raises(emu.EmulatorLaunchError) as ei:
        k.launch(grid=1, threadgroup=32, buffers=[torch.zeros(64), out], schedule=schedule)
    e = ei.value
    assert e.kind == "simd" and "needs all 32 lanes" in str(e)
    assert line_of(RETURNS_BEFORE_MULTIPLY, "simdgroup_multiply(") in e.msl_lines
    assert torch.count_nonzero(out) == 0


def test_read_of_a_result_never_computed_is_a_deadlock(emu):
    e = _fails(emu, READ_NEVER_COMPUTED, "never")
    assert e.kind == "deadlock"
    assert "threads 0-15 wait at the result of a simdgroup_multiply_accumulate" in str(e)
    assert line_of(READ_NEVER_COMPUTED, "thread_elements") in e.msl_lines


TILE_OOB = msl("""
kernel void tile_oob(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                     uint lane [[thread_index_in_simdgroup]]) {
    simdgroup_float8x8 m;
    simdgroup_load(m, x, 8);                     // x has 60 elements: row 7, columns 4-7 are past its end
    out[lane] = m.thread_elements()[0];
}
""")


def test_whole_tile_load_out_of_bounds_names_the_lane(emu):
    k = emu.compile_msl(TILE_OOB, "tile_oob")
    with pytest.raises(emu.EmulatorLaunchError) as ei:
        k.launch(grid=1, threadgroup=32, buffers=[torch.zeros(60), torch.zeros(32)])
    e = ei.value
    assert e.kind == "out_of_bounds"
    # element 60 (row 7, column 4) is lane 30's first element
    assert e.thread == 30 and frag_row(30) == 7 and frag_col(30, 0) == 4
    assert line_of(TILE_OOB, "simdgroup_load") in e.msl_lines


STORE_OOB = msl("""
kernel void store_oob(device const float* x [[buffer(0)]], device float* out [[buffer(1)]]) {
    simdgroup_float8x8 a, d;
    simdgroup_load(a, x, 8);
    simdgroup_multiply(d, a, a);
    simdgroup_store(d, out, 8);                  // out has 60 elements
}
""")


def test_store_of_a_deferred_result_out_of_bounds(emu):
    k = emu.compile_msl(STORE_OOB, "store_oob")
    with pytest.raises(emu.EmulatorLaunchError) as ei:
        k.launch(grid=1, threadgroup=32, buffers=[torch.zeros(64), torch.zeros(60)])
    e = ei.value
    assert e.kind == "out_of_bounds" and e.is_write
    # lanes store their own elements: lanes 30 and 31 hold elements 60-63 (row 7, columns 4-7); which of them
    # stores first depends on which lane completed the multiply
    assert e.thread in (30, 31)
    assert line_of(STORE_OOB, "simdgroup_store") in e.msl_lines

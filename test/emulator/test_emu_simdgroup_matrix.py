"""simdgroup_matrix<T, 8, 8>: fragment layout, load/store (strides, origins, transposes, address spaces),
multiply-accumulate over element types, a multi-simdgroup GEMM, strictness and compile errors.

The fragment layout checked here is the one in include/metal_simdgroup_matrix.h (the one MLX and
metal-flash-attention rely on; the MSL spec leaves it unspecified): lane l holds row 4*(l>>4) + ((l>>1)&3) and columns 4*((l>>3)&1) + 2*(l&1) + j for
thread_elements()[j]. `matrix_origin` is (x = column, y = row) in the memory being read or written; with
`transpose_matrix` the 8x8 tile at that origin is transposed (element (r, c) of the matrix lives at
(origin.y + c, origin.x + r) in memory).
"""
import numpy as np
import pytest
import torch

from support.emulator_msl import line_of, msl

U32 = 2.0 ** -24  # unit roundoff of float
U16 = 2.0 ** -11  # unit roundoff of half


def frag_row(lane):
    return 4 * (lane >> 4) + ((lane >> 1) & 3)


def frag_col(lane, j):
    return 4 * ((lane >> 3) & 1) + 2 * (lane & 1) + j


TORCH = {"float": torch.float32, "half": torch.float16, "bfloat": torch.bfloat16}

# ---------------------------------------------------------------------------------------------------------
# fragment layout

LAYOUT = msl("""
template <typename T>
void elements_of_iota(device const T* iota, device float* out) {
    simdgroup_matrix<T, 8, 8> m;
    simdgroup_load(m, iota, 8);
    out[0] = float(m.thread_elements()[0]);
    out[1] = float(m.thread_elements()[1]);
}

template <typename T>
void store_lane_ids(device T* dst, uint lane) {
    simdgroup_matrix<T, 8, 8> m;
    m.thread_elements()[0] = T(2 * lane);
    m.thread_elements()[1] = T(2 * lane + 1);
    simdgroup_store(m, dst, 8);
}

kernel void layout(device const float* iota_f [[buffer(0)]],
                   device const half* iota_h [[buffer(1)]],
                   device const bfloat* iota_b [[buffer(2)]],
                   device float* elems [[buffer(3)]],
                   device float* ids_f [[buffer(4)]],
                   device half* ids_h [[buffer(5)]],
                   device bfloat* ids_b [[buffer(6)]],
                   uint lane [[thread_index_in_simdgroup]],
                   uint sg [[simdgroup_index_in_threadgroup]],
                   uint tid [[thread_index_in_threadgroup]],
                   uint nthreads [[threads_per_threadgroup]]) {
    elements_of_iota(iota_f, elems + 2 * tid);
    elements_of_iota(iota_h, elems + 2 * (nthreads + tid));
    elements_of_iota(iota_b, elems + 2 * (2 * nthreads + tid));
    store_lane_ids(ids_f + 64 * sg, lane);
    store_lane_ids(ids_h + 64 * sg, lane);
    store_lane_ids(ids_b + 64 * sg, lane);
}
""")


def test_thread_elements_layout(emu):
    """After simdgroup_load of an iota matrix (value 8*row + col), thread_elements()[j] of lane l is element
    (row(l), col(l, j)); simdgroup_store of per-lane values writes them back to the same places. Checked for
    float, half and bfloat fragments and in both simdgroups of a 64-thread threadgroup."""
    k = emu.compile_msl(LAYOUT, "layout")
    nsg = 2
    n = 32 * nsg
    iota = torch.arange(64, dtype=torch.float32)
    elems = torch.full((3 * n * 2, ), -1.0)
    ids = {t: torch.full((nsg * 64, ), -1.0, dtype=d) for t, d in TORCH.items()}
    k.launch(grid=1, threadgroup=n, buffers=[iota, iota.half(), iota.bfloat16(), elems, ids["float"],
                                            ids["half"], ids["bfloat"]])
    got = elems.view(3, nsg, 32, 2).numpy().astype(np.int64)
    lanes = np.arange(32)
    for j in range(2):
        np.testing.assert_array_equal(got[..., j] // 8, np.broadcast_to(frag_row(lanes), (3, nsg, 32)))
        np.testing.assert_array_equal(got[..., j] % 8, np.broadcast_to(frag_col(lanes, j), (3, nsg, 32)))
    owner = np.full((8, 8), -1)
    for lane in range(32):
        for j in range(2):
            owner[frag_row(lane), frag_col(lane, j)] = 2 * lane + j
    assert sorted(owner.ravel()) == list(range(64))  # every element has exactly one owner
    for t in TORCH:
        np.testing.assert_array_equal(ids[t].float().view(nsg, 8, 8).numpy(), np.broadcast_to(owner, (nsg, 8, 8)))


FILL = msl("""
kernel void fill(device const float* x [[buffer(0)]],
                 device float* out [[buffer(1)]],
                 device half* out_h [[buffer(2)]]) {
    simdgroup_float8x8 five = make_filled_simdgroup_matrix<float, 8, 8>(5.0f);
    simdgroup_store(five, out, 8);
    simdgroup_half8x8 diag = simdgroup_half8x8(-2.0f);       // diagonal matrix constructor
    simdgroup_store(diag, out_h, 8);
    simdgroup_float8x8 eye(1.0f), X;
    simdgroup_load(X, x, 8);
    simdgroup_multiply(X, X, eye);                            // d aliases a
    simdgroup_store(X, out + 64, 8);
    simdgroup_multiply_accumulate(X, X, X, X);                // d aliases a, b and c
    simdgroup_store(X, out + 128, 8);
}
""")


def test_filled_diagonal_and_aliasing(emu):
    k = emu.compile_msl(FILL, "fill")
    x = torch.arange(64, dtype=torch.float32).view(8, 8) % 5 - 2  # small integers: every result exact
    out = torch.zeros(3 * 64)
    out_h = torch.zeros(64, dtype=torch.float16)
    k.launch(grid=1, threadgroup=32, buffers=[x, out, out_h])
    o = out.view(3, 8, 8)
    assert torch.equal(o[0], torch.full((8, 8), 5.0))
    assert torch.equal(out_h.view(8, 8), -2 * torch.eye(8, dtype=torch.float16))
    assert torch.equal(o[1], x)
    assert torch.equal(o[2], x @ x + x)


# ---------------------------------------------------------------------------------------------------------
# simdgroup_load / simdgroup_store: strides > 8, nonzero origins, transposes, address spaces

SRC_ROWS, SRC_LD = 24, 20  # source matrix in memory: 24 rows, 20 elements per row
LOAD_ORIGIN = (5, 3)  # (x = column, y = row)
DST_ROWS, DST_LD = 16, 12  # each destination area: 16 rows, 12 elements per row
STORE_ORIGIN = (2, 6)
# (transpose on load, transpose on store) for the four destination areas
TRANSPOSES = [(False, False), (True, False), (False, True), (True, True)]


def _load_store_body(load_ptr, store_ptr, t):
    lines = []
    for area, (tl_, ts) in enumerate(TRANSPOSES):
        lines.append(f"    {{ simdgroup_matrix<{t}, 8, 8> m;\n"
                     f"      simdgroup_load(m, {load_ptr}, {SRC_LD}, ulong2{{{LOAD_ORIGIN[0]}, {LOAD_ORIGIN[1]}}}, "
                     f"{'true' if tl_ else 'false'});\n"
                     f"      simdgroup_store(m, {store_ptr} + {area * DST_ROWS * DST_LD}, {DST_LD}, "
                     f"ulong2{{{STORE_ORIGIN[0]}, {STORE_ORIGIN[1]}}}, {'true' if ts else 'false'}); }}")
    return "\n".join(lines)


def _load_store_kernel(case, t):
    n_src, n_dst = SRC_ROWS * SRC_LD, 4 * DST_ROWS * DST_LD
    copy_in = (f"    threadgroup {t} tile[{n_src}];\n"
               f"    for (uint i = tid; i < {n_src}; i += 32) tile[i] = src[i];\n"
               "    threadgroup_barrier(mem_flags::mem_threadgroup);\n")
    if case == "device->threadgroup":
        return msl(f"""
kernel void load_store(device const {t}* src [[buffer(0)]],
                       device {t}* dst [[buffer(1)]],
                       uint tid [[thread_index_in_threadgroup]]) {{
    threadgroup {t} tile[{n_dst}];
    for (uint i = tid; i < {n_dst}; i += 32) tile[i] = dst[i];
    threadgroup_barrier(mem_flags::mem_threadgroup);
{_load_store_body("src", "tile", t)}
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint i = tid; i < {n_dst}; i += 32) dst[i] = tile[i];
}}
""")
    if case == "threadgroup->device":
        return msl(f"""
kernel void load_store(device const {t}* src [[buffer(0)]],
                       device {t}* dst [[buffer(1)]],
                       uint tid [[thread_index_in_threadgroup]]) {{
{copy_in}{_load_store_body("tile", "dst", t)}
}}
""")
    assert case == "constant->device"
    return msl(f"""
kernel void load_store(constant {t}* src [[buffer(0)]],
                       device {t}* dst [[buffer(1)]]) {{
{_load_store_body("src", "dst", t)}
}}
""")


@pytest.mark.parametrize("case,t", [("device->threadgroup", "float"), ("threadgroup->device", "half"),
                                    ("constant->device", "bfloat")])
def test_load_store_stride_origin_transpose(emu, case, t):
    k = emu.compile_msl(_load_store_kernel(case, t), "load_store")
    rng = np.random.default_rng(1)
    src = torch.from_numpy(rng.standard_normal((SRC_ROWS, SRC_LD)).astype(np.float32)).to(TORCH[t])
    dst = torch.full((4, DST_ROWS, DST_LD), 99.0, dtype=TORCH[t])
    k.launch(grid=1, threadgroup=32, buffers=[src, dst])
    s = src.float().numpy()
    (lx, ly), (sx, sy) = LOAD_ORIGIN, STORE_ORIGIN
    for area, (tl_, ts) in enumerate(TRANSPOSES):
        m = s[ly:ly + 8, lx:lx + 8]
        m = m.T if tl_ else m
        expect = np.full((DST_ROWS, DST_LD), 99.0, dtype=np.float32)
        expect[sy:sy + 8, sx:sx + 8] = m.T if ts else m  # everything outside the tile untouched
        np.testing.assert_array_equal(dst[area].float().numpy(), expect, err_msg=f"transposes {tl_, ts}")


# ---------------------------------------------------------------------------------------------------------
# multiply-accumulate over element types

MMA = msl("""
template <typename TD, typename TA, typename TB, typename TC>
void mma(device const TA* a, device const TB* b, device const TC* c, device TD* d) {
    simdgroup_matrix<TA, 8, 8> A;
    simdgroup_matrix<TB, 8, 8> B;
    simdgroup_matrix<TC, 8, 8> C;
    simdgroup_matrix<TD, 8, 8> D;
    simdgroup_load(A, a);
    simdgroup_load(B, b);
    simdgroup_load(C, c);
    simdgroup_multiply_accumulate(D, A, B, C);
    simdgroup_store(D, d);
}

template <typename TD, typename TI>
void mul(device const TI* a, device const TI* b, device TD* d) {
    simdgroup_matrix<TI, 8, 8> A, B;
    simdgroup_matrix<TD, 8, 8> D;
    simdgroup_load(A, a);
    simdgroup_load(B, b);
    simdgroup_multiply(D, A, B);
    simdgroup_store(D, d);
}

kernel void mma_types(device const float* a_f [[buffer(0)]], device const float* b_f [[buffer(1)]],
                      device const half* a_h [[buffer(2)]], device const half* b_h [[buffer(3)]],
                      device const bfloat* a_b [[buffer(4)]], device const bfloat* b_b [[buffer(5)]],
                      device const float* c_f [[buffer(6)]], device const half* c_h [[buffer(7)]],
                      device float* d_f [[buffer(8)]],      // 5 results with a float accumulator
                      device half* d_h [[buffer(9)]]) {     // 5 results with a half accumulator
    mma(a_f, b_f, c_f, d_f);
    mma(a_h, b_h, c_f, d_f + 64);
    mma(a_b, b_b, c_f, d_f + 128);
    mma(a_h, b_b, c_f, d_f + 192);                  // mixed operand types
    mul<float>(a_h, b_h, d_f + 256);
    mma(a_f, b_f, c_h, d_h);
    mma(a_h, b_h, c_h, d_h + 64);
    mma(a_b, b_b, c_h, d_h + 128);
    mma(a_h, b_h, c_f, d_h + 192);                  // float C, half D
    mul<half>(a_b, b_b, d_h + 256);
}
""")


def test_multiply_accumulate_element_types(emu):
    """D = A @ B + C against numpy in float64.

    Tolerances: with a float D every product and partial sum is rounded to float at most 9 times, so
    |D - ref| <= 10 u32 (|A| @ |B| + |C|) (u32 = 2^-24; the bound holds for any summation order, so also on a
    GPU). With a half D the float result is rounded once more: add u16 |ref| (u16 = 2^-11) and 2^-24 for
    results in half's subnormal range."""
    k = emu.compile_msl(MMA, "mma_types")
    rng = np.random.default_rng(2)

    def rand(t):
        return torch.from_numpy(rng.standard_normal((8, 8)).astype(np.float32)).to(TORCH[t])

    a = {t: rand(t) for t in TORCH}
    b = {t: rand(t) for t in TORCH}
    c_f, c_h = rand("float"), rand("half")
    d_f = torch.full((5, 8, 8), float("nan"))
    d_h = torch.full((5, 8, 8), float("nan"), dtype=torch.float16)
    k.launch(grid=1, threadgroup=32, buffers=[a["float"], b["float"], a["half"], b["half"], a["bfloat"],
                                            b["bfloat"], c_f, c_h, d_f, d_h])
    f64 = lambda x: x.double().numpy()  # noqa: E731
    zero = torch.zeros(8, 8)
    cases_f = [(a["float"], b["float"], c_f), (a["half"], b["half"], c_f), (a["bfloat"], b["bfloat"], c_f),
               (a["half"], b["bfloat"], c_f), (a["half"], b["half"], zero)]
    cases_h = [(a["float"], b["float"], c_h), (a["half"], b["half"], c_h), (a["bfloat"], b["bfloat"], c_h),
               (a["half"], b["half"], c_f), (a["bfloat"], b["bfloat"], zero)]
    for out, cases, half_out in ((d_f, cases_f, False), (d_h, cases_h, True)):
        for i, (A, B, C) in enumerate(cases):
            ref = f64(A) @ f64(B) + f64(C)
            tol = 10 * U32 * (np.abs(f64(A)) @ np.abs(f64(B)) + np.abs(f64(C)))
            if half_out:
                tol += U16 * np.abs(ref) + U32
            err = np.abs(f64(out[i]) - ref)
            assert (err <= tol).all(), f"{'half' if half_out else 'float'} D, case {i}: max err {err.max()}"


def test_multiply_accumulate_emulator_numerics(emu):
    """The emulator's exact model (emulator-specific, not a Metal guarantee): products and sums in float, k in
    increasing order starting from C, one rounding to D's type."""
    k = emu.compile_msl(MMA, "mma_types")
    rng = np.random.default_rng(3)
    r = lambda d: torch.from_numpy(rng.standard_normal((8, 8)).astype(np.float32)).to(d)  # noqa: E731
    bufs = [r(torch.float32), r(torch.float32), r(torch.float16), r(torch.float16), r(torch.bfloat16),
            r(torch.bfloat16), r(torch.float32), r(torch.float16), torch.zeros(5, 8, 8),
            torch.zeros(5, 8, 8, dtype=torch.float16)]
    k.launch(grid=1, threadgroup=32, buffers=bufs)

    def model(A, B, C, out_dtype):
        A, B, C = (x.float().numpy() for x in (A, B, C))
        acc = C.astype(np.float32).copy()
        for kk in range(8):
            acc = (acc + (A[:, kk:kk + 1] * B[kk:kk + 1, :]).astype(np.float32)).astype(np.float32)
        return torch.from_numpy(acc).to(out_dtype)

    assert torch.equal(bufs[8][1], model(bufs[2], bufs[3], bufs[6], torch.float32))
    assert torch.equal(bufs[9][2], model(bufs[4], bufs[5], bufs[7], torch.float16))


# ---------------------------------------------------------------------------------------------------------
# a 64x64 GEMM over several simdgroups

GEMM = msl("""
// C (64x64, float) = A (64x64, half) @ B (64x64, half). 2x2 threadgroups of 4 simdgroups; a threadgroup
// computes a 32x32 tile, each simdgroup a 16x16 quarter of it (2x2 fragments). A and B tiles are staged in
// threadgroup memory (16-wide K steps); with B_TRANSPOSED, B is given as B^T (row n holds column n of B) and
// read from device memory with transposed simdgroup_loads.
kernel void gemm64(device const half* A [[buffer(0)]],
                   device const half* B [[buffer(1)]],
                   device float* C [[buffer(2)]],
                   uint2 tg [[threadgroup_position_in_grid]],
                   uint tid [[thread_index_in_threadgroup]],
                   uint sg [[simdgroup_index_in_threadgroup]]) {
    constexpr uint N = 64, BM = 32, BN = 32, BK = 16;
    threadgroup half As[BM * BK];
    threadgroup half Bs[BK * BN];
    const uint row0 = tg.y * BM, col0 = tg.x * BN;
    const uint sr = (sg / 2) * 16, sc = (sg % 2) * 16;
    simdgroup_float8x8 acc[2][2];
    for (uint i = 0; i < 2; ++i)
        for (uint j = 0; j < 2; ++j)
            acc[i][j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    for (uint k0 = 0; k0 < N; k0 += BK) {
        for (uint i = tid; i < BM * BK; i += 128)
            As[i] = A[(row0 + i / BK) * N + k0 + i % BK];
#if !B_TRANSPOSED
        for (uint i = tid; i < BK * BN; i += 128)
            Bs[i] = B[(k0 + i / BN) * N + col0 + i % BN];
#endif
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (uint kk = 0; kk < BK; kk += 8) {
            simdgroup_half8x8 a[2], b[2];
            for (uint i = 0; i < 2; ++i)
                simdgroup_load(a[i], As, BK, ulong2{kk, sr + 8 * i});
            for (uint j = 0; j < 2; ++j) {
#if B_TRANSPOSED
                simdgroup_load(b[j], B, N, ulong2{k0 + kk, col0 + sc + 8 * j}, true);
#else
                simdgroup_load(b[j], Bs, BN, ulong2{sc + 8 * j, kk});
#endif
            }
            for (uint i = 0; i < 2; ++i)
                for (uint j = 0; j < 2; ++j)
                    simdgroup_multiply_accumulate(acc[i][j], a[i], b[j], acc[i][j]);
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    for (uint i = 0; i < 2; ++i)
        for (uint j = 0; j < 2; ++j)
            simdgroup_store(acc[i][j], C, N, ulong2{col0 + sc + 8 * j, row0 + sr + 8 * i});
}
""")


@pytest.mark.parametrize("b_transposed,schedule", [(False, "forward"), (False, "random:7"), (True, "reverse")])
def test_gemm_64x64_several_simdgroups(emu, b_transposed, schedule):
    src = GEMM.replace("kernel void gemm64", f"#define B_TRANSPOSED {int(b_transposed)}\nkernel void gemm64", 1)
    k = emu.compile_msl(src, "gemm64")
    torch.manual_seed(0)
    a = torch.randn(64, 64).half()
    b = torch.randn(64, 64).half()
    c = torch.full((64, 64), float("nan"))
    k.launch(grid=(2, 2), threadgroup=128, buffers=[a, b.t().contiguous() if b_transposed else b, c],
             schedule=schedule)
    ref = a.double() @ b.double()
    tol = 66 * U32 * (a.double().abs() @ b.double().abs())  # 64 products + 64 sums in float, any order
    assert ((c.double() - ref).abs() <= tol).all()


# ---------------------------------------------------------------------------------------------------------
# strictness: every simdgroup_matrix operation needs all 32 lanes

DIVERGENT_EXIT = msl("""
kernel void half_lanes(device float* x [[buffer(0)]],
                       uint lane [[thread_index_in_simdgroup]]) {
    if (lane < 16) {
        simdgroup_float8x8 m;
        simdgroup_load(m, x, 8);
        x[lane] = m.thread_elements()[0];
    }
}
""")

DIVERGENT_SITES = msl("""
kernel void two_sites(device float* x [[buffer(0)]],
                      uint lane [[thread_index_in_simdgroup]]) {
    simdgroup_float8x8 m;
    if (lane < 16) {
        simdgroup_load(m, x, 8);
    } else {
        simdgroup_store(m, x + 64, 8);
    }
}
""")

DIVERGENT_BARRIER = msl("""
kernel void load_vs_barrier(device float* x [[buffer(0)]],
                            uint lane [[thread_index_in_simdgroup]]) {
    simdgroup_float8x8 m;
    if (lane < 16) {
        simdgroup_load(m, x, 8);
    } else {
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
}
""")

PARTIAL_SIMDGROUP = msl("""
kernel void partial(device float* x [[buffer(0)]],
                    uint sg [[simdgroup_index_in_threadgroup]]) {
    simdgroup_float8x8 a = make_filled_simdgroup_matrix<float, 8, 8>(1.0f), d;
    simdgroup_multiply_accumulate(d, a, a, a);
    simdgroup_store(d, x + 64 * sg, 8);
}
""")


def test_divergent_load_is_an_error_not_a_hang(emu):
    k = emu.compile_msl(DIVERGENT_EXIT, "half_lanes")
    x = torch.zeros(64)
    with pytest.raises(emu.EmulatorLaunchError) as ei:
        k.launch(grid=1, threadgroup=32, buffers=[x])
    e = ei.value
    assert e.kind == "simd"
    assert "simdgroup_load needs all 32 lanes" in str(e) and "0x0000ffff" in str(e)
    assert e.msl_lines == [line_of(DIVERGENT_EXIT, "simdgroup_load")]
    assert torch.count_nonzero(x) == 0  # nothing copied back


def test_divergent_matrix_ops_at_two_sites(emu):
    k = emu.compile_msl(DIVERGENT_SITES, "two_sites")
    with pytest.raises(emu.EmulatorLaunchError) as ei:
        k.launch(grid=1, threadgroup=32, buffers=[torch.zeros(128)])
    e = ei.value
    assert e.kind == "divergence"
    assert e.msl_lines == sorted([line_of(DIVERGENT_SITES, "simdgroup_load"),
                                  line_of(DIVERGENT_SITES, "simdgroup_store")])
    # lanes issue simdgroup_matrix operations without waiting for each other: the first lane at another call
    # site than the lanes before it is reported
    assert "threads 0-15 issued simdgroup_load" in str(e) and "thread 16 issues simdgroup_store" in str(e)


def test_matrix_op_against_barrier_deadlocks_reported(emu):
    k = emu.compile_msl(DIVERGENT_BARRIER, "load_vs_barrier")
    with pytest.raises(emu.EmulatorLaunchError) as ei:
        k.launch(grid=1, threadgroup=32, buffers=[torch.zeros(64)])
    assert ei.value.kind in ("deadlock", "divergence")
    assert line_of(DIVERGENT_BARRIER, "simdgroup_load") in ei.value.msl_lines


def test_partial_simdgroup_cannot_use_matrices(emu):
    """A 48-thread threadgroup: simdgroup 1 has 16 lanes, which is not enough for a simdgroup_matrix."""
    k = emu.compile_msl(PARTIAL_SIMDGROUP, "partial")
    with pytest.raises(emu.EmulatorLaunchError) as ei:
        k.launch(grid=1, threadgroup=48, buffers=[torch.zeros(128)])
    e = ei.value
    assert e.kind == "simd" and e.thread is not None and e.thread >= 32
    assert "needs all 32 lanes" in str(e)
    k.launch(grid=1, threadgroup=64, buffers=[torch.zeros(128)])  # two full simdgroups are fine


MIXED_INSTANTIATIONS = msl("""
template <typename T>
void mma_of(device float* out) {
    simdgroup_matrix<T, 8, 8> a = make_filled_simdgroup_matrix<T, 8, 8>(T(1));
    simdgroup_float8x8 d = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    simdgroup_multiply_accumulate(d, a, a, d);
    simdgroup_store(d, out, 8);
}

kernel void mixed(device float* out [[buffer(0)]],
                  uint lane [[thread_index_in_simdgroup]]) {
    if (lane < 16) {
        mma_of<float>(out);
    } else {
        mma_of<half>(out);
    }
}
""")


def test_lanes_in_different_instantiations_of_one_multiply_are_divergent(emu):
    """The multiply runs once for the whole simdgroup, from every lane's operands: lanes at the same call site
    (line and column) but in different template instantiations (element types) must not be mixed."""
    k = emu.compile_msl(MIXED_INSTANTIATIONS, "mixed")
    out = torch.zeros(64)
    with pytest.raises(emu.EmulatorLaunchError) as ei:
        k.launch(grid=1, threadgroup=32, buffers=[out])
    e = ei.value
    assert e.kind == "divergence" and "different instantiations" in str(e)
    assert line_of(MIXED_INSTANTIATIONS, "simdgroup_multiply_accumulate") in e.msl_lines
    assert torch.count_nonzero(out) == 0


# ---------------------------------------------------------------------------------------------------------
# compile errors

BAD = {
    "int elements": ("simdgroup_matrix<int, 8, 8> m;", "element type must be float, half or bfloat"),
    "16x16": ("simdgroup_matrix<float, 16, 16> m;", "8x8"),
    "pointer type": ("simdgroup_float8x8 m; simdgroup_load(m, xh, 8);", "no matching function"),
    "store to constant": ("simdgroup_float8x8 m; simdgroup_store(m, c, 8);", "no matching function"),
}


@pytest.mark.parametrize("what", list(BAD))
def test_bad_matrices_do_not_compile(emu, what):
    stmt, message = BAD[what]
    src = msl(f"""
kernel void bad(device float* x [[buffer(0)]],
                device half* xh [[buffer(1)]],
                constant float* c [[buffer(2)]]) {{
    {stmt}
}}
""")
    with pytest.raises(emu.EmulatorCompileError) as ei:
        emu.compile_msl(src, "bad")
    assert message in str(ei.value)
    assert line_of(src, stmt) in ei.value.msl_lines

// The kernels of the Metal device probe (tools/metal_device_probe.m): each measures one thing the backend's
// kernels rely on, on the GPU the probe finds. Their inputs are made from thread indices, so each kernel takes
// only its output buffer; what each output must be, and the grid each runs on, is in metal_device_probe.json
// beside this file, which the probe tool and test/emulator/test_metal_device_probe.py (the same kernels on the
// emulator) both compare against. Plain MSL, no version-dependent constructs: it compiles at every -std the
// backend targets.
#include <metal_stdlib>
using namespace metal;

// A plain dispatch: two threadgroups of 64 threads, threadgroup memory and a barrier. Thread 0 of each
// threadgroup writes the sum of (global thread index + 1) over its threadgroup.
kernel void probe_dispatch(device int* out [[buffer(0)]],
                           uint tid [[thread_index_in_threadgroup]],
                           uint group [[threadgroup_position_in_grid]],
                           uint threads [[threads_per_threadgroup]]) {
    threadgroup int values[64];
    values[tid] = int(group * threads + tid + 1);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (tid == 0) {
        int sum = 0;
        for (uint i = 0; i < threads; ++i) {
            sum += values[i];
        }
        out[group] = sum;
    }
}

// SIMD-group functions over one simdgroup of 32 threads, as the lowering uses them for reductions, scans and
// layout conversions: one row of 32 outputs (one per lane) for each function.
kernel void probe_simd_functions(device int* out [[buffer(0)]],
                                 uint lane_id [[thread_index_in_simdgroup]]) {
    int lane = int(lane_id);
    out[0 * 32 + lane] = simd_sum(lane + 1);
    out[1 * 32 + lane] = simd_prefix_exclusive_sum(lane);
    out[2 * 32 + lane] = simd_max(lane);
    out[3 * 32 + lane] = simd_shuffle(lane * 10, ushort((lane + 5) % 32));
    out[4 * 32 + lane] = simd_shuffle_xor(lane, ushort(5));
    out[5 * 32 + lane] = simd_broadcast(lane * lane, ushort(3));
    out[6 * 32 + lane] = int(simd_sum(float(lane) * 0.5f));
}

// An 8x8 product on simdgroup_matrix fragments: A[r][k] = r - k, B[k][c] = k + 2c, staged in threadgroup memory
// and loaded from there (as the lowering loads dot operands), C = A B stored to `out` row-major. Every value is
// an exact small integer; C is not symmetric, so a transposed operand or result shows. (Threadgroup arrays are
// declared in the kernels, where the specification declares them (4.4).)
template <typename T>
void probe_product(device float* out, threadgroup T* a, threadgroup T* b, uint lane) {
    for (uint i = lane; i < 64; i += 32) {
        int r = int(i / 8), c = int(i % 8);
        a[i] = T(r - c);
        b[i] = T(r + 2 * c);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    simdgroup_matrix<T, 8, 8> ma, mb;
    simdgroup_load(ma, a, 8);
    simdgroup_load(mb, b, 8);
    simdgroup_float8x8 mc = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    simdgroup_multiply_accumulate(mc, ma, mb, mc);
    simdgroup_store(mc, out, 8);
}

// float operands, float accumulator.
kernel void probe_simdgroup_matrix(device float* out [[buffer(0)]],
                                   uint lane [[thread_index_in_simdgroup]]) {
    threadgroup float a[64];
    threadgroup float b[64];
    probe_product(out, a, b, lane);
}

// half operands into a float accumulator, the form the lowering emits for float16 dots.
kernel void probe_simdgroup_matrix_half(device float* out [[buffer(0)]],
                                        uint lane [[thread_index_in_simdgroup]]) {
    threadgroup half a[64];
    threadgroup half b[64];
    probe_product(out, a, b, lane);
}

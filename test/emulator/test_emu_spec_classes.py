"""The compat header rejects what the Metal Shading Language Specification does not allow, one class of builtin at a
time (the classes of docs/mac.md's Metal surface; sections of the specification's version 4): a kernel the
emulator accepts is one the specification allows. Each test compiles one non-specification use and checks the
error names it and its MSL line."""
import pytest
import torch

from support.emulator_msl import line_of, msl


def _rejected(emu, body: str, needle: str, message: str):
    src = msl(body)
    with pytest.raises(emu.EmulatorCompileError) as ei:
        emu.compile_msl(src, "k")
    assert message in str(ei.value), str(ei.value)
    assert line_of(src, needle) in ei.value.msl_lines
    return ei.value


# 6.9.2 Table 6.14: SIMD-group permutes take integer or floating-point scalars and vectors, not bool, long, ulong
@pytest.mark.parametrize("ty,value,message", [
    ("bool", "lane != 0", "Metal has no SIMD-group shuffles or reductions of bool"),
    ("long", "long(lane)", "Metal has no 64-bit SIMD-group shuffles"),
    ("Pair", "Pair{1, 2}", "unsupported type for a Metal SIMD-group function"),
])
def test_simd_permutes_take_integers_and_floats_only(emu, ty, value, message):
    _rejected(emu, f"""
struct Pair {{ short a; short b; }};
kernel void k(device int* out [[buffer(0)]], uint lane [[thread_index_in_simdgroup]]) {{
    {ty} v = simd_shuffle({ty}({value}), ushort(lane ^ 1));
    out[lane] = sizeof(v);
}}
""", "simd_shuffle(", message)


# 6.9.2 Table 6.15: simd_max/min/sum/product take T (no bool); simd_and/or/xor integers only
@pytest.mark.parametrize("call,message", [
    ("simd_max(lane != 0)", "Metal has no SIMD-group shuffles or reductions of bool"),
    ("simd_and(float(lane))", "simd_and exists for integer types only"),
    ("simd_sum(ulong(lane))", "Metal has no 64-bit SIMD-group shuffles or reductions"),
])
def test_simd_reductions_take_their_types_only(emu, call, message):
    _rejected(emu, f"""
kernel void k(device int* out [[buffer(0)]], uint lane [[thread_index_in_simdgroup]]) {{
    out[lane] = int({call});
}}
""", call.split("(")[0] + "(", message)


# 6.15.1: memory_order has relaxed and seq_cst; atomic functions take relaxed only
@pytest.mark.parametrize("order,message", [
    ("memory_order_seq_cst", "Metal atomic functions support memory_order_relaxed only"),
    ("memory_order_acquire", "use of undeclared identifier 'memory_order_acquire'"),
])
def test_atomic_functions_take_relaxed_order_only(emu, order, message):
    _rejected(emu, f"""
kernel void k(device atomic_int* c [[buffer(0)]]) {{
    atomic_fetch_add_explicit(c, 1, {order});
}}
""", order, message)


# 6.15.4: which atomic type each function takes, and where
@pytest.mark.parametrize("body,needle,message", [
    ("atomic_fetch_and_explicit((device atomic_float*)p, 1.0f, memory_order_relaxed);", "atomic_fetch_and",
     "this atomic operation exists for atomic_int and atomic_uint only"),
    ("uint e = 0u; atomic_compare_exchange_strong_explicit((device atomic_uint*)p, &e, 1u, memory_order_relaxed, "
     "memory_order_relaxed);", "strong", "use of undeclared identifier 'atomic_compare_exchange_strong_explicit'"),
    ("atomic_fetch_add_explicit(p, 1.0f, memory_order_relaxed);", "atomic_fetch_add_explicit(p",
     "no matching function for call to 'atomic_fetch_add_explicit'"),
])
def test_atomic_functions_take_their_atomic_types_only(emu, body, needle, message):
    _rejected(emu, f"""
kernel void k(device float* p [[buffer(0)]]) {{
    {body}
}}
""", needle, message)


# 6.15.4.6 and the feature set tables: 64-bit atomic min/max on Apple9 only (target.py GPU_FAMILIES)
_ULONG_MAX = """
kernel void k(device atomic_ulong* p [[buffer(0)]], device const ulong* v [[buffer(1)]],
              uint tid [[thread_index_in_threadgroup]]) {
    atomic_max_explicit(p, v[tid], memory_order_relaxed);
}
"""


def test_64_bit_atomic_min_max_exist_only_on_apple9(emu, monkeypatch):
    monkeypatch.setenv("TRITON_APPLE_FAMILY", "apple7")
    _rejected(emu, _ULONG_MAX, "atomic_max_explicit", "64-bit atomic min/max (atomic_ulong) needs an Apple9 GPU")
    monkeypatch.setenv("TRITON_APPLE_FAMILY", "apple8")
    _rejected(emu, _ULONG_MAX, "atomic_max_explicit", "needs an Apple9 GPU")
    monkeypatch.setenv("TRITON_APPLE_FAMILY", "apple9")
    k = emu.compile_msl(msl(_ULONG_MAX), "k")
    v = torch.tensor([5, 1 << 40, 7, 3] * 8, dtype=torch.int64)
    p = torch.zeros(1, dtype=torch.int64)
    k.launch(grid=(1, 1, 1), threadgroup=(32, 1, 1), buffers=[p, v])
    assert p.item() == 1 << 40


# 6.15.3: fences from MSL 3.2 (test/lowering/test_msl_version.py has the kernel-level refusal)
def test_fences_exist_from_msl_32(emu, monkeypatch):
    monkeypatch.setenv("TRITON_APPLE_MSL_VERSION", "3.1")
    _rejected(emu, """
kernel void k(device atomic_int* c [[buffer(0)]]) {
    atomic_thread_fence(mem_flags::mem_device, memory_order_seq_cst, thread_scope_device);
}
""", "atomic_thread_fence", "atomic_thread_fence needs MSL 3.2 (macOS 15)")


# 2.21: as_type reinterprets scalars and vectors of one size, never pointers
@pytest.mark.parametrize("expr,message", [
    ("as_type<ulong>(p)", "as_type reinterprets scalars and vectors, not pointers"),
    ("as_type<uint>(half(1))", "as_type: source and destination types must have the same size"),
])
def test_as_type_takes_scalars_and_vectors_of_one_size(emu, expr, message):
    _rejected(emu, f"""
kernel void k(device uint* p [[buffer(0)]]) {{
    p[0] = uint({expr});
}}
""", "as_type", message)


# 6.5 Table 6.4: math functions take half or float (no pown in MSL)
@pytest.mark.parametrize("expr,message", [
    ("precise::pown(2.0f, 3)", "no member named 'pown' in namespace 'metal::precise'"),
    ("exp(int(p[0]))", "call to 'exp' is ambiguous"),
])
def test_math_functions_take_half_or_float(emu, expr, message):
    _rejected(emu, f"""
kernel void k(device float* p [[buffer(0)]]) {{
    p[0] = {expr};
}}
""", expr.split("(")[0], message)


# 2.4: SIMD-group matrices of half, bfloat or float, 8x8
def test_simdgroup_matrices_hold_half_bfloat_or_float(emu):
    err = _rejected(emu, """
kernel void k(device int* p [[buffer(0)]]) {
    simdgroup_matrix<int, 8, 8> m;
    simdgroup_load(m, p);
}
""", "simdgroup_matrix<int", "simdgroup_matrix element type must be float, half or bfloat")
    assert err.kernel_name == "k"


# 5.2.3.6 Table 5.8: builtin kernel inputs are ushort / uint (vectors where the attribute is a position)
def test_kernel_builtin_inputs_take_their_types(emu):
    src = msl("""
kernel void k(device float* p [[buffer(0)]], float tid [[thread_index_in_threadgroup]]) {
    p[0] = tid;
}
""")
    with pytest.raises(emu.EmulatorCompileError, match="must be uint/ushort, not 'float'"):
        emu.compile_msl(src, "k")

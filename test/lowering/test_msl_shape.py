"""FileCheck tests pinning the shape of the emitted MSL."""
import pytest
import torch
import triton
import triton.language as tl
from triton._filecheck import run_filecheck

from support.device import compile_for_apple
from triton.backends.apple.errors import UnsupportedFeatureError


def msl(kernel) -> str:
    return kernel.asm["msl"]


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, x + y, mask=mask)


@triton.jit
def row_sum_kernel(x_ptr, out_ptr, N: tl.constexpr):
    cols = tl.arange(0, N)
    x = tl.load(x_ptr + tl.program_id(0) * N + cols)
    tl.store(out_ptr + tl.program_id(0), tl.sum(x, axis=0))


def test_vector_add_signature_and_masked_load():
    k = compile_for_apple(add_kernel, {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32",
                                       "BLOCK": "constexpr"}, {"BLOCK": 1024})
    run_filecheck("add", msl(k), r"""
CHECK: #pragma METAL fp math_mode(safe)
CHECK: kernel void add_kernel(
CHECK-NEXT: device float* x_ptr {{\[\[}}buffer(0){{\]\]}},
CHECK-NEXT: device float* y_ptr {{\[\[}}buffer(1){{\]\]}},
CHECK-NEXT: device float* out_ptr {{\[\[}}buffer(2){{\]\]}},
CHECK-NEXT: constant int& n {{\[\[}}buffer(3){{\]\]}},
CHECK: const int pid = int(tt_pid.x);
CHECK: bool mask{{.*}}[8];
CHECK: = mask{{.*}}{{\[}}[[R:t_r[_0-9]*]]] ? *x{{.*}}{{\[}}[[R]]] : float(0);
CHECK: for (uint [[S:t_r[_0-9]*]] = 0; [[S]] < 8; ++[[S]]) if (mask{{.*}}{{\[}}[[S]]]) *{{.*}}{{\[}}[[S]]] = {{.*}}{{\[}}[[S]]];  // tt.store
CHECK-NEXT: }
""")
    assert k.metadata.name == "add_kernel"
    assert k.metadata.shared == 0
    src = msl(k)
    # no threadgroup memory: no buffer macro; no `return;` closing the kernel; builtin inputs it never reads
    # are not declared
    assert "TT_THREADGROUP_BUFFER" not in src and "return;" not in src and "tt_nprog" not in src


def test_fast_math_is_explicit_opt_in():
    k = compile_for_apple(add_kernel, {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32",
                                       "BLOCK": "constexpr"}, {"BLOCK": 128}, fast_math=True)
    assert "#pragma METAL fp math_mode(fast)" in msl(k)


def test_reduction_uses_a_simd_builtin_then_threadgroup_memory():
    k = compile_for_apple(row_sum_kernel, {"x_ptr": "*fp32", "out_ptr": "*fp32", "N": "constexpr"}, {"N": 1024})
    run_filecheck("rowsum", msl(k), r"""
CHECK: static inline void tt_combine_{{.*}}(thread float& acc0, float other0)
CHECK: kernel void row_sum_kernel(
CHECK: TT_THREADGROUP_BUFFER(tt_smem, 16);
CHECK: = simd_sum(
CHECK: threadgroup_barrier(mem_flags::mem_threadgroup);
CHECK: threadgroup float* {{.*}} = (threadgroup float*)(tt_smem + 0);
CHECK: if (tt_tid == 0) *{{.*}} = {{.*}};  // tt.store
""")
    assert k.metadata.shared == 16
    assert "simd_shuffle" not in msl(k)


@triton.jit
def row_max_kernel(x_ptr, out_ptr, idx_ptr, N: tl.constexpr):
    cols = tl.arange(0, N)
    x = tl.load(x_ptr + tl.program_id(0) * N + cols)
    tl.store(out_ptr + tl.program_id(0), tl.max(x, axis=0))
    tl.store(idx_ptr + tl.program_id(0), tl.argmax(x, axis=0))


def test_float_max_runs_on_order_keys_and_argmax_keeps_the_shuffle_butterfly():
    # Metal's simd_max does not document what it does with NaN or signed zeros on floats: the float max runs on
    # integer order keys, with the lanes' NaN flags reduced beside them; argmax combines two values at once, so
    # it stays a butterfly
    k = compile_for_apple(row_max_kernel, {"x_ptr": "*fp32", "out_ptr": "*fp32", "idx_ptr": "*i32", "N": "constexpr"},
                          {"N": 256})
    run_filecheck("rowmax", msl(k), r"""
CHECK: static inline uint tt_float_order_key(float x)
CHECK: kernel void row_max_kernel(
CHECK: const bool [[NAN:t_isnan[0-9]+]] = isnan([[ACC:t_[0-9]+_acc[0-9]+]]{{.*}});
CHECK: uint [[KEY:t_key[0-9]+]] = tt_float_order_key([[NAN]] ? float(-INFINITY) : [[ACC]]
CHECK: uint [[NANS:t_nans[0-9]+]] = uint([[NAN]]);
CHECK: [[KEY]] = simd_max([[KEY]]);
CHECK: [[NANS]] = simd_min([[NANS]]);
CHECK: [[ACC]]{{.*}} = [[NANS]] ? float(NAN) : tt_float_from_order_key([[KEY]]);
CHECK: tt_simd_shuffle_xor({{.*}}, ushort(1));
CHECK: tt_simd_shuffle_xor({{.*}}, ushort(16));
""")
    assert "simd_max(t_" in msl(k) and "simd_max(float" not in msl(k)


def test_num_warps_one_needs_no_threadgroup_memory_for_reduce():
    k = compile_for_apple(row_sum_kernel, {"x_ptr": "*fp32", "out_ptr": "*fp32", "N": "constexpr"}, {"N": 64},
                          num_warps=1)
    assert "threadgroup_barrier" not in msl(k)


@pytest.mark.parametrize("nw", [0, 3, 64])
def test_bad_num_warps_is_refused(nw):
    with pytest.raises(UnsupportedFeatureError, match="num_warps must be a power of 2") as ei:
        compile_for_apple(add_kernel, {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32",
                                       "BLOCK": "constexpr"}, {"BLOCK": 128}, num_warps=nw)
    assert isinstance(ei.value, AssertionError)  # what upstream's backends raise for it (test_core checks)
    assert f"kernel 'add_kernel': num_warps must be a power of 2 in [1, 32]" in str(ei.value)
    assert f"got num_warps={nw}" in str(ei.value)


def test_bad_num_warps_at_launch_names_the_kernel():
    x = torch.zeros(16)
    with pytest.raises(AssertionError, match="kernel 'add_kernel': num_warps must be a power of 2"):
        add_kernel[(1,)](x, x, x, 16, BLOCK=16, num_warps=64)


def test_num_ctas_is_refused():
    with pytest.raises(UnsupportedFeatureError, match="num_ctas=2 is not supported"):
        compile_for_apple(add_kernel, {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32",
                                       "BLOCK": "constexpr"}, {"BLOCK": 128}, num_ctas=2)



def test_num_stages_compiles_once_for_every_value(tmp_path, monkeypatch):
    """This backend pipelines no loop, so num_stages changes nothing it emits: the value is checked, recorded as
    1, and configs differing only in it share one compile (Triton's cache key is the options' hash)."""
    from triton.backends.apple import compile_log
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    lowered = []
    stop = compile_log.listen(lambda e: lowered.append(e.kernel) if e.what == compile_log.LOWERED else None)
    try:
        x = torch.arange(40, dtype=torch.float32)
        for stages in (1, 2, 5):
            out = torch.zeros(40)
            k = add_kernel[(3,)](x, x, out, 40, BLOCK=16, num_stages=stages)
            assert k.metadata.num_stages == 1
            torch.testing.assert_close(out, 2 * x, rtol=0, atol=0)
    finally:
        stop()
    assert lowered == ["add_kernel"]
    with pytest.raises(ValueError, match="num_stages must be >= 1, got 0"):
        add_kernel[(1,)](x, x, x, 40, BLOCK=16, num_stages=0)


@triton.jit
def col_sum_kernel(x_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr):
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    x = tl.load(x_ptr + rm[:, None] * N + rn[None, :])
    tl.store(out_ptr + rm, tl.sum(x, axis=1))


def test_convert_layout_inside_a_simdgroup_uses_shuffles():
    k = compile_for_apple(col_sum_kernel, {"x_ptr": "*fp32", "out_ptr": "*fp32", "M": "constexpr",
                                           "N": "constexpr"}, {"M": 32, "N": 16}, num_warps=1)
    src = msl(k)
    run_filecheck("convert", src, r"""
CHECK: kernel void col_sum_kernel(
CHECK: // ttg.convert_layout
CHECK-NEXT: const ushort t_src_lane{{.*}} = ushort(
CHECK: = tt_simd_shuffle(
CHECK: // tt.store
""")
    start = src.rindex("\n", 0, src.index("// ttg.convert_layout"))
    convert = src[start:src.rindex("\n", 0, src.index("// tt.store", start))]
    assert "threadgroup_barrier" not in convert and "tt_smem" not in convert


def test_aligned_contiguous_fp32_load_is_a_128_bit_access():
    import triton as _triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    sig = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
    # what the JIT passes for 16-byte aligned tensors and an n divisible by 16
    attrs = {(i, ): [["tt.divisibility", 16]] for i in range(4)}
    src = ASTSource(add_kernel, sig, {(4, ): 1024}, attrs)
    k = _triton.compile(src, target=GPUTarget("cpu", "apple7", 32))
    run_filecheck("vec", msl(k), r"""
CHECK: static inline void tt_unpack(thread float* regs, float4 v)
CHECK: float [[X:x[_0-9]*]][8];  // tt.load
CHECK-NEXT: for (uint [[R:t_r[_0-9]*]] = 0; [[R]] < 8; [[R]] += 4) tt_unpack([[X]] + [[R]], mask{{.*}}{{\[}}[[R]]] ? *(device const float4*){{.*}}{{\[}}[[R]]] : float4(0));
CHECK: float [[Y:y[_0-9]*]][8];  // tt.load
CHECK-NEXT: for (uint [[R2:t_r[_0-9]*]] = 0; [[R2]] < 8; [[R2]] += 4) tt_unpack([[Y]] + [[R2]], mask{{.*}}{{\[}}[[R2]]] ? *(device const float4*){{.*}}{{\[}}[[R2]]] : float4(cst));
CHECK: if (mask{{.*}}) *(device float4*){{.*}} = tt_pack4({{.*}});  // tt.store
""")


def test_unaligned_or_unknown_length_stays_scalar():
    k = compile_for_apple(add_kernel, {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32",
                                       "BLOCK": "constexpr"}, {"BLOCK": 1024})
    assert "float4" not in msl(k)


@pytest.mark.parametrize("kernel,sig,consts", [
    (add_kernel, {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
     {"BLOCK": 1024}),
    (col_sum_kernel, {"x_ptr": "*fp32", "out_ptr": "*fp32", "M": "constexpr", "N": "constexpr"}, {"M": 32, "N": 16}),
])
def test_msl_locations_name_the_line_carrying_the_ops_comment(kernel, sig, consts):
    # the driver maps MSL lines (clang errors, emulator faults) to ops through msl_locations: each entry's
    # line is the op's first line of code, which ends with the op's location comment
    import json
    k = compile_for_apple(kernel, sig, consts)
    lines = msl(k).splitlines()
    locations = json.loads(k.metadata.msl_locations)
    assert locations and [n for n, _, _ in locations] == sorted(n for n, _, _ in locations)
    for line_no, op_name, loc in locations:
        line = lines[line_no - 1]
        assert line.strip() and not line.strip().startswith("//")
        if "test_msl_shape.py" in loc:
            assert line.rstrip().endswith(f"// {op_name} test_msl_shape.py:{loc.rsplit(':', 2)[-2]}"), (line, loc)


def test_msl_is_text_and_the_binary_is_its_bytes():
    """`asm["msl"]` is the readable MSL (Triton reads every stage but the binary one as text); `asm["metal"]`,
    the binary stage Triton hands to `load_binary`, is the same source as bytes: the `.metal` file Apple's
    compiler and the emulator's clang consume."""
    k = compile_for_apple(add_kernel, {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32",
                                       "BLOCK": "constexpr"}, {"BLOCK": 256})
    assert isinstance(k.asm["msl"], str)
    assert "kernel void add_kernel(" in k.asm["msl"]
    assert "\n" in k.asm["msl"] and not k.asm["msl"].startswith("b'")
    assert isinstance(k.asm["metal"], bytes)
    assert k.asm["metal"] == k.asm["msl"].encode()
    assert k.kernel is k.asm["metal"]
    assert sorted(k.asm) == ["metal", "msl", "source", "ttgir", "ttir"]


def test_backend_hash_covers_the_msl_library_and_native_sources(monkeypatch):
    """A kernel cached before an edit of any source it is built from must not be reused after it: the MSL
    library's `.metal` files and the emulator's native sources are part of the backend's hash."""
    import pathlib
    from triton.backends.apple import compiler
    read = []
    real = pathlib.Path.read_bytes
    monkeypatch.setattr(pathlib.Path, "read_bytes", lambda self: (read.append(self), real(self))[1])
    compiler._source_hash.cache_clear()
    try:
        compiler._source_hash()
    finally:
        compiler._source_hash.cache_clear()
    root = pathlib.Path(compiler.__file__).parent
    hashed = {p.relative_to(root).as_posix() for p in read}
    sources = {p.relative_to(root).as_posix() for p in root.rglob("*")
               if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".md", ".conf", ".pyc")
               and ".ruff_cache" not in p.parts}
    assert sources - hashed == set()
    assert {"lowering/msl/erf.metal", "emulator/native/launcher.c", "emulator/native/include/metal_stdlib",
            "compiler.py"} <= hashed

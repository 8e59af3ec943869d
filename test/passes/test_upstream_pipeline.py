"""upstream_pipeline.py: a pass skipped for a kernel would not have changed it.

Reference: the whole pipeline (every pass, as for a kernel that has loops, nests, dots, transposes and private
functions). Each kernel's TTIR goes through both, in separate MLIR contexts; the printed TTGIR must be the same.
"""
import pytest
import triton
import triton.language as tl
from triton._C.libtriton import ir, passes
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.compiler.compiler import make_backend

from triton.backends.apple.compiler import _ttg_target
from triton.backends.apple.target import SIMD_WIDTH
from triton.backends.apple.upstream_pipeline import OpCensus, ttgir_passes


@triton.jit
def _add(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1.0, mask=offs < n)


@triton.jit
def _row_sums(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * n + offs, mask=offs < n, other=0.0)
    tl.store(y_ptr + row, tl.sum(acc))


@triton.jit
def _matmul(a_ptr, b_ptr, c_ptr, K, B: tl.constexpr):
    r = tl.arange(0, B)
    acc = tl.zeros([B, B], tl.float32)
    for k in range(0, K, B):
        a = tl.load(a_ptr + r[:, None] * K + k + r[None, :])
        b = tl.load(b_ptr + (k + r[:, None]) * B + r[None, :])
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + r[:, None] * B + r[None, :], acc)


@triton.jit
def _transpose(x_ptr, y_ptr, B: tl.constexpr):
    r = tl.arange(0, B)
    x = tl.load(x_ptr + r[:, None] * B + r[None, :])
    tl.store(y_ptr + r[:, None] * B + r[None, :], tl.trans(x) * 2.0)


@triton.jit
def _flattened(x_ptr, y_ptr, rows, n, BLOCK: tl.constexpr):
    for row in tl.range(0, rows, flatten=True):
        for start in tl.range(0, n, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            v = tl.load(x_ptr + row * n + offs, mask=offs < n)
            tl.store(y_ptr + row * n + offs, v * 3.0, mask=offs < n)


@triton.jit(noinline=True)
def _doubled(s):
    return s * 2.0


@triton.jit
def _calls(x_ptr, y_ptr, s, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs) * _doubled(s))


F32 = "*fp32"
CASES = {
    "no_loops": (_add, {"x_ptr": F32, "y_ptr": F32, "n": "i32"}, {"BLOCK": 128}),
    "loop_and_reduction": (_row_sums, {"x_ptr": F32, "y_ptr": F32, "n": "i32"}, {"BLOCK": 64}),
    "dot_in_a_loop": (_matmul, {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": F32, "K": "i32"}, {"B": 32}),
    "transpose": (_transpose, {"x_ptr": F32, "y_ptr": F32}, {"B": 32}),
    "flattened_nest": (_flattened, {"x_ptr": F32, "y_ptr": F32, "rows": "i32", "n": "i32"}, {"BLOCK": 64}),
    "private_function": (_calls, {"x_ptr": F32, "y_ptr": F32, "s": "fp32"}, {"BLOCK": 64}),
}
# What each kernel lets the pipeline skip (its census), so that the comparison below is never vacuous.
SKIPPED = {
    "no_loops": {"add_fuse_nested_loops", "add_triton_licm", "add_reduce_data_duplication",
                 "add_reorder_instructions", "add_symbol_dce"},
    "loop_and_reduction": {"add_fuse_nested_loops", "add_reduce_data_duplication", "add_reorder_instructions",
                           "add_symbol_dce"},
    "dot_in_a_loop": {"add_fuse_nested_loops", "add_symbol_dce"},
    "transpose": {"add_fuse_nested_loops", "add_triton_licm", "add_reduce_data_duplication", "add_symbol_dce"},
    "flattened_nest": {"add_reduce_data_duplication", "add_reorder_instructions", "add_symbol_dce"},
    "private_function": {"add_fuse_nested_loops", "add_triton_licm", "add_reduce_data_duplication",
                         "add_reorder_instructions"},
}
EVERYTHING = OpCensus({"scf.for": 2, "tt.dot": 1, "tt.trans": 1, "tt.func": 2})


def _ttir(tmp_path, fn, signature, constexprs):
    """The kernel's TTIR as the apple backend's make_ttir leaves it, written to a file."""
    target = GPUTarget("cpu", "apple7", 32)
    backend = make_backend(target)
    options = backend.parse_options({"num_warps": 4})
    names = list(signature) + list(constexprs)
    sig = {**signature, **{k: "constexpr" for k in constexprs}}
    src = ASTSource(fn, sig, {(names.index(k), ): v for k, v in constexprs.items()})
    context = ir.context()
    ir.load_dialects(context)
    module = src.make_ir(target, options, backend.get_codegen_implementation(options), backend.get_module_map(),
                         context)
    module = backend.make_ttir(module, {}, options)
    path = tmp_path / "kernel.ttir"
    path.write_text(module.str())
    return path, options


def _ttgir(path, choose):
    context = ir.context()
    ir.load_dialects(context)
    module = ir.parse_mlir_module(str(path), context)
    module.context = context
    pm = ir.pass_manager(context)
    steps = choose(OpCensus.of(module))
    for add in steps:
        add(pm)
    pm.run(module, "make_ttgir")
    return module.str(), {getattr(s, "__name__", "") for s in steps}


@pytest.mark.parametrize("case", sorted(CASES))
def test_skipped_passes_would_not_change_the_kernel(tmp_path, case):
    path, options = _ttir(tmp_path, *CASES[case])

    def to_ttgpuir(pm):  # as make_ttgir adds it
        passes.ttir.add_convert_to_ttgpuir(pm, _ttg_target(options), options.num_warps, SIMD_WIDTH, options.num_ctas)

    pruned, ran = _ttgir(path, lambda census: ttgir_passes(census, to_ttgpuir))
    whole, ran_all = _ttgir(path, lambda census: ttgir_passes(EVERYTHING, to_ttgpuir))
    assert ran_all - ran == SKIPPED[case]
    assert pruned == whole


def test_census_counts_nested_ops(tmp_path):
    path, _ = _ttir(tmp_path, *CASES["flattened_nest"])
    context = ir.context()
    ir.load_dialects(context)
    census = OpCensus.of(ir.parse_mlir_module(str(path), context))
    assert census.count("scf.for") == 2 and census.count("tt.func") == 1
    assert census.has("tt.load", "tt.dot") and not census.has("tt.dot")

"""Apple's compiler verdicts on the Metal path, on the MPS stand-in: `torch.mps.compile_shader` raises
`SyntaxError` (PyTorch's c10::SyntaxError) with Apple's `program_source:line:col:` diagnostics, and
`load_binary` turns it into a `MetalCompileError` naming the kernel and, for each MSL line, the Triton op and
source line it came from; the MSL handed to Metal is ASCII whatever the kernel's file is called."""
import importlib.util
import inspect

import pytest
import torch
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from triton.backends.apple import driver as drv
from triton.backends.apple.abi.msl_locations import MslLocations, ascii_safe, error_lines, location_comment
from triton.backends.apple.errors import AppleCompilationError, MetalCompileError


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = x * 3.0  # the line the broken MSL points at
    tl.store(out_ptr + offs, y, mask=mask)


def _msl_for_mps(fn, signature, constexprs):
    names = list(signature)
    sig = dict(signature, **{k: "constexpr" for k in constexprs})
    src = ASTSource(fn, sig, {(names.index(k), ): v for k, v in constexprs.items()})
    compiled = triton.compile(src, target=GPUTarget("mps", "apple7", 32), options={"num_warps": 4})
    return compiled.asm["msl"].decode() if isinstance(compiled.asm["msl"], bytes) else compiled.asm["msl"]


def _scale_msl():
    return _msl_for_mps(scale_kernel, {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
                        {"BLOCK": 64})


def _source_line(fn, marker: str) -> int:
    lines, first = inspect.getsourcelines(fn.fn)
    return first + next(i for i, text in enumerate(lines) if marker in text)


def test_compile_shader_raises_syntax_error_with_apples_diagnostic_form(mps):
    with pytest.raises(SyntaxError, match=r"(?s)^Compilation failed: .*program_source:2:\d+: error: "):
        torch.mps.compile_shader("kernel void k(device float* x [[buffer(0)]]) {\n  x[0] = undefined_name;\n}\n")


def test_a_rejected_kernel_names_the_kernel_op_and_source_line(mps):
    msl = _scale_msl()
    lines = msl.splitlines()
    k = next(i for i, text in enumerate(lines) if "// arith.mulf" in text)
    first, comment = lines[k].split("  // ")
    lines[k] = first.replace(";", " + not_declared;", 1) + "  // " + comment  # an error inside the op's code
    with pytest.raises(MetalCompileError) as info:
        drv.AppleUtils("metal").load_binary("scale_kernel", "\n".join(lines).encode(), 0, 0)
    e = info.value
    assert isinstance(e, AppleCompilationError) and e.kernel_name == "scale_kernel"
    assert e.msl_lines == [k + 1] and "not_declared" in e.diagnostics
    text = str(e)
    line = _source_line(scale_kernel, "the line the broken MSL points at")
    assert "Apple's Metal compiler rejected the MSL of kernel 'scale_kernel'" in text
    assert f"MSL line {k + 1} was generated from arith.mulf at test_metal_compile_errors.py:{line}" in text
    assert f"{k + 1:5d} | " in text  # the offending MSL line is quoted


def test_a_missing_kernel_is_named(mps):
    with pytest.raises(MetalCompileError, match=r"Metal made no pipeline for kernel 'other': Failed to create "
                       r"function state object for: other"):
        drv.AppleUtils("metal").load_binary("other", _scale_msl().encode(), 0, 0)


def test_non_ascii_msl_is_refused_before_metal_sees_it(mps):
    src = "kernel void k(device float* x [[buffer(0)]]) {\n  x[0] = 1.0f;  // caf\u00e9\n}\n"
    with pytest.raises(MetalCompileError, match=r"kernel 'k' has non-ASCII text at line 2"):
        drv.AppleUtils("metal").load_binary("k", src.encode(), 0, 0)
    assert not mps.sources


KERNEL_IN_A_NON_ASCII_FILE = '''
import triton
import triton.language as tl


@triton.jit
def copy_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.store(y_ptr + i, tl.load(x_ptr + i) + 1.0)
'''


def test_a_kernel_from_a_non_ascii_file_runs_with_ascii_msl(mps, tmp_path):
    path = tmp_path / "k\u00ebrnel_\u4e2d.py"
    path.write_text(KERNEL_IN_A_NON_ASCII_FILE, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("kernel_in_non_ascii_file", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    x, y = torch.arange(32, dtype=torch.float32), torch.zeros(32)
    compiled = module.copy_kernel[(1, )](x, y, BLOCK=32)
    assert torch.equal(y, x + 1)
    msl = mps.sources[-1]  # what Metal was given (the stand-in refuses non-ASCII, as PyTorch decodes ASCII)
    assert msl.isascii() and compiled.asm["msl"].isascii()
    # MLIR prints the location's file name with its UTF-8 bytes escaped; the comment keeps that spelling
    name = "k\\C3\\ABrnel_\\E4\\B8\\AD.py"
    assert f"// tt.load {name}:9" in msl
    load_line = next(n for n, t in enumerate(msl.splitlines(), 1) if "// tt.load" in t)
    assert MslLocations.from_comments(msl).origin(load_line) == ("tt.load", f"{name}:9")


def test_location_comments_cannot_leave_the_comment():
    assert location_comment("tt.load", "/a/b/plain name.py", 7) == "  // tt.load plain name.py:7"
    assert location_comment("tt.store", "/x/evil\nint y = 1;.py", 3) == "  // tt.store evil\\nint y = 1;.py:3"
    assert ascii_safe("d\u00e9j\u00e0\tvu") == "d\\xe9j\\xe0\\tvu"
    assert "\n" not in location_comment("tt.store", "a\r\nb\u2028.py", 1)


def test_error_lines_follow_notes_into_the_msl():
    text = ("program_source:12:3: error: no matching function for call to 'f'\n"
            "/System/Library/metal_stdlib:40:1: error: static assertion failed\n"
            "program_source:30:9: note: in instantiation of function template requested here\n"
            "program_source:44:1: warning: unused variable 'w'\n")
    assert error_lines(text, ["program_source"]) == [12, 30]

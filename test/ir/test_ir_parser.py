"""The TTGIR reader: ops, regions, types, encodings and source locations from the printed module, and the
printed forms it refuses or reads as attributes."""
import pytest
import triton
import triton.language as tl

from triton.backends.apple.ir import IRParseError, parse_module, print_module
from triton.backends.apple.ir.types import BlockedEncoding, PointerType, SliceEncoding, TensorType

from support.device import compile_for_apple


@triton.jit
def loop_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for i in range(0, n):
        acc += tl.load(x_ptr + i * BLOCK + offs)
    total = tl.sum(acc, axis=0)
    if total > 0:
        total = total * 2
    tl.store(out_ptr, total)


def _ttgir():
    k = compile_for_apple(loop_kernel, {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
                          {"BLOCK": 256})
    return k.asm["ttgir"]


def test_parses_kernel_signature_and_attrs():
    mod = parse_module(_ttgir())
    assert mod.num_warps == 4
    fn = mod.kernel
    assert fn.name == "loop_kernel"
    assert [a.name for a in fn.args] == ["x_ptr", "out_ptr", "n"]
    assert isinstance(fn.args[0].type, PointerType)
    assert str(fn.args[2].type) == "i32"


def test_regions_and_locations():
    mod = parse_module(_ttgir())
    ops = list(mod.kernel.walk())
    names = [op.name for op in ops]
    assert "scf.for" in names and "scf.if" in names and "tt.reduce" in names
    loop = next(op for op in ops if op.name == "scf.for")
    body = loop.regions[0].entry
    assert len(body.args) == 2  # induction variable and the carried accumulator
    assert isinstance(body.args[1].type, TensorType)
    assert isinstance(body.args[1].type.encoding, BlockedEncoding)
    load = next(op for op in ops if op.name == "tt.load")
    assert load.loc.file.endswith("test_ir_parser.py")
    assert load.loc.line == loop_kernel.fn.__code__.co_firstlineno + 5
    red = next(op for op in ops if op.name == "tt.reduce")
    # locations inside Triton's own library are reported at the user's call
    assert red.loc.file.endswith("test_ir_parser.py")
    assert red.regions[0].entry.ops[-1].name == "tt.reduce.return"


def test_printer_round_trips_names_and_types():
    mod = parse_module(_ttgir())
    text = print_module(mod)
    assert "tt.func public @loop_kernel(%x_ptr: !tt.ptr<f32>" in text
    assert '"scf.for"' in text and '"tt.reduce.return"' in text


def test_slice_encoding_is_parsed_with_parent():
    from triton.backends.apple.ir.parser import TypeParser
    tp = TypeParser({"#blocked": "#ttg.blocked<{sizePerThread = [1, 1], threadsPerWarp = [1, 32], "
                                 "warpsPerCTA = [2, 2], order = [1, 0]}>"})
    ty = tp.parse("tensor<64xf32, #ttg.slice<{dim = 0, parent = #blocked}>>")
    assert ty.shape == (64, )
    assert isinstance(ty.encoding, SliceEncoding) and ty.encoding.dim == 0
    assert ty.encoding.parent == BlockedEncoding((1, 1), (1, 32), (2, 2), (1, 0))


_TTGIR = """#blocked = #ttg.blocked<{sizePerThread = [1], threadsPerWarp = [32], warpsPerCTA = [1], order = [0]}>
module attributes {"ttg.num-ctas" = 1 : i32, "ttg.num-warps" = 1 : i32, "ttg.threads-per-warp" = 32 : i32} {
  tt.func public @k(%x: !tt.ptr<f32>) {
    %0 = tt.get_program_id x : i32 loc(#loc)
    %1 = arith.cmpi slt, %0, %0 : i32 loc(#loc)
    %2 = tt.frobnicate wildly, %0 : i32 loc(#loc)
    tt.return loc(#loc)
  } loc(#loc)
} loc(#loc)
#loc = loc(unknown)
"""


def test_reader_refuses_forms_it_does_not_know():
    with pytest.raises(IRParseError, match=r"tt.frobnicate: unknown keyword\(s\) \['wildly'\]"):
        parse_module(_TTGIR)


def test_reader_names_keywords_as_attributes():
    mod = parse_module(_TTGIR.replace("    %2 = tt.frobnicate wildly, %0 : i32 loc(#loc)\n", ""))
    pid, cmp = list(mod.kernel.walk())[:2]
    assert pid.attrs["axis"] == "x"
    assert cmp.attrs["predicate"] == "slt"

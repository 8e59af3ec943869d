"""Printed forms Gluon kernels bring to the TTGIR reader: `#ttg.generic_linear` register layouts,
`#ttg.shared_linear` shared layouts (an attribute dictionary followed by `alignment = 16`), views of shared
buffers (`ttg.memdesc_subslice %buf[16, 8]`, whose type names the buffer's shape after its memory space)."""
from triton.backends.apple.ir import parse_module
from triton.backends.apple.ir.parser import TypeParser
from triton.backends.apple.ir.types import GenericLinearEncoding, LinearEncoding, MemDescType, SharedEncoding

_GENERIC = ("#ttg.generic_linear<{register = [[1], [2]], lane = [[4], [8], [16], [32], [64]], warp = [[96], [128]], "
            "block = []}>")
_SHARED_LINEAR = ("#ttg.shared_linear<{offset = [[0, 1], [0, 2], [1, 0], [2, 0]], block = []}, alignment = 16>")


def test_generic_linear_encoding():
    enc = TypeParser({}).encoding(_GENERIC)
    assert isinstance(enc, GenericLinearEncoding) and isinstance(enc, LinearEncoding)
    assert enc.warp == ((96, ), (128, ))
    assert enc.text() == _GENERIC
    # the same bases as #ttg.linear are another encoding
    assert enc != LinearEncoding(enc.register, enc.lane, enc.warp)


def test_shared_linear_encoding_with_alignment():
    enc = TypeParser({}).encoding(_SHARED_LINEAR)
    assert isinstance(enc, SharedEncoding) and enc.kind == "shared_linear"
    assert enc.text() == _SHARED_LINEAR


_VIEWS = """#blocked = #ttg.blocked<{sizePerThread = [1, 1], threadsPerWarp = [4, 8], warpsPerCTA = [4, 1], order = [1, 0]}>
#shared = """ + _SHARED_LINEAR + """
#smem = #ttg.shared_memory
module attributes {"ttg.num-ctas" = 1 : i32, "ttg.num-warps" = 4 : i32, "ttg.threads-per-warp" = 32 : i32} {
  tt.func public @k(%x: !tt.ptr<f32>) {
    %a = ttg.local_alloc {allocation.offset = 0 : i32} : () -> !ttg.memdesc<4x4xf32, #shared, #smem, mutable> loc(#loc)
    %t = ttg.memdesc_subslice %a[2, 0] : !ttg.memdesc<4x4xf32, #shared, #smem, mutable> -> !ttg.memdesc<2x4xf32, #shared, #smem, mutable, 4x4> loc(#loc)
    %v = ttg.local_load %t : !ttg.memdesc<2x4xf32, #shared, #smem, mutable, 4x4> -> tensor<2x4xf32, #blocked> loc(#loc)
    tt.return loc(#loc)
  } loc(#loc)
} loc(#loc)
#loc = loc(unknown)
"""


def test_memdesc_subslice_offsets_and_buffer_shape():
    ops = list(parse_module(_VIEWS).kernel.walk())
    sub = next(op for op in ops if op.name == "ttg.memdesc_subslice")
    assert sub.attrs["offsets"] == [2, 0]
    assert [v.name for v in sub.operands] == ["a"]
    ty = sub.result.type
    assert isinstance(ty, MemDescType) and ty.shape == (2, 4) and ty.alloc_shape == (4, 4) and ty.mutable
    assert str(ty).endswith(", #smem, mutable, 4x4>")
    assert ops[0].result.type.alloc_shape is None

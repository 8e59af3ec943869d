"""Printed forms Gluon kernels bring to the TTGIR reader: `#ttg.generic_linear` register layouts,
`#ttg.shared_linear` shared layouts (an attribute dictionary followed by `alignment = 16`), views of shared
buffers (`ttg.memdesc_subslice %buf[16, 8]`, whose type names the buffer's shape after its memory space), which
shared layouts place elements row-major, and the gathers and scatters in shared memory
(`ttg.local_atomic_scatter_rmw fadd, %buf[%idx], %v, %mask`)."""
import pytest

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


@pytest.mark.parametrize("text, row_major", [
    ("#ttg.swizzled_shared<{vec = 1, perPhase = 1, maxPhase = 1, order = [1, 0]}>", True),
    ("#ttg.swizzled_shared<{vec = 8, perPhase = 1, maxPhase = 1, order = [2, 1, 0]}>", True),
    ("#ttg.swizzled_shared<{vec = 1, perPhase = 1, maxPhase = 1, order = [0, 1]}>", False),
    ("#ttg.swizzled_shared<{vec = 4, perPhase = 2, maxPhase = 4, order = [1, 0]}>", False),
    (_SHARED_LINEAR, True),
    ("#ttg.shared_linear<{offset = [[1, 0], [0, 1]], block = []}, alignment = 16>", False),
    ("#ttg.shared_linear<{offset = [[0, 1], [1, 0], [0, 2]], block = []}, alignment = 16>", False),
    ("#ttg.shared_linear<{offset = [[0, 1], [0, 1]], block = []}, alignment = 16>", False),
    ("#ttg.padded_shared<[32:+4] {order = [1, 0], shape = [64, 64]}>", False),
    ("#ttg.nvmma_shared<{swizzlingByteWidth = 0, transposed = false, elementBitWidth = 16}>", False),
])
def test_which_shared_layouts_place_elements_row_major(text, row_major):
    enc = TypeParser({}).encoding(text)
    assert isinstance(enc, SharedEncoding) and enc.row_major == row_major


_SCATTERS = """#blocked = #ttg.blocked<{sizePerThread = [1, 1], threadsPerWarp = [4, 8], warpsPerCTA = [4, 1], order = [1, 0]}>
#shared = #ttg.swizzled_shared<{vec = 1, perPhase = 1, maxPhase = 1, order = [1, 0]}>
#smem = #ttg.shared_memory
module attributes {"ttg.num-ctas" = 1 : i32, "ttg.num-warps" = 4 : i32, "ttg.threads-per-warp" = 32 : i32} {
  tt.func public @k(%i: tensor<4x8xi32, #blocked>, %v: tensor<4x8xf32, #blocked>, %m: tensor<4x8xi1, #blocked>) {
    %a = ttg.local_alloc {allocation.offset = 0 : i32} : () -> !ttg.memdesc<4x8xf32, #shared, #smem, mutable> loc(#loc)
    %g = ttg.local_gather %a[%i] {axis = 0 : i32} : !ttg.memdesc<4x8xf32, #shared, #smem, mutable>, tensor<4x8xi32, #blocked> -> tensor<4x8xf32, #blocked> loc(#loc)
    ttg.local_scatter %a[%i], %v {axis = 1 : i32} : !ttg.memdesc<4x8xf32, #shared, #smem, mutable>, tensor<4x8xi32, #blocked>, tensor<4x8xf32, #blocked> loc(#loc)
    %o = ttg.local_atomic_scatter_rmw fadd, %a[%i], %v, %m {axis = 1 : i32} : (!ttg.memdesc<4x8xf32, #shared, #smem, mutable>, tensor<4x8xf32, #blocked>, tensor<4x8xi32, #blocked>, tensor<4x8xi1, #blocked>) -> tensor<4x8xf32, #blocked> loc(#loc)
    %r = ttg.memdesc_reinterpret %a : !ttg.memdesc<4x8xf32, #shared, #smem, mutable> -> !ttg.memdesc<32xi32, #shared, #smem, mutable> loc(#loc)
    tt.return loc(#loc)
  } loc(#loc)
} loc(#loc)
#loc = loc(unknown)
"""


def test_gathers_and_scatters_in_shared_memory():
    ops = {op.name: op for op in parse_module(_SCATTERS).kernel.walk()}
    gather, scatter = ops["ttg.local_gather"], ops["ttg.local_scatter"]
    assert [v.name for v in gather.operands] == ["a", "i"] and gather.attrs["axis"] == 0
    assert str(gather.result.type).startswith("tensor<4x8xf32")
    assert [v.name for v in scatter.operands] == ["a", "i", "v"] and scatter.attrs["axis"] == 1
    rmw = ops["ttg.local_atomic_scatter_rmw"]
    assert rmw.attrs["atomic_rmw_op"] == "fadd" and [v.name for v in rmw.operands] == ["a", "i", "v", "m"]
    assert str(rmw.result.type).startswith("tensor<4x8xf32")
    assert ops["ttg.memdesc_reinterpret"].result.type.shape == (32, )

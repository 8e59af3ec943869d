"""Findings of running upstream Triton's test_core on the apple backend (issue 9), each as a small kernel of
our own with a torch reference. Hand-written TTGIR here is compiled from a `.ttgir` file the way upstream's
layout tests do it, which skips upstream's `allocate_shared_memory` pass."""
import pytest
import torch
import triton
import triton.language as tl

# Two buffers from `ttg.local_alloc` with no `allocation.offset` (nothing placed them), live at the same time,
# and a layout conversion through threadgroup memory while both are live: all three need bytes of their own.
_TWO_BUFFERS = """
#blk = #ttg.blocked<{sizePerThread = [1, 4], threadsPerWarp = [4, 8], warpsPerCTA = [4, 1], order = [1, 0]}>
#col = #ttg.blocked<{sizePerThread = [4, 1], threadsPerWarp = [8, 4], warpsPerCTA = [1, 4], order = [0, 1]}>
#shared = #ttg.swizzled_shared<{vec = 1, perPhase = 1, maxPhase = 1, order = [1, 0]}>
#smem = #ttg.shared_memory
module attributes {"ttg.num-ctas" = 1 : i32, "ttg.num-warps" = 4 : i32, "ttg.threads-per-warp" = 32 : i32} {
  tt.func public @two_buffers(%x: !tt.ptr<i32>, %o0: !tt.ptr<i32>, %o1: !tt.ptr<i32>, %o2: !tt.ptr<i32>) {
    %c32 = arith.constant dense<32> : tensor<16x1xi32, #blk>
    %c1000 = arith.constant dense<1000> : tensor<16x32xi32, #blk>
    %r = tt.make_range {end = 16 : i32, start = 0 : i32} : tensor<16xi32, #ttg.slice<{dim = 1, parent = #blk}>>
    %c = tt.make_range {end = 32 : i32, start = 0 : i32} : tensor<32xi32, #ttg.slice<{dim = 0, parent = #blk}>>
    %r2 = tt.expand_dims %r {axis = 1 : i32} : tensor<16xi32, #ttg.slice<{dim = 1, parent = #blk}>> -> tensor<16x1xi32, #blk>
    %rs = arith.muli %r2, %c32 : tensor<16x1xi32, #blk>
    %c2 = tt.expand_dims %c {axis = 0 : i32} : tensor<32xi32, #ttg.slice<{dim = 0, parent = #blk}>> -> tensor<1x32xi32, #blk>
    %rb = tt.broadcast %rs : tensor<16x1xi32, #blk> -> tensor<16x32xi32, #blk>
    %cb = tt.broadcast %c2 : tensor<1x32xi32, #blk> -> tensor<16x32xi32, #blk>
    %off = arith.addi %rb, %cb : tensor<16x32xi32, #blk>
    %xs = tt.splat %x : !tt.ptr<i32> -> tensor<16x32x!tt.ptr<i32>, #blk>
    %xp = tt.addptr %xs, %off : tensor<16x32x!tt.ptr<i32>, #blk>, tensor<16x32xi32, #blk>
    %v = tt.load %xp : tensor<16x32x!tt.ptr<i32>, #blk>
    %w = arith.addi %v, %c1000 : tensor<16x32xi32, #blk>
    %a = ttg.local_alloc %v : (tensor<16x32xi32, #blk>) -> !ttg.memdesc<16x32xi32, #shared, #smem>
    %b = ttg.local_alloc %w : (tensor<16x32xi32, #blk>) -> !ttg.memdesc<16x32xi32, #shared, #smem>
    %vc = ttg.convert_layout %v : tensor<16x32xi32, #blk> -> tensor<16x32xi32, #col>
    %la = ttg.local_load %a : !ttg.memdesc<16x32xi32, #shared, #smem> -> tensor<16x32xi32, #blk>
    %lb = ttg.local_load %b : !ttg.memdesc<16x32xi32, #shared, #smem> -> tensor<16x32xi32, #blk>
    %offc = ttg.convert_layout %off : tensor<16x32xi32, #blk> -> tensor<16x32xi32, #col>
    %s0 = tt.splat %o0 : !tt.ptr<i32> -> tensor<16x32x!tt.ptr<i32>, #blk>
    %p0 = tt.addptr %s0, %off : tensor<16x32x!tt.ptr<i32>, #blk>, tensor<16x32xi32, #blk>
    tt.store %p0, %la : tensor<16x32x!tt.ptr<i32>, #blk>
    %s1 = tt.splat %o1 : !tt.ptr<i32> -> tensor<16x32x!tt.ptr<i32>, #blk>
    %p1 = tt.addptr %s1, %off : tensor<16x32x!tt.ptr<i32>, #blk>, tensor<16x32xi32, #blk>
    tt.store %p1, %lb : tensor<16x32x!tt.ptr<i32>, #blk>
    %s2 = tt.splat %o2 : !tt.ptr<i32> -> tensor<16x32x!tt.ptr<i32>, #col>
    %p2 = tt.addptr %s2, %offc : tensor<16x32x!tt.ptr<i32>, #col>, tensor<16x32xi32, #col>
    tt.store %p2, %vc : tensor<16x32x!tt.ptr<i32>, #col>
    tt.return
  }
}
"""


def test_local_alloc_without_allocation_offset(tmp_path, device):
    # upstream's test_local_load_store compiles TTGIR like this; the backend refused it as an internal error
    # ("shared memory buffer without an allocation offset") instead of placing the buffers itself
    path = tmp_path / "two_buffers.ttgir"
    path.write_text(_TWO_BUFFERS)
    kernel = triton.compile(str(path))
    x = torch.arange(16 * 32, dtype=torch.int32, device=device).reshape(16, 32) * 7 - 300
    outs = [torch.full_like(x, -1) for _ in range(3)]
    kernel[(1, 1, 1)](x, *outs)
    assert torch.equal(outs[0].cpu(), x.cpu())
    assert torch.equal(outs[1].cpu(), (x + 1000).cpu())
    assert torch.equal(outs[2].cpu(), x.cpu())


# A `#ttg.linear` layout whose bases span 64x64, on tensors of other shapes: upstream's
# LinearEncodingAttr::toLinearLayout(shape) repeats the layout over a larger tensor (more registers) and
# broadcasts it over a smaller one (the bases past the shape become 0). Found by test_core's test_reduce_layouts
# with the layout's CTA fields dropped for Triton 3.9's parser: 128x128 and 128x16 sums came out 2-4x too large,
# 32x128 read threadgroup memory out of bounds.
_LINEAR_REDUCE = """
#blk = #ttg.blocked<{{sizePerThread = [1, 1], threadsPerWarp = [32, 1], warpsPerCTA = [4, 1], order = [0, 1]}}>
#lin = #ttg.linear<{{register = [[0, 16], [1, 0], [2, 0], [4, 0], [8, 0], [16, 0]], lane = [[0, 0], [0, 1], [0, 2], [0, 4], [0, 8]], warp = [[32, 0], [0, 32]], block = []}}>
module attributes {{"ttg.num-ctas" = 1 : i32, "ttg.num-warps" = 4 : i32, "ttg.threads-per-warp" = 32 : i32}} {{
  tt.func public @linear_sum(%x: !tt.ptr<i32>, %o: !tt.ptr<i32>) {{
    %cN = arith.constant dense<{N}> : tensor<{M}x1xi32, #blk>
    %r = tt.make_range {{end = {M} : i32, start = 0 : i32}} : tensor<{M}xi32, #ttg.slice<{{dim = 1, parent = #blk}}>>
    %c = tt.make_range {{end = {N} : i32, start = 0 : i32}} : tensor<{N}xi32, #ttg.slice<{{dim = 0, parent = #blk}}>>
    %r2 = tt.expand_dims %r {{axis = 1 : i32}} : tensor<{M}xi32, #ttg.slice<{{dim = 1, parent = #blk}}>> -> tensor<{M}x1xi32, #blk>
    %rs = arith.muli %r2, %cN : tensor<{M}x1xi32, #blk>
    %c2 = tt.expand_dims %c {{axis = 0 : i32}} : tensor<{N}xi32, #ttg.slice<{{dim = 0, parent = #blk}}>> -> tensor<1x{N}xi32, #blk>
    %rb = tt.broadcast %rs : tensor<{M}x1xi32, #blk> -> tensor<{M}x{N}xi32, #blk>
    %cb = tt.broadcast %c2 : tensor<1x{N}xi32, #blk> -> tensor<{M}x{N}xi32, #blk>
    %off = arith.addi %rb, %cb : tensor<{M}x{N}xi32, #blk>
    %xs = tt.splat %x : !tt.ptr<i32> -> tensor<{M}x{N}x!tt.ptr<i32>, #blk>
    %xp = tt.addptr %xs, %off : tensor<{M}x{N}x!tt.ptr<i32>, #blk>, tensor<{M}x{N}xi32, #blk>
    %v = tt.load %xp : tensor<{M}x{N}x!tt.ptr<i32>, #blk>
    %vl = ttg.convert_layout %v : tensor<{M}x{N}xi32, #blk> -> tensor<{M}x{N}xi32, #lin>
    %s = "tt.reduce"(%vl) <{{axis = 0 : i32}}> ({{
    ^bb0(%a: i32, %b: i32):
      %t = arith.addi %a, %b : i32
      tt.reduce.return %t : i32
    }}) : (tensor<{M}x{N}xi32, #lin>) -> tensor<{N}xi32, #ttg.slice<{{dim = 0, parent = #lin}}>>
    %cc = tt.make_range {{end = {N} : i32, start = 0 : i32}} : tensor<{N}xi32, #ttg.slice<{{dim = 0, parent = #lin}}>>
    %os = tt.splat %o : !tt.ptr<i32> -> tensor<{N}x!tt.ptr<i32>, #ttg.slice<{{dim = 0, parent = #lin}}>>
    %op = tt.addptr %os, %cc : tensor<{N}x!tt.ptr<i32>, #ttg.slice<{{dim = 0, parent = #lin}}>>, tensor<{N}xi32, #ttg.slice<{{dim = 0, parent = #lin}}>>
    tt.store %op, %s : tensor<{N}x!tt.ptr<i32>, #ttg.slice<{{dim = 0, parent = #lin}}>>
    tt.return
  }}
}}
"""


# upstream fits a #ttg.linear encoding to the tensor's shape (copies where the bases reach beyond it, extra
# registers where they fall short); layouts.linear_encoding_layout does the same (a wrong reduction before)
@pytest.mark.parametrize("M, N", [(64, 64), (128, 128), (128, 16), (32, 128), (16, 16)])
def test_linear_layout_on_other_shapes(M, N, tmp_path, device):
    path = tmp_path / "linear_sum.ttgir"
    path.write_text(_LINEAR_REDUCE.format(M=M, N=N))
    kernel = triton.compile(str(path))
    x = (torch.arange(M * N, dtype=torch.int32, device=device).reshape(M, N) * 37) % 101 - 50
    out = torch.full((N, ), -1, dtype=torch.int32, device=device)
    kernel[(1, 1, 1)](x, out)
    assert torch.equal(out.cpu(), x.sum(0, dtype=torch.int32).cpu())


@triton.jit
def _dot_f16_add_kernel(x_ptr, y_ptr, z_ptr, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    offs = r[:, None] * BLOCK + r[None, :]
    acc = tl.dot(tl.load(x_ptr + offs), tl.load(y_ptr + offs), out_dtype=tl.float16)
    tl.store(z_ptr + offs, acc + tl.load(z_ptr + offs))


def test_dot_float16_result_plus_matrix(device):
    # test_core's test_dot[32-32-32, 4 warps, add-matrix, float16 in and out] came out wrong (992 of 1024
    # elements) at 15e66c3 and until 3885faf; right since 4649d5c (operands kept in registers)
    g = torch.Generator().manual_seed(17)
    x = (torch.randn(32, 32, generator=g) * 0.1).half().to(device)
    y = (torch.randn(32, 32, generator=g) * 0.1).half().to(device)
    z = (1 + torch.randn(32, 32, generator=g) * 0.1).half().to(device)
    ref = (x.float() @ y.float() + z.float())
    _dot_f16_add_kernel[(1, )](x, y, z, BLOCK=32, num_warps=4)
    torch.testing.assert_close(z.float().cpu(), ref.cpu(), rtol=0.01, atol=0.01)

"""Tensors on layouts other than Triton's default ones, and moves between layouts, end to end against torch:
buffers of `ttg.local_alloc` that nothing placed, `#ttg.linear` and other vendors' matrix-unit layouts as
register distributions, and conversions and gathers larger than threadgroup memory. Found by running
upstream Triton's test_core on the apple backend (issue 9). Hand-written TTGIR here is compiled from a
`.ttgir` file the way upstream's layout tests do it, which skips upstream's `allocate_shared_memory` pass."""
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
#lin = {LAYOUT}
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
_LINEAR_64x64 = ("#ttg.linear<{register = [[0, 16], [1, 0], [2, 0], [4, 0], [8, 0], [16, 0]], lane = [[0, 0], "
                 "[0, 1], [0, 2], [0, 4], [0, 8]], warp = [[32, 0], [0, 32]], block = []}>")


@pytest.mark.parametrize("M, N", [(64, 64), (128, 128), (128, 16), (32, 128), (16, 16)])
def test_linear_layout_on_other_shapes(M, N, tmp_path, device):
    path = tmp_path / "linear_sum.ttgir"
    path.write_text(_LINEAR_REDUCE.format(M=M, N=N, LAYOUT=_LINEAR_64x64))
    kernel = triton.compile(str(path))
    x = (torch.arange(M * N, dtype=torch.int32, device=device).reshape(M, N) * 37) % 101 - 50
    out = torch.full((N, ), -1, dtype=torch.int32, device=device)
    kernel[(1, 1, 1)](x, out)
    assert torch.equal(out.cpu(), x.sum(0, dtype=torch.int32).cpu())


# Other vendors' matrix-unit layouts in hand-written TTGIR (test_core's layout tests use them for conversions,
# reductions and scans): register distributions like any other, their linear layouts from libtriton. Refused
# before; the 64x64 sum runs the reduction across lanes, warps and registers of each.
_MMA_V2 = "#ttg.nvidia_mma<{versionMajor = 2, versionMinor = 0, warpsPerCTA = [2, 2], instrShape = [16, 8]}>"
_VENDOR_LAYOUTS = {
    "nvidia_mma_v2": _MMA_V2,
    "nvidia_mma_v3": "#ttg.nvidia_mma<{versionMajor = 3, versionMinor = 0, warpsPerCTA = [4, 1], instrShape = [16, 32, 16]}>",
    "dot_op_of_mma_v2": "#ttg.dot_op<{opIdx = 0, parent = " + _MMA_V2 + ", kWidth = 2}>",
    "amd_wmma": "#ttg.amd_wmma<{version = 2, isTranspose = false, ctaLayout = {warp = [[0, 1], [1, 0]]}}>",
}


@pytest.mark.parametrize("M, N", [(64, 64), (128, 16), (16, 128)])
@pytest.mark.parametrize("layout", sorted(_VENDOR_LAYOUTS))
def test_vendor_mma_layouts_as_distributions(layout, M, N, tmp_path, device):
    path = tmp_path / "vendor_sum.ttgir"
    path.write_text(_LINEAR_REDUCE.format(M=M, N=N, LAYOUT=_VENDOR_LAYOUTS[layout]))
    kernel = triton.compile(str(path))
    x = (torch.arange(M * N, dtype=torch.int32, device=device).reshape(M, N) * 37) % 101 - 50
    out = torch.full((N, ), -1, dtype=torch.int32, device=device)
    kernel[(1, 1, 1)](x, out)
    assert torch.equal(out.cpu(), x.sum(0, dtype=torch.int32).cpu())


# Layout conversions and gathers of tensors larger than threadgroup memory: upstream sizes their scratch for
# the whole tensor (64-128 KB here, test_core's test_permute and test_gather), the lowering moves them in rounds
# through what is left of Apple's 32 KB. Refused as OutOfResources before.
@triton.jit
def _transpose_kernel(x_ptr, z_ptr, M: tl.constexpr, N: tl.constexpr):
    r = tl.arange(0, M)[:, None]
    c = tl.arange(0, N)[None, :]
    x = tl.load(x_ptr + r * N + c)
    rt = tl.arange(0, N)[:, None]
    ct = tl.arange(0, M)[None, :]
    tl.store(z_ptr + rt * M + ct, tl.permute(x, (1, 0)))


@pytest.mark.parametrize("M, N, dtype", [(128, 128, torch.float32), (256, 128, torch.int64)])
def test_permute_larger_than_threadgroup_memory(M, N, dtype, device):
    x = torch.randint(-1000, 1000, (M, N)).to(dtype).to(device)
    z = torch.zeros(N, M, dtype=dtype, device=device)
    k = _transpose_kernel[(1, )](x, z, M, N)
    assert torch.equal(z.cpu(), x.T.cpu())
    assert k.metadata.shared <= 32768 and "chunk" in k.asm["msl"]


@triton.jit
def _gather_kernel(x_ptr, i_ptr, z_ptr, M: tl.constexpr, N: tl.constexpr, AXIS: tl.constexpr):
    offs = tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :]
    tl.store(z_ptr + offs, tl.gather(tl.load(x_ptr + offs), tl.load(i_ptr + offs), AXIS))


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("M, N, dtype", [(256, 64, torch.int64), (128, 128, torch.float32), (32, 32, torch.int32)])
def test_gather_in_rounds(M, N, dtype, axis, device):
    g = torch.Generator().manual_seed(M + axis)
    x = torch.randint(-1000, 1000, (M, N), generator=g).to(dtype).to(device)
    idx = torch.randint(0, x.shape[axis], (M, N), generator=g).to(device)
    z = torch.zeros(M, N, dtype=dtype, device=device)
    k = _gather_kernel[(1, )](x, idx, z, M, N, axis)
    assert torch.equal(z.cpu(), torch.gather(x, axis, idx).cpu())
    assert k.metadata.shared <= 32768
    assert ("chunk" in k.asm["msl"]) == (M * N * x.element_size() > 32768)

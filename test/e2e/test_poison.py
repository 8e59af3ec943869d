"""`ub.poison` as Triton 3.9 prints it (`%0 = ub.poison : i32`, an op with nothing but its type), read and
lowered. TTIR keeps it where a `noinline` function returns a value on one path only; upstream's test_core
spells it in hand-written TTGIR. A poison value may be anything: the backend picks zero."""
import pytest
import torch
import triton

from triton.backends.apple.ir import parse_module

_POISON = """
#blk = #ttg.blocked<{sizePerThread = [1], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}>
module attributes {"ttg.num-ctas" = 1 : i32, "ttg.num-warps" = 4 : i32, "ttg.threads-per-warp" = 32 : i32} {
  tt.func public @poison_select(%x: !tt.ptr<f32>, %o: !tt.ptr<f32>, %os: !tt.ptr<i32>, %n: i32) {
    %p = ub.poison : i32
    %pp = ub.poison : !tt.ptr<f32>
    %c0 = arith.constant 0 : i32
    %nonneg = arith.cmpi sge, %n, %c0 : i32
    %xq = arith.select %nonneg, %x, %pp : !tt.ptr<f32>
    %pt = ub.poison : tensor<128xf32, #blk>
    %c3 = arith.constant 3 : i32
    %big = arith.cmpi sgt, %n, %c3 : i32
    %r = tt.make_range {end = 128 : i32, start = 0 : i32} : tensor<128xi32, #blk>
    %xs = tt.splat %xq : !tt.ptr<f32> -> tensor<128x!tt.ptr<f32>, #blk>
    %xp = tt.addptr %xs, %r : tensor<128x!tt.ptr<f32>, #blk>, tensor<128xi32, #blk>
    %v = tt.load %xp : tensor<128x!tt.ptr<f32>, #blk>
    %sel = arith.select %big, %v, %pt : tensor<128xf32, #blk>
    %os_ = tt.splat %o : !tt.ptr<f32> -> tensor<128x!tt.ptr<f32>, #blk>
    %op = tt.addptr %os_, %r : tensor<128x!tt.ptr<f32>, #blk>, tensor<128xi32, #blk>
    tt.store %op, %sel : tensor<128x!tt.ptr<f32>, #blk>
    %s = arith.select %big, %n, %p : i32
    tt.store %os, %s : !tt.ptr<i32>
    tt.return
  }
}
"""


def _compile(tmp_path):
    path = tmp_path / "poison.ttgir"
    path.write_text(_POISON)
    return triton.compile(str(path))


def test_poison_with_its_type_is_read(tmp_path):
    kernel = _compile(tmp_path)
    assert "ub.poison : i32" in kernel.asm["ttgir"]
    mod = parse_module(kernel.asm["ttgir"])
    poisons = [op for op in mod.kernel.walk() if op.name == "ub.poison"]
    assert [str(op.result.type) for op in poisons][0] == "i32"
    assert str(poisons[1].result.type) == "!tt.ptr<f32>" and poisons[2].result.type.shape == (128, )
    assert poisons[0].operands == [] and poisons[0].attrs == {}


@pytest.mark.parametrize("n", [5, 1])
def test_poison_lowered_as_zero(n, tmp_path, device):
    kernel = _compile(tmp_path)
    x = torch.randn(128, device=device)
    out = torch.full((128, ), -1.0, device=device)
    out_s = torch.full((1, ), -1, dtype=torch.int32, device=device)
    kernel[(1, 1, 1)](x, out, out_s, n)
    if n > 3:  # the defined path
        assert torch.equal(out.cpu(), x.cpu()) and out_s.item() == n
    else:  # the poison path: any value is right; the backend's is zero
        assert torch.equal(out.cpu(), torch.zeros(128)) and out_s.item() == 0

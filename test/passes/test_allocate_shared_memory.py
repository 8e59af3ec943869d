"""passes/allocate_shared_memory.py: buffers and scratch packed by liveness after the Apple passes."""
from triton.backends.apple.ir import parse_module
from triton.backends.apple.passes import allocate_shared_memory

# Three buffers as upstream placed them: %a (4 KB) at 0, %b (4 KB) at 4096, %c (2 KB) at 8192; %a is dead
# before %c is written, %b is read in the loop so it stays live across it.
IR = """
#blocked = #ttg.blocked<{sizePerThread = [1, 1], threadsPerWarp = [4, 8], warpsPerCTA = [4, 1], order = [1, 0]}>
#shared = #ttg.swizzled_shared<{vec = 1, perPhase = 1, maxPhase = 1, order = [1, 0]}>
#smem = #ttg.shared_memory
#loc = loc(unknown)
module attributes {"ttg.num-ctas" = 1 : i32, "ttg.num-warps" = 4 : i32, ttg.shared = 12288 : i32, "ttg.threads-per-warp" = 32 : i32} {
  tt.func public @k(%n: i32) {
    %c0 = arith.constant 0 : i32 loc(#loc)
    %c1 = arith.constant 1 : i32 loc(#loc)
    %x = arith.constant dense<1.0> : tensor<32x64xf16, #blocked> loc(#loc)
    %y = arith.constant dense<1.0> : tensor<32x32xf16, #blocked> loc(#loc)
    %a = ttg.local_alloc %x {allocation.offset = 0 : i32} : (tensor<32x64xf16, #blocked>) -> !ttg.memdesc<32x64xf16, #shared, #smem> loc(#loc)
    %b = ttg.local_alloc %x {allocation.offset = 4096 : i32} : (tensor<32x64xf16, #blocked>) -> !ttg.memdesc<32x64xf16, #shared, #smem> loc(#loc)
    %la = ttg.local_load %a : !ttg.memdesc<32x64xf16, #shared, #smem> -> tensor<32x64xf16, #blocked> loc(#loc)
    scf.for %i = %c0 to %n step %c1  : i32 {
      %c = ttg.local_alloc %y {allocation.offset = 8192 : i32} : (tensor<32x32xf16, #blocked>) -> !ttg.memdesc<32x32xf16, #shared, #smem> loc(#loc)
      %lc = ttg.local_load %c : !ttg.memdesc<32x32xf16, #shared, #smem> -> tensor<32x32xf16, #blocked> loc(#loc)
      %lb = ttg.local_load %b : !ttg.memdesc<32x64xf16, #shared, #smem> -> tensor<32x64xf16, #blocked> loc(#loc)
      scf.yield loc(#loc)
    } loc(#loc)
    tt.return loc(#loc)
  } loc(#loc)
}
"""


def _offsets(module):
    return {o.result.name: o.attrs["allocation.offset"] for f in module.functions for o in f.walk()
            if o.name == "ttg.local_alloc"}


def test_buffers_are_filled_right_before_their_first_reader():
    m = parse_module(IR)
    allocate_shared_memory(m)
    ops = [o.name + ":" + (o.results[0].name if o.results else "") for o in m.functions[0].body.entry.ops]
    # %b was filled before %a's reader; now right before the loop that reads it
    assert ops.index("ttg.local_alloc:b") == ops.index("scf.for:") - 1
    assert ops.index("ttg.local_alloc:b") > ops.index("ttg.local_load:la")


def test_dead_buffer_space_is_reused():
    m = parse_module(IR)
    assert allocate_shared_memory(m) == 6144  # upstream needed 12288
    off = _offsets(m)
    assert off["a"] == off["b"] == 0  # %a is dead once %b is filled
    assert off["c"] == 4096  # %b is live in the loop: disjoint
    assert m.attrs["ttg.shared"] == 6144


def test_buffers_without_an_offset_are_placed():
    m = parse_module(IR.replace(" {allocation.offset = 8192 : i32}", ""))
    assert allocate_shared_memory(m) == 6144
    assert _offsets(m)["c"] == 4096


def test_placement_kept_when_packing_does_not_help():
    m = parse_module(IR)
    allocate_shared_memory(m)
    before = dict(_offsets(m))
    assert allocate_shared_memory(m) == 6144  # already packed: nothing to gain, nothing moves
    assert _offsets(m) == before


def test_upstream_placement_that_overlaps_under_our_liveness_is_replaced():
    """Upstream put %c over %b, right for its liveness; here %b is read after %c is filled (as when a dot reads its
    operand's buffer in place instead of upstream's early local_load). Packing needs as much as upstream claims,
    but upstream's placement would let %c overwrite %b: ours is used."""
    ir = IR.replace("ttg.shared = 12288", "ttg.shared = 6144").replace(
        "allocation.offset = 4096 : i32", "allocation.offset = 0 : i32").replace(
        "allocation.offset = 8192 : i32", "allocation.offset = 0 : i32")
    m = parse_module(ir)
    assert allocate_shared_memory(m) == 6144
    off = _offsets(m)
    assert not (off["b"] < off["c"] + 2048 and off["c"] < off["b"] + 4096)  # %b and %c are disjoint


def test_padded_rows_rule():
    from triton.backends.apple.analysis.padded_rows import padded_bytes, padded_row, padded_strides
    assert padded_row(64, 2) == 72  # 128-byte half rows: 16 bytes more
    assert padded_row(32, 2) == 40  # 64 bytes: an even multiple of 16 too
    assert padded_row(8, 2) == 8  # 16 bytes: the 8 rows of a fragment already start 16 bytes apart
    assert padded_row(24, 2) == 24  # 48 bytes, an odd multiple of 16
    assert padded_row(32, 4) == 36 and padded_row(8, 4) == 12
    for row, eb in [(64, 2), (32, 2), (8, 2), (24, 2), (32, 4), (16, 4), (128, 2)]:
        # the 8 rows of a fragment start at 8 distinct 16-byte offsets modulo 128 bytes
        assert len({(r * padded_row(row, eb) * eb) % 128 // 16 for r in range(8)}) == 8
    assert padded_strides([2, 32, 64], 2) == [32 * 72, 72, 1]
    assert padded_bytes([32, 64], 2) == 32 * 72 * 2


def test_padded_buffers_are_sized_padded_and_unpadded_where_they_would_not_fit():
    from triton.backends.apple.analysis.padded_rows import PAD_ATTR
    m = parse_module(IR)
    allocs = {o.result.name: o for o in m.functions[0].walk() if o.name == "ttg.local_alloc"}
    allocs["b"].attrs[PAD_ATTR] = 1
    allocate_shared_memory(m)
    off = _offsets(m)
    # %b is 32 rows of 72 halves now (4608 bytes); %c, live with it, starts after it
    assert off["c"] >= off["b"] + 4608 or off["b"] >= off["c"] + 2048
    assert m.attrs["ttg.shared"] == 4608 + 2048 and allocs["b"].attrs[PAD_ATTR]
    # the same buffers 4x as long: 16 KB + 8 KB fit in 32 KB only unpadded
    big = IR.replace("32x64xf16", "128x64xf16").replace("32x32xf16", "128x64xf16").replace("4096", "16384").replace(
        "8192", "32768").replace("ttg.shared = 12288", "ttg.shared = 49152")
    m = parse_module(big)
    allocs = {o.result.name: o for o in m.functions[0].walk() if o.name == "ttg.local_alloc"}
    for name in ("b", "c"):
        allocs[name].attrs[PAD_ATTR] = 1
    assert allocate_shared_memory(m) == 32768
    assert not any(PAD_ATTR in a.attrs for a in allocs.values())

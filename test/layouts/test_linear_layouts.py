"""Linear layouts: our blocked/slice derivation against libtriton, and the register maps built on them."""
import os
import subprocess
import sys

import pytest

from triton.backends.apple.ir.types import BlockedEncoding, SliceEncoding
from triton.backends.apple.layouts import blocked_layout, layout_of, local_register_map, slice_layout

HERE = os.path.dirname(os.path.abspath(__file__))


def test_blocked_and_slice_match_libtriton():
    # A subprocess: libtriton's to_linear_layout binding leaks objects that nanobind reports at exit.
    out = subprocess.run([sys.executable, os.path.join(HERE, "layout_oracle.py"), "400", "7"], capture_output=True,
                         text=True, timeout=300)
    assert "checked 400 encodings, 0 mismatches" in out.stdout, out.stdout + out.stderr
    assert out.returncode == 0


def test_blocked_1d_bases():
    lay = blocked_layout(BlockedEncoding((4, ), (32, ), (4, ), (0, )), (1024, ))
    assert lay.reg == ((1, ), (2, ), (512, ))
    assert lay.lane == ((4, ), (8, ), (16, ), (32, ), (64, ))
    assert lay.warp == ((128, ), (256, ))
    assert lay.num_regs == 8
    # every element is held exactly once
    seen = {lay.coord(r, l, w) for r in range(8) for l in range(32) for w in range(4)}
    assert len(seen) == 1024


def test_small_tensor_replicates_lanes_and_warps():
    lay = blocked_layout(BlockedEncoding((1, ), (32, ), (4, ), (0, )), (16, ))
    assert lay.free_lane_mask() == 0b10000
    assert lay.free_warp_mask() == 0b11


def test_slice_drops_dimension():
    parent = BlockedEncoding((1, 1), (1, 32), (2, 2), (1, 0))
    lay = layout_of(SliceEncoding(0, parent), (64, ), 4)
    assert lay.lane == ((1, ), (2, ), (4, ), (8, ), (16, ))
    assert lay.warp == ((32, ), (0, ))


def test_register_map_for_expand_dims_is_identity():
    parent = BlockedEncoding((1, 4), (8, 4), (4, 1), (1, 0))
    sl = layout_of(SliceEncoding(1, parent), (32, ), 4)
    full = layout_of(parent, (32, 1), 4)
    mapping = local_register_map(full, sl, lambda c: c[:1])
    # register bit i of the expanded tensor reads register bit i of the slice: the identity map
    assert mapping == [1 << i for i in range(len(full.reg))]
    assert full.num_regs == sl.num_regs


def test_register_map_refuses_cross_thread_moves():
    a = blocked_layout(BlockedEncoding((1, ), (32, ), (4, ), (0, )), (128, ))
    b = blocked_layout(BlockedEncoding((4, ), (32, ), (1, ), (0, )), (128, ))
    assert local_register_map(b, a, lambda c: c) is None


def test_non_power_of_two_shape_is_an_error_not_an_abort():
    with pytest.raises(ValueError, match="power of two"):
        blocked_layout(BlockedEncoding((1, ), (32, ), (4, ), (0, )), (96, ))


def _fragment_owner(lay, coord):
    """(registers, lanes, warps) holding element `coord`."""
    return {(r, l, w) for r in range(lay.num_regs) for l in range(32) for w in range(1 << len(lay.warp))
            if lay.coord(r, l, w) == coord}


@pytest.mark.parametrize("op_idx, shape, warps", [(0, (64, 32), (4, 1)), (0, (32, 16), (2, 2)),
                                                  (1, (32, 64), (2, 2)), (1, (16, 32), (1, 4)),
                                                  (0, (2, 32, 16), (2, 1))])
def test_mma_operand_layout_holds_each_simdgroups_fragments(op_idx, shape, warps):
    """A simdgroup holds exactly the 8x8 fragments it multiplies, in the accumulator's lane mapping
    (lane l: row 4*(l>>4) + ((l>>1)&3), columns 4*((l>>3)&1) + 2*(l&1) + j), and register
    e | frag_col << 1 | frag_row << ... as lowering/dot_ops.py indexes them."""
    from triton.backends.apple.ir.types import AppleMmaEncoding, DotOperandEncoding
    wm, wn = warps
    lay = layout_of(DotOperandEncoding(op_idx, AppleMmaEncoding(warps)), shape, wm * wn)
    rows, cols = shape[-2], shape[-1]
    tile_rows = rows // wm if op_idx == 0 else rows
    tile_cols = cols if op_idx == 0 else cols // wn
    log_cf = (tile_cols // 8).bit_length() - 1
    log_rf = (tile_rows // 8).bit_length() - 1
    batch = shape[0] if len(shape) == 3 else 1
    for w in range(wm * wn):
        w_col, w_row = w % wn, w // wn  # accumulator order: N tiles first
        r0 = w_row * tile_rows if op_idx == 0 else 0
        c0 = 0 if op_idx == 0 else w_col * tile_cols
        for b in range(batch):
            for fr in range(tile_rows // 8):
                for fc in range(tile_cols // 8):
                    for lane in range(32):
                        for e in range(2):
                            reg = e | fc << 1 | fr << (1 + log_cf) | b << (1 + log_cf + log_rf)
                            row = r0 + 8 * fr + 4 * (lane >> 4) + ((lane >> 1) & 3)
                            col = c0 + 8 * fc + 4 * ((lane >> 3) & 1) + 2 * (lane & 1) + e
                            want = (b, row, col) if batch > 1 or len(shape) == 3 else (row, col)
                            assert lay.coord(reg, lane, w) == want


def test_mma_accumulator_with_one_simdgroup_column_is_the_next_dots_a_operand():
    """Attention's P: a dot result in [wm, 1] is already the A operand of the next dot (no data moves)."""
    from triton.backends.apple.ir.types import AppleMmaEncoding, DotOperandEncoding
    from triton.backends.apple.layouts import identity
    enc = AppleMmaEncoding((4, 1))
    acc = layout_of(enc, (128, 64), 4)
    a_op = layout_of(DotOperandEncoding(0, enc), (128, 64), 4)
    assert local_register_map(a_op, acc, identity) == [1 << i for i in range(len(a_op.reg))]


def test_linear_encoding_fitted_to_the_tensor_shape():
    """#ttg.linear bases spanning 64x64, used on other shapes: out-of-range components become copies (register
    copies dropped), missing extent becomes registers; every element is held, and held by the same threads
    as on the spanned shape where both exist."""
    from triton.backends.apple.ir.types import LinearEncoding
    enc = LinearEncoding(register=((0, 16), (1, 0), (2, 0), (4, 0), (8, 0), (16, 0)),
                         lane=((0, 0), (0, 1), (0, 2), (0, 4), (0, 8)), warp=((32, 0), (0, 32)))
    for shape in [(64, 64), (128, 128), (128, 16), (32, 128), (16, 16)]:
        lay = layout_of(enc, shape, 4)
        held = {lay.coord(r, l, w) for r in range(lay.num_regs) for l in range(32) for w in range(4)}
        assert held == {(i, j) for i in range(shape[0]) for j in range(shape[1])}, shape
    small = layout_of(enc, (16, 16), 4)
    assert small.warp == ((0, 0), (0, 0)) and small.num_regs == 16


def test_layout_the_verifier_refuses_is_named():
    # AMD's mfma layouts need 64-lane wavefronts; Apple simdgroups have 32 lanes
    from triton.backends.apple.layouts import from_libtriton
    from triton.backends.apple.ir.types import OpaqueEncoding
    mfma = "#ttg.amd_mfma<{version = 3, warpsPerCTA = [2, 2], instrShape = [32, 32, 8], isTransposed = false}>"
    with pytest.raises(NotImplementedError, match=r"layout #ttg\.amd_mfma.* over 64 lanes .* 4 simdgroups of 32 lanes"):
        from_libtriton(OpaqueEncoding(mfma), (64, 64), 4)

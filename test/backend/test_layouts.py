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

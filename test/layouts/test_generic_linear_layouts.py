"""`#ttg.generic_linear` layouts: ours against libtriton's (generic_layout_oracle.py), and which holder of each
element is its owner when a layout holds elements more than once."""
import os
import subprocess
import sys

from triton.backends.apple.layouts import LinearLayout

HERE = os.path.dirname(os.path.abspath(__file__))


def test_generic_linear_layouts_match_libtriton():
    # A subprocess: libtriton's bindings leak objects that nanobind reports at exit.
    out = subprocess.run([sys.executable, os.path.join(HERE, "generic_layout_oracle.py")], capture_output=True,
                         text=True, timeout=300)
    assert "checked 34 layouts, 0 mismatches" in out.stdout, out.stdout + out.stderr
    assert out.returncode == 0


def _owners(lay: LinearLayout):
    """(register, lane, warp) of every holder with no copy bit set."""
    rm, lm, wm = lay.free_reg_mask(), lay.free_lane_mask(), lay.free_warp_mask()
    return [(r, l, w) for r in range(lay.num_regs) for l in range(32) for w in range(1 << len(lay.warp))
            if not (r & rm or l & lm or w & wm)]


def _one_owner_each(lay: LinearLayout) -> bool:
    owned = [lay.coord(*h) for h in _owners(lay)]
    held = {lay.coord(r, l, w) for r in range(lay.num_regs) for l in range(32) for w in range(1 << len(lay.warp))}
    return len(owned) == len(set(owned)) and set(owned) == held


def test_warps_that_repeat_lanes_have_one_owner():
    # warp bit 0 holds what lane bit 4 holds: only even warps own
    lay = LinearLayout((256, ), ((1, ), (2, )), ((4, ), (8, ), (16, ), (32, ), (64, )), ((64, ), (128, )))
    assert (lay.free_reg_mask(), lay.free_lane_mask(), lay.free_warp_mask()) == (0, 0, 1)
    assert _one_owner_each(lay)


def test_repeats_of_combinations_have_one_owner():
    # warp bit 1 repeats register bit 0 xor lane bit 2; a zero register basis on top
    lay = LinearLayout((8, 8), ((1, 0), (0, 0), (0, 1)), ((2, 0), (4, 0), (0, 2), (0, 4), (0, 0)),
                       ((0, 0), (1, 2)))
    assert lay.free_reg_mask() == 0b010 and lay.free_lane_mask() == 0b10000 and lay.free_warp_mask() == 0b11
    assert _one_owner_each(lay)


def test_injective_layouts_keep_their_zero_bases_as_copies():
    lay = LinearLayout((16, ), ((0, ), (1, )), ((2, ), (4, ), (8, ), (0, ), (0, )), ((0, ), (0, )))
    assert (lay.free_reg_mask(), lay.free_lane_mask(), lay.free_warp_mask()) == (0b1, 0b11000, 0b11)
    assert _one_owner_each(lay)

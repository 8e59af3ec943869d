"""Compares our layouts of `#ttg.generic_linear` encodings with libtriton's on exact, smaller and larger shapes.

libtriton's `to_linear_layout` aborts on these encodings (it converts them to `#ttg.linear`, which they are not),
so the reference is `gluon_ir.get_layout_view`, libtriton's printout of which thread and register hold each element
of a shape. What is compared is the set of (thread, element) pairs: register numbering is ours to choose. Run as a
script (the test runs it in a subprocess: libtriton's bindings leak objects that nanobind reports at exit); prints
one line per mismatch and a summary.
"""
import itertools
import re
import sys

from triton._C.libtriton import gluon_ir
from triton.experimental.gluon import language as gl

from triton.backends.apple.ir.types import GenericLinearEncoding
from triton.backends.apple.layouts import layout_of

CASES = [
    ([[1], [2]], [[4], [8], [16], [32], [64]], [[64], [128]], [256]),
    ([[1], [2], [4]], [[8], [16], [32], [64], [128]], [[4], [256]], [512]),
    ([[1], [2]], [[4], [8], [16], [32], [64]], [[96], [128]], [256]),
    ([[1, 0], [0, 1]], [[2, 0], [4, 0], [8, 0], [0, 2], [0, 4]], [[16, 8], [0, 8]], [32, 16]),
    ([[1, 0], [0, 1]], [[2, 0], [4, 0], [8, 0], [0, 2], [0, 4]], [[4, 2], [8, 4]], [16, 8]),
    ([[1, 0], [0, 0], [0, 1]], [[2, 0], [4, 0], [8, 0], [0, 2], [0, 4]], [[16, 8], [0, 8]], [32, 16]),
    ([[0, 1], [0, 2], [0, 4], [0, 16], [32, 0]], [[1, 0], [2, 0], [4, 0], [8, 0], [0, 8]], [[32, 0], [16, 0]], [64, 32]),
    ([[1, 0], [0, 1]], [[2, 0], [4, 0], [8, 0], [0, 2], [0, 4]], [[24, 0], [0, 8]], [32, 16]),
]


def reference(layout, shape):
    """{(thread, coordinate)} from libtriton's view of `layout` on `shape` (elements printed row-major)."""
    text = gluon_ir.get_layout_view(layout, list(shape), False)
    cells = re.sub(r"\]\s*\[", ",", text).replace("[", " ").replace("]", " ").split(",")  # rows are lines
    out = set()
    for coord, cell in zip(itertools.product(*[range(n) for n in shape]), cells):
        for t in re.findall(r"T(\d+):\d+", cell):
            out.add((int(t), coord))
    assert len(cells) == len(list(itertools.product(*[range(n) for n in shape]))), (len(cells), shape)
    return out


def ours(reg, lane, warp, shape):
    enc = GenericLinearEncoding(tuple(map(tuple, reg)), tuple(map(tuple, lane)), tuple(map(tuple, warp)))
    lay = layout_of(enc, tuple(shape), 1 << len(warp))
    return {(w * 32 + l, lay.coord(r, l, w)) for r in range(lay.num_regs) for l in range(32) for w in range(1 << len(warp))}


def main() -> int:
    bad = checked = 0
    for reg, lane, warp, shape in CASES:
        layout = gl.DistributedLinearLayout(reg_bases=reg, lane_bases=lane, warp_bases=warp, block_bases=[],
                                            shape=shape)
        shapes = [shape, [max(1, n // 2) for n in shape], [n * 2 for n in shape]]
        if len(shape) == 2:
            shapes += [[shape[0], 1], [1, shape[1]]]  # the shapes slices of the layout are taken on
        for s in shapes:
            checked += 1
            if ours(reg, lane, warp, s) != reference(layout, s):
                bad += 1
                print(f"MISMATCH {reg} {lane} {warp} on {s}")
    print(f"checked {checked} layouts, {bad} mismatches")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

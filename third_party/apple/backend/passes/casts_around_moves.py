"""Apple pass: widen before moving. `arith.extf(ttg.convert_layout(x))` becomes
`ttg.convert_layout(arith.extf(x))` when the conversion has no other use.

The result is the same value; the difference is where the narrow type exists. A bfloat16 scan accumulates
in float (lowering/scan_ops.py) and `arith.extf` of its result reads that float accumulator, so a layout
conversion between the scan and the extf would otherwise round the sum to bfloat16 on the way.
"""
from __future__ import annotations

from ..ir import Module, Op
from ..ir.types import TensorType
from .rewrite import insert_before, uses


def widen_before_moves(module: Module) -> int:
    """Apply the rewrite everywhere in `module`; returns how many pairs were swapped."""
    count = 0
    for fn in module.functions:
        for ext in [o for o in fn.walk() if o.name == "arith.extf"]:
            cvt = ext.operands[0].owner
            if not isinstance(cvt, Op) or cvt.name != "ttg.convert_layout":
                continue
            if [u for u, _ in uses([o for b in fn.body.blocks for o in b.ops], cvt.result)] != [ext]:
                continue
            x, narrow, wide = cvt.operands[0], cvt.result, ext.result
            # `narrow` (the conversion's result, now unused elsewhere) becomes the extf's result: float in
            # the source's layout; `wide` keeps its identity for its users and is now the conversion's result
            narrow.type = TensorType(x.type.shape, wide.type.element, x.type.encoding)
            ext.operands, ext.results, narrow.owner = [x], [narrow], ext
            cvt.operands, cvt.results, wide.owner = [narrow], [wide], cvt
            ext.parent.ops.remove(ext)
            insert_before(cvt, ext)
            count += 1
    return count

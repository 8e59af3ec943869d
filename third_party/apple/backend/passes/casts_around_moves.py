"""Apple pass: place float casts on the right side of layout conversions.

`cast(ttg.convert_layout(x))` becomes `ttg.convert_layout(cast(x))` (the conversion having no other use)
in two cases; the value is the same, only the type that moves between threads changes:
- narrowing casts (`arith.truncf`, narrowing `tt.fp_to_fp`): the narrow value moves, which halves the
  threadgroup memory of, e.g., a GEMM epilogue that converts the float32 accumulator before storing fp16;
- `arith.extf` of a bfloat16 scan result: bfloat16 scans accumulate in float (lowering/scan_ops.py) and the
  extf reads that float accumulator, so the conversion must move the wide value, not a rounded one.
"""
from __future__ import annotations

from ..ir import Module, Op
from ..ir.types import TensorType
from .rewrite import insert_before, scope, uses


def _narrowing(op: Op) -> bool:
    if op.name == "arith.truncf":
        return True
    return op.name == "tt.fp_to_fp" and op.result.type.element.bitwidth < op.operands[0].type.element.bitwidth


def _widening_a_bf16_scan(op: Op) -> bool:
    if op.name != "arith.extf":
        return False
    src = op.operands[0].owner.operands[0]  # through the conversion
    return isinstance(src.owner, Op) and src.owner.name == "tt.scan" and str(src.type.element) == "bf16"


def casts_around_moves(module: Module) -> int:
    """Apply the rewrite everywhere in `module`; returns how many cast/conversion pairs were swapped."""
    count = 0
    for fn in module.functions:
        for cast in [o for o in fn.walk() if o.name in ("arith.truncf", "tt.fp_to_fp", "arith.extf")]:
            cvt = cast.operands[0].owner
            if not isinstance(cvt, Op) or cvt.name != "ttg.convert_layout":
                continue
            if not (_narrowing(cast) or _widening_a_bf16_scan(cast)):
                continue
            if [u for u, _ in uses(scope(cvt.result), cvt.result)] != [cast]:
                continue
            x, moved, result = cvt.operands[0], cvt.result, cast.result
            # `moved` (the conversion's result, used only by the cast) becomes the cast's result, in the
            # source's layout; `result` keeps its identity for its users and is now the conversion's result
            moved.type = TensorType(x.type.shape, result.type.element, x.type.encoding)
            cast.operands[0], cast.results, moved.owner = x, [moved], cast
            cvt.operands, cvt.results, result.owner = [moved], [result], cvt
            cast.parent.ops.remove(cast)
            insert_before(cvt, cast)
            count += 1
    return count

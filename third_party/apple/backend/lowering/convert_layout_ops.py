"""Lowering of `ttg.convert_layout`: a relayout (`relayout.py`) whose result element at coordinate c is the
source element at c, by register permutation, simdgroup shuffles or threadgroup memory."""
from __future__ import annotations

from ..ir import Op
from .emitter import FunctionEmitter
from .registry import OpFamily
from .relayout import relayout
from .shared_memory import row_major_strides

FAMILY = OpFamily("convert_layout")


@FAMILY.lowers("ttg.convert_layout")
def _convert_layout(em: FunctionEmitter, op: Op) -> None:
    relayout(em, op, lambda c: c, row_major_strides(op.result.type.shape))

"""Lowering of the SPMD ops that read the launch grid: `tt.get_program_id` and `tt.get_num_programs`
(threadgroup position and count in the grid)."""
from __future__ import annotations

from ..ir import Op
from .emitter import FunctionEmitter, Lowered
from .registry import OpFamily

FAMILY = OpFamily("spmd")

_AXES = {"x": "x", "y": "y", "z": "z", "0": "x", "1": "y", "2": "z"}
_GRID_BUILTINS = {"tt.get_program_id": "tt_pid", "tt.get_num_programs": "tt_nprog"}


@FAMILY.lowers(*_GRID_BUILTINS)
def _grid_coordinate(em: FunctionEmitter, op: Op) -> None:
    axis = _AXES[str(op.attrs["axis"])]
    name = em.fresh(op.result.name)
    em.emit(f"const int {name} = int({_GRID_BUILTINS[op.name]}.{axis});")
    em.bind(op.result, Lowered(name, "int"))

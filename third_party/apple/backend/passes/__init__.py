"""Apple-specific passes over our IR, run between parsing the TTGIR and lowering it to MSL."""
from .accelerate_matmul import accelerate_matmul
from .allocate_shared_memory import allocate_shared_memory
from .casts_around_moves import casts_around_moves
from .loop_carried_layouts import loop_carried_layouts

__all__ = ["accelerate_matmul", "allocate_shared_memory", "casts_around_moves", "loop_carried_layouts"]

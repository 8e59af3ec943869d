"""Apple-specific passes over our IR, run between parsing the TTGIR and lowering it to MSL."""
from .accelerate_matmul import accelerate_matmul
from .widen_before_moves import widen_before_moves

__all__ = ["accelerate_matmul", "widen_before_moves"]

"""Apple-specific passes over our IR, run between parsing the TTGIR and lowering it to MSL."""
from .accelerate_matmul import accelerate_matmul

__all__ = ["accelerate_matmul"]

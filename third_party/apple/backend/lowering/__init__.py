"""TTGIR -> Metal Shading Language lowering, organised per op family (`*_ops.py`, listed in `module.py`) and
driven by the linear layouts of `..layouts`."""
from .module import BufferSlot, LoweredKernel, lower_module

__all__ = ["BufferSlot", "LoweredKernel", "lower_module"]

"""TTGIR -> Metal Shading Language lowering, organised per op family (`*_ops.py`) and driven by the
linear layouts of `..layouts`."""
from .core import AppleCompilationError
from .module import LoweredKernel, lower_module, lower_parsed_module

__all__ = ["AppleCompilationError", "LoweredKernel", "lower_module", "lower_parsed_module"]

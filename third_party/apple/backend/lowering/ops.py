"""Imports every op-family module so that their `@lowers` registrations take effect."""
from . import (atomic_ops, control_flow_ops, debug_ops, dot_ops, elementwise_ops, extern_ops, memory_ops,  # noqa: F401
               reduce_ops, scan_ops, shared_memory_ops, tensor_ops)

"""Imports every op-family module so that their `@lowers` registrations take effect."""
from . import control_flow_ops, elementwise_ops, memory_ops, reduce_ops, tensor_ops  # noqa: F401

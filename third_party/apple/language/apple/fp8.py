"""Hook for Triton's custom fp8 formats: the `apple` backend converts only the standard ones."""
from triton.language import core


@core.builtin
def convert_custom_types(arg, dst_ty, fp_downcast_rounding=None, _semantic=None):
    rounding = f" (rounding {fp_downcast_rounding})" if fp_downcast_rounding else ""
    raise ValueError(f"apple backend: conversion from {arg.type} to {dst_ty}{rounding} is not supported; the only "
                     "fp8 formats on this backend are fp8e5 (float8_e5m2) and fp8e4nv (float8_e4m3fn)")

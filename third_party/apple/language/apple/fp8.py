"""Triton's custom fp8 format on the `apple` backend: conversions to and from fp8e4b15.

fp8e4b15 is e4m3 with exponent bias 15: float16's bit layout with the top exponent bit dropped, so it has no
NaN or infinity and every byte is a finite value (0x7F is 1.875). MLIR has no such type: Triton's IR holds the
values as i8 and hands every conversion that involves them to the backend's `convert_custom_types`. Here they
are integer operations on the bits, with the results NVIDIA GPUs give (Triton's conversions for them):
- to float: the byte's sign, exponent and mantissa moved into float16's fields, exact;
- from float: the magnitude rounded toward zero to float16, clamped to 1.75 (NaN and infinities too), then
  rounded half away from zero to three mantissa bits; the sign is kept.
"""
from triton.language import core


@core.builtin
def convert_custom_types(arg, dst_ty, fp_downcast_rounding=None, _semantic=None):
    # the rounding is fixed, as in NVIDIA's conversion: toward zero to float16, then half away from zero
    del fp_downcast_rounding
    src = arg.type.scalar
    if src.is_fp8e4b15() and dst_ty.scalar.is_fp8e4b15():
        return arg
    if src.is_fp8e4b15():
        half = _fp8e4b15_to_float16(arg, _semantic)
        return half if dst_ty.scalar.is_fp16() else _semantic.cast(half, dst_ty)
    if not (src.is_fp16() or src.is_bf16() or src.is_fp32()):
        raise ValueError(f"apple backend: conversion from {arg.type} to {dst_ty} is not supported; fp8e4b15 is "
                         "made from float16, bfloat16 or float32 values (convert to float32 first)")
    return _float_to_fp8e4b15(arg, dst_ty, _semantic)


def _const(value, dtype, _semantic):
    return _semantic.scalar_constant(value, dtype)


def _fp8e4b15_to_float16(arg, _semantic):
    s = _semantic
    u16 = core.uint16
    byte = core.tensor(arg.handle, arg.type.with_element_ty(core.uint8))  # the i8 the IR holds, as unsigned
    x = s.cast(byte, u16 if not byte.type.is_block() else byte.type.with_element_ty(u16))
    sign = s.shl(s.and_(x, _const(0x80, u16, s)), _const(8, u16, s))
    rest = s.shl(s.and_(x, _const(0x7F, u16, s)), _const(7, u16, s))
    return s.bitcast(s.or_(sign, rest), core.float16)


def _float_to_fp8e4b15(arg, dst_ty, _semantic):
    s = _semantic
    f32, u32 = core.float32, core.uint32
    x = s.cast(arg, arg.type.with_element_ty(f32) if arg.type.is_block() else f32)
    bits = s.bitcast(x, u32)
    sign = s.and_(s.lshr(bits, _const(24, u32, s)), _const(0x80, u32, s))
    mag = s.bitcast(s.and_(bits, _const(0x7FFFFFFF, u32, s)), f32)
    cap = _const(1.75, f32, s)
    mag = s.where(s.not_equal(mag, mag), cap, s.minimum(mag, cap, core.PropagateNan.NONE))
    # float16 bits of the magnitude, rounded toward zero: normal numbers keep float32's top 10 mantissa bits
    # (exponent rebased from 127 to 15), subnormals are whole multiples of 2**-24
    normal = s.sub(s.lshr(s.bitcast(mag, u32), _const(13, u32, s)), _const(0x1C000, u32, s), True)
    subnormal = s.cast(s.mul(mag, _const(16777216.0, f32, s), True), normal.type)
    h = s.where(s.greater_equal(mag, _const(2.0**-14, f32, s)), normal, subnormal)
    byte = s.or_(s.lshr(s.add(s.shl(h, _const(1, u32, s)), _const(0x80, u32, s), True), _const(8, u32, s)), sign)
    i8 = s.cast(byte, byte.type.with_element_ty(core.int8) if byte.type.is_block() else core.int8)
    return core.tensor(i8.handle, dst_ty)

"""Decomposes `tt.dot_scaled` into upcasts, block-scale multiplies and an ordinary `tt.dot`.

Apple GPUs have no block-scaled (microscaling) matrix instructions; neither do NVIDIA GPUs before Blackwell nor
most AMD GPUs, where upstream rewrites the op the same way (its `DecomposeScaledBlocked`). The semantics are
upstream's (Triton 3.9):

- compute type: f16 when either operand is `fp16`, else bf16;
- each operand is upcast from its stored format: `e2m1` (two per byte, low nibble first, packed along K, or
  along M/N when `lhs_k_pack`/`rhs_k_pack` is false) through `ttg.fp4_to_fp`, the other formats through
  `tt.fp_to_fp` (nothing when the operand already is the compute type);
- an e8m0 scale (one byte per block of `K / scale.shape[-1]` elements along K; value 2^(s-127)) becomes the
  compute type by placing its byte in the exponent field: bf16 `(s << 7)`, with `max(., 64)` so that s = 0 is
  2^-127 (a bf16 subnormal), or f32 `(s << 23)` truncated to f16 (overflowing to inf, underflowing to 0);
  unless `fast_math`, `fma(x, 0, x)` turns the 0xFF scale (inf) into NaN and keeps every finite scale;
  a floating-point scale is converted with `tt.fp_to_fp`;
- the upcast operand is multiplied by its scale in the compute type, then both feed `tt.dot` with the op's
  accumulator and result type, which `accelerate_matmul` moves onto `simdgroup_matrix`.

Layouts come from linear layouts instead of upstream's expand/broadcast/trans/reshape chain: the scale of the
element at (m, k) of A is scale[m, k // block], so the scale tensor is converted (`ttg.convert_layout`) into A's
linear layout with its K components shifted right by log2(block) — bases inside one block become zero, i.e. copies
— and `apple.scale_broadcast` then reads it register for register (`lowering/scaled_dot_ops.py`). For B, whose
scale is stored [N, K / block], the same layout also swaps the two axes.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

from ..errors import InternalCompilerError, UnsupportedFeatureError
from ..ir import Function, Module, Op, Value
from ..ir.types import (BlockedEncoding, DotOperandEncoding, LinearEncoding, ScalarType, TensorType)
from ..layouts import LayoutService, LinearLayout
from .rewrite import convert_layout, insert_before

BF16 = ScalarType("bf16")
F16 = ScalarType("f16")
F32 = ScalarType("f32")
I16 = ScalarType("i16")
I32 = ScalarType("i32")
I8 = ScalarType("i8")


def _log2(n: int) -> int:
    if n <= 0 or n & (n - 1):
        raise UnsupportedFeatureError(f"apple backend: tt.dot_scaled with a scale block of {n} elements along K; "
                                      "blocks must be a power of two")
    return n.bit_length() - 1


class _Builder:
    """Creates ops before the `tt.dot_scaled` being replaced, with names unique in its function (derived from
    the op's result name, so the same kernel always gets the same MSL)."""

    def __init__(self, fn: Function, anchor: Op, taken: set):
        self.anchor, self.taken = anchor, taken
        self.base = anchor.result.name

    def name(self, hint: str) -> str:
        name, k = f"{self.base}_{hint}", 1
        while name in self.taken:
            name = f"{self.base}_{hint}_{k}"
            k += 1
        self.taken.add(name)
        return name

    def op(self, opname: str, operands: List[Value], ty, hint: str, attrs: Optional[dict] = None) -> Value:
        res = Value(self.name(hint), ty, None, 0, self.anchor.loc)
        new = Op(opname, operands, [res], dict(attrs or {}), [], self.anchor.loc)
        insert_before(self.anchor, new)
        return res

    def constant(self, like: TensorType, element: ScalarType, literal: str, hint: str) -> Value:
        ty = TensorType(like.shape, element, like.encoding)
        return self.op("arith.constant", [], ty, hint, {"value": f"dense<{literal}>"})

    def convert(self, v: Value, ty: TensorType, hint: str) -> Value:
        if v.type == ty:
            return v
        cvt = convert_layout(v, ty, self.anchor.loc, self.name(hint))
        insert_before(self.anchor, cvt)
        return cvt.result


def _as_encoding(lay: LinearLayout) -> LinearEncoding:
    return LinearEncoding(tuple(lay.reg), tuple(lay.lane), tuple(lay.warp))


def _fp4_result_encoding(src: LinearLayout, axis: int) -> LinearEncoding:
    """Layout of e2m1 values unpacked along `axis`: each thread keeps the bytes it held, now two elements each
    (register bit 0 picks the nibble, low nibble first); every other basis doubles along `axis`."""
    def double(b):
        return tuple(x * 2 if d == axis else x for d, x in enumerate(b))

    unit = tuple(1 if d == axis else 0 for d in range(src.rank))
    return LinearEncoding((unit, ) + tuple(double(b) for b in src.reg), tuple(double(b) for b in src.lane),
                          tuple(double(b) for b in src.warp))


def _scale_encoding(v: LinearLayout, dims: Tuple[int, ...], shifts: Tuple[int, ...]) -> LinearEncoding:
    """The operand's layout `v` seen from its scale tensor: scale coordinate i is operand coordinate dims[i]
    shifted right by shifts[i] (K by log2(block); for B also the K/N swap)."""
    def project(b):
        return tuple(b[d] >> s for d, s in zip(dims, shifts))

    return LinearEncoding(tuple(project(b) for b in v.reg), tuple(project(b) for b in v.lane),
                          tuple(project(b) for b in v.warp))


def _scale_to_compute(bld: _Builder, scale: Value, ct: ScalarType, fast_math: bool) -> Value:
    """The scale tensor (its own shape and layout) in the compute type, as upstream's `scaleTo16`."""
    sty: TensorType = scale.type
    if sty.element.name != "i8":  # a floating-point scale (e4m3 for nvfp4-style scaling) just converts
        return bld.op("tt.fp_to_fp", [scale], sty.with_element(ct), "scale_up")
    if ct == BF16:
        wide = bld.op("arith.extui", [scale], sty.with_element(I16), "scale_ext")
        bits = bld.op("arith.shli", [wide, bld.constant(sty, I16, "7", "c7")], wide.type, "scale_bits")
        # e8m0 0 is 2^-127: bf16's subnormal 0x0040 (upstream's maxui 64)
        bits = bld.op("arith.maxui", [bits, bld.constant(sty, I16, "64", "c64")], wide.type, "scale_min")
        fp = bld.op("tt.bitcast", [bits], sty.with_element(BF16), "scale_bf16")
    else:
        wide = bld.op("arith.extui", [scale], sty.with_element(I32), "scale_ext")
        bits = bld.op("arith.shli", [wide, bld.constant(sty, I32, "23", "c23")], wide.type, "scale_bits")
        fp = bld.op("tt.bitcast", [bits], sty.with_element(F32), "scale_f32")
    if not fast_math:  # 0xFF is inf here: inf * 0 + inf is NaN, every finite scale stays itself
        zero = bld.constant(fp.type, fp.type.element, "0.000000e+00", "zero")
        fp = bld.op("math.fma", [fp, zero, fp], fp.type, "scale_nan")
    if ct == F16:
        fp = bld.op("arith.truncf", [fp], sty.with_element(F16), "scale_f16")
    return fp


def _upcast_operand(bld: _Builder, layouts: LayoutService, op: Op, idx: int, v: Value, scale: Optional[Value],
                    ct: ScalarType) -> Value:
    side = "lhs" if idx == 0 else "rhs"
    fmt = str(op.attrs[side])
    k_pack = bool(op.attrs.get(f"{side}_k_pack", True))
    vty: TensorType = v.type
    rank = len(vty.shape)
    k_dim = rank - 1 if idx == 0 else rank - 2
    tag = "a" if idx == 0 else "b"
    if fmt == "e2m1":
        axis = k_dim if k_pack else (rank - 2 if idx == 0 else rank - 1)
        enc = _fp4_result_encoding(layouts.of(vty), axis)
        shape = tuple(n * 2 if d == axis else n for d, n in enumerate(vty.shape))
        up = bld.op("ttg.fp4_to_fp", [v], TensorType(shape, ct, enc), f"{tag}_up", {"axis": axis})
    elif vty.element == ct:
        up = v
    else:
        up = bld.op("tt.fp_to_fp", [v], vty.with_element(ct), f"{tag}_up")
    if scale is None:
        return up
    uty: TensorType = up.type
    sshape = scale.type.shape
    block = uty.shape[k_dim] // sshape[-1]
    # scale coordinate i reads operand coordinate dims[i]: A's scale is [.., M, K/block], B's [.., N, K/block]
    dims = tuple(range(rank - 2)) + ((rank - 2, rank - 1) if idx == 0 else (rank - 1, rank - 2))
    shifts = (0, ) * (rank - 1) + (_log2(block), )
    s16 = _scale_to_compute(bld, scale, ct, bool(op.attrs.get("fastMath", False)))
    lay = layouts.of(uty)
    s_in_v = bld.convert(s16, TensorType(sshape, ct, _scale_encoding(lay, dims, shifts)), f"{tag}_scale_cvt")
    bcast = bld.op("apple.scale_broadcast", [s_in_v], uty, f"{tag}_scale", {
        "dims": list(dims), "shifts": list(shifts)})
    return bld.op("arith.mulf", [up, bcast], uty, f"{tag}_scaled")


def _operands(op: Op) -> Tuple[Value, Optional[Value], Value, Optional[Value], Value]:
    ops = list(op.operands)
    lhs_scaled = op.attrs.get("lhs_scaled", len(ops) == 5)
    rhs_scaled = op.attrs.get("rhs_scaled", len(ops) == 5)
    if len(ops) != 3 + int(lhs_scaled) + int(rhs_scaled):
        raise InternalCompilerError(f"apple backend: tt.dot_scaled with {len(ops)} operands and scales "
                                    f"lhs={lhs_scaled}, rhs={rhs_scaled}: {op.text}")
    a = ops.pop(0)
    sa = ops.pop(0) if lhs_scaled else None
    b = ops.pop(0)
    sb = ops.pop(0) if rhs_scaled else None
    return a, sa, b, sb, ops[0]


def _decompose(fn: Function, op: Op, layouts: LayoutService, taken: set) -> None:
    a, sa, b, sb, c = _operands(op)
    ct = F16 if "fp16" in (op.attrs.get("lhs"), op.attrs.get("rhs")) else BF16
    bld = _Builder(fn, op, taken)
    res_enc = op.result.type.encoding
    dot_operands = []
    for idx, (v, s) in enumerate(((a, sa), (b, sb))):
        up = _upcast_operand(bld, layouts, op, idx, v, s, ct)
        uty: TensorType = up.type
        dot_ty = TensorType(uty.shape, ct, DotOperandEncoding(idx, res_enc))
        dot_operands.append(bld.convert(up, dot_ty, f"{'ab'[idx]}_dot"))
    dot = Op("tt.dot", dot_operands + [c], [op.result], {"inputPrecision": "ieee", "maxNumImpreciseAcc": 0},
             [], op.loc)
    insert_before(op, dot)
    op.parent.ops.remove(op)


def decompose_scaled_dot(module: Module) -> int:
    """Replace every `tt.dot_scaled` of `module` by its decomposition; returns how many were replaced."""
    layouts = LayoutService(module.num_warps)
    count = 0
    for fn in module.functions:
        taken = {v.name for o in fn.walk() for v in o.results} | {a.name for a in fn.args}
        for o in fn.walk():
            for region in o.regions:
                for block in region.blocks:
                    taken |= {arg.name for arg in block.args}
        for op in [o for o in fn.walk() if o.name == "tt.dot_scaled"]:
            if not isinstance(op.result.type.encoding, (BlockedEncoding, LinearEncoding)):
                raise InternalCompilerError(f"apple backend: tt.dot_scaled with result layout "
                                            f"{op.result.type.encoding}; expected a blocked or linear layout")
            _decompose(fn, op, layouts, taken)
            count += 1
    return count

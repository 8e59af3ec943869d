"""Linear layouts of distributed tensors, and the register maps the lowering derives from them.

A layout maps (register, lane, warp) indices to tensor coordinates, linearly over GF(2): the coordinate
of a thread's register is the XOR of the bases of the set bits of the three indices. Upstream encodings
(`#ttg.blocked`, `#ttg.slice`, `#ttg.linear`, `#ttg.dot_op`) are converted by libtriton itself through
`gluon_ir.GluonOpBuilder.to_linear_layout`, so we never re-derive upstream's layout semantics.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from .ir.types import (BlockedEncoding, DotOperandEncoding, Encoding, LinearEncoding, SliceEncoding, TensorType)

Coord = Tuple[int, ...]


def _xor(a: Coord, b: Coord) -> Coord:
    return tuple(x ^ y for x, y in zip(a, b))


@dataclass(frozen=True)
class LinearLayout:
    shape: Tuple[int, ...]
    reg: Tuple[Coord, ...]
    lane: Tuple[Coord, ...]
    warp: Tuple[Coord, ...]

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def num_regs(self) -> int:
        return 1 << len(self.reg)

    @staticmethod
    def _apply(bases: Sequence[Coord], index: int, rank: int) -> Coord:
        out = (0, ) * rank
        for i, b in enumerate(bases):
            if index >> i & 1:
                out = _xor(out, b)
        return out

    def reg_coord(self, r: int) -> Coord:
        return self._apply(self.reg, r, self.rank)

    def coord(self, r: int, lane: int, warp: int) -> Coord:
        c = self._apply(self.reg, r, self.rank)
        c = _xor(c, self._apply(self.lane, lane, self.rank))
        return _xor(c, self._apply(self.warp, warp, self.rank))

    def free_reg_mask(self) -> int:
        """Register bits whose basis is zero: registers that repeat data held by another register."""
        return sum(1 << i for i, b in enumerate(self.reg) if not any(b))

    def free_lane_mask(self) -> int:
        return sum(1 << i for i, b in enumerate(self.lane) if not any(b))

    def free_warp_mask(self) -> int:
        return sum(1 << i for i, b in enumerate(self.warp) if not any(b))

    def is_injective_modulo_zero_bases(self) -> bool:
        """True when the non-zero bases are linearly independent (no data held twice except via zero bases)."""
        vecs = [b for b in self.reg + self.lane + self.warp if any(b)]
        return _gf2_rank([_pack(v, self.shape) for v in vecs]) == len(vecs)


def _pack(c: Coord, shape: Sequence[int]) -> int:
    """Row-major linear index; for power-of-two shapes this is a bit concatenation (GF(2)-linear)."""
    idx = 0
    for x, n in zip(c, shape):
        idx = idx * n + x
    return idx


def _gf2_rank(vectors: List[int]) -> int:
    basis: List[int] = []
    for v in vectors:
        for b in basis:
            v = min(v, v ^ b)
        if v:
            basis.append(v)
    return len(basis)


class LayoutService:
    """Turns encodings into linear layouts. Owns a private MLIR context for libtriton's layout code and
    caches every answer, so each (encoding, shape) pair crosses into C++ once per compilation."""

    def __init__(self, num_warps: int):
        self.num_warps = num_warps
        self._cache: Dict[Tuple[Encoding, Tuple[int, ...]], LinearLayout] = {}

    def of(self, ty: TensorType) -> LinearLayout:
        if ty.encoding is None:
            raise ValueError(f"tensor type {ty} has no layout encoding")
        return self.get(ty.encoding, ty.shape)

    def get(self, enc: Encoding, shape: Sequence[int]) -> LinearLayout:
        key = (enc, tuple(shape))
        if key not in self._cache:
            custom = getattr(enc, "linear_layout", None)
            if custom is not None:
                self._cache[key] = custom(tuple(shape), self.num_warps)
            else:
                self._cache[key] = _from_libtriton(enc, tuple(shape))
        return self._cache[key]


def _from_libtriton(enc: Encoding, shape: Tuple[int, ...]) -> LinearLayout:
    from triton._C.libtriton import gluon_ir, ir
    ctx = ir.context()
    ir.load_dialects(ctx)
    builder = gluon_ir.GluonOpBuilder(ctx)
    try:
        attr = _attr(builder, enc, shape)
        ll = builder.to_linear_layout(attr, list(shape))
        result = LinearLayout(tuple(shape), tuple(tuple(b) for b in ll.reg_bases),
                              tuple(tuple(b) for b in ll.lane_bases), tuple(tuple(b) for b in ll.warp_bases))
        del ll, attr
    finally:
        del builder, ctx
    return result


def _attr(builder, enc: Encoding, shape: Tuple[int, ...]):
    if isinstance(enc, BlockedEncoding):
        return builder.get_blocked_layout(list(enc.size_per_thread), list(enc.threads_per_warp),
                                          list(enc.warps_per_cta), list(enc.order), [])
    if isinstance(enc, SliceEncoding):
        parent_shape = list(shape)
        parent_shape.insert(enc.dim, 1)
        return builder.get_slice_layout(enc.dim, _attr(builder, enc.parent, tuple(parent_shape)))
    if isinstance(enc, LinearEncoding):
        return builder.get_distributed_linear_layout([list(b) for b in enc.register], [list(b) for b in enc.lane],
                                                     [list(b) for b in enc.warp], [], list(shape))
    if isinstance(enc, DotOperandEncoding):
        return builder.get_dot_operand_layout(enc.op_idx, _attr(builder, enc.parent, shape), enc.k_width)
    raise NotImplementedError(f"no linear layout for encoding {enc}")


# ------------------------------------------------------------------------------------------------
# Register maps between layouts


def local_register_map(dst: LinearLayout, src: LinearLayout,
                       project: Callable[[Coord], Coord]) -> Optional[List[int]]:
    """If every thread already holds, for each of its `dst` registers, the element `project(coord)` of
    `src` in one of its own registers, return for each dst register bit the src register index it maps to
    (the full map is the XOR over set bits). Return None when data must move between threads."""
    for db, sb in zip(dst.lane, src.lane):
        if project(db) != sb:
            return None
    for db, sb in zip(dst.warp, src.warp):
        if project(db) != sb:
            return None
    if len(dst.lane) != len(src.lane) or len(dst.warp) != len(src.warp):
        return None
    by_coord: Dict[Coord, int] = {}
    for r in range(src.num_regs - 1, -1, -1):  # lowest index wins among duplicates
        by_coord[src.reg_coord(r)] = r
    out = []
    for b in dst.reg:
        c = project(b)
        if c not in by_coord:
            return None
        out.append(by_coord[c])
    # The map must also be consistent for composite register indices (linearity check).
    for r in range(dst.num_regs):
        s = 0
        for i, k in enumerate(out):
            if r >> i & 1:
                s ^= k
        if src.reg_coord(s) != project(dst.reg_coord(r)):
            return None
    return out


def identity(c: Coord) -> Coord:
    return c


@functools.lru_cache(None)
def bit_runs(values: Tuple[int, ...]) -> List[Tuple[int, int, int]]:
    """Group XOR-linear terms `bit i of x -> values[i]` into runs `(first_bit, count, shift)` where
    values are consecutive powers of two, so `((x >> first_bit) & (2**count - 1)) << shift` covers the
    run. Values that are zero or not powers of two get runs of count 0 with the raw value as shift."""
    runs: List[Tuple[int, int, int]] = []
    i = 0
    while i < len(values):
        v = values[i]
        if v == 0:
            i += 1
            continue
        if v & (v - 1):
            runs.append((i, 0, v))
            i += 1
            continue
        j = i
        while j + 1 < len(values) and values[j + 1] == values[j] * 2:
            j += 1
        runs.append((i, j - i + 1, v.bit_length() - 1))
        i = j + 1
    return runs

"""Linear layouts of distributed tensors, and the register maps the lowering derives from them.

A layout maps (register, lane, warp) indices to tensor coordinates, linearly over GF(2): the coordinate
of a thread's register is the XOR of the bases of the set bits of the three indices.

`#ttg.blocked` and `#ttg.slice` are converted here in Python (test/layouts/test_linear_layouts.py checks the
result against libtriton's `GluonOpBuilder.to_linear_layout` over many parameters); other upstream
encodings go through libtriton. Calling libtriton for every layout is avoided because its
`to_linear_layout` binding leaks objects that nanobind reports at every interpreter exit, and it
aborts the process on a non-power-of-two shape.
"""
from __future__ import annotations

import functools
import os
import re
import tempfile
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from .target import SIMD_WIDTH
from .ir.types import (AppleMmaEncoding, BlockedEncoding, DotOperandEncoding, Encoding, LinearEncoding,
                       OpaqueEncoding, SliceEncoding, TensorType)

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
        return self._reg_coords[r & (self.num_regs - 1)]  # bits above the last base select nothing

    @functools.cached_property
    def _reg_coords(self) -> Tuple[Coord, ...]:
        """`reg_coord(r)` for every register: the registers below 2**(i+1) are those below 2**i, each XORed
        with register bit i's base (one XOR per register, where applying the bases costs one per bit)."""
        coords = [(0, ) * self.rank]
        for b in self.reg:
            coords += [_xor(c, b) for c in coords]
        return tuple(coords)

    def coord(self, r: int, lane: int, warp: int) -> Coord:
        c = self._reg_coords[r & (self.num_regs - 1)]
        c = _xor(c, self._apply(self.lane, lane, self.rank))
        return _xor(c, self._apply(self.warp, warp, self.rank))

    def free_reg_mask(self) -> int:
        """Register bits that index copies: a register with any of them set repeats data held elsewhere (by another
        register of the thread, or, in a layout that holds elements twice, by another thread). With the lane and
        warp masks, every element has exactly one holder whose index has none of these bits set."""
        return self._copy_masks[0]

    def free_lane_mask(self) -> int:
        return self._copy_masks[1]

    def free_warp_mask(self) -> int:
        return self._copy_masks[2]

    @functools.cached_property
    def _copy_masks(self) -> Tuple[int, int, int]:
        """(register, lane, warp) bit masks of the copies. The (register, lane, warp) indices that hold the same
        element differ by a vector of the kernel of the layout's map over GF(2); in a basis of that kernel in
        reduced echelon form each vector has a pivot bit no other one has, so exactly one index of each element's
        holders has every pivot bit clear. A zero basis is a kernel vector by itself (its bit is its pivot, as
        for replicated lanes of blocked layouts); `#ttg.generic_linear` layouts may also repeat a combination of
        other bases (a warp basis equal to a lane basis), which makes a pivot of the higher bit (warps before lanes
        before registers)."""
        nr, nl = len(self.reg), len(self.lane)
        images = [_pack(b, self.shape) for b in self.reg + self.lane + self.warp]
        # elimination of the images, tracking which index bits make each: the combinations that vanish span the kernel
        rows: List[Tuple[int, int]] = []
        kernel: List[int] = []
        for i, img in enumerate(images):
            combo = 1 << i
            for pv, pc in rows:
                if img ^ pv < img:
                    img, combo = img ^ pv, combo ^ pc
            if img:
                rows.append((img, combo))
                rows.sort(key=lambda t: -t[0])
            else:
                kernel.append(combo)
        # reduced echelon form of the kernel with each vector's highest bit as its pivot
        reduced: List[int] = []
        for v in kernel:
            for r in reduced:
                if v & (1 << (r.bit_length() - 1)):
                    v ^= r
            if v:
                pivot = 1 << (v.bit_length() - 1)
                reduced = [r ^ v if r & pivot else r for r in reduced] + [v]
        pivots = 0
        for r in reduced:
            pivots |= 1 << (r.bit_length() - 1)
        return pivots & ((1 << nr) - 1), pivots >> nr & ((1 << nl) - 1), pivots >> (nr + nl)

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
    """Turns encodings into linear layouts, caching every answer for one compilation."""

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
            self._cache[key] = layout_of(enc, tuple(shape), self.num_warps)
        return self._cache[key]


def _log2(n: int) -> int:
    if n <= 0 or n & (n - 1):
        raise ValueError(f"layout dimension {n} is not a power of two")
    return n.bit_length() - 1


def _unit(rank: int, dim: int, value: int) -> Coord:
    return tuple(value if d == dim else 0 for d in range(rank))


def blocked_layout(enc: BlockedEncoding, shape: Tuple[int, ...]) -> LinearLayout:
    """`#ttg.blocked` as a linear layout: per dimension (fastest first, as `order` says) the thread's own
    elements, then lanes, then warps tile the tensor; a tile larger than the tensor replicates lanes and
    warps (zero bases) and drops registers; a smaller one repeats over extra registers."""
    rank = len(shape)
    for n in shape:
        _log2(n)
    levels = (enc.size_per_thread, enc.threads_per_warp, enc.warps_per_cta)
    bases: List[List[Coord]] = [[], [], []]
    covered = [1] * rank
    for lvl, sizes in enumerate(levels):
        for d in enc.order:
            for _ in range(_log2(sizes[d])):
                value = covered[d]
                covered[d] *= 2
                if value >= shape[d]:
                    if lvl > 0:
                        bases[lvl].append((0, ) * rank)  # replicated across lanes / warps
                    continue  # registers beyond the tensor are dropped
                bases[lvl].append(_unit(rank, d, value))
    for d in enc.order:
        while covered[d] < shape[d]:
            bases[0].append(_unit(rank, d, covered[d]))
            covered[d] *= 2
    return LinearLayout(tuple(shape), tuple(bases[0]), tuple(bases[1]), tuple(bases[2]))


def slice_layout(parent: LinearLayout, dim: int) -> LinearLayout:
    """`#ttg.slice`: the parent's layout for the shape with a unit dimension at `dim`, without that dim."""

    def drop(c: Coord) -> Coord:
        return c[:dim] + c[dim + 1:]

    regs = tuple(drop(b) for b in parent.reg if any(drop(b)))
    shape = drop(parent.shape)
    return LinearLayout(shape, regs, tuple(drop(b) for b in parent.lane), tuple(drop(b) for b in parent.warp))


def layout_of(enc: Encoding, shape: Tuple[int, ...], num_warps: int) -> LinearLayout:
    if isinstance(enc, BlockedEncoding):
        return blocked_layout(enc, shape)
    if isinstance(enc, SliceEncoding):
        parent_shape = shape[:enc.dim] + (1, ) + shape[enc.dim:]
        return slice_layout(layout_of(enc.parent, parent_shape, num_warps), enc.dim)
    if isinstance(enc, LinearEncoding):
        return linear_encoding_layout(enc, tuple(shape))
    if isinstance(enc, DotOperandEncoding) and isinstance(enc.parent, (BlockedEncoding, LinearEncoding)):
        return fma_operand_layout(enc, shape, num_warps)
    if isinstance(enc, DotOperandEncoding) and isinstance(enc.parent, AppleMmaEncoding):
        return mma_operand_layout(enc, tuple(shape), num_warps)
    if isinstance(enc, AppleMmaEncoding):
        return mma_layout(enc, tuple(shape), num_warps)
    return from_libtriton(enc, tuple(shape), num_warps)


def linear_encoding_layout(enc: LinearEncoding, shape: Tuple[int, ...]) -> LinearLayout:
    """`#ttg.linear` on a tensor shape: its bases as printed, fitted to the shape the way blocked layouts are
    (and upstream fits them): a component at or beyond the tensor's extent becomes 0 (lanes and warps then
    hold copies, registers that would only hold copies are dropped), and an extent the bases do not reach
    is covered by extra registers, dimension by dimension."""
    rank = len(shape)
    for n in shape:
        _log2(n)

    def fit(b: Coord) -> Coord:
        return tuple(x if x < shape[d] else 0 for d, x in enumerate(b))

    regs = [fit(b) for b in enc.register]
    regs = [b for b in regs if any(b)]
    lane = [fit(b) for b in enc.lane]
    warp = [fit(b) for b in enc.warp]
    for d in range(rank):
        reach = 0
        for b in regs + lane + warp:
            reach |= b[d]
        size = 1 << reach.bit_length() if reach else 1
        while size < shape[d]:
            regs.append(_unit(rank, d, size))
            size *= 2
    return LinearLayout(tuple(shape), tuple(regs), tuple(lane), tuple(warp))


def mma_layout(enc: AppleMmaEncoding, shape: Tuple[int, ...], num_warps: int) -> LinearLayout:
    """`AppleMmaEncoding` as a linear layout: the 8x8 `simdgroup_matrix` fragment layout (lane `l` holds row
    `4*(l>>4) + ((l>>1)&3)`, columns `4*((l>>3)&1) + 2*(l&1) + j`, `j` being element `j` of
    `thread_elements()`), fragments tiling each simdgroup's (M, N) tile along N then M, simdgroups tiling
    the tensor. Extents smaller than the tiling (e.g. the unit dimension of a broadcast row) replicate
    lanes and warps and drop registers, as blocked layouts do."""
    rank = len(shape)
    m_dim, n_dim = rank - 2, rank - 1
    wm, wn = enc.warps_per_cta
    full_m, full_n = max(shape[m_dim], 8 * wm), max(shape[n_dim], 8 * wn)
    tile_m, tile_n = full_m // wm, full_n // wn
    if tile_m % 8 or tile_n % 8:
        raise ValueError(f"{enc.text()} cannot tile shape {list(shape)}")

    def at(dim: int, value: int) -> Tuple[int, ...]:
        return tuple(value if d == dim else 0 for d in range(rank))

    def fits(b: Tuple[int, ...]) -> bool:
        return all(x < n for x, n in zip(b, shape))

    zero = tuple(0 for _ in range(rank))
    reg = [at(n_dim, 1)]
    reg += [at(n_dim, 8 << i) for i in range((tile_n // 8).bit_length() - 1)]
    reg += [at(m_dim, 8 << i) for i in range((tile_m // 8).bit_length() - 1)]
    if rank == 3:
        reg += [at(0, 1 << i) for i in range(shape[0].bit_length() - 1)]
    lane = [at(n_dim, 2), at(m_dim, 1), at(m_dim, 2), at(n_dim, 4), at(m_dim, 4)]
    warp = [at(n_dim, tile_n << i) for i in range(wn.bit_length() - 1)]
    warp += [at(m_dim, tile_m << i) for i in range(wm.bit_length() - 1)]
    while len(warp) < num_warps.bit_length() - 1:
        warp.append(zero)  # more simdgroups than tiles: replicas
    return LinearLayout(tuple(shape), tuple(b for b in reg if fits(b)), tuple(b if fits(b) else zero for b in lane),
                        tuple(b if fits(b) else zero for b in warp))


def mma_operand_layout(enc: DotOperandEncoding, shape: Tuple[int, ...], num_warps: int) -> LinearLayout:
    """Operand of a `simdgroup_matrix` dot held in registers: each simdgroup holds the 8x8 fragments it
    multiplies, A's rows of its M tile by all of K (B: all of K by the columns of its N tile), in the
    same lane mapping as the accumulator (`mma_layout`). Registers: element `j` of `thread_elements()`,
    then the fragment index along the fragment's columns, then along its rows (A: K then M; B: N then K).
    Simdgroups that differ only along the other operand's dimension hold the same fragments (replicas).
    With `warps_per_cta = [wm, 1]` the A layout is the accumulator layout of an (M, K) result, so a dot
    result feeds the next dot's A operand without moving (attention's P)."""
    rank = len(shape)
    if rank not in (2, 3):
        raise ValueError(f"{enc.text()} needs a rank-2 or rank-3 shape, not {list(shape)}")
    row_dim, col_dim = rank - 2, rank - 1
    wm, wn = enc.parent.warps_per_cta
    if enc.op_idx == 0:
        rows, cols = shape[row_dim] // wm, shape[col_dim]  # this simdgroup's M tile by all of K
    else:
        rows, cols = shape[row_dim], shape[col_dim] // wn  # all of K by this simdgroup's N tile
    if rows % 8 or cols % 8 or rows < 8 or cols < 8:
        raise ValueError(f"{enc.text()} cannot hold shape {list(shape)} in 8x8 fragments")

    def at(dim: int, value: int) -> Tuple[int, ...]:
        return tuple(value if d == dim else 0 for d in range(rank))

    zero = tuple(0 for _ in range(rank))
    reg = [at(col_dim, 1)]
    reg += [at(col_dim, 8 << i) for i in range(_log2(cols // 8))]
    reg += [at(row_dim, 8 << i) for i in range(_log2(rows // 8))]
    if rank == 3:
        reg += [at(0, 1 << i) for i in range(_log2(shape[0]))]
    lane = [at(col_dim, 2), at(row_dim, 1), at(row_dim, 2), at(col_dim, 4), at(row_dim, 4)]
    # the accumulator's warp order: N tiles first, then M tiles
    warp = [zero if enc.op_idx == 0 else at(col_dim, cols << i) for i in range(_log2(wn))]
    warp += [at(row_dim, rows << i) if enc.op_idx == 0 else zero for i in range(_log2(wm))]
    while len(warp) < num_warps.bit_length() - 1:
        warp.append(zero)
    return LinearLayout(tuple(shape), tuple(reg), tuple(lane), tuple(warp))


def fma_operand_layout(enc: DotOperandEncoding, shape: Tuple[int, ...], num_warps: int) -> LinearLayout:
    """Operand layout of an FMA dot whose result has a blocked (or linear) layout: each thread holds the
    whole K extent of the rows (A) or columns (B) that its result elements need. Rank 2 or 3 (batched);
    K is the last dim of A and the second-to-last of B."""
    rank = len(shape)
    k_dim = rank - 1 if enc.op_idx == 0 else rank - 2
    # The result's extent along N (for A) / M (for B) does not matter: those bases become broadcasts.
    parent = layout_of(enc.parent, tuple(_parent_result_shape(shape, enc.op_idx)), num_warps)

    def project(b: Coord) -> Coord:
        # result coordinate (.., m, n) -> operand coordinate, zero along K
        out = list(b)
        if enc.op_idx == 0:
            out[rank - 1] = 0  # drop n
        else:
            out[rank - 2] = 0  # drop m
        return tuple(out)

    regs = [project(b) for b in parent.reg if any(project(b))]
    regs += [_unit(rank, k_dim, 1 << i) for i in range(_log2(shape[k_dim]))]
    lane = tuple(project(b) for b in parent.lane)
    warp = tuple(project(b) for b in parent.warp)
    return LinearLayout(tuple(shape), tuple(regs), lane, warp)


def _parent_result_shape(shape: Tuple[int, ...], op_idx: int) -> List[int]:
    """A result shape whose M (A) or N (B) extent matches the operand; the other extent is 1."""
    rank = len(shape)
    out = list(shape)
    if op_idx == 0:
        out[rank - 1] = 1
    else:
        out[rank - 2] = 1
    return out


def from_libtriton(enc: Encoding, shape: Tuple[int, ...], num_warps: Optional[int] = None) -> LinearLayout:
    """Ask libtriton for the linear layout of an upstream encoding we do not model ourselves, in a kernel of
    `num_warps` simdgroups (any number if not given).
    (libtriton aborts the process on non-power-of-two shapes, hence the check first.)"""
    for n in shape:
        _log2(n)
    from triton._C.libtriton import gluon_ir, ir
    ctx = ir.context()
    ir.load_dialects(ctx)
    builder = gluon_ir.GluonOpBuilder(ctx)
    attr = _attr(builder, ctx, enc, shape, num_warps or 4)
    ll = builder.to_linear_layout(attr, list(shape))
    if len(ll.lane_bases) != _log2(SIMD_WIDTH) or (num_warps and len(ll.warp_bases) != _log2(num_warps)):
        raise NotImplementedError(f"the layout {enc} spreads a tensor over {1 << len(ll.lane_bases)} lanes and "
                                  f"{1 << len(ll.warp_bases)} warps; this kernel has {num_warps} simdgroups of "
                                  f"{SIMD_WIDTH} lanes")
    return LinearLayout(tuple(shape), tuple(tuple(b) for b in ll.reg_bases), tuple(tuple(b) for b in ll.lane_bases),
                        tuple(tuple(b) for b in ll.warp_bases))


def _attr(builder, ctx, enc: Encoding, shape: Tuple[int, ...], num_warps: int):
    if isinstance(enc, BlockedEncoding):
        return builder.get_blocked_layout(list(enc.size_per_thread), list(enc.threads_per_warp),
                                          list(enc.warps_per_cta), list(enc.order), [])
    if isinstance(enc, SliceEncoding):
        parent_shape = list(shape)
        parent_shape.insert(enc.dim, 1)
        return builder.get_slice_layout(enc.dim, _attr(builder, ctx, enc.parent, tuple(parent_shape), num_warps))
    if isinstance(enc, LinearEncoding):
        return builder.get_distributed_linear_layout([list(b) for b in enc.register], [list(b) for b in enc.lane],
                                                     [list(b) for b in enc.warp], [], list(shape))
    if isinstance(enc, DotOperandEncoding):
        return builder.get_dot_operand_layout(enc.op_idx, _attr(builder, ctx, enc.parent, shape, num_warps), enc.k_width)
    if isinstance(enc, OpaqueEncoding) and _VENDOR_DISTRIBUTED.fullmatch(enc.raw):
        return _vendor_attr(builder, ctx, enc.raw, shape, num_warps)
    raise NotImplementedError(f"no linear layout for encoding {enc}")


# Other vendors' register layouts for their matrix units. On Apple GPUs they are only distributions of a tensor
# over lanes and registers like any other (data movement, reductions, elementwise ops all work from the linear
# layout), and a `tt.dot` producing one is moved onto simdgroup_matrix like any other. AMD's `amd_mfma` spreads
# over 64-lane wavefronts, which `from_libtriton` refuses: a simdgroup has 32 lanes.
_VENDOR_DISTRIBUTED = re.compile(r"#ttg\.(nvidia_mma|amd_wmma|amd_mfma)<.*>", re.S)


def _vendor_attr(builder, ctx, text: str, shape: Tuple[int, ...], num_warps: int):
    """The libtriton attribute of a vendor encoding spelled `text`. Gluon's builder makes these only from
    per-vendor parameter lists, so the spelling is parsed by MLIR itself: as the layout of the argument of a stub
    function, read back as Gluon's layout object, which builds the attribute."""
    from triton._C.libtriton import ir
    dims = "x".join(str(n) for n in shape)
    stub = (f'#enc = {text}\n'
            f'module attributes {{"ttg.num-ctas" = 1 : i32, "ttg.num-warps" = {num_warps} : i32, '
            f'"ttg.threads-per-warp" = 32 : i32}} {{\n'
            f'  tt.func @layout_stub(%x: tensor<{dims}xi32, #enc>) {{\n    tt.return\n  }}\n}}\n')
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "layout.ttgir")
        with open(path, "w") as f:
            f.write(stub)
        try:
            mod = ir.parse_mlir_module(path, ctx)
        except RuntimeError:
            raise NotImplementedError(f"Triton's verifier refuses the layout {text} in a module of "
                                      f"{num_warps} warps of 32 lanes") from None
    value = mod.get_function("layout_stub").args(0)
    return builder.get_gluon_layout_from_tensor(value)._to_ir(builder)


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


@dataclass(frozen=True)
class WarpShuffle:
    """How a layout conversion that stays inside each simdgroup moves data: for destination register r of
    lane l, the source register is reg_from_reg(r) ^ reg_from_lane(l) of lane lane_from_reg(r) ^
    lane_from_lane(l). Each map is given by the images of the input bits."""
    reg_from_reg: Tuple[int, ...]
    reg_from_lane: Tuple[int, ...]
    lane_from_reg: Tuple[int, ...]
    lane_from_lane: Tuple[int, ...]


def warp_shuffle_plan(dst: LinearLayout, src: LinearLayout) -> Optional[WarpShuffle]:
    """Solve, over GF(2), for the source (register, lane) of every destination register and lane bit, when
    both layouts place the same data in each simdgroup (equal warp bases). None if impossible."""
    if dst.shape != src.shape or dst.warp != src.warp or len(dst.lane) != len(src.lane):
        return None
    shape = dst.shape
    # elimination basis: packed coordinate -> (pivot vector, (src reg bits, src lane bits))
    basis: List[Tuple[int, int, int]] = []
    for i, b in enumerate(src.reg):
        basis.append((_pack(b, shape), 1 << i, 0))
    for i, b in enumerate(src.lane):
        basis.append((_pack(b, shape), 0, 1 << i))
    reduced: List[Tuple[int, int, int]] = []  # (vector with a unique leading bit, reg, lane)
    for vec, r, l in basis:
        for pv, pr, pl in reduced:
            if vec ^ pv < vec:
                vec, r, l = vec ^ pv, r ^ pr, l ^ pl
        if vec:
            reduced.append((vec, r, l))
            reduced.sort(key=lambda t: -t[0])

    def solve(c) -> Optional[Tuple[int, int]]:
        vec, r, l = _pack(c, shape), 0, 0
        for pv, pr, pl in reduced:
            if vec ^ pv < vec:
                vec, r, l = vec ^ pv, r ^ pr, l ^ pl
        return None if vec else (r, l)

    from_reg = [solve(b) for b in dst.reg]
    from_lane = [solve(b) for b in dst.lane]
    if any(s is None for s in from_reg + from_lane):
        return None
    return WarpShuffle(tuple(s[0] for s in from_reg), tuple(s[0] for s in from_lane), tuple(s[1] for s in from_reg),
                       tuple(s[1] for s in from_lane))

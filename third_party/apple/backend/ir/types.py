"""Types and layout encodings of our TTGIR model.

Types print back to the exact MLIR spelling they were parsed from (``str(t)``), so dumps of our IR
read like upstream's. Encodings are plain frozen dataclasses; `layouts.py` turns them into linear
layouts. `AppleMmaEncoding` is ours: upstream's verifier cannot hold it, so it only exists here.
Every scalar, pointer, tensor and memdesc type knows its size in memory (`nbytes`, from the kernel ABI's one
scalar table `abi/scalars.py`), which passes and lowering both read.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from ..abi.scalars import ELEMENT_TYPES

INT_WIDTHS = {"i1": 1, "i8": 8, "i16": 16, "i32": 32, "i64": 64}
FLOAT_WIDTHS = {"f16": 16, "bf16": 16, "f32": 32, "f64": 64, "f8E4M3FN": 8, "f8E5M2": 8, "f8E4M3FNUZ": 8,
                "f8E5M2FNUZ": 8, "f8E4M3B11FNUZ": 8}


class Type:
    """Base of every type in our IR."""

    @property
    def is_tensor(self) -> bool:
        return isinstance(self, TensorType)

    @property
    def scalar(self) -> "Type":
        return self


@dataclass(frozen=True)
class ScalarType(Type):
    name: str

    def __str__(self) -> str:
        return self.name

    @property
    def is_int(self) -> bool:
        return self.name in INT_WIDTHS or self.name == "index"

    @property
    def is_float(self) -> bool:
        return self.name in FLOAT_WIDTHS

    @property
    def bitwidth(self) -> int:
        if self.name == "index":
            return 64
        return INT_WIDTHS.get(self.name) or FLOAT_WIDTHS[self.name]

    @property
    def nbytes(self) -> int:
        """Bytes of one value in memory: the kernel ABI's size where it has this type, else whole bytes of
        the bit width (fp8 variants the ABI does not list)."""
        row = ELEMENT_TYPES.get(self.name)
        return row.nbytes if row is not None else max(1, self.bitwidth // 8)


@dataclass(frozen=True)
class PointerType(Type):
    pointee: Type
    address_space: object = 1  # 1, another number, or a quoted name such as '"constant"' (read-only)

    def __str__(self) -> str:
        suffix = "" if self.address_space == 1 else f", {self.address_space}"
        return f"!tt.ptr<{self.pointee}{suffix}>"

    @property
    def bitwidth(self) -> int:
        return 64

    @property
    def nbytes(self) -> int:
        """Bytes of a pointer in memory (a 64-bit device address)."""
        return 8


@dataclass(frozen=True)
class Encoding:
    """A layout attribute; `alias` is the `#name` it was printed under, if any."""

    def __str__(self) -> str:
        return self.text()

    def text(self) -> str:
        raise NotImplementedError


def _ints(xs) -> str:
    return "[" + ", ".join(str(x) for x in xs) + "]"


def _bases(bs) -> str:
    return "[" + ", ".join(_ints(b) for b in bs) + "]"


@dataclass(frozen=True)
class BlockedEncoding(Encoding):
    size_per_thread: Tuple[int, ...]
    threads_per_warp: Tuple[int, ...]
    warps_per_cta: Tuple[int, ...]
    order: Tuple[int, ...]

    def text(self) -> str:
        return (f"#ttg.blocked<{{sizePerThread = {_ints(self.size_per_thread)}, threadsPerWarp = "
                f"{_ints(self.threads_per_warp)}, warpsPerCTA = {_ints(self.warps_per_cta)}, order = "
                f"{_ints(self.order)}}}>")


@dataclass(frozen=True)
class SliceEncoding(Encoding):
    dim: int
    parent: Encoding

    def text(self) -> str:
        return f"#ttg.slice<{{dim = {self.dim}, parent = {self.parent.text()}}}>"


@dataclass(frozen=True)
class LinearEncoding(Encoding):
    register: Tuple[Tuple[int, ...], ...]
    lane: Tuple[Tuple[int, ...], ...]
    warp: Tuple[Tuple[int, ...], ...]

    def text(self) -> str:
        return (f"#ttg.linear<{{register = {_bases(self.register)}, lane = {_bases(self.lane)}, "
                f"warp = {_bases(self.warp)}, block = []}}>")


@dataclass(frozen=True)
class GenericLinearEncoding(LinearEncoding):
    """`#ttg.generic_linear`: bases as `#ttg.linear` prints them, without its restriction to layouts that hold each
    element once (after removing zero bases); Gluon's `DistributedLinearLayout` prints this way when its bases are
    not a permutation: warp bases that repeat lane or register bases (elements held twice), or bases that are not
    powers of two (swizzled warps). The layout is the same XOR of bases."""

    def text(self) -> str:
        return (f"#ttg.generic_linear<{{register = {_bases(self.register)}, lane = {_bases(self.lane)}, "
                f"warp = {_bases(self.warp)}, block = []}}>")


@dataclass(frozen=True)
class DotOperandEncoding(Encoding):
    op_idx: int
    parent: Encoding
    k_width: int = 0

    def text(self) -> str:
        kw = f", kWidth = {self.k_width}" if self.k_width else ""
        return f"#ttg.dot_op<{{opIdx = {self.op_idx}, parent = {self.parent.text()}{kw}}}>"


@dataclass(frozen=True)
class SharedEncoding(Encoding):
    """`#ttg.swizzled_shared` and friends: only the order matters to our row-major shared buffers.
    `row_major`: whether upstream places the buffer's elements row-major too (no swizzle, no padding, the last
    dimension fastest), i.e. whether its bytes are the bytes of our placement; a reinterpretation of the buffer
    (`ttg.memdesc_reinterpret`) reads the same bytes only then."""
    kind: str
    params: str
    order: Tuple[int, ...]
    row_major: bool = False

    def text(self) -> str:
        return f"#ttg.{self.kind}<{self.params}>"


@dataclass(frozen=True)
class OpaqueEncoding(Encoding):
    """An encoding the lowering does not know; kept verbatim so errors can name it."""
    raw: str

    def text(self) -> str:
        return self.raw


class _Shaped:
    """Shape helpers of tensor and memdesc types."""
    shape: Tuple[int, ...]

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        """Bytes of every element stored unpadded (a shared buffer holds its tensor row-major)."""
        return self.numel * self.element.nbytes

    def _dims(self) -> str:
        return "".join(f"{d}x" for d in self.shape)


@dataclass(frozen=True)
class TensorType(_Shaped, Type):
    shape: Tuple[int, ...]
    element: Type
    encoding: Optional[Encoding] = None

    def __str__(self) -> str:
        enc = f", {self.encoding.text()}" if self.encoding is not None else ""
        return f"tensor<{self._dims()}{self.element}{enc}>"

    @property
    def scalar(self) -> Type:
        return self.element

    def with_element(self, element: Type) -> "TensorType":
        return TensorType(self.shape, element, self.encoding)


@dataclass(frozen=True)
class MemDescType(_Shaped, Type):
    shape: Tuple[int, ...]
    element: Type
    encoding: Optional[Encoding]
    memory_space: str
    mutable: bool = False
    # the shape of the buffer a view (`ttg.memdesc_subslice`, `ttg.memdesc_index`) was taken from, where it differs
    alloc_shape: Optional[Tuple[int, ...]] = None

    def __str__(self) -> str:
        enc = f", {self.encoding.text()}" if self.encoding is not None else ""
        mut = ", mutable" if self.mutable else ""
        alloc = ", " + "x".join(str(n) for n in self.alloc_shape) if self.alloc_shape else ""
        return f"!ttg.memdesc<{self._dims()}{self.element}{enc}, {self.memory_space}{mut}{alloc}>"


@dataclass(frozen=True)
class OpaqueType(Type):
    raw: str

    def __str__(self) -> str:
        return self.raw


@dataclass(frozen=True)
class FunctionType(Type):
    inputs: Tuple[Type, ...]
    results: Tuple[Type, ...]

    def __str__(self) -> str:
        res = ", ".join(map(str, self.results))
        return f"({', '.join(map(str, self.inputs))}) -> ({res})"


I1 = ScalarType("i1")
I32 = ScalarType("i32")
I64 = ScalarType("i64")
F32 = ScalarType("f32")


@dataclass(frozen=True)
class AppleMmaEncoding(Encoding):
    """The accumulator layout of Apple's 8x8 `simdgroup_matrix`, tiled over registers and simdgroups
    (its linear layout: `layouts.mma_layout`).

    Upstream's verifier rejects a dot whose operands' parent layout is not an upstream MMA layout, so this
    encoding exists only in our IR. Within one 8x8
    fragment, lane `l` holds row `4*(l>>4) + ((l>>1)&3)` and columns `4*((l>>3)&1) + 2*(l&1) + j`,
    `j` in {0, 1} being element `j` of `thread_elements()`; this lowering depends on that mapping (the
    MSL spec leaves it unspecified; MLX and metal-flash-attention rely on the same one).
    Simdgroups are arranged `warps_per_cta = [wm, wn]` over the (M, N) tile, N fastest.
    """
    warps_per_cta: Tuple[int, int]

    def text(self) -> str:
        return f"#apple.mma<{{warpsPerCTA = {_ints(self.warps_per_cta)}}}>"

"""Operations, values, blocks, regions, functions and modules of our TTGIR model (printed back to MLIR text
by `printer.py`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Tuple

from .types import Type


@dataclass(frozen=True)
class Location:
    """Where an op came from: the user's file/line/column and, when Triton knows it, a variable name."""
    file: str = ""
    line: int = 0
    col: int = 0
    name: str = ""

    def __str__(self) -> str:
        if not self.file:
            return "<unknown location>"
        return f"{self.file}:{self.line}:{self.col}"


UNKNOWN = Location()


class Value:
    """An SSA value: an op result or a block argument. `name` is its printed `%name` without `%`."""

    def __init__(self, name: str, type: Type, owner: Any = None, index: int = 0, loc: Location = UNKNOWN):
        self.name = name
        self.type = type
        self.owner = owner  # Op for results, Block for arguments
        self.index = index
        self.loc = loc

    def __repr__(self) -> str:
        return f"%{self.name}: {self.type}"


@dataclass
class Block:
    label: str = ""
    args: List[Value] = field(default_factory=list)
    ops: List["Op"] = field(default_factory=list)
    parent: Optional["Region"] = None


@dataclass
class Region:
    blocks: List[Block] = field(default_factory=list)
    parent: Optional["Op"] = None

    @property
    def entry(self) -> Block:
        return self.blocks[0]


class Op:
    """One operation. `attrs` hold parsed attribute values (ints, strings, bools, lists, or raw text);
    `text` keeps the op's own printed line so that dumps and error messages can show it verbatim."""

    def __init__(self, name: str, operands: List[Value], results: List[Value], attrs: Dict[str, Any],
                 regions: List[Region], loc: Location, text: str = ""):
        self.name = name
        self.operands = operands
        self.results = results
        self.attrs = attrs
        self.regions = regions
        self.loc = loc
        self.text = text
        self.parent: Optional[Block] = None
        # branch ops (cf.br, cf.cond_br): (target block, values passed to its arguments), in operand order
        self.successors: List[Tuple["Block", List[Value]]] = []
        for r in results:
            r.owner = self
        for reg in regions:
            reg.parent = self

    @property
    def result(self) -> Value:
        if len(self.results) != 1:
            raise ValueError(f"{self.name} has {len(self.results)} results")
        return self.results[0]

    def walk(self) -> Iterator["Op"]:
        """Pre-order walk over this op and every op nested in its regions (with a stack: a generator per
        nesting level made every walk cost a generator resumption per level per op). A block's ops are taken when
        their parent is reached: callers that edit the IR walk a list of the ops first."""
        stack = [self]
        while stack:
            op = stack.pop()
            yield op
            for region in reversed(op.regions):
                for block in reversed(region.blocks):
                    stack.extend(reversed(block.ops))

    def __repr__(self) -> str:
        return f"<Op {self.name} at {self.loc}>"


@dataclass
class Function:
    name: str
    args: List[Value]
    result_types: List[Type]
    body: Region
    public: bool
    attrs: Dict[str, Any]
    loc: Location
    arg_attrs: List[Dict[str, Any]] = field(default_factory=list)

    def walk(self) -> Iterator[Op]:
        """Every op of the function, in the order of `Op.walk` (one stack for the whole function, where a walk
        per top-level op passed every op through two generators)."""
        stack: List[Op] = []
        for block in reversed(self.body.blocks):
            stack.extend(reversed(block.ops))
        while stack:
            op = stack.pop()
            yield op
            for region in reversed(op.regions):
                for block in reversed(region.blocks):
                    stack.extend(reversed(block.ops))


@dataclass
class Module:
    attrs: Dict[str, Any]
    functions: List[Function]
    aliases: Dict[str, str]

    def function(self, name: str) -> Function:
        for f in self.functions:
            if f.name == name:
                return f
        raise KeyError(name)

    @property
    def kernel(self) -> Function:
        public = [f for f in self.functions if f.public]
        if len(public) != 1:
            raise ValueError(f"expected exactly one public kernel function, found {[f.name for f in public]}")
        return public[0]

    @property
    def num_warps(self) -> int:
        return int(self.attrs["ttg.num-warps"])

"""Small IR-editing helpers for the Apple passes: creating ops, inserting them, replacing uses."""
from __future__ import annotations

import collections
from typing import Callable, Iterable, List, Optional

from ..ir import Block, Function, Op, Value
from ..ir.types import Type


def convert_layout(src: Value, ty: Type, loc, name: str) -> Op:
    """A `ttg.convert_layout` of `src` to `ty`; `name` must be unique in the function (the pass derives it
    from the source value, so the same kernel always gets the same names and the same MSL)."""
    return Op("ttg.convert_layout", [src], [Value(name, ty, None, 0, loc)], {}, [], loc)


def insert_before(anchor: Op, op: Op) -> None:
    block: Block = anchor.parent
    block.ops.insert(block.ops.index(anchor), op)
    op.parent = block


def insert_after(anchor: Op, op: Op) -> None:
    block: Block = anchor.parent
    block.ops.insert(block.ops.index(anchor) + 1, op)
    op.parent = block


def scope(v: Value) -> List[Op]:
    """The top-level ops of the region `v` is defined in: only they and the ops nested in them can read `v`
    (SSA: a value is visible after its definition in its block, in the blocks that block dominates, and in the
    regions nested in them). The roots to give `uses` for `v`, where a walk of the whole function would also visit
    every other loop body."""
    owner = v.owner
    block = owner.parent if isinstance(owner, Op) else owner
    if block is None or block.parent is None:
        raise ValueError(f"%{v.name} is not defined inside a region")
    return [op for b in block.parent.blocks for op in b.ops]


def uses(root_ops: Iterable[Op], v: Value):
    """(op, operand index) of every use of `v` among `root_ops` and the ops nested in them, in walk order (one
    stack for all of them: passes ask this for many values, and a generator per op doubled each scan)."""
    stack = list(root_ops)
    stack.reverse()
    while stack:
        op = stack.pop()
        if v in op.operands:  # values compare by identity: a C-level scan skips the ops that do not read it
            for i, operand in enumerate(op.operands):
                if operand is v:
                    yield op, i
        for region in reversed(op.regions):
            for block in reversed(region.blocks):
                stack.extend(reversed(block.ops))


def drop_unread(fn: Function, removable: Callable[[Op], bool]) -> None:
    """Remove every op accepted by `removable` whose results nobody reads, then the ops that only those read,
    until none is left: dead-code removal over read counts taken once (one walk of the function, then work
    proportional to what goes, where asking `uses` per op walked the function again for each)."""
    reads: collections.Counter = collections.Counter(id(v) for op in fn.walk() for v in op.operands)
    work = [op for op in fn.walk() if removable(op)]
    while work:
        op = work.pop()
        if op.parent is None or any(reads[id(r)] for r in op.results):
            continue
        op.parent.ops.remove(op)
        op.parent = None
        for gone in op.walk():
            for v in gone.operands:
                reads[id(v)] -= 1
                if not reads[id(v)] and isinstance(v.owner, Op) and removable(v.owner):
                    work.append(v.owner)


def replace_uses(root_ops: Iterable[Op], old: Value, new: Value, skip: Optional[Op] = None) -> None:
    for op, i in list(uses(root_ops, old)):
        if op is not skip:
            op.operands[i] = new

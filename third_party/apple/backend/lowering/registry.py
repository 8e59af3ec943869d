"""Op families and the table that maps each TTGIR op name to the function lowering it.

Each `*_ops.py` module declares one `OpFamily` and registers its lowerings on it with `@FAMILY.lowers(...)`;
`module.py` lists the families explicitly and builds the table once (`build_table`), so which module lowers
an op is visible in one place and two families cannot claim the same op.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterable

from ..ir import Op

Lowering = Callable[[Any, Op], None]  # (emitter.FunctionEmitter, op) -> None


class OpFamily:
    """The lowerings of one family of ops (one `*_ops.py` module)."""

    def __init__(self, name: str):
        self.name = name
        self.lowerings: Dict[str, Lowering] = {}

    def lowers(self, *op_names: str) -> Callable[[Lowering], Lowering]:
        """Register the decorated function as this family's lowering of the named TTGIR ops."""

        def deco(fn: Lowering) -> Lowering:
            for n in op_names:
                if n in self.lowerings:
                    raise ValueError(f"op family '{self.name}' registers {n} twice")
                self.lowerings[n] = fn
            return fn

        return deco


def build_table(families: Iterable[OpFamily]) -> Dict[str, Lowering]:
    table: Dict[str, Lowering] = {}
    owner: Dict[str, str] = {}
    for fam in families:
        for n, fn in fam.lowerings.items():
            if n in table:
                raise ValueError(f"op {n} is lowered by both '{owner[n]}' and '{fam.name}'")
            table[n] = fn
            owner[n] = fam.name
    return table

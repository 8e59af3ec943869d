"""Prints our IR back as MLIR text (generic op form), for dumps, tests and error messages."""
from __future__ import annotations

from typing import List

from .core import Block, Function, Module, Op, Region


def _attr(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return v if v.startswith("#") else '"' + v.replace('"', '\\"') + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_attr(x) for x in v) + "]"
    return str(v)


def _attrs(attrs: dict) -> str:
    items = [f"{k} = {_attr(v)}" for k, v in sorted(attrs.items()) if not k.startswith("_")]
    return " {" + ", ".join(items) + "}" if items else ""


def print_op(op: Op, indent: int = 0) -> List[str]:
    pad = "  " * indent
    res = ", ".join(f"%{r.name}" for r in op.results)
    lhs = f"{res} = " if res else ""
    operands = ", ".join(f"%{v.name}" for v in op.operands)
    in_types = ", ".join(str(v.type) for v in op.operands)
    out_types = ", ".join(str(v.type) for v in op.results)
    head = f'{pad}{lhs}"{op.name}"({operands})'
    lines = []
    if op.regions:
        lines.append(head + " ({")
        for i, region in enumerate(op.regions):
            lines += print_region(region, indent + 1)
            if i + 1 < len(op.regions):
                lines.append(pad + "}, {")
        lines.append(f"{pad}}}){_attrs(op.attrs)} : ({in_types}) -> ({out_types})")
    else:
        lines.append(f"{head}{_attrs(op.attrs)} : ({in_types}) -> ({out_types})")
    return lines


def print_region(region: Region, indent: int) -> List[str]:
    lines = []
    for block in region.blocks:
        lines += print_block(block, indent)
    return lines


def print_block(block: Block, indent: int) -> List[str]:
    pad = "  " * (indent - 1)
    args = ", ".join(f"%{a.name}: {a.type}" for a in block.args)
    lines = [f"{pad}^{block.label or 'bb0'}({args}):"]
    for op in block.ops:
        lines += print_op(op, indent)
    return lines


def print_function(fn: Function) -> List[str]:
    args = ", ".join(f"%{a.name}: {a.type}" for a in fn.args)
    vis = "public" if fn.public else "private"
    lines = [f"  tt.func {vis} @{fn.name}({args}) {{"]
    for op in fn.body.entry.ops:
        lines += print_op(op, 2)
    lines.append("  }")
    return lines


def print_module(mod: Module) -> str:
    lines = [f"module attributes {_attrs(mod.attrs).strip() or '{}'} {{"]
    for fn in mod.functions:
        lines += print_function(fn)
    lines.append("}")
    return "\n".join(lines) + "\n"

"""Regions emitted once as MSL functions and called per element: the combine region of `tt.reduce` and
`tt.scan` (called at every combining step) and the scalar function of `tt.map_elementwise`; and what reduce
and scan share besides (upstream's ReduceScanCommon): whether a combine region is one op
(`single_combine_op`, which picks a simdgroup builtin) and the per-operand scratch in threadgroup memory."""
from __future__ import annotations

from typing import List, Optional, Sequence

from ..ir import Op, Region, Value
from ..ir.types import TensorType
from .control_flow_ops import lower_body
from .emitter import FunctionEmitter, Lowered
from .msl_types import msl_size


class RegionFunction:
    """A region emitted as an MSL function; `call(first, second)` spells one invocation with the two groups
    of arguments (combine: accumulators then others; map: inputs then outputs) and the captured values."""

    def __init__(self, name: str, captured: List[str]):
        self.name = name
        self.captured = captured

    def call(self, first: Sequence[str], second: Sequence[str]) -> str:
        return f"{self.name}({', '.join(list(first) + list(second) + self.captured)});"


def _external_values(region: Region) -> List[Value]:
    """Values the region reads but does not define (hoisted constants, scalars of the enclosing function)."""
    defined, used = set(), []
    for block in region.blocks:
        defined.update(id(a) for a in block.args)
        for op in block.ops:
            for inner in op.walk():
                defined.update(id(r) for r in inner.results)
                for reg in inner.regions:
                    for b in reg.blocks:
                        defined.update(id(a) for a in b.args)
    for block in region.blocks:
        for op in block.ops:
            for inner in op.walk():
                for v in inner.operands:
                    if id(v) not in defined and all(v is not u for u in used):
                        used.append(v)
    return used


def _capture_externals(em: FunctionEmitter, sub: FunctionEmitter, region: Region, params: List[str]) -> List[str]:
    """Make the values `region` reads from outside available in `sub`: scalar constants are re-created,
    other uniform values become extra parameters (appended to `params`); returns the caller's expressions
    for those parameters."""
    captured = []
    for v in _external_values(region):
        owner = v.owner
        if isinstance(owner, Op) and owner.name == "arith.constant" and not isinstance(v.type, TensorType):
            sub.lower_op(owner)
            continue
        outer = em.get(v)
        if outer.is_tensor and not outer.uniform:
            raise em.unsupported(f"a {em.current_op.name} region that reads a tensor defined outside it is not "
                                 "supported")
        pname = sub.fresh(v.name)
        params.append(f"{outer.ctype} {pname}")
        sub.bind(v, Lowered(pname, outer.ctype))
        captured.append(outer.at(0))
    if any(o.name in ("tt.print", "tt.assert") for b in region.blocks for top in b.ops for o in top.walk()):
        # device_print/device_assert in the region: it needs the kernel's context (pid, thread, debug buffer)
        em.ctx.uses_smem = True  # the context includes tt_smem
        for ctype, name in em.ctx.context_params():
            params.append(f"{ctype} {name}")
            captured.append(name)
    return captured


def _define(em: FunctionEmitter, name: str, params: List[str], sub: FunctionEmitter) -> None:
    lines, _ = sub.text_with_origins()
    em.ctx.add_function(name, f"static inline void {name}({', '.join(params)}) {{\n" + "\n".join(lines) + "\n}")


def single_combine_op(op: Op) -> Optional[Op]:
    """The op of a reduce/scan combine region that is exactly `return a <op> b` of its two arguments (in
    either order), else None."""
    block = op.regions[0].entry
    if len(block.ops) != 2 or len(block.args) != 2:
        return None
    combine, ret = block.ops
    if list(ret.operands) != [combine.result] or len(combine.operands) != 2 or \
            {id(v) for v in combine.operands} != {id(a) for a in block.args}:
        return None
    return combine


def emit_combine_function(em: FunctionEmitter, op: Op, hint: str, wide_bf16: bool = False) -> RegionFunction:
    """Emit the combine region of a reduce/scan as an MSL function. With `wide_bf16`, bfloat16 values are
    float in the function and never rounded."""
    region = op.regions[0]
    block = region.entry
    n = len(op.operands)
    name = em.ctx.generated_name(f"combine_{hint}")
    sub = FunctionEmitter(em.ctx, axis=None, wide_bf16=wide_bf16, per_element=True)
    params, accs = [], []
    for i, arg in enumerate(block.args):
        ct = sub.ctype(arg.type)
        pname = sub.fresh(f"acc{i}" if i < n else f"other{i - n}")
        params.append(f"thread {ct}& {pname}" if i < n else f"{ct} {pname}")
        if i < n:
            accs.append(pname)
        sub.bind(arg, Lowered(pname, ct))
    captured = _capture_externals(em, sub, region, params)
    *body, ret = block.ops
    if ret.name not in ("tt.reduce.return", "tt.scan.return"):
        raise em.internal(f"combine region ends with {ret.name}, expected a return")
    sub.lower_block(body)
    vals = [sub.get(v) for v in ret.operands]
    temps = []
    for i, v in enumerate(vals):
        t = sub.temp(f"result{i}")
        sub.emit(f"{v.ctype} {t} = {v.at(0)};")
        temps.append(t)
    for acc, t in zip(accs, temps):
        sub.emit(f"{acc} = {t};")
    _define(em, name, params, sub)
    return RegionFunction(name, captured)


def emit_scalar_function(em: FunctionEmitter, op: Op, hint: str) -> RegionFunction:
    """Emit the scalar-function region of `tt.map_elementwise` as `void f(T in..., thread R& out...,
    captured...)`; the region may branch (several blocks) and ends with `tt.map_elementwise.return`.
    `call(ins, outs)` spells one invocation."""
    region = op.regions[0]
    pack = int(op.attrs.get("pack", 1))
    name = em.ctx.generated_name(f"map_{hint}")
    sub = FunctionEmitter(em.ctx, axis=None, per_element=True)
    params = []
    for i, arg in enumerate(region.entry.args):
        ct = sub.ctype(arg.type)
        pname = sub.fresh(f"in{i}")
        params.append(f"{ct} {pname}")
        sub.bind(arg, Lowered(pname, ct))
    for i, res in enumerate(r for r in op.results for _ in range(pack)):
        ct = sub.ctype(res.type.element)
        pname = sub.fresh(f"out{i}")
        params.append(f"thread {ct}& {pname}")
        sub.out_params.append(Lowered(pname, ct))
    captured = _capture_externals(em, sub, region, params)
    lower_body(sub, region)
    _define(em, name, params, sub)
    return RegionFunction(name, captured)


def operand_scratch(em: FunctionEmitter, ctypes: Sequence[str], op: Op, numel: int, hint: str) -> List[str]:
    """One threadgroup-memory view of `numel` values of each MSL type in `ctypes`, for `op`."""
    return em.scratch(op, [(ct, numel * msl_size(ct)) for ct in ctypes], hint)

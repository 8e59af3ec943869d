"""Lowering of structured control flow and calls: `scf.for/if/while/yield/condition`, `tt.call` and
`tt.return`.

MSL has no goto, so every region maps onto a C block. Region results (loop-carried values, if results)
are variables declared before the construct and assigned at its yield; yields go through temporaries
so that swapping carried values works.
"""
from __future__ import annotations

from typing import List, Sequence

from ..ir import Op, Value
from .context import CONTEXT_PARAMS, DEBUG_PARAM
from .emitter import FunctionEmitter, Lowered
from .registry import OpFamily

FAMILY = OpFamily("control_flow")


def declare_carried(em: FunctionEmitter, values: Sequence[Value], hints: Sequence[str] = ()) -> List[Lowered]:
    return [em.declare(v, hints[i] if i < len(hints) else None) for i, v in enumerate(values)]


def _copy(em: FunctionEmitter, dst: str, src: Lowered, regs) -> None:
    """`dst = src`, register by register for tensors (`regs` registers) or as one scalar (`regs` None)."""
    if regs is None:
        em.emit(f"{dst} = {src.at(0)};")
        return
    with em.for_regs(regs) as r:
        em.emit(f"{dst}[{r}] = {src.at(r)};")


def assign(em: FunctionEmitter, dsts: Sequence[Lowered], srcs: Sequence[Lowered]) -> None:
    """dst_i = src_i for all i, as if simultaneously (temporaries only when a source is a destination)."""
    dst_names = {d.name for d in dsts}
    if any(s.name in dst_names for s in srcs):
        staged = []
        for d, s in zip(dsts, srcs):
            t = em.temp("yield")
            em.emit(f"{d.ctype} {t}[{d.regs}];" if d.is_tensor else f"{d.ctype} {t};")
            _copy(em, t, s, d.regs)
            staged.append(Lowered(t, d.ctype, d.regs))
        srcs = staged
    for d, s in zip(dsts, srcs):
        _copy(em, d.name, s, d.regs)


def _lower_region_with_yield(em: FunctionEmitter, ops: Sequence[Op], targets: Sequence[Lowered]) -> None:
    # MLIR does not print a `scf.yield` without operands, so a region may end without one.
    has_yield = bool(ops) and ops[-1].name in ("scf.yield", "scf.condition")
    body = ops[:-1] if has_yield else ops
    em.lower_block(body)
    if not has_yield:
        if targets:
            raise em.internal("region that produces values ends without scf.yield")
        return
    term = ops[-1]
    if targets:
        assign(em, targets, [em.get(v) for v in term.operands])


@FAMILY.lowers("scf.for")
def _for(em: FunctionEmitter, op: Op) -> None:
    lb, ub, step, *inits = [em.get(v) for v in op.operands]
    block = op.regions[0].entry
    iv, *iter_args = block.args
    carried = declare_carried(em, iter_args)
    assign(em, carried, inits)
    for a, c in zip(iter_args, carried):
        em.bind(a, c)
    ivt = em.ctype(iv.type)
    ivn = em.fresh(iv.name)
    em.bind(iv, Lowered(ivn, ivt))
    em.open(f"for ({ivt} {ivn} = {lb.name}; {ivn} < {ub.name}; {ivn} += {step.name})")
    _lower_region_with_yield(em, block.ops, carried)
    em.close()
    for res, c in zip(op.results, carried):
        em.bind(res, c)


@FAMILY.lowers("scf.if")
def _if(em: FunctionEmitter, op: Op) -> None:
    cond = em.get(op.operands[0])
    results = declare_carried(em, op.results)
    em.open(f"if ({cond.name})")
    _lower_region_with_yield(em, op.regions[0].entry.ops, results)
    if len(op.regions) > 1 and op.regions[1].blocks and op.regions[1].entry.ops:
        em.else_()
        _lower_region_with_yield(em, op.regions[1].entry.ops, results)
    em.close()


@FAMILY.lowers("scf.while")
def _while(em: FunctionEmitter, op: Op) -> None:
    before, after = op.regions
    inits = [em.get(v) for v in op.operands]
    carried = declare_carried(em, before.entry.args)
    assign(em, carried, inits)
    for a, c in zip(before.entry.args, carried):
        em.bind(a, c)
    results = declare_carried(em, op.results)
    em.open("while (true)")
    *body, cond_op = before.entry.ops
    em.lower_block(body)
    cond = em.get(cond_op.operands[0])
    passed = [em.get(v) for v in cond_op.operands[1:]]
    assign(em, results, passed)
    em.open(f"if (!({cond.name}))")
    em.emit("break;")
    em.close()
    for a, r in zip(after.entry.args, results):
        em.bind(a, r)
    _lower_region_with_yield(em, after.entry.ops, carried)
    em.close()


@FAMILY.lowers("tt.return")
def _return(em: FunctionEmitter, op: Op) -> None:
    if op.operands:
        assign(em, em.out_params, [em.get(v) for v in op.operands])
    em.emit("return;")


@FAMILY.lowers("tt.call")
def _call(em: FunctionEmitter, op: Op) -> None:
    callee = em.ctx.module.function(op.attrs["callee"])
    name = em.ctx.function_name(callee)
    results = declare_carried(em, op.results)
    args = [em.get(v) for v in op.operands]
    arg_text = []
    for a in args:
        if a.is_tensor and a.uniform:
            t = em.temp("arg")
            em.emit(f"{a.ctype} {t}[{a.regs}];")
            with em.for_regs(a.regs) as r:
                em.emit(f"{t}[{r}] = {a.name};")
            arg_text.append(t)
        else:
            arg_text.append(a.name)
    arg_text += [r.name for r in results]
    arg_text += [name for _, name in CONTEXT_PARAMS + ([DEBUG_PARAM] if em.ctx.has_debug else [])]
    em.emit(f"{name}({', '.join(arg_text)});")

"""Lowering of control flow and calls: `scf.for/if/while/yield/condition`, `tt.call`, `tt.return`, and
function bodies made of several blocks (`cf.br`/`cf.cond_br`, from early returns).

MSL has no goto, so every region maps onto a C block. Region results (loop-carried values, if results)
are variables declared before the construct and assigned at its yield; yields go through temporaries
so that swapping carried values works.
"""
from __future__ import annotations

from dataclasses import replace
from typing import List, Sequence

from ..ir import Block, Op, Region, Value
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


@FAMILY.lowers("tt.return", "tt.map_elementwise.return")
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
    arg_text += [name for _, name in em.ctx.context_params()]
    em.emit(f"{name}({', '.join(arg_text)});")


def lower_body(em: FunctionEmitter, region: Region) -> None:
    """Lower a function body: one block as it is, several (early `return`s make Triton emit `cf.br` /
    `cf.cond_br` between blocks) as structured MSL."""
    if len(region.blocks) == 1:
        em.lower_block(region.entry.ops)
        return
    _StructuredCfg(em, region).emit(region.entry)


class _StructuredCfg:
    """MSL has no goto, so an acyclic CFG becomes nested code along its dominator tree: a block is emitted
    inside the block that dominates it (so every value it uses is in scope). A branch to a block with one
    incoming edge emits that block in place; a block with several incoming edges (a merge) is emitted
    once, after its immediate dominator's branch, guarded by a flag each incoming edge sets after assigning
    the block's arguments. Triton's frontend allows no `return` inside loops, so back edges are refused."""

    def __init__(self, em: FunctionEmitter, region: Region):
        self.em = em
        entry = region.entry
        order, on_stack, seen = [], set(), set()

        def visit(b: Block) -> None:  # post-order DFS; a successor still on the stack closes a cycle
            seen.add(id(b))
            on_stack.add(id(b))
            for target, _ in _successors(b):
                if id(target) in on_stack:
                    raise em.unsupported(f"a branch from ^{b.label} back to ^{target.label} forms a loop; only "
                                         "structured loops (scf.for/scf.while) are supported")
                if id(target) not in seen:
                    visit(target)
            on_stack.discard(id(b))
            order.append(b)

        visit(entry)
        self.rpo = list(reversed(order))
        index = {id(b): i for i, b in enumerate(self.rpo)}
        preds = {id(b): [] for b in self.rpo}
        for b in self.rpo:
            for target, _ in _successors(b):
                preds[id(target)].append(b)
        idom = {id(entry): entry}
        for b in self.rpo[1:]:  # acyclic: every predecessor comes earlier in reverse post-order
            dom = preds[id(b)][0]
            for p in preds[id(b)][1:]:
                dom = _common_dominator(dom, p, idom, index)
            idom[id(b)] = dom
        self.merges = {id(b) for b in self.rpo if len(preds[id(b)]) > 1}
        self.merges_under = {id(b): [m for m in self.rpo if id(m) in self.merges and idom[id(m)] is b]
                             for b in self.rpo}
        self.flags = {}
        self.merge_args = {}

    def emit(self, block: Block) -> None:
        em = self.em
        *body, term = block.ops
        em.lower_block(body)
        for m in self.merges_under[id(block)]:
            self.merge_args[id(m)] = [em.declare(a) for a in m.args]
            self.flags[id(m)] = em.temp("reach")
            em.emit(f"bool {self.flags[id(m)]} = false;")
        if term.name == "cf.br":
            self._edge(*term.successors[0])
        elif term.name == "cf.cond_br":
            em.open(f"if ({em.get(term.operands[0]).name})")
            self._edge(*term.successors[0])
            em.else_()
            self._edge(*term.successors[1])
            em.close()
        else:
            em.lower_op(term)
        for m in self.merges_under[id(block)]:
            em.open(f"if ({self.flags[id(m)]})")
            self.emit(m)
            em.close()

    def _edge(self, target: Block, args: List[Value]) -> None:
        em = self.em
        values = [em.get(a) for a in args]
        if id(target) in self.merges:
            assign(em, self.merge_args[id(target)], values)
            em.emit(f"{self.flags[id(target)]} = true;")
            return
        for a, v in zip(target.args, values):
            # the unrounded float of a bfloat16 scan result belongs to that result: a block argument is the
            # rounded bfloat16 value
            em.bind(a, replace(v, unrounded=None) if v.unrounded is not None else v)
        self.emit(target)


def _successors(block: Block):
    return block.ops[-1].successors if block.ops else []


def _common_dominator(a: Block, b: Block, idom, index) -> Block:
    while a is not b:
        while index[id(a)] > index[id(b)]:
            a = idom[id(a)]
        while index[id(b)] > index[id(a)]:
            b = idom[id(b)]
    return a


@FAMILY.lowers("llvm.intr.assume")
def _assume(em: FunctionEmitter, op: Op) -> None:
    """`tl.assume(cond)`: a promise about values for the optimiser; nothing executes."""

"""Lowering of a whole TTGIR module to one MSL source: the kernel, its `noinline` callees, helpers.

Kernel arguments bind to consecutive buffer slots in signature order (pointers as `device T*`, scalars as
`constant T&`), which is the order PyTorch's `compile_shader` dispatch and the emulator bind them in.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from ..analysis.axis_info import AxisInfoAnalysis
from ..ir import Function, Module, Op, parse_module
from ..ir.types import PointerType, ScalarType, TensorType, Type
from ..layouts import LayoutService
from .core import FunctionEmitter, KernelContext, Lowered, msl_function_name, msl_type

MAX_THREADGROUP_MEMORY = 32 * 1024

PRELUDE = """#include <metal_stdlib>
using namespace metal;
{math_mode}
#ifndef TT_THREADGROUP_BUFFER
#define TT_THREADGROUP_BUFFER(name, nbytes) threadgroup alignas(16) uchar name[nbytes]
#endif
"""

BUILTIN_PARAMS = [
    ("uint3", "tt_pid", "threadgroup_position_in_grid"),
    ("uint3", "tt_nprog", "threadgroups_per_grid"),
    ("uint", "tt_tid", "thread_index_in_threadgroup"),
    ("uint", "tt_lane", "thread_index_in_simdgroup"),
    ("uint", "tt_warp", "simdgroup_index_in_threadgroup"),
]
_CONTEXT_PARAMS = ("threadgroup uchar* tt_smem, uint tt_lane, uint tt_warp, uint tt_tid, uint3 tt_pid, "
                   "uint3 tt_nprog")
_DEBUG_PARAM = "device uint* tt_debug"


@dataclass
class KernelParam:
    name: str
    slot: int
    kind: str  # "pointer" | "scalar"
    msl_type: str
    triton_type: str


@dataclass
class LoweredKernel:
    name: str
    source: str
    shared_bytes: int
    params: List[KernelParam]
    num_warps: int
    line_ops: List[Tuple[int, str, str]] = field(default_factory=list)  # (msl line, op name, location)
    debug_formats: List[dict] = field(default_factory=list)  # tt.print / tt.assert record formats

    def signature_json(self) -> str:
        return json.dumps([p.__dict__ for p in self.params])

    def op_at_line(self, line: int) -> Optional[Tuple[str, str]]:
        best = None
        for l, name, loc in self.line_ops:
            if l <= line:
                best = (name, loc)
        return best


class _ModuleContext(KernelContext):

    def __init__(self, module: Module, options, layouts: LayoutService):
        super().__init__(module, options, layouts)
        self.function_names: Dict[str, str] = {}
        self._helper_counter: Dict[str, int] = {}
        self.used_values = {id(v) for f in module.functions for op in f.walk() for v in op.operands}
        self.has_debug = any(op.name in ("tt.print", "tt.assert") for f in module.functions for op in f.walk())
        self.low_scratch = 0  # bytes of scratch placed at offset 0 where no shared buffer is live
        self._live = None
        self._position = {id(op): i for i, op in enumerate(o for f in module.functions for o in f.walk())}
        self.debug_formats: List[dict] = []

    def add_debug_format(self, fmt: dict) -> int:
        self.debug_formats.append(fmt)
        return len(self.debug_formats) - 1

    def scratch_offset(self, op: Op, nbytes: int) -> int:
        """Offset in `tt_smem` of scratch space for `op`: upstream's allocation when it is big enough; the
        start of threadgroup memory when no explicit shared buffer is live at `op`; otherwise a region of
        our own after everything upstream allocated."""
        self.uses_smem = True
        off, size = op.attrs.get("allocation.offset"), op.attrs.get("allocation.size")
        if off is not None and size is not None and nbytes <= int(size):
            return int(off)
        if not self._buffers_live_at(op):
            self.low_scratch = max(self.low_scratch, nbytes)
            return 0
        base = (self.upstream_shared + 15) // 16 * 16
        self.extra_scratch = max(self.extra_scratch, nbytes)
        return base

    def _buffers_live_at(self, op: Op) -> bool:
        if self._live is None:
            self._live = _buffer_live_ranges(self.module)
        pos = self._position.get(id(op))
        if pos is None:
            return True  # unknown op: assume the worst
        return any(start <= pos <= end for start, end in self._live)

    def elem_bytes(self, ty: Type) -> int:
        if isinstance(ty, PointerType):
            return 8
        if ty.name == "i1":
            return 1
        return max(1, ty.bitwidth // 8)

    def unique_helper_name(self, base: str) -> str:
        import re
        base = re.sub(r"[^A-Za-z0-9_]", "_", base)
        k = self._helper_counter.get(base, 0)
        self._helper_counter[base] = k + 1
        return base if k == 0 else f"{base}_{k}"

    def function_name(self, fn: Function) -> str:
        if fn.name not in self.function_names:
            self.function_names[fn.name] = self.unique_helper_name("fn_" + fn.name.split("__")[0])
        return self.function_names[fn.name]

    @property
    def shared_bytes(self) -> int:
        total = max(self.upstream_shared, self.low_scratch)
        if self.extra_scratch:
            total = max(total, (self.upstream_shared + 15) // 16 * 16 + self.extra_scratch)
        return total


def _buffer_live_ranges(module: Module) -> List[Tuple[int, int]]:
    """Pre-order position ranges during which each `ttg.local_alloc` buffer may be read. A buffer used
    inside a loop that does not contain its allocation stays live to the end of that loop."""
    order = [o for f in module.functions for o in f.walk()]
    pos = {id(o): i for i, o in enumerate(order)}
    span = {}
    for o in order:
        if o.regions:
            inner = [pos[id(x)] for x in o.walk()]
            span[id(o)] = (min(inner), max(inner))
    loops = [o for o in order if o.name in ("scf.for", "scf.while")]
    ranges = []
    for o in order:
        if o.name != "ttg.local_alloc":
            continue
        start = end = pos[id(o)]
        buf = o.result
        for user in order:
            if any(v is buf for v in user.operands):
                p = pos[id(user)]
                end = max(end, p)
                for loop in loops:
                    lo, hi = span[id(loop)]
                    if lo <= p <= hi and not lo <= start <= hi:
                        end = max(end, hi)
        ranges.append((start, end))
    return ranges


def _triton_type_name(ty: Type) -> str:
    if isinstance(ty, PointerType):
        return "*" + str(ty.pointee)
    return str(ty)


def _lower_callee(ctx: _ModuleContext, fn: Function) -> str:
    em = FunctionEmitter(ctx)
    params = []
    for a in fn.args:
        lay = em.layout(a.type)
        ct = em.ctype(a.type)
        name = em.fresh(a.name)
        if lay is not None:
            params.append(f"thread {ct}* {name}")
            em.bind(a, Lowered(name, ct, lay.num_regs, False, lay))
        else:
            params.append(f"{ct} {name}")
            em.bind(a, Lowered(name, ct))
    outs = []
    for i, ty in enumerate(fn.result_types):
        ct = msl_type(ty)
        name = em.fresh(f"result{i}")
        if isinstance(ty, TensorType):
            lay = ctx.layouts.of(ty)
            params.append(f"thread {ct}* {name}")
            outs.append(Lowered(name, ct, lay.num_regs, False, lay))
        else:
            params.append(f"thread {ct}& {name}")
            outs.append(Lowered(name, ct))
    em.out_params = outs
    em.axis = AxisInfoAnalysis(fn)
    em.lower_block(fn.body.entry.ops)
    name = ctx.function_name(fn)
    context = [_CONTEXT_PARAMS] + ([_DEBUG_PARAM] if ctx.has_debug else [])
    header = f"static void {name}({', '.join(params + context)})"
    return header + " {\n" + "\n".join(em.lines) + "\n}"


def lower_module(mod, options) -> LoweredKernel:
    """Lower a libtriton TTGIR module (or its printed text) to MSL."""
    text = mod if isinstance(mod, str) else mod.str()
    module = parse_module(text)
    return lower_parsed_module(module, options)


def lower_parsed_module(module: Module, options) -> LoweredKernel:
    from . import ops  # noqa: F401  (registers every op family)
    kernel_fn = module.kernel
    ctx = _ModuleContext(module, options, LayoutService(module.num_warps))
    callees = [f for f in module.functions if f is not kernel_fn]
    functions = [_lower_callee(ctx, f) for f in callees]

    em = FunctionEmitter(ctx)
    params: List[KernelParam] = []
    param_text: List[str] = []
    for slot, a in enumerate(kernel_fn.args):
        name = em.fresh(a.name)
        if isinstance(a.type, PointerType):
            ct = em.ctype(a.type)
            param_text.append(f"{ct} {name} [[buffer({slot})]]")
            params.append(KernelParam(a.name, slot, "pointer", ct, _triton_type_name(a.type)))
        elif isinstance(a.type, ScalarType):
            ct = em.ctype(a.type)
            param_text.append(f"constant {ct}& {name} [[buffer({slot})]]")
            params.append(KernelParam(a.name, slot, "scalar", ct, _triton_type_name(a.type)))
        else:
            raise ctx.error(f"kernel argument %{a.name} has unsupported type {a.type}", loc=a.loc)
        em.bind(a, Lowered(name, ct))
    if ctx.has_debug:
        slot = len(params)
        param_text.append(f"device uint* tt_debug [[buffer({slot})]]")
        params.append(KernelParam("tt_debug", slot, "debug", "device uint*", "*u32"))
    if len(params) > 31:
        raise ctx.error(f"the kernel has {len(params)} arguments; Metal binds at most 31 buffers")
    param_text += [f"{t} {n} [[{attr}]]" for t, n, attr in BUILTIN_PARAMS]
    em.axis = AxisInfoAnalysis(kernel_fn)
    em.lower_block(kernel_fn.body.entry.ops)
    if callees:
        ctx.uses_smem = True
    shared = ctx.shared_bytes
    if shared > MAX_THREADGROUP_MEMORY:
        raise ctx.error(f"the kernel needs {shared} bytes of threadgroup memory; Apple GPUs offer "
                        f"{MAX_THREADGROUP_MEMORY}. Use smaller blocks or fewer warps")

    fast = getattr(options, "fast_math", False)
    out: List[str] = [PRELUDE.format(math_mode="#pragma METAL fp math_mode(fast)" if fast else
                                     "#pragma METAL fp math_mode(safe)")]
    for h in ctx.helpers:
        out.append(h + "\n")
    for f in functions:
        out.append(f + "\n")
    kernel_name = msl_function_name(kernel_fn.name)
    head = f"kernel void {kernel_name}(\n    " + ",\n    ".join(param_text) + ") {"
    out.append(head)
    body_lines = []
    if shared or ctx.uses_smem:
        body_lines.append(f"    TT_THREADGROUP_BUFFER(tt_smem, {max(shared, 16)});")
    source_prefix = "\n".join(out) + "\n"
    first_body_line = source_prefix.count("\n") + 1 + len(body_lines)
    body_lines += em.lines
    source = source_prefix + "\n".join(body_lines) + "\n}\n"

    line_ops = []
    for emitter, idx, op in ctx.line_map:
        if emitter is em:
            line_ops.append((first_body_line + idx, op.name, str(op.loc)))
    return LoweredKernel(kernel_name, source, max(shared, 16) if (shared or ctx.uses_smem) else 0, params,
                         module.num_warps, line_ops, ctx.debug_formats)

"""Lowering of a whole module to one MSL source: the kernel, its `noinline` callees and the helpers they use.

Kernel arguments bind to consecutive buffer slots in signature order (pointers as `device T*`, scalars as
`constant T&`), which is the order PyTorch's `compile_shader` dispatch and the emulator bind them in. A kernel
with more arguments than Metal's 31 buffer slots (host tensor descriptors expand to 11 arguments each) gets
its scalars packed into one buffer of 32-bit words instead (`abi.slots.PACKED_SCALARS`, after the pointers),
which the launchers fill; the kernel reads each scalar from its words into a variable of its own at the start.
What each slot is goes into the kernel's metadata as `abi.slots.BufferSlot`s.
The op families the lowering knows are listed here, explicitly (`OP_FAMILIES`).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import List, Tuple

from ..abi.slots import ADDED_BUFFERS, PACKED, PACKED_SCALARS, POINTER, SCALAR, BufferSlot, packed_layout, slots_to_json
from ..analysis.axis_info import AxisInfoAnalysis
from ..errors import ResourceLimitError
from ..ir import Function, Module
from ..ir.types import PointerType, ScalarType, TensorType, Type
from ..layouts import LayoutService
from ..target import MAX_BUFFER_SLOTS
from .control_flow_ops import lower_body
from .context import BUILTIN_INPUTS, KernelContext
from .emitter import FunctionEmitter, Lowered
from . import collection, msl_library
from .msl_types import msl_function_name
from .registry import build_table
from .atomic_ops import FAMILY as ATOMIC
from .barrier_ops import FAMILY as BARRIER
from .constant_ops import FAMILY as CONSTANT
from .control_flow_ops import FAMILY as CONTROL_FLOW
from .convert_layout_ops import FAMILY as CONVERT_LAYOUT
from .debug_ops import FAMILY as DEBUG
from .dot_ops import FAMILY as DOT
from .elementwise_ops import FAMILY as ELEMENTWISE
from .extern_ops import FAMILY as EXTERN
from .gather_ops import FAMILY as GATHER
from .histogram_ops import FAMILY as HISTOGRAM
from .load_store_ops import FAMILY as LOAD_STORE
from .local_memory_ops import FAMILY as LOCAL_MEMORY
from .map_elementwise_ops import FAMILY as MAP_ELEMENTWISE
from .reduce_ops import FAMILY as REDUCE
from .scan_ops import FAMILY as SCAN
from .scaled_dot_ops import FAMILY as SCALED_DOT
from .spmd_ops import FAMILY as SPMD
from .view_ops import FAMILY as VIEW

# Every op family the lowering knows: one `*_ops.py` module each.
OP_FAMILIES = (ATOMIC, BARRIER, CONSTANT, CONTROL_FLOW, CONVERT_LAYOUT, DEBUG, DOT, ELEMENTWISE, EXTERN, GATHER, HISTOGRAM,
            LOAD_STORE, LOCAL_MEMORY, MAP_ELEMENTWISE, REDUCE, SCALED_DOT, SCAN, SPMD, VIEW)
LOWERINGS = build_table(OP_FAMILIES)



@dataclass
class LoweredKernel:
    name: str
    source: str
    shared_bytes: int
    slots: List[BufferSlot]
    # (MSL line, op name, source location) for the first line of code of every located op, in line order
    locations: List[Tuple[int, str, str]] = field(default_factory=list)
    debug_formats: List[dict] = field(default_factory=list)  # tt.print / tt.assert record formats
    soft_f64: bool = False  # computes float64 in software (lowering/soft_f64.py)
    msl_std: str = "metal3.1"  # the oldest `-std=` of Apple's compiler the source compiles at

    def signature_json(self) -> str:
        return slots_to_json(self.slots)

    def locations_json(self) -> str:
        return json.dumps(self.locations)


def _triton_type_name(ty: Type) -> str:
    if isinstance(ty, PointerType):
        return "*" + str(ty.pointee)
    return str(ty)


def _context_params(ctx: KernelContext) -> List[str]:
    return [f"{t} {n}" for t, n in ctx.context_params()]


def _lower_callee(ctx: KernelContext, fn: Function) -> Tuple[str, FunctionEmitter]:
    """(header, emitter holding the body) of a `noinline` function: tensors pass as `thread T*` arrays,
    results come back through trailing `thread` reference/array parameters."""
    em = FunctionEmitter(ctx, axis=AxisInfoAnalysis(fn))
    params = []
    for a in fn.args:
        lay = em.layout(a.type)
        ct = em.ctype(a.type)
        name = em.fresh(a.name)
        params.append(f"thread {ct}* {name}" if lay is not None else f"{ct} {name}")
        em.bind(a, Lowered(name, ct, lay.num_regs if lay else None, False, lay))
    for i, ty in enumerate(fn.result_types):
        ct = em.ctype(ty)
        name = em.fresh(f"result{i}")
        lay = ctx.layouts.of(ty) if isinstance(ty, TensorType) else None
        params.append(f"thread {ct}* {name}" if lay is not None else f"thread {ct}& {name}")
        em.out_params.append(Lowered(name, ct, lay.num_regs if lay else None, False, lay))
    lower_body(em, fn.body)
    return f"static void {ctx.function_name(fn)}({', '.join(params + _context_params(ctx))})", em


def _unpack_scalar(ct: str, word: int) -> str:
    """MSL reading a scalar of MSL type `ct` from the packed words at `word` (`abi.slots.packed_layout`; Metal is
    little-endian: an 8- or 16-bit value is the low bits of its word; 64-bit values take two words)."""
    buf = PACKED_SCALARS.name
    w = f"{buf}[{word}]"
    if ct in ("long", "ulong"):
        return f"{ct}(ulong({buf}[{word + 1}]) << 32 | {w})"
    if ct == "tt_double":
        return f"tt_f64_from_bits(ulong({buf}[{word + 1}]) << 32 | {w})"
    if ct == "bool":
        return f"{w} != 0u"
    if ct in ("half", "bfloat"):
        return f"as_type<{ct}>(ushort({w}))"
    if ct == "uint":
        return w
    if ct in ("int", "float"):
        return f"as_type<{ct}>({w})"
    return f"{ct}({w})"  # char, uchar, short, ushort: the low bits


def _kernel_params(ctx: KernelContext, em: FunctionEmitter,
                   kernel_fn: Function) -> Tuple[List[BufferSlot], List[str], List[str]]:
    """The buffer slots, their parameter text (the builtin inputs come from `_builtin_params`) and the
    statements that read scalars into variables of their own (packed ones, float64 ones)."""
    slots: List[BufferSlot] = []
    text: List[str] = []
    unpack: List[str] = []
    for a in kernel_fn.args:
        if not isinstance(a.type, (PointerType, ScalarType)):
            raise ctx.unsupported(f"kernel argument %{a.name} has unsupported type {a.type}", loc=a.loc)
    added = ctx.added_buffers()
    packed = len(kernel_fn.args) + len(added) > MAX_BUFFER_SLOTS
    pointers = [a for a in kernel_fn.args if isinstance(a.type, PointerType)]
    scalars = [a for a in kernel_fn.args if not isinstance(a.type, PointerType)]
    words = dict(zip(map(id, scalars), packed_layout([em.ctype(a.type) for a in scalars]))) if packed else {}
    for a in kernel_fn.args:  # slots are listed in argument order, which is the launchers' order
        name = em.fresh(a.name)
        ct = em.ctype(a.type)
        pointer = isinstance(a.type, PointerType)
        if not packed:
            slot = len(slots)
            if ct == "tt_double" and not pointer:
                # a struct in constant memory is read by its bits: the software float64's operators take values in
                # the thread address space
                text.append(ctx.target.buffer_parameter(ct, f"{name}_arg", slot, reference=True))
                unpack.append(f"    const {ct} {name} = tt_f64_from_bits({name}_arg.bits);")
            else:
                text.append(ctx.target.buffer_parameter(ct, name, slot, reference=not pointer))
            slots.append(BufferSlot(a.name, slot, POINTER if pointer else SCALAR, ct, _triton_type_name(a.type)))
        elif pointer:
            slot = pointers.index(a)
            text.append(ctx.target.buffer_parameter(ct, name, slot))
            slots.append(BufferSlot(a.name, slot, POINTER, ct, _triton_type_name(a.type)))
        else:
            word = words[id(a)]
            slots.append(BufferSlot(a.name, len(pointers), PACKED, ct, _triton_type_name(a.type), word))
            unpack.append(f"    const {ct} {name} = {_unpack_scalar(ct, word)};")
        em.bind(a, Lowered(name, ct))
    if packed and scalars:
        text.append(ctx.target.buffer_parameter(PACKED_SCALARS.msl_type, PACKED_SCALARS.name, len(pointers)))
    if any(em.ctype(a.type) == "tt_double" for a in scalars):
        ctx.require("tt_f64_core")  # the parameter's type (and tt_f64_from_bits, for packed ones)
    for kind in added:
        buf = ADDED_BUFFERS[kind]
        slot = len({p.slot for p in slots})  # after the pointers and the packed scalars' buffer
        text.append(ctx.target.buffer_parameter(buf.msl_type, buf.name, slot))
        slots.append(BufferSlot(buf.name, slot, kind, buf.msl_type, "*u32"))
    buffers = len({p.slot for p in slots})
    if buffers > MAX_BUFFER_SLOTS:
        purposes = " and ".join(ADDED_BUFFERS[kind].purpose for kind in added)
        with_added = f" (with {purposes})" if added else ""
        packed_text = ", its scalars packed into one" if packed and scalars else ""
        raise ResourceLimitError(
            f"apple backend: kernel '{ctx.kernel_name}' has {buffers} buffer arguments{with_added}{packed_text}; Metal "
            f"binds at most {MAX_BUFFER_SLOTS}. Pass fewer tensors", buffers, MAX_BUFFER_SLOTS, "buffer slots")
    return slots, text, unpack


def _builtin_params(em: FunctionEmitter) -> List[str]:
    """The builtin inputs the kernel's code reads (callees and region functions receive them as arguments,
    so their calls name them too)."""
    used = set(re.findall(r"\btt_\w+", "\n".join(em.lines)))
    return [em.target.builtin_parameter(t, n, attr) for t, n, attr in BUILTIN_INPUTS if n in used]


def _drop_final_return(em: FunctionEmitter) -> None:
    """A kernel's `return;` as its last statement says nothing: drop it (and the location of its op)."""
    if em.lines and em.lines[-1] == "    return;":
        last = len(em.lines) - 1
        em.lines.pop()
        em.op_lines = [(i, op) for i, op in em.op_lines if i != last]


def lower_module(module: Module, options) -> LoweredKernel:
    """Lower our IR of a TTGIR module (after the Apple passes) to MSL."""
    kernel_fn = module.kernel
    ctx = KernelContext(module, options, LayoutService(module.num_warps), LOWERINGS)
    callees = [_lower_callee(ctx, f) for f in module.functions if f is not kernel_fn]
    em = FunctionEmitter(ctx, axis=AxisInfoAnalysis(kernel_fn))
    slots, param_text, unpack = _kernel_params(ctx, em, kernel_fn)
    lower_body(em, kernel_fn.body)
    _drop_final_return(em)
    param_text += _builtin_params(em)
    if callees:
        ctx.uses_smem = True  # callees take tt_smem
    ctx.check_shared_bytes()
    shared = ctx.shared_bytes

    lines: List[str] = ctx.target.prelude(bool(getattr(options, "fast_math", False))).splitlines()
    if ctx.msl_needed:
        lines += ctx.target.version_guard(ctx.kernel_name, *ctx.msl_needed).splitlines()
    if shared:
        lines += msl_library.helper("tt_threadgroup_buffer").text.splitlines()
    helpers = list(ctx.helpers.values())
    for i, text in enumerate(helpers):
        lines += text.splitlines()
        if "\n" in text or i + 1 == len(helpers) or "\n" in helpers[i + 1]:
            lines.append("")  # one-line helpers stand together
    locations: List[Tuple[int, str, str]] = []

    def add_function(header: str, body_em: FunctionEmitter, first: List[str] = ()) -> None:
        body, origins = body_em.text_with_origins()
        lines.append(header + " {")
        lines.extend(first)
        base = len(lines) + 1  # MSL lines are 1-based
        locations.extend((base + i, op.name, str(op.loc)) for i, op in origins)
        lines.extend(body)
        lines.extend(["}", ""])

    # Prototypes first: callees may call each other in any order.
    lines.extend([header + ";" for header, _ in callees] + ([""] if callees else []))
    for header, callee_em in callees:
        add_function(header, callee_em)
    kernel_name = msl_function_name(kernel_fn.name)
    head = ctx.target.kernel_header(kernel_name, param_text)
    lines.extend(head.splitlines()[:-1])
    add_function(head.splitlines()[-1], em,
                 unpack + ([f"    TT_THREADGROUP_BUFFER(tt_smem, {shared});"] if shared else []))
    kernel = LoweredKernel(kernel_name, "\n".join(lines).rstrip() + "\n", shared, slots, locations, ctx.debug_formats,
                           "tt_f64_core" in ctx.helpers, ctx.msl_std)
    collection.record(kernel.name, kernel.source, options.arch, ctx.target.msl.name, kernel.msl_std,
                      bool(getattr(options, "fast_math", False)))
    return kernel

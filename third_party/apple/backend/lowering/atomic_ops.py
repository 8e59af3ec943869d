"""Lowering of `tt.atomic_rmw`, `tt.atomic_cas` and `tt.atomic_poll` onto Metal's atomics.

Metal offers only relaxed atomics, on 32-bit integers (device and threadgroup memory) and 32-bit floats
(add/sub/exchange, device memory). 16-bit float add and 16-bit compare-and-swap update their half of the
containing 32-bit word with a compare-and-swap loop (msl/atomics.metal: the word of element `p - base` of a
4-byte aligned kernel argument `base`, or, for pointers not traced to one, from the element's address); 64-bit
ones take one of the forms wide_atomics.py chooses (two 32-bit words, Apple9's ulong min/max, or a lock).
Triton's acquire/release semantics are built from relaxed atomics plus device-scope fences around them (every
spelling comes from `em.target`). Each element's atomic is performed by exactly one thread (the owner);
when the result is used and the layout replicates elements, the owner shares it through threadgroup
memory. Float compare-and-swap compares bit patterns, as Triton's does (a float CAS loop would spin
forever on NaN).
"""
from __future__ import annotations

from typing import List, Optional

from ..ir import Op, Value
from ..ir.types import ScalarType
from .emitter import FunctionEmitter, Lowered, elem_type, is_tensor
from .registry import OpFamily
from .shared_memory import index_expr, row_major_strides
from .pointer_base import argument_alignment, kernel_argument
from .target_info import DEVICE_FENCE_MSL
from .wide_atomics import form, is_wide

FAMILY = OpFamily("atomic")

_UNSIGNED = {"umax", "umin"}


def _sem(op: Op) -> str:
    return str(op.attrs.get("sem", "acq_rel"))


def _aligned_base(em: FunctionEmitter, op: Op) -> str:
    """The MSL name of the kernel argument the pointers of 16-bit atomic `op` point into, when it starts a 32-bit
    word; "" otherwise (then the containing word comes from the element's address)."""
    kernel = em.ctx.module.kernel
    arg = kernel_argument(kernel, op.operands[0])
    if arg is None or id(arg) not in em.values or argument_alignment(kernel, arg) % 4:
        return ""
    return em.get(arg).name


def _atomic16(em: FunctionEmitter, op: Op, kind: str, ptr: str, operands: List[str]) -> str:
    """The call of 16-bit atomic `kind` ("add", "cas", or "load": the element's bits) of element `ptr`."""
    base = _aligned_base(em, op)
    at, address = ("tt_atomic16_load_at", "tt_atomic16_load_address") if kind == "load" else \
        ("tt_atomic16_at", "tt_atomic16_address")
    if base:
        em.ctx.require(at)
        return f"tt_atomic_{kind}16_at({', '.join([f'(device atomic_uint*){base}', f'{ptr} - {base}'] + operands)})"
    em.ctx.require(address)
    return f"tt_atomic_{kind}16({', '.join([ptr] + operands)})"


def _lock_key(em: FunctionEmitter, ptr: str) -> str:
    """The key that chooses a 64-bit element's lock (msl/atomics64_locked.metal tt_lock64_for)."""
    base = em.ctx.lock_base
    if base is not None and id(base) in em.values:
        return f"ulong({ptr} - {em.get(base).name})"
    return f"{em.ctx.require('tt_lock64_address_key')}((device ulong*){ptr})"


def _fence(em: FunctionEmitter, op: Op) -> None:
    """The device-scope fence before (release) or after (acquire) an atomic: MSL 3.2 has the only one."""
    em.ctx.require_msl(DEVICE_FENCE_MSL, f"{op.name} with sem='{_sem(op)}' (acquire and release order memory "
                       "with a device-scope fence, atomic_thread_fence)", op,
                       instead="pass sem='relaxed' where only the atomic's own value matters")
    em.emit(em.target.device_fence())


def _atomic_type(em: FunctionEmitter, op: Op, kind: str, ty: ScalarType) -> tuple:
    """(MSL atomic type, MSL value type) for an RMW `kind` on element type `ty`, or a clear refusal."""
    if ty.name == "f32":
        if kind in em.target.FLOAT_ATOMIC_KINDS:
            return em.target.atomic_type("float"), "float"
        raise em.unsupported(f"atomic {kind} on float32 is not supported by Metal")
    if ty.name in ("i32", ):
        vtype = "uint" if kind in _UNSIGNED else "int"
        return em.target.atomic_type(vtype), vtype
    if ty.name in ("f16", "bf16"):
        raise em.unsupported(f"atomic {kind} on {ty.name} is not supported: Metal has no 16-bit atomics and "
                             "only add and compare-and-swap are built from 32-bit ones")
    raise em.unsupported(f"atomic {kind} on {ty.name} is not supported: Metal atomics are 32-bit")


_WORD_HELPERS = {"add": ("tt_atomic_add64", "tt_atomic_add64"), "and": ("tt_atomic_bits64", "tt_atomic_and64"),
                 "or": ("tt_atomic_bits64", "tt_atomic_or64"), "xor": ("tt_atomic_bits64", "tt_atomic_xor64")}


def _wide_atomic(em: FunctionEmitter, op: Op, kind: str):
    """`call(ptr, value, cmp) -> MSL` for a 64-bit RMW or CAS (`kind` "cas") of element `ptr` (wide_atomics.py
    says which form), and whether the call yields the old value. Operands and results are the elements' own
    MSL types (long, tt_double); the locked helpers take and return their 64 bits."""
    ty = elem_type(op.operands[1])
    if ty.name == "f64" and kind not in ("fadd", "exch", "xchg", "cas"):
        raise em.unsupported(f"atomic {kind} on float64 is not supported (Triton's frontend expresses float "
                             "min/max as integer min/max on the bits)")
    how = form(op, em.target, em.ctx.used_values, em.ctx.uses_locks)
    if how == "words":
        helper, fn = _WORD_HELPERS[kind]
        em.ctx.require(helper)
        return (lambda ptr, value, cmp: f"{fn}((device long*){ptr}, long({value}))"), False
    if how == "native":
        return (lambda ptr, value, cmp: em.target.atomic64_min_max(kind, ptr, f"ulong({value})")), False
    em.ctx.require_msl(DEVICE_FENCE_MSL, "64-bit atomics under a lock (the lock orders the element's halves with "
                       "device-scope fences)", op)
    fn = em.ctx.require_locked_atomic64(kind)
    soft = ty.name == "f64"

    def bits(x: str) -> str:
        return f"{x}.bits" if soft else f"as_type<ulong>({x})"

    def call(ptr: str, value: str, cmp: str) -> str:
        operands = [_lock_key(em, ptr)] + ([bits(cmp)] if kind == "cas" else []) + [bits(value)]
        text = f"{fn}(tt_locks, (device ulong*){ptr}, {', '.join(operands)}, tt_lane)"
        return f"tt_f64_from_bits({text})" if soft else f"as_type<long>({text})"

    return call, True


def per_owned_element(em: FunctionEmitter, op: Op, body, like: Optional[Value] = None) -> List[Lowered]:
    """Run `body(r, results)` for each element this thread owns, of the tensor `like` (default: the op's first
    operand); returns the result values, shared with every thread that holds the element when the layout
    replicates it."""
    res = op.results[0] if op.results else None
    like = op.operands[0] if like is None else like
    tensor = is_tensor(like)
    lay = em.layout(like.type) if tensor else None
    out = em.declare(res) if res is not None else None
    R = lay.num_regs if lay else 1
    with em.owned_regs(lay) as r:
        body(r, out)
    used = res is not None and id(res) in em.ctx.used_values
    replicated = em.owner_predicate(lay) or (lay.free_reg_mask() if lay else 0)
    if used and replicated:
        ty = res.type
        numel = ty.numel if tensor else 1
        buf = em.scratch(op, [(out.ctype, numel * elem_type(res).nbytes)], "atomic_smem")[0]
        strides = row_major_strides(ty.shape) if tensor else []
        with em.owned_regs(lay) as r:
            em.emit(em.tg_store(buf, index_expr(em, lay, r, strides) if tensor else "0", out.at(r), out.ctype))
        em.barrier()
        with em.for_regs(R) as r:
            idx = index_expr(em, lay, r, strides) if tensor else "0"
            em.emit(f"{out.at(r)} = {em.tg_load(buf, idx, out.ctype)};")
    return out


@FAMILY.lowers("tt.atomic_rmw")
def _atomic_rmw(em: FunctionEmitter, op: Op) -> None:
    kind = op.attrs["atomic_rmw_op"]
    if not em.target.has_atomic_rmw(kind):
        raise em.unsupported(f"atomic operation {kind!r} is not supported")
    ty = elem_type(op.operands[1])
    ptr, val = em.get(op.operands[0]), em.get(op.operands[1])
    half_add = ty.name in ("f16", "bf16") and kind == "fadd"
    wide = is_wide(op)
    returns_old = True
    if wide:
        wide_call, returns_old = _wide_atomic(em, op, kind)
    atype, vtype = (None, em.ctype(ty)) if half_add or wide else _atomic_type(em, op, kind, ty)

    def call_of(r: str, value: str) -> str:
        if half_add:
            return _atomic16(em, op, "add", ptr.at(r), [value])
        if wide:
            return wide_call(ptr.at(r), value, None)
        return em.target.atomic_rmw(kind, em.target.device_atomic(atype, ptr.at(r)), value)

    mask = em.get(op.operands[2]) if len(op.operands) > 2 else None
    sem = _sem(op)
    if sem in ("release", "acq_rel"):
        _fence(em, op)

    def body(r, out):
        if mask is not None:
            em.open(f"if ({mask.at(r)})")
        value = val.at(r) if vtype == em.ctype(ty) else f"{vtype}({val.at(r)})"
        call = call_of(r, value)
        if out is not None and returns_old:  # the lock-free 64-bit forms return nothing (their result is unused)
            em.emit(f"{out.at(r)} = {call if wide else out.ctype + '(' + call + ')'};")
        else:
            em.emit(f"{call};")
        if mask is not None:
            if out is not None and returns_old:
                em.else_()
                em.emit(f"{out.at(r)} = {out.ctype}(0);")
            em.close()

    per_owned_element(em, op, body)
    if sem in ("acquire", "acq_rel"):
        _fence(em, op)


@FAMILY.lowers("tt.atomic_cas")
def _atomic_cas(em: FunctionEmitter, op: Op) -> None:
    ty = elem_type(op.operands[1])
    if ty.name not in ("i32", "f32", "f16", "bf16", "i16", "i64", "f64"):
        raise em.unsupported(f"atomic_cas on {ty.name} is not supported: Metal compare-and-swap is 32-bit "
                             "(16-bit values are swapped inside their 32-bit word, 64-bit ones under a lock)")
    ptr, cmp, val = (em.get(v) for v in op.operands[:3])
    wide_call = _wide_atomic(em, op, "cas")[0] if is_wide(op) else None
    sem = _sem(op)
    if sem in ("release", "acq_rel"):
        _fence(em, op)
    bits = ty.name == "f32"

    def body(r, out):
        if wide_call is not None:
            em.emit(f"{out.at(r)} = {wide_call(ptr.at(r), val.at(r), cmp.at(r))};")
            return
        if elem_type(op.operands[1]).bitwidth == 16:
            em.emit(f"{out.at(r)} = {_atomic16(em, op, 'cas', ptr.at(r), [cmp.at(r), val.at(r)])};")
            return
        exp = em.temp("expected")
        c = f"as_type<uint>({cmp.at(r)})" if bits else cmp.at(r)
        v = f"as_type<uint>({val.at(r)})" if bits else val.at(r)
        vt = "uint" if bits else "int"
        em.emit(f"{vt} {exp} = {c};")
        swap = em.target.atomic_compare_exchange(em.target.device_atomic(em.target.atomic_type(vt), ptr.at(r)),
                                                 f"&{exp}", v)
        em.open(f"while (!{swap} && {exp} == {c})")
        em.close()
        em.emit(f"{out.at(r)} = {'as_type<float>(' + exp + ')' if bits else exp};")

    per_owned_element(em, op, body)
    if sem in ("acquire", "acq_rel"):
        _fence(em, op)


def _zero_timeout(op: Op) -> bool:
    """Whether `op`'s timeout operand is the constant 0 (each element is then read once)."""
    t = op.operands[2] if len(op.operands) > 2 else None
    owner = getattr(t, "owner", None)
    if not isinstance(owner, Op) or owner.name != "arith.constant":
        return False
    value = str(owner.attrs.get("value", "")).split(":")[0].strip()
    return value.lstrip("-").isdigit() and int(value) == 0


@FAMILY.lowers("tt.atomic_poll")
def _atomic_poll(em: FunctionEmitter, op: Op) -> None:
    """Spin until each element equals the expected value (read with relaxed atomic loads, then a fence for
    `acquire`); the threadgroup then waits for every poll. Metal shaders have no global timer, so a poll
    with a timeout is refused rather than waiting forever, except a timeout of 0, which is exactly one read of
    each element (its result: whether that read matched, the same on every thread holding the element).

    32-bit elements are read with one atomic load, 16-bit ones with one atomic load of their 32-bit word (never
    torn). 64-bit ones are read under the element's lock (wide_atomics.py makes every 64-bit atomic of a polling
    kernel take it), so the poll sees only whole values of the kernel's 64-bit atomics; the high half is read again
    after the low one until unchanged, so a plain 64-bit store is not seen half written. The acquire fence
    after the poll orders the kernel's later accesses after the matching value, for every width."""
    once = bool(op.attrs.get("timeout")) and _zero_timeout(op)
    if op.attrs.get("timeout") and not once:
        raise em.unsupported("atomic_poll with a timeout_ns other than 0 is not supported: Metal shaders have no "
                             "global timer to measure it; poll without a timeout (or with timeout_ns=0, one read)")
    ty = elem_type(op.operands[1])
    if ty.name not in ("i16", "i32", "i64"):  # Triton's frontend takes 16-, 32- and 64-bit integers only
        raise em.unsupported(f"atomic_poll on {ty.name} is not supported: it polls 16-, 32- or 64-bit integers")
    ptr, expected = em.get(op.operands[0]), em.get(op.operands[1])
    if ty.name == "i64":
        em.ctx.require_msl(DEVICE_FENCE_MSL, "atomic_poll of 64-bit elements (read under the element's lock, which "
                           "orders its halves with device-scope fences)", op)
        load64 = em.ctx.require("tt_atomic64_poll_load")

    def differs(r: str) -> str:
        if ty.name == "i32":
            current = em.target.atomic_load(em.target.device_atomic(em.target.atomic_type("int"), ptr.at(r)))
            return f"{current} != {expected.at(r)}"
        if ty.name == "i16":
            return f"{_atomic16(em, op, 'load', ptr.at(r), [])} != as_type<ushort>({expected.at(r)})"
        current = f"{load64}(tt_locks, (device ulong*){ptr.at(r)}, {_lock_key(em, ptr.at(r))}, tt_lane)"
        return f"{current} != as_type<ulong>({expected.at(r)})"

    if once:
        per_owned_element(em, op, lambda r, out: em.emit(f"{out.at(r)} = !({differs(r)});"))
    else:
        with em.owned_regs(em.layout(op.operands[0].type)) as r:
            em.open(f"while ({differs(r)})")
            em.close()
    if _sem(op) in ("acquire", "acq_rel"):
        _fence(em, op)
    em.emit(em.target.barrier(device=True))
    if not once:
        name = em.fresh(op.result.name)
        em.emit(f"const bool {name} = true;")
        em.scalar_or_splat(op.result, name, "bool")

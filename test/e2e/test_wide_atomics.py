"""64-bit atomics (lowering/wide_atomics.py): add/and/or/xor on two 32-bit words when the old value is unused,
Apple9's native unsigned min/max, and everything else under a lock of the kernel's lock table
(backend/atomic_locks.py). Checked under contention: thousands of updates from many threadgroups on a few
elements, with the emulator running threadgroups on several host threads at once.

Reference: Python integers and float64; old values are checked with support.references.updates_in_one_order."""
import operator
import struct

import pytest
import torch
import triton
import triton.language as tl

from support.references import updates_in_one_order


@pytest.fixture(autouse=True)
def _host_threads(monkeypatch):
    # more host threads than cores: threadgroups run concurrently and are preempted in the middle of updates
    monkeypatch.setenv("TRITON_APPLE_EMULATOR_THREADS", "4")


def _wrap(x: int) -> int:
    return (x + 2**63) % 2**64 - 2**63


def _u64(x: int) -> int:
    return x % 2**64


def _f64_bits(x: float) -> int:
    return struct.unpack("<q", struct.pack("<d", x))[0]


_INT_OPS = {
    "add": lambda o, v: _wrap(o + v), "and": operator.and_, "or": operator.or_, "xor": operator.xor,
    "max": max, "min": min, "xchg": lambda o, v: v,
    "umax": lambda o, v: _wrap(max(_u64(o), _u64(v))), "umin": lambda o, v: _wrap(min(_u64(o), _u64(v))),
}
_FLOAT_OPS = {"add": operator.add, "max": max, "min": min, "xchg": lambda o, v: v}


@triton.jit
def rmw64(h_ptr, v_ptr, idx_ptr, old_ptr, n, OP: tl.constexpr, UNSIGNED: tl.constexpr, USE_OLD: tl.constexpr,
          BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    i = tl.load(idx_ptr + offs, mask=m, other=0)
    v = tl.load(v_ptr + offs, mask=m, other=0)
    p = h_ptr + i
    if UNSIGNED:
        p = p.to(tl.pointer_type(tl.uint64))
        v = v.to(tl.uint64, bitcast=True)
    if OP == "add":
        old = tl.atomic_add(p, v, mask=m)
    elif OP == "and":
        old = tl.atomic_and(p, v, mask=m)
    elif OP == "or":
        old = tl.atomic_or(p, v, mask=m)
    elif OP == "xor":
        old = tl.atomic_xor(p, v, mask=m)
    elif OP == "max":
        old = tl.atomic_max(p, v, mask=m)
    elif OP == "min":
        old = tl.atomic_min(p, v, mask=m)
    else:
        old = tl.atomic_xchg(p, v, mask=m)
    if USE_OLD:
        tl.store(old_ptr + offs, old.to(old_ptr.dtype.element_ty, bitcast=True), mask=m)


def _run_rmw(op: str, dtype, use_old: bool, device: str, n: int = 3000, slots: int = 5, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, slots, (n, ), dtype=torch.int32, generator=g)
    if dtype == torch.float64:
        v = torch.randn(n, dtype=torch.float64, generator=g) * 1e3
        start = 0.5
    else:  # values whose carries and signs cross the 32-bit halves
        v = torch.randint(-2**62, 2**62, (n, ), dtype=torch.int64, generator=g) * 2
        start = {"and": -1, "min": 2**62, "umin": -1}.get(op, 2**32 - 7)
    h = torch.full((slots, ), start, dtype=dtype, device=device)
    old = torch.zeros(n, dtype=dtype, device=device)
    kernel_op = op[1:] if op in ("umax", "umin") else op
    rmw64[(triton.cdiv(n, 128), )](h, v.to(device), idx.to(device), old, n, OP=kernel_op,
                                   UNSIGNED=op in ("umax", "umin"), USE_OLD=use_old, BLOCK=128)
    return start, idx, v, h.cpu(), old.cpu()


@pytest.mark.parametrize("op", ["add", "and", "or", "xor", "max", "min", "umax", "umin", "xchg"])
def test_locked_int64_rmw_returns_old_values_of_one_order(op, device):
    start, idx, v, h, old = _run_rmw(op, torch.int64, True, device)
    f = _INT_OPS[op]
    for s in range(h.numel()):
        sel = idx == s
        olds, vals = old[sel].tolist(), v[sel].tolist()
        assert updates_in_one_order(start, olds, vals, h[s].item(), f), f"slot {s}"
        if op != "xchg":  # the final value does not depend on the order
            acc = start
            for x in vals:
                acc = f(acc, x)
            assert h[s].item() == acc, f"slot {s}"


@pytest.mark.parametrize("op", ["add", "max", "min", "xchg"])
def test_locked_float64_rmw_returns_old_values_of_one_order(op, device):
    start, idx, v, h, old = _run_rmw(op, torch.float64, True, device)
    f = _FLOAT_OPS[op]
    for s in range(h.numel()):
        sel = idx == s
        olds, vals = old[sel].tolist(), v[sel].tolist()
        # software float64 rounds like the host's doubles, so every f(old, v) is exact to the bit
        assert updates_in_one_order(start, olds, vals, h[s].item(), f), f"slot {s}"
        if op in ("max", "min"):
            assert h[s].item() == f([start] + vals)


@pytest.mark.parametrize("op", ["add", "and", "or", "xor"])
def test_word_form_is_exact_under_contention(op, device):
    start, idx, v, h, _ = _run_rmw(op, torch.int64, False, device)
    f = _INT_OPS[op]
    for s in range(h.numel()):
        acc = start
        for x in v[idx == s].tolist():
            acc = f(acc, x)
        assert h[s].item() == acc


@triton.jit
def cas_counter(c_ptr, log_ptr, ROUNDS: tl.constexpr):
    """Each program takes ROUNDS tickets from one counter with a compare-and-swap loop."""
    pid = tl.program_id(0)
    for r in range(ROUNDS):
        # A first guess: the counter read atomically. (A plain load would not do: the threads of a program may
        # load at different times, and would then disagree on whether the loop below goes on.)
        cur = tl.atomic_add(c_ptr, 0)
        prev = tl.atomic_cas(c_ptr, cur, cur + 1)
        while prev != cur:
            cur = prev
            prev = tl.atomic_cas(c_ptr, cur, cur + 1)
        tl.store(log_ptr + pid * ROUNDS + r, cur)


def test_int64_compare_and_swap_hands_out_each_ticket_once(device):
    start, programs, rounds = 2**32 - 100, 40, 8  # the counter's low word wraps on the way
    c = torch.tensor([start], dtype=torch.int64, device=device)
    log = torch.zeros(programs * rounds, dtype=torch.int64, device=device)
    cas_counter[(programs, )](c, log, ROUNDS=rounds)
    assert c.item() == start + programs * rounds
    assert sorted(log.cpu().tolist()) == list(range(start, start + programs * rounds))


@triton.jit
def cas64(p_ptr, cmp_ptr, val_ptr, old_ptr, N: tl.constexpr):
    i = tl.arange(0, N)
    old = tl.atomic_cas(p_ptr + i, tl.load(cmp_ptr + i), tl.load(val_ptr + i))
    tl.store(old_ptr + i, old)


def test_float64_compare_and_swap_compares_bit_patterns(device):
    nan = float("nan")
    p = torch.tensor([nan, 0.0, -0.0, 1.5, 2.5, 1e300, -7.0, 3.0], dtype=torch.float64)
    cmp = torch.tensor([nan, -0.0, -0.0, 1.5, 2.0, 1e300, -7.0, 3.5], dtype=torch.float64)
    val = torch.arange(8, dtype=torch.float64) + 10
    old = torch.zeros(8, dtype=torch.float64, device=device)
    ref = [v if _f64_bits(a) == _f64_bits(b) else a for a, b, v in zip(p.tolist(), cmp.tolist(), val.tolist())]
    p_dev = p.clone().to(device)  # on the emulator `.to("cpu")` would be p itself
    cas64[(1, )](p_dev, cmp.to(device), val.to(device), old, N=8)
    assert [_f64_bits(x) for x in p_dev.cpu().tolist()] == [_f64_bits(x) for x in ref]
    assert [_f64_bits(x) for x in old.cpu().tolist()] == [_f64_bits(x) for x in p.tolist()]


@triton.jit
def add_with_and_without_old(h_ptr, v_ptr, idx_ptr, old_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    i = tl.load(idx_ptr + offs, mask=m, other=0)
    v = tl.load(v_ptr + offs, mask=m, other=0)
    if tl.program_id(0) % 2 == 0:
        tl.atomic_add(h_ptr + i, v, mask=m)  # alone, this would update the two words without a lock
    else:
        tl.store(old_ptr + offs, tl.atomic_add(h_ptr + i, v, mask=m), mask=m)


def test_all_64bit_atomics_of_a_kernel_take_the_lock_when_one_needs_it(device):
    n = 4000
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, 3, (n, ), dtype=torch.int32, generator=g)
    v = torch.randint(-2**62, 2**62, (n, ), dtype=torch.int64, generator=g)
    h = torch.zeros(3, dtype=torch.int64, device=device)
    old = torch.zeros(n, dtype=torch.int64, device=device)
    compiled = add_with_and_without_old[(triton.cdiv(n, 128), )](h, v.to(device), idx.to(device), old, n, BLOCK=128)
    msl = compiled.asm["msl"]
    assert "tt_atomic64_add(tt_locks" in msl and "tt_atomic_add64" not in msl
    for s in range(3):
        assert h[s].item() == _wrap(sum(v[idx == s].tolist()))


def test_native_min_max_on_apple9_and_the_lock_where_old_values_are_used(apple_compile):
    sig = {"h_ptr": "*i64", "v_ptr": "*i64", "idx_ptr": "*i32", "old_ptr": "*i64", "n": "i32", "OP": "constexpr",
           "UNSIGNED": "constexpr", "USE_OLD": "constexpr", "BLOCK": "constexpr"}

    def msl(family, use_old):
        k = apple_compile(rmw64, sig, {"OP": "max", "UNSIGNED": True, "USE_OLD": use_old, "BLOCK": 128},
                          family=family)
        return k.asm["msl"]

    native = msl("apple9", False)
    assert "atomic_max_explicit((device atomic_ulong*)" in native and "tt_locks" not in native
    assert "tt_atomic64_umax(tt_locks" in msl("apple9", True)
    assert "tt_atomic64_umax(tt_locks" in msl("apple7", False)  # M1, M2: no 64-bit atomics at all


@triton.jit
def faulting_atomic(h_ptr, idx_ptr, out_ptr):
    i = tl.load(idx_ptr)
    tl.store(out_ptr, tl.atomic_xchg(h_ptr + i, 5))


def test_a_fault_while_a_lock_is_taken_leaves_the_next_launch_unaffected(device):
    if device != "cpu":
        pytest.skip("a fault in a Metal kernel is not reported per launch")
    from triton.backends.apple.emulator import EmulatorLaunchError
    h = torch.zeros(4, dtype=torch.int64)
    out = torch.zeros(1, dtype=torch.int64)
    with pytest.raises(EmulatorLaunchError, match="out-of-bounds read of buffer 'h_ptr'"):
        faulting_atomic[(1, )](h, torch.tensor([1 << 20], dtype=torch.int32), out)
    faulting_atomic[(1, )](h, torch.tensor([2], dtype=torch.int32), out)  # each launch has a table of its own
    assert h.tolist() == [0, 0, 5, 0] and out.item() == 0


@triton.jit
def and_or_same_elements(h_ptr, n, X: tl.constexpr, BLOCK: tl.constexpr):
    """Even programs clear every element, odd ones set X: each element ends as 0 or X, never a mix."""
    offs = tl.arange(0, BLOCK)
    for start in range(0, n, BLOCK):
        p = h_ptr + start + offs
        m = start + offs < n
        if tl.program_id(0) % 2 == 0:
            tl.atomic_and(p, 0, mask=m)
        else:
            tl.atomic_or(p, X, mask=m)


def test_lock_free_updates_of_two_kinds_in_one_kernel_take_the_lock(device):
    """add/and/or/xor each update the two 32-bit halves at different times: and and or of the same element in
    one launch could leave the high half of one and the low half of the other, so they take the lock."""
    x = 0x0123456789ABCDEF
    h = torch.full((2048, ), x, dtype=torch.int64, device=device)
    compiled = and_or_same_elements[(8, )](h, h.numel(), X=x, BLOCK=256)
    msl = compiled.asm["msl"]
    assert "tt_atomic64_and(tt_locks" in msl and "tt_atomic64_or(tt_locks" in msl
    assert set(h.cpu().tolist()) <= {0, x}


def test_apple9_native_min_and_two_word_add_in_one_kernel_take_the_lock(apple_compile):
    @triton.jit
    def add_and_umin(h_ptr, v_ptr):
        i = tl.arange(0, 32)
        p = h_ptr + i
        tl.atomic_add(p, tl.load(v_ptr + i))
        tl.atomic_min(p.to(tl.pointer_type(tl.uint64)), tl.load(v_ptr + i).to(tl.uint64, bitcast=True))

    k = apple_compile(add_and_umin, {"h_ptr": "*i64", "v_ptr": "*i64"}, family="apple9")
    msl = k.asm["msl"]
    assert "tt_atomic64_add(tt_locks" in msl and "tt_atomic64_umin(tt_locks" in msl
    assert "atomic_ulong" not in msl and "tt_atomic_add64" not in msl


@triton.jit(noinline=True)
def _count(c_ptr, k):
    return tl.atomic_add(c_ptr, k)


@triton.jit
def replicated_and_scalar(h_ptr, c_ptr, old_ptr, first_ptr):
    # 16 elements over 4 warps: each element is held by several threads and must be updated once
    i = tl.arange(0, 16)
    tl.store(old_ptr + tl.program_id(0) * 16 + i, tl.atomic_add(h_ptr + i, i.to(tl.int64) + 1))
    first = _count(c_ptr, (tl.program_id(0) + 1).to(tl.int64))  # a scalar atomic in a noinline function
    tl.store(first_ptr + tl.program_id(0), first)


def test_replicated_layouts_scalars_and_noinline_functions(device):
    programs = 12
    h = torch.zeros(16, dtype=torch.int64, device=device)
    c = torch.zeros(1, dtype=torch.int64, device=device)
    old = torch.zeros(programs * 16, dtype=torch.int64, device=device)
    first = torch.zeros(programs, dtype=torch.int64, device=device)
    replicated_and_scalar[(programs, )](h, c, old, first, num_warps=4)
    assert h.cpu().tolist() == [programs * (j + 1) for j in range(16)]
    olds = old.cpu().view(programs, 16)
    for j in range(16):  # element j read 0, j+1, 2(j+1), ... in some order
        assert sorted(olds[:, j].tolist()) == [k * (j + 1) for k in range(programs)]
    ks = list(range(1, programs + 1))
    assert c.item() == sum(ks)
    assert updates_in_one_order(0, first.cpu().tolist(), ks, c.item(), operator.add)


@triton.jit(debug=True)  # device_assert is compiled in
def many_args_checked_counter(c_ptr, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, b0, b1, b2, b3, b4, b5, b6, b7, b8, b9,
                              d0, d1, d2, d3, d4, d5, d6, d7, d8, d9, e0, e1):
    total = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + b0 + b1 + b2 + b3 + b4 + b5 + b6 + b7 + b8 + b9
    total += d0 + d1 + d2 + d3 + d4 + d5 + d6 + d7 + d8 + d9 + e0 + e1
    old = tl.atomic_add(c_ptr, total.to(tl.int64))
    tl.device_assert(old >= 0, "the counter only grows")
    tl.store(c_ptr + 1 + tl.program_id(0), old)


def test_lock_table_with_the_debug_buffer_and_packed_scalars(device):
    """33 arguments: the scalars travel packed in one buffer; the debug buffer and the lock table follow."""
    c = torch.zeros(1 + 16, dtype=torch.int64, device=device)
    scalars = list(range(2, 34))  # (a 1 would be specialised into a constant)
    compiled = many_args_checked_counter[(16, )](c, *scalars)
    kinds = [p["kind"] for p in __import__("json").loads(compiled.metadata.kernel_signature)]
    assert kinds.count("packed") == 32 and kinds[-2:] == ["debug", "locks"]
    step = sum(scalars)
    assert c[0].item() == 16 * step
    assert sorted(c[1:].cpu().tolist()) == [k * step for k in range(16)]

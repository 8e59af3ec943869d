"""Pointer-free forms (lowering/pointer_base.py): 16-bit atomics find their 32-bit word, and 64-bit atomics their
lock, from the element's index in the kernel argument they point into; only pointers the lowering cannot trace
to one argument (or, for 16-bit atomics, to a 4-byte aligned one) keep the address forms, a pointer -> integer
reinterpret_cast that Apple's compiler has never been shown. Both forms give the same results here."""
import torch
import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl


@triton.jit
def _add16(h_ptr, v_ptr, idx_ptr, old_ptr, N: tl.constexpr):
    i = tl.arange(0, N)
    tl.store(old_ptr + i, tl.atomic_add(h_ptr + tl.load(idx_ptr + i), tl.load(v_ptr + i), sem="relaxed"))


@triton.jit
def _cas16(h_ptr, out_ptr, N: tl.constexpr):
    i = tl.arange(0, N)
    tl.store(out_ptr + i, tl.atomic_cas(h_ptr + i, tl.full([N], 1.0, tl.float16), tl.full([N], 2.0, tl.float16),
                                         sem="relaxed"))


@triton.jit
def _xchg64(h_ptr, v_ptr, old_ptr, N: tl.constexpr):
    i = tl.arange(0, N)
    tl.store(old_ptr + i, tl.atomic_xchg(h_ptr + i % 4, tl.load(v_ptr + i)))


@triton.jit
def _xchg64_two(a_ptr, b_ptr, v_ptr, old_ptr, N: tl.constexpr):
    i = tl.arange(0, N)
    tl.store(old_ptr + i, tl.atomic_xchg(a_ptr + i % 4, tl.load(v_ptr + i)))
    tl.atomic_xchg(b_ptr + i % 4, tl.load(v_ptr + i))


def _msl(k) -> str:
    return k.asm["msl"]


def _kernel_body(src: str) -> str:
    return src.split("kernel void", 1)[1]


def _add_into(h, idx, v, device):
    return _add16[(1, )](h, v.to(device), idx.to(device), torch.empty(len(v), dtype=torch.float16, device=device),
                         N=len(v))


def test_16_bit_atomic_add_finds_its_word_by_index_and_by_address_alike(device):
    n = 64
    idx = torch.randint(0, 5, (n, ), dtype=torch.int32, generator=torch.Generator().manual_seed(0))
    v = torch.randn(n, generator=torch.Generator().manual_seed(1)).half()
    want = torch.tensor([v[idx == s].float().sum().item() for s in range(5)])
    aligned = torch.zeros(6, dtype=torch.float16, device=device)  # a 16-byte aligned data pointer
    k = _add_into(aligned, idx, v, device)
    assert "tt_atomic_add16_at((device atomic_uint*)h_ptr, " in _kernel_body(_msl(k))
    assert "reinterpret_cast" not in _msl(k)
    # from element 1 of a tensor: an address 2 mod 4, which Triton does not specialise as divisible
    shifted = torch.zeros(7, dtype=torch.float16, device=device)[1:]
    k = _add_into(shifted, idx, v, device)
    body = _kernel_body(_msl(k))
    assert "tt_atomic_add16(" in body and "tt_atomic_add16_at" not in body
    assert "reinterpret_cast<ulong>(p)" in _msl(k)
    for h in (aligned, shifted):
        assert torch.allclose(h.cpu()[:5].float(), want, atol=0.05)  # each add rounds to half, in any order


def test_16_bit_compare_and_swap_by_index_changes_only_its_half(device):
    h = torch.tensor([1.0, 3.0, 1.0, 1.0, 5.0, 1.0, 1.0, 1.0], dtype=torch.float16, device=device)
    out = torch.empty(8, dtype=torch.float16, device=device)
    k = _cas16[(1, )](h, out, N=8)
    assert "tt_atomic_cas16_at((device atomic_uint*)h_ptr, " in _kernel_body(_msl(k))
    assert h.cpu().tolist() == [2.0, 3.0, 2.0, 2.0, 5.0, 2.0, 2.0, 2.0]
    assert out.cpu().tolist() == [1.0, 3.0, 1.0, 1.0, 5.0, 1.0, 1.0, 1.0]


def test_64_bit_locks_are_chosen_by_index_when_every_atomic_points_into_one_argument(device):
    n = 128
    v = torch.arange(1, n + 1, dtype=torch.int64)
    h = torch.zeros(4, dtype=torch.int64, device=device)
    old = torch.zeros(n, dtype=torch.int64, device=device)
    k = _xchg64[(1, )](h, v.to(device), old, N=n)
    body = _kernel_body(_msl(k))
    assert "tt_atomic64_exch(tt_locks, (device ulong*)" in body and " - h_ptr), " in body
    assert "reinterpret_cast" not in _msl(k)
    # every value went in exactly once: per element, the olds and the final value are its values, each once
    for s in range(4):
        mine = sorted(v[s::4].tolist())
        assert sorted(old.cpu()[s::4].tolist() + [h[s].item()]) == sorted([0] + mine)


def test_64_bit_locks_of_atomics_into_two_arguments_are_chosen_by_address(device):
    n = 64
    v = torch.arange(1, n + 1, dtype=torch.int64)
    shared = torch.zeros(4, dtype=torch.int64, device=device)
    old = torch.zeros(n, dtype=torch.int64, device=device)
    k = _xchg64_two[(1, )](shared, shared, v.to(device), old, N=n)  # two arguments, one tensor: the same locks
    assert "tt_lock64_address_key((device ulong*)" in _kernel_body(_msl(k))
    assert "reinterpret_cast<ulong>(p) >> 3" in _msl(k)
    assert set(shared.cpu().tolist()) <= set(v.tolist())


@gluon.jit
def _transpose_pointers(x_ptr, y_ptr, N: gl.constexpr):
    by_rows: gl.constexpr = gl.BlockedLayout([1, 4], [8, 4], [4, 1], [1, 0])
    by_cols: gl.constexpr = gl.BlockedLayout([4, 1], [4, 8], [1, 4], [0, 1])
    r = gl.arange(0, N, layout=gl.SliceLayout(1, by_rows))
    c = gl.arange(0, N, layout=gl.SliceLayout(0, by_rows))
    offsets = r[:, None] * N + c[None, :]
    pointers = gl.convert_layout(x_ptr + offsets, by_cols)  # pointers move between threads
    gl.store(y_ptr + gl.convert_layout(offsets, by_cols), gl.load(pointers))


def test_pointers_move_between_threads_as_indices_from_their_argument(device):
    x = torch.randn(32, 32, device=device)
    y = torch.zeros_like(x)
    k = _transpose_pointers[(1, )](x, y, N=32, num_warps=4)
    src = _msl(k)
    assert torch.equal(x, y)
    assert "* threadgroup*" not in src and "tt_shuffle_pointer" not in src and "reinterpret_cast" not in src
    assert " - x_ptr;" in src and "= x_ptr + t_moved" in src

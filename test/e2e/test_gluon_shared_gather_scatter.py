"""Gluon's gathers and scatters in shared memory (`shared_memory_descriptor.gather/scatter/atomic_scatter_*`, i.e.
`ttg.local_gather`, `ttg.local_scatter`, `ttg.local_atomic_scatter_rmw`) and `reinterpret` (`ttg.memdesc_reinterpret`)
on the emulator against torch: along either axis, through a subslice of the buffer, with broadcast and masked
operands, every atomic operation on int32, float32 add and exchange, float16 add (two halves of one 32-bit word),
old values returned on a layout that holds each element on several threads, and the refusals."""
import pytest
import torch

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from triton.backends.apple.errors import UnsupportedFeatureError

M, N = 32, 16
ROW_MAJOR = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])


@gluon.jit
def gl_gather(x_ptr, idx_ptr, out_ptr, AXIS: gl.constexpr, R0: gl.constexpr, C0: gl.constexpr, BM: gl.constexpr,
              BN: gl.constexpr, M: gl.constexpr, N: gl.constexpr, SHARED: gl.constexpr):
    lay: gl.constexpr = gl.BlockedLayout([1, 2], [8, 4], [2, 2], [1, 0])
    r = gl.arange(0, M, layout=gl.SliceLayout(1, lay))[:, None]
    c = gl.arange(0, N, layout=gl.SliceLayout(0, lay))[None, :]
    smem = gl.allocate_shared_memory(gl.float32, [M, N], SHARED, gl.load(x_ptr + r * N + c))
    view = smem.slice(R0, BM, dim=0).slice(C0, BN, dim=1)
    vr = gl.arange(0, BM, layout=gl.SliceLayout(1, lay))[:, None]
    vc = gl.arange(0, BN, layout=gl.SliceLayout(0, lay))[None, :]
    idx = gl.load(idx_ptr + vr * BN + vc)
    gl.store(out_ptr + vr * BN + vc, view.gather(idx, axis=AXIS))


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("window", [(0, 0, M, N), (16, 8, 16, 8)], ids=["whole", "subslice"])
def test_gather_along_an_axis(axis, window, device):
    r0, c0, bm, bn = window
    torch.manual_seed(0)
    x = torch.randn(M, N, device=device)
    idx = torch.randint(0, (bm, bn)[axis], (bm, bn), dtype=torch.int32, device=device)
    out = torch.empty(bm, bn, device=device)
    gl_gather[(1, )](x, idx, out, axis, r0, c0, bm, bn, M, N, ROW_MAJOR, num_warps=4)
    torch.testing.assert_close(out, torch.gather(x[r0:r0 + bm, c0:c0 + bn], axis, idx.long()), rtol=0, atol=0)


@gluon.jit
def gl_scatter(idx_ptr, val_ptr, out_ptr, AXIS: gl.constexpr, M: gl.constexpr, N: gl.constexpr,
               BROADCAST: gl.constexpr):
    lay: gl.constexpr = gl.BlockedLayout([1, 1], [4, 8], [4, 1], [1, 0])
    r = gl.arange(0, M, layout=gl.SliceLayout(1, lay))[:, None]
    c = gl.arange(0, N, layout=gl.SliceLayout(0, lay))[None, :]
    smem = gl.allocate_shared_memory(gl.float32, [M, N], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]),
                                     gl.full([M, N], -1.0, gl.float32, lay))
    if BROADCAST:  # values [M, 1] and indices [1, N]: row i is written with values[i] at columns idx[j]
        smem.scatter(gl.load(val_ptr + r), gl.load(idx_ptr + c), axis=1)
    else:
        smem.scatter(gl.load(val_ptr + r * N + c), gl.load(idx_ptr + r * N + c), axis=AXIS)
    gl.store(out_ptr + r * N + c, smem.load(lay))


@pytest.mark.parametrize("axis", [0, 1])
def test_scatter_a_permutation_along_an_axis(axis, device):
    torch.manual_seed(1)
    size = (M, N)[axis]
    perms = [torch.randperm(size) for _ in range((N, M)[axis])]
    idx = torch.stack(perms, dim=1 - axis).to(torch.int32).to(device)
    val = torch.randn(M, N, device=device)
    out = torch.empty(M, N, device=device)
    gl_scatter[(1, )](idx, val, out, axis, M, N, False, num_warps=4)
    expected = torch.full((M, N), -1.0, device=device).scatter_(axis, idx.long(), val)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


def test_scatter_broadcasts_values_and_indices(device):
    idx = torch.randperm(N).to(torch.int32).to(device)
    val = torch.randn(M, device=device)
    out = torch.empty(M, N, device=device)
    gl_scatter[(1, )](idx, val, out, 1, M, N, True, num_warps=4)
    torch.testing.assert_close(out, val[:, None].expand(M, N), rtol=0, atol=0)


@gluon.jit
def gl_atomic_scatter(idx_ptr, val_ptr, mask_ptr, old_ptr, out_ptr, OP: gl.constexpr, INIT: gl.constexpr,
                      AXIS: gl.constexpr, DTYPE: gl.constexpr, M: gl.constexpr, N: gl.constexpr,
                      RM: gl.constexpr, RN: gl.constexpr):
    lay: gl.constexpr = gl.BlockedLayout([1, 1], [4, 8], [4, 1], [1, 0])
    r = gl.arange(0, M, layout=gl.SliceLayout(1, lay))[:, None]
    c = gl.arange(0, N, layout=gl.SliceLayout(0, lay))[None, :]
    smem = gl.allocate_shared_memory(DTYPE, [M, N], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]),
                                     gl.full([M, N], INIT, DTYPE, lay))
    # the operands are [RM, RN], smaller than the 128 threads: each element is held by several threads
    rr = gl.arange(0, RM, layout=gl.SliceLayout(1, lay))[:, None]
    rc = gl.arange(0, RN, layout=gl.SliceLayout(0, lay))[None, :]
    idx = gl.load(idx_ptr + rr * RN + rc)
    val = gl.load(val_ptr + rr * RN + rc)
    mask = gl.load(mask_ptr + rr * RN + rc) != 0
    if OP == "add":
        old = smem.atomic_scatter_add(val, idx, axis=AXIS, mask=mask)
    elif OP == "max":
        old = smem.atomic_scatter_max(val, idx, axis=AXIS, mask=mask)
    elif OP == "min":
        old = smem.atomic_scatter_min(val, idx, axis=AXIS, mask=mask)
    elif OP == "and":
        old = smem.atomic_scatter_and(val, idx, axis=AXIS, mask=mask)
    elif OP == "or":
        old = smem.atomic_scatter_or(val, idx, axis=AXIS, mask=mask)
    elif OP == "xor":
        old = smem.atomic_scatter_xor(val, idx, axis=AXIS, mask=mask)
    else:
        old = smem.atomic_scatter_xchg(val, idx, axis=AXIS, mask=mask)
    gl.store(old_ptr + rr * RN + rc, old)
    gl.store(out_ptr + r * N + c, smem.load(lay))


_COMBINE = {"add": torch.add, "max": torch.maximum, "min": torch.minimum, "and": torch.bitwise_and,
            "or": torch.bitwise_or, "xor": torch.bitwise_xor, "xchg": lambda old, v: v}
_GL = {torch.int32: gl.int32, torch.uint32: gl.uint32, torch.float32: gl.float32, torch.float16: gl.float16}


def _atomic_case(op, dtype, axis, device, seed, unique):
    """Operands of an atomic scatter of [4, 16] (axis 1) or [8, 8] (axis 0) elements into a [32, 16] buffer.
    `unique`: each destination at most once (the old values are then those of the initial buffer)."""
    g = torch.Generator().manual_seed(seed)
    rm, rn = (4, 16) if axis == 1 else (8, 8)
    size = (M, N)[axis]
    if unique:
        idx = torch.stack([torch.randperm(size, generator=g)[:(rm, rn)[axis]] for _ in range((rn, rm)[axis])],
                          dim=1 - axis)
    else:
        idx = torch.randint(0, size, (rm, rn), generator=g)
    if dtype.is_floating_point:  # small integers: every sum is exact whatever the order
        val = torch.randint(-8, 9, (rm, rn), generator=g).to(dtype)
    else:
        val = torch.randint(-(1 << 30), 1 << 30, (rm, rn), generator=g).to(torch.int64).to(dtype)
    mask = torch.rand(rm, rn, generator=g) < 0.75
    return idx.to(torch.int32).to(device), val.to(device), mask.to(torch.int32).to(device), rm, rn


def _reference(op, init, dtype, idx, val, mask, axis):
    ref = torch.full((M, N), init, dtype=torch.int64 if dtype == torch.uint32 else dtype)
    vals = val.cpu().to(ref.dtype)
    for i in range(idx.shape[0]):
        for j in range(idx.shape[1]):
            if mask[i, j]:
                at = (i, int(idx[i, j])) if axis == 1 else (int(idx[i, j]), j)
                ref[at] = _COMBINE[op](ref[at], vals[i, j])
    return ref


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("op, dtype", [("add", torch.int32), ("max", torch.int32), ("min", torch.int32),
                                       ("and", torch.int32), ("or", torch.int32), ("xor", torch.int32),
                                       ("max", torch.uint32), ("min", torch.uint32), ("xchg", torch.int32),
                                       ("add", torch.float32), ("xchg", torch.float32), ("add", torch.float16)])
def test_atomic_scatter_final_values(op, dtype, axis, device):
    init = {"and": -1, "min": 1 << 30}.get(op, 0) if dtype != torch.uint32 else (7 if op == "max" else 1 << 30)
    idx, val, mask, rm, rn = _atomic_case(op, dtype, axis, device, seed=3, unique=op == "xchg")
    old = torch.empty(rm, rn, dtype=dtype, device=device)
    out = torch.empty(M, N, dtype=dtype, device=device)
    gl_atomic_scatter[(1, )](idx, val, mask, old, out, op, init, axis, _GL[dtype], M, N, rm, rn, num_warps=4)
    ref = _reference(op, init, dtype, idx.cpu(), val, mask.cpu(), axis)
    got = out.cpu().to(torch.int64) if dtype == torch.uint32 else out.cpu()
    torch.testing.assert_close(got, ref, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.int32, torch.float32, torch.float16])
def test_atomic_scatter_old_values_on_every_thread_holding_an_element(dtype, device):
    """Destinations distinct: the old values are the buffer's initial ones, 0 where the mask is off."""
    idx, val, mask, rm, rn = _atomic_case("add", dtype, 1, device, seed=4, unique=True)
    old = torch.full((rm, rn), 99, dtype=dtype, device=device)
    out = torch.empty(M, N, dtype=dtype, device=device)
    gl_atomic_scatter[(1, )](idx, val, mask, old, out, "add", 5, 1, _GL[dtype], M, N, rm, rn, num_warps=4)
    expected = torch.where(mask.bool(), torch.full_like(val, 5), torch.zeros_like(val))
    torch.testing.assert_close(old, expected, rtol=0, atol=0)


@gluon.jit
def gl_reinterpret(x_ptr, out_ptr, N: gl.constexpr, LAYOUT: gl.constexpr):
    lay8: gl.constexpr = gl.BlockedLayout([4], [32], [4], [0])
    lay32: gl.constexpr = gl.BlockedLayout([1, 1], [4, 8], [4, 1], [1, 0])
    offs = gl.arange(0, 4 * N, layout=lay8)
    smem = gl.allocate_shared_memory(gl.int8, [4 * N], LAYOUT, gl.load(x_ptr + offs))
    words = smem.reinterpret(gl.int32, [N // 16, 16], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    r = gl.arange(0, N // 16, layout=gl.SliceLayout(1, lay32))[:, None]
    c = gl.arange(0, 16, layout=gl.SliceLayout(0, lay32))[None, :]
    gl.store(out_ptr + r * 16 + c, words.slice(0, N // 16, dim=0).load(lay32))


def test_reinterpret_reads_the_same_bytes(device):
    x = torch.randint(-128, 128, (4 * 256, ), dtype=torch.int8, device=device)
    out = torch.empty(16, 16, dtype=torch.int32, device=device)
    gl_reinterpret[(1, )](x, out, 256, gl.SwizzledSharedLayout(1, 1, 1, [0]), num_warps=4)
    torch.testing.assert_close(out.flatten(), x.view(torch.int32), rtol=0, atol=0)


def test_reinterpret_of_a_swizzled_buffer_is_refused(device):
    x = torch.zeros(4 * 256, dtype=torch.int8, device=device)
    out = torch.empty(16, 16, dtype=torch.int32, device=device)
    with pytest.raises(UnsupportedFeatureError, match="memdesc_reinterpret of a shared buffer with layout"):
        gl_reinterpret[(1, )](x, out, 256, gl.SwizzledSharedLayout(4, 2, 4, [0]), num_warps=4)


def test_atomic_scatter_of_int64_is_refused(device):
    idx = torch.zeros(4, 16, dtype=torch.int32, device=device)
    val = torch.ones(4, 16, dtype=torch.int64, device=device)
    mask = torch.ones(4, 16, dtype=torch.int32, device=device)
    old = torch.empty(4, 16, dtype=torch.int64, device=device)
    out = torch.empty(M, N, dtype=torch.int64, device=device)
    with pytest.raises(UnsupportedFeatureError, match="atomic scatter add on i64 in shared memory"):
        gl_atomic_scatter[(1, )](idx, val, mask, old, out, "add", 0, 1, gl.int64, M, N, 4, 16, num_warps=4)

"""`tl.atomic_poll` on 16-, 32- and 64-bit integers, as upstream's tests use it: a poll of a value already there
returns (scalar and tensor pointers, strided, expected values per element, signed values), and a program that
polls a flag another program sets with a release atomic then reads what that program stored before it. 16-bit
elements are read through their 32-bit word (neighbours in one word polled at once here); 64-bit ones under the
element's lock, which every 64-bit atomic of a polling kernel takes (so the consumer never sees half of an update,
e.g. of an add carrying into the high word). A timeout of 0 is one read of each element, its result whether that
read matched; other timeouts are refused (Metal has no global timer): test_atomics.py."""
import pytest
import torch
import triton
import triton.language as tl

DTYPES = [torch.int16, torch.int32, torch.int64]


@triton.jit
def poll_scalar(flag_ptr, out_ptr, expect, SEM: tl.constexpr):
    seen = tl.atomic_poll(flag_ptr, expect, sem=SEM)
    tl.store(out_ptr, seen.to(tl.int32))


@pytest.mark.parametrize("sem", ["relaxed", "acquire"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_poll_of_a_value_already_there(dtype, sem, device):
    expect = {torch.int16: -12345, torch.int32: -7, torch.int64: -(1 << 40) - 3}[dtype]
    flag = torch.tensor([expect, 99], dtype=dtype, device=device)  # the neighbour shares a 32-bit word at 16 bits
    out = torch.zeros(1, dtype=torch.int32, device=device)
    poll_scalar[(1, )](flag, out, expect, sem)
    assert out.item() == 1
    assert flag.tolist() == [expect, 99]  # a poll only reads


@triton.jit
def poll_tensor(flags_ptr, out_ptr, BLOCK: tl.constexpr, STRIDE: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    seen = tl.atomic_poll(flags_ptr + offs * STRIDE, (offs + 1).to(flags_ptr.dtype.element_ty), sem="acquire")
    tl.store(out_ptr + offs, seen.to(tl.int8))


@pytest.mark.parametrize("block, stride", [(16, 1), (256, 2), (16, 3)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_poll_of_a_tensor_of_flags(dtype, block, stride, device):
    flags = torch.zeros(block * stride, dtype=dtype, device=device)
    flags[::stride] = torch.arange(1, block + 1, dtype=dtype)
    out = torch.zeros(block, dtype=torch.int8, device=device)
    poll_tensor[(1, )](flags, out, block, stride, num_warps=4)
    assert out.tolist() == [1] * block


@triton.jit
def release_then_poll(payload_ptr, flag_ptr, out_ptr, ONE: tl.constexpr, WIDE_ADD: tl.constexpr):
    pid = tl.program_id(0)
    if pid == 0:
        tl.store(payload_ptr, 1000)
        if WIDE_ADD:  # 0xFFFFFFFF + 1: the value changes in both halves
            tl.atomic_add(flag_ptr, 1, sem="release")
        elif flag_ptr.dtype.element_ty == tl.int16:
            ty = flag_ptr.dtype.element_ty  # Triton has no 16-bit exchange
            tl.atomic_cas(flag_ptr, tl.cast(0, ty), tl.cast(ONE, ty), sem="release")
        else:
            tl.atomic_xchg(flag_ptr, ONE, sem="release")
    elif pid == 1:
        tl.atomic_poll(flag_ptr, ONE, sem="acquire")
        tl.store(out_ptr, tl.load(payload_ptr))


@pytest.mark.parametrize("dtype", DTYPES)
def test_poll_acquires_what_the_releasing_program_stored(dtype, device):
    payload = torch.zeros(1, dtype=torch.int32, device=device)
    flag = torch.zeros(2, dtype=dtype, device=device)
    out = torch.full((1, ), -1, dtype=torch.int32, device=device)
    release_then_poll[(2, )](payload, flag, out, 1, False, num_warps=4)
    assert out.item() == 1000 and flag.tolist() == [1, 0]


def test_64_bit_poll_sees_a_carry_into_the_high_word_whole(device):
    payload = torch.zeros(1, dtype=torch.int32, device=device)
    flag = torch.tensor([0xFFFFFFFF], dtype=torch.int64, device=device)
    out = torch.full((1, ), -1, dtype=torch.int32, device=device)
    k = release_then_poll[(2, )](payload, flag, out, 1 << 32, True, num_warps=4)
    assert out.item() == 1000 and flag.item() == 1 << 32
    # without the poll this add would update the halves one after the other (no lock); with it, it is locked
    assert "tt_atomic64_add(tt_locks" in k.asm["msl"] and "tt_atomic64_poll_load(tt_locks" in k.asm["msl"]


@triton.jit
def producers_and_a_poller(payload_ptr, flags_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    pid = tl.program_id(0)
    if pid < 2:  # programs 0 and 1 each publish every other element
        mine = offs % 2 == pid
        tl.store(payload_ptr + offs, offs + 1000, mask=mine)
        ty = flags_ptr.dtype.element_ty  # compare-and-swap takes no mask: the other elements swap 0 for 0
        tl.atomic_cas(flags_ptr + offs, tl.zeros([BLOCK], ty), mine.to(ty), sem="release")
    else:
        tl.atomic_poll(flags_ptr + offs, tl.full([BLOCK], 1, flags_ptr.dtype.element_ty), sem="acquire")
        tl.store(out_ptr + offs, tl.load(payload_ptr + offs))


@pytest.mark.parametrize("dtype", DTYPES)
def test_tensor_poll_acquires_from_every_producer(dtype, device):
    block = 64
    payload = torch.zeros(block, dtype=torch.int32, device=device)
    flags = torch.zeros(block, dtype=dtype, device=device)  # 16-bit: both halves of a word, two producers
    out = torch.full((block, ), -1, dtype=torch.int32, device=device)
    producers_and_a_poller[(3, )](payload, flags, out, block, num_warps=4)
    assert out.tolist() == list(range(1000, 1000 + block))
    assert flags.tolist() == [1] * block


@triton.jit(noinline=True)
def _poll_in_a_function(flag_ptr, expect):
    return tl.atomic_poll(flag_ptr, expect)


@triton.jit
def poll_through_a_function(flag_ptr, out_ptr, expect):
    tl.store(out_ptr, _poll_in_a_function(flag_ptr + 1, expect).to(tl.int32))


@pytest.mark.parametrize("dtype", [torch.int16, torch.int64])
def test_poll_of_a_pointer_not_traced_to_an_argument(dtype, device):
    # in a noinline function the pointer is not known to point into an argument: the 16-bit word and the 64-bit
    # lock come from the element's address
    flag = torch.tensor([5, -3, 5], dtype=dtype, device=device)
    out = torch.zeros(1, dtype=torch.int32, device=device)
    k = poll_through_a_function[(1, )](flag, out, -3)
    assert out.item() == 1
    assert ("tt_atomic_load16(" if dtype == torch.int16 else "tt_lock64_address_key(") in k.asm["msl"]


@triton.jit
def poll_once(flags_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    seen = tl.atomic_poll(flags_ptr + offs, (offs + 1).to(flags_ptr.dtype.element_ty), timeout_ns=0)
    tl.store(out_ptr + offs, seen.to(tl.int8))


@pytest.mark.parametrize("block, num_warps", [(1, 4), (16, 4), (128, 8), (512, 4)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_poll_with_a_zero_timeout_reads_once(dtype, block, num_warps, device):
    # upstream's test_atomic_poll_tensor_results: every other flag does not match and comes back false
    expected = torch.arange(1, block + 1, dtype=dtype)
    flags = expected.clone()
    flags[::2] = 0
    out = torch.full((block, ), 7, dtype=torch.int8, device=device)
    poll_once[(1, )](flags.to(device), out, block, num_warps=num_warps)
    assert out.cpu().tolist() == (flags == expected).to(torch.int8).tolist()


@triton.jit
def poll_scalar_once(flag_ptr, out_ptr):
    tl.store(out_ptr, tl.atomic_poll(flag_ptr, 1, timeout_ns=0).to(tl.int32))


@pytest.mark.parametrize("value", [0, 1])
def test_scalar_poll_with_a_zero_timeout(value, device):
    out = torch.full((1, ), 7, dtype=torch.int32, device=device)
    poll_scalar_once[(1, )](torch.tensor([value], dtype=torch.int32, device=device), out)
    assert out.item() == value


@triton.jit
def swap_and_add16(p_ptr, h_ptr, old_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    old = tl.atomic_cas(p_ptr + offs, (offs + 1).to(tl.int16), (offs + 100).to(tl.int16))
    tl.store(old_ptr + offs, old)
    tl.atomic_add(h_ptr + offs, tl.full([BLOCK], 0.5, tl.float16))


@pytest.mark.parametrize("num_warps", [1, 4])
def test_16_bit_atomics_on_odd_elements(num_warps, device):
    # every thread holds two elements of each 32-bit word's halves apart (two registers): the word of an odd
    # element was found wrongly before (clang folded (p - base) >> 1 as if p - base were even), reading the next
    # element and, for the last one, past the buffer
    block = 64
    p = torch.arange(1, block + 1, dtype=torch.int16, device=device)
    h = torch.arange(block, dtype=torch.float16, device=device)
    old = torch.zeros(block, dtype=torch.int16, device=device)
    swap_and_add16[(1, )](p, h, old, block, num_warps=num_warps)
    assert old.tolist() == list(range(1, block + 1))
    assert p.tolist() == list(range(100, 100 + block))
    assert h.tolist() == [i + 0.5 for i in range(block)]

"""Row padding of layout conversions' threadgroup buffers (lowering/scratch_padding.py): the bank cycles it counts
for a layout's stores and loads, the pad it picks, and a conversion through a padded buffer checked end to end."""
import re

import torch
import triton
import triton.language as tl

from triton.backends.apple.layouts import LinearLayout
from triton.backends.apple.lowering.scratch_padding import bank_cycles, conversion_strides, scratch_bytes
from triton.backends.apple.lowering.shared_memory import vector_run

# 32 x 32 floats, one warp. COLUMNS: lane l holds column l, each register one row. ROWS: lane l holds row l.
COLUMNS = LinearLayout((32, 32), ((1, 0), (2, 0), (4, 0), (8, 0), (16, 0)), ((0, 1), (0, 2), (0, 4), (0, 8), (0, 16)),
                       ())
ROWS = LinearLayout((32, 32), ((0, 1), (0, 2), (0, 4), (0, 8), (0, 16)), ((1, 0), (2, 0), (4, 0), (8, 0), (16, 0)),
                    ())


def test_bank_cycles_of_rows_and_columns():
    # COLUMNS: each access is one row's 32 words: 1 cycle. ROWS: each access is a column of 32 rows 128 bytes apart,
    # all in one bank (32 cycles), until rows are padded by a word (1 cycle).
    assert bank_cycles(COLUMNS, 32, 4, True) == 32
    assert bank_cycles(ROWS, 32, 4, True) == 32 * 32
    assert bank_cycles(ROWS, 33, 4, False) == 32
    # 16-bit elements: two lanes share a word, a row of 64 bytes; the 32 rows then fall on 2 words per bank
    assert bank_cycles(COLUMNS, 32, 2, False) == 32
    assert bank_cycles(ROWS, 32, 2, False) == 32 * 16
    assert bank_cycles(ROWS, 34, 2, False) == 32


def test_conversion_picks_the_smallest_pad_that_frees_the_banks():
    assert conversion_strides(ROWS, COLUMNS, (32, 32), 4) == [33, 1]
    assert conversion_strides(COLUMNS, ROWS, (32, 32), 2) == [34, 1]  # whole words only
    assert conversion_strides(COLUMNS, COLUMNS, (32, 32), 4) == [32, 1]  # nothing to gain: row-major
    assert scratch_bytes((32, 32), [33, 1], 4) == (31 * 33 + 32) * 4


def test_vector_runs():
    """ROWS holds 32 consecutive elements of a row per thread: stored 16 bytes at a time where rows start at
    multiples of 16 bytes in a 16-byte aligned buffer."""
    assert vector_run(ROWS, [32, 1], "float", 16) == 4
    assert vector_run(ROWS, [36, 1], "float", 16) == 4
    assert vector_run(ROWS, [33, 1], "float", 16) == 1  # row starts not 16-byte aligned
    assert vector_run(ROWS, [34, 1], "float", 16) == 2
    assert vector_run(ROWS, [32, 1], "float", 8) == 2  # the buffer's alignment bounds it
    assert vector_run(ROWS, [32, 1], "half", 16) == 8 and vector_run(ROWS, [32, 1], "long", 16) == 2
    assert vector_run(ROWS, [32, 1], "bool", 16) == 1  # no vector type
    assert vector_run(COLUMNS, [32, 1], "float", 16) == 1  # a thread's registers go down a column
    # a register bit that repeats another register: the copies are not stored, so no run spans them
    copies = LinearLayout((32, 32), ((0, 0), (0, 1)), ROWS.lane, ())
    assert vector_run(copies, [32, 1], "float", 16) == 1 and vector_run(copies, [32, 1], "float", 16, False) == 1


@triton.jit
def transposes(x_ptr, y_ptr, a_ptr, b_ptr, N: tl.constexpr):
    # a 64 x 128 transpose first: its buffer (32 KB, row-major, the kernel's first) leaves the 64 x 64 one room for
    # padded rows without the kernel declaring more threadgroup memory
    rows = tl.arange(0, N)[:, None]
    wide = tl.arange(0, 2 * N)[None, :]
    a = tl.load(a_ptr + rows * (2 * N) + wide)
    tl.store(b_ptr + wide * N + rows, a)
    cols = tl.arange(0, N)[None, :]
    x = tl.load(x_ptr + rows * N + cols)  # each thread a run of a row
    tl.store(y_ptr + cols * N + rows, x)  # stored down the columns: the conversion gives each thread a column run


def test_padded_conversion_end_to_end(device):
    x, a = torch.randn(64, 64, device=device), torch.randn(64, 128, device=device)
    y, b = torch.empty_like(x), torch.empty(128, 64, device=device)
    k = transposes[(1, )](x, y, a, b, N=64, num_warps=4)
    assert torch.equal(y.cpu(), x.cpu().t()) and torch.equal(b.cpu(), a.cpu().t())
    strides = re.findall(r"\* (\d+) \+ \(\(t_r", k.asm["msl"])  # the buffers' row strides, in order
    assert strides[0] == "128" and any(int(s) > 64 for s in strides[1:]), strides
    assert "*(threadgroup float4*)" in k.asm["msl"]  # each thread's run of a row stored as one float4

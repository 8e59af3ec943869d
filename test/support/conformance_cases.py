"""The conformance matrix: op x dtype cells, each either run against a torch reference or expected to be
refused with a clear message. `test_conformance.py` runs every cell; `tools/coverage_table.py` turns the
same cells into docs/coverage.md."""
from __future__ import annotations

import functools
import operator
from dataclasses import dataclass
from typing import Callable, Optional

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from support.references import updates_in_one_order

INT_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint32"]
FLOAT_DTYPES = ["float16", "bfloat16", "float32", "float64"]  # float64: software binary64
ALL_DTYPES = INT_DTYPES + FLOAT_DTYPES
TL = {"int8": tl.int8, "int16": tl.int16, "int32": tl.int32, "int64": tl.int64, "uint8": tl.uint8,
      "uint32": tl.uint32, "float16": tl.float16, "bfloat16": tl.bfloat16, "float32": tl.float32,
      "float64": tl.float64}
N = 200  # not a multiple of the block: every kernel masks its tail


@dataclass
class Cell:
    category: str
    op: str
    dtype: str
    run: Callable[[str], None]  # raises on mismatch
    refused: Optional[str] = None  # regex of the expected refusal, or None when it must work
    refused_by: str = "apple"  # "apple": the backend's UnsupportedFeatureError; "triton": Triton's frontend

    def refusal_type(self) -> type:
        """The exception a refusal of this cell must be: never an accepted kernel that failed later."""
        if self.refused_by == "triton":
            from triton.compiler.errors import CompilationError
            return CompilationError
        from triton.backends.apple.errors import UnsupportedFeatureError
        return UnsupportedFeatureError


def _inputs(dtype: str, device: str, seed: int, positive: bool = False, small_shift: bool = False):
    g = torch.Generator().manual_seed(seed)
    t = getattr(torch, dtype)
    if dtype.startswith("float") or dtype == "bfloat16":
        x = torch.randn(N, generator=g) * 3
        x[:8] = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1e-3, -2.5, 7.0])
        if positive:
            x = x.abs() + 0.5
        return x.to(t).to(device)
    info = torch.iinfo(t)
    if small_shift:
        return torch.randint(0, info.bits, (N, ), generator=g).to(t).to(device)
    lo, hi = (1, 100) if positive else (max(info.min, -1000), min(info.max, 1000))
    x = torch.randint(lo, hi, (N, ), generator=g).to(t)
    if not positive:
        x[:2] = torch.tensor([info.min, info.max]).to(t)
    return x.to(device)


# -- binary ops --------------------------------------------------------------------------------------


@triton.jit
def _binary_kernel(x_ptr, y_ptr, o_ptr, n, OP: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    x = tl.load(x_ptr + i, mask=m)
    y = tl.load(y_ptr + i, mask=m)
    if OP == "add":
        r = x + y
    elif OP == "sub":
        r = x - y
    elif OP == "mul":
        r = x * y
    elif OP == "div":
        r = x / y
    elif OP == "floordiv":
        r = x // y
    elif OP == "mod":
        r = x % y
    elif OP == "minimum":
        r = tl.minimum(x, y)
    elif OP == "maximum":
        r = tl.maximum(x, y)
    elif OP == "lt":
        r = (x < y).to(x.dtype)
    elif OP == "eq":
        r = (x == y).to(x.dtype)
    elif OP == "and":
        r = x & y
    elif OP == "or":
        r = x | y
    elif OP == "xor":
        r = x ^ y
    elif OP == "shl":
        r = x << y
    elif OP == "shr":
        r = x >> y
    else:
        r = tl.where(x > y, x, y)
    tl.store(o_ptr + i, r, mask=m)


def _trunc_div(x, y):
    return torch.div(x, y, rounding_mode="trunc")


def _c_mod(x, y):
    return x - _trunc_div(x, y) * y


_BINARY_REF = {
    "add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y, "div": lambda x, y: x / y,
    "floordiv": _trunc_div, "mod": _c_mod, "minimum": torch.minimum, "maximum": torch.maximum,
    "lt": lambda x, y: (x < y).to(x.dtype), "eq": lambda x, y: (x == y).to(x.dtype), "and": torch.bitwise_and,
    "or": torch.bitwise_or, "xor": torch.bitwise_xor, "shl": torch.bitwise_left_shift,
    "shr": torch.bitwise_right_shift, "where": lambda x, y: torch.where(x > y, x, y)
}
_FLOAT_ONLY = {"div"}
_INT_ONLY = {"floordiv", "mod", "and", "or", "xor", "shl", "shr"}


def _binary_runner(op: str, dtype: str, device: str):
    def run(_):
        x = _inputs(dtype, device, 1)
        y = _inputs(dtype, device, 2, positive=op in ("floordiv", "mod", "div"), small_shift=op in ("shl", "shr"))
        out = torch.empty_like(x)
        _binary_kernel[(triton.cdiv(N, 128), )](x, y, out, N, OP=op, BLOCK=128)
        if dtype.startswith("uint"):  # torch lacks most uint32 kernels: compute in int64, wrap back
            ref = _BINARY_REF[op](x.to(torch.int64), y.to(torch.int64))
            ref = (ref & ((1 << torch.iinfo(x.dtype).bits) - 1)).to(x.dtype) if op == "shl" else ref.to(x.dtype)
        elif dtype in ("float16", "bfloat16") and op in ("add", "sub", "mul", "div"):
            ref = _BINARY_REF[op](x.float(), y.float()).to(x.dtype)  # one rounding, as IEEE ops do
        else:
            ref = _BINARY_REF[op](x, y)
        torch.testing.assert_close(out.cpu(), ref.cpu(), rtol=0, atol=0, equal_nan=True)

    return run


# -- math --------------------------------------------------------------------------------------------


@triton.jit
def _math_kernel(x_ptr, o_ptr, n, OP: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    x = tl.load(x_ptr + i, mask=m)
    if OP == "exp":
        r = tl.exp(x)
    elif OP == "exp2":
        r = tl.exp2(x)
    elif OP == "log":
        r = tl.log(x)
    elif OP == "log2":
        r = tl.log2(x)
    elif OP == "sqrt":
        r = tl.sqrt(x)
    elif OP == "rsqrt":
        r = tl.rsqrt(x)
    elif OP == "sin":
        r = tl.sin(x)
    elif OP == "cos":
        r = tl.cos(x)
    elif OP == "abs":
        r = tl.abs(x)
    elif OP == "floor":
        r = tl.floor(x)
    elif OP == "ceil":
        r = tl.ceil(x)
    elif OP == "sigmoid":
        r = tl.sigmoid(x)
    elif OP == "erf":
        r = tl.math.erf(x)
    elif OP == "log1p":
        r = libdevice.log1p(x)
    elif OP == "expm1":
        r = libdevice.expm1(x)
    else:
        r = tl.fma(x, x, x)
    tl.store(o_ptr + i, r, mask=m)


_MATH_REF = {
    "exp": torch.exp, "exp2": torch.exp2, "log": torch.log, "log2": torch.log2, "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt, "sin": torch.sin, "cos": torch.cos, "abs": torch.abs, "floor": torch.floor,
    "ceil": torch.ceil, "sigmoid": torch.sigmoid, "erf": torch.erf, "log1p": torch.log1p, "expm1": torch.expm1,
    "fma": lambda x: x * x + x
}
_POSITIVE_MATH = {"log", "log2", "sqrt", "rsqrt"}


def _math_runner(op: str, dtype: str, device: str):
    def run(_):
        x = _inputs(dtype, device, 3, positive=op in _POSITIVE_MATH)
        out = torch.empty_like(x)
        _math_kernel[(triton.cdiv(N, 128), )](x, out, N, OP=op, BLOCK=128)
        ref = _MATH_REF[op](x.double()).to(x.dtype)
        tol = {"float32": 4e-6, "float16": 1e-3, "bfloat16": 8e-3}.get(dtype, 0)
        if op in ("abs", "floor", "ceil"):
            tol = 0
        torch.testing.assert_close(out.cpu(), ref.cpu(), rtol=tol, atol=tol, equal_nan=True)

    return run


# -- reductions and scans --------------------------------------------------------------------------


@triton.jit
def _reduce_kernel(x_ptr, o_ptr, n, OP: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    m = i < n
    x = tl.load(x_ptr + i, mask=m, other=0)
    if OP == "sum":
        tl.store(o_ptr, tl.sum(x, axis=0))
    elif OP == "max":
        tl.store(o_ptr, tl.max(tl.where(m, x, tl.full(x.shape, 0, x.dtype)), axis=0))
    elif OP == "min":
        tl.store(o_ptr, tl.min(tl.where(m, x, tl.full(x.shape, 0, x.dtype)), axis=0))
    elif OP == "argmax":
        tl.store(o_ptr, tl.argmax(tl.where(m, x, tl.full(x.shape, 0, x.dtype)), axis=0).to(x.dtype))
    elif OP == "xor_sum":
        tl.store(o_ptr, tl.xor_sum(x, axis=0))
    elif OP == "cumsum":
        tl.store(o_ptr + i, tl.cumsum(x, axis=0), mask=m)
    else:
        tl.store(o_ptr + i, tl.cumprod(x, axis=0), mask=m)


def _reduce_runner(op: str, dtype: str, device: str):
    def run(_):
        n = 100
        x = _inputs(dtype, device, 4)[:n].clone()
        if dtype.startswith("float") or dtype == "bfloat16":
            x = torch.linspace(-2, 3, n, device=device).to(x.dtype)  # finite, so sums are comparable
        if op == "cumprod":
            if x.is_floating_point():
                x = (1 + torch.linspace(-0.05, 0.05, n, device=device)).to(x.dtype)
            else:
                x = torch.where(x.to(torch.int64) % 2 == 0, 1, 3 if dtype.startswith("uint") else -1).to(x.dtype)
        out = torch.zeros(n, dtype=x.dtype, device=device)
        _reduce_kernel[(1, )](x, out, n, OP=op, BLOCK=128)
        xf = x.double() if x.is_floating_point() else x.to(torch.int64)  # int results wrap on the cast back
        refs = {
            "sum": lambda: xf.sum().reshape(1), "max": lambda: torch.clamp(xf, min=0).max().reshape(1),
            "min": lambda: torch.clamp(xf, max=0).min().reshape(1), "argmax": lambda: torch.argmax(
                torch.clamp(xf, min=0)).reshape(1),
            "xor_sum": lambda: torch.tensor([functools.reduce(operator.xor, x.to(torch.int64).tolist(), 0)]),
            "cumsum": lambda: torch.cumsum(xf, 0), "cumprod": lambda: torch.cumprod(xf, 0)
        }
        ref = refs[op]().to(x.dtype)
        got = out[:ref.numel()]
        tol = 0 if not x.is_floating_point() else {"float64": 1e-12, "float32": 1e-5, "float16": 2e-2,
                                                   "bfloat16": 1e-1}[dtype]
        torch.testing.assert_close(got.cpu().double(), ref.cpu().double(), rtol=tol, atol=tol * 10)

    return run


# -- atomics ---------------------------------------------------------------------------------------


@triton.jit
def _atomic_kernel(t_ptr, v_ptr, old_ptr, n, OP: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    v = tl.load(v_ptr + i, mask=m)
    p = t_ptr + (i % 4)
    if OP == "add":
        old = tl.atomic_add(p, v, mask=m)
    elif OP == "max":
        old = tl.atomic_max(p, v, mask=m)
    elif OP == "min":
        old = tl.atomic_min(p, v, mask=m)
    elif OP == "and":
        old = tl.atomic_and(p, v, mask=m)
    elif OP == "or":
        old = tl.atomic_or(p, v, mask=m)
    elif OP == "xor":
        old = tl.atomic_xor(p, v, mask=m)
    elif OP == "cas":  # the first update of a slot wins (its start value is 0); the others read the winner's
        # (atomic_cas has no mask: lanes past n swap 0 for 0, which changes nothing)
        old = tl.atomic_cas(p, tl.zeros_like(v), tl.where(m, v, tl.zeros_like(v)))
    else:
        old = tl.atomic_xchg(p, v, mask=m)
    tl.store(old_ptr + i, old, mask=m)


def _atomic_runner(op: str, dtype: str, device: str):
    def run(_):
        v = _inputs(dtype, device, 5, positive=op in ("and", "or", "xor"))
        if v.is_floating_point():
            v = torch.linspace(-3, 4, N, device=device).to(v.dtype)
        t = torch.zeros(4, dtype=v.dtype, device=device)
        if op in ("and", "min"):
            t.fill_(-1 if not dtype.startswith("uint") else torch.iinfo(v.dtype).max)
        t0 = t.clone()
        old = torch.empty_like(v)
        _atomic_kernel[(triton.cdiv(N, 64), )](t, v, old, N, OP=op, BLOCK=64)
        bits = torch.iinfo(v.dtype).bits if not v.is_floating_point() else 0
        wrap = (lambda x: x % 2**bits if dtype.startswith("uint") else (x + 2**(bits - 1)) % 2**bits - 2**(bits - 1))
        update = {"add": (lambda o, x: wrap(o + x)) if bits else (lambda o, x: o + x), "max": max, "min": min,
                  "and": lambda a, b: a & b, "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b,
                  "xchg": lambda o, x: x, "cas": lambda o, x: x if o == 0 else o}[op]
        for slot in range(4):
            vals, olds = v[slot::4].cpu(), old[slot::4].cpu().tolist()
            start, final = t0[slot].item(), t[slot].item()
            # every f(old, v) is exact on the host for integers, exchanges and float64 (software float64 rounds
            # as the host's doubles do); float32/float16 sums round in their own type
            if not v.is_floating_point() or op in ("xchg", "cas") or dtype == "float64":
                assert updates_in_one_order(start, olds, vals.tolist(), final, update), (slot, "old values")
            if op == "add" and v.is_floating_point():
                ref = t0[slot].cpu().double() + vals.double().sum()
                # the additions happen in any order, each rounded to the element type: at most half an ulp of
                # a partial sum (bounded by sum |v|) per addition
                eps = torch.finfo(v.dtype).eps / 2
                bound = len(vals) * eps * (vals.double().abs().sum() + t0[slot].cpu().double().abs())
                assert abs(t[slot].cpu().double() - ref) <= bound, (slot, t[slot].item(), ref.item())
            elif op == "add":  # integer sums wrap
                assert final == wrap(start + sum(vals.tolist()))
            elif op in ("xchg", "cas"):
                assert final in set(vals.tolist())
            else:
                acc = start
                for x in vals.tolist():
                    acc = update(acc, x)
                assert final == acc, (slot, final, acc)

    return run


# -- the matrix ------------------------------------------------------------------------------------


_MLIR = {"int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "i8", "uint32": "i32",
         "float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64"}

# Hand-written TTGIR (compiled from a .ttgir file, as upstream's layout tests do): a buffer with no
# `allocation.offset`, which only the backend itself can place, written from one layout and read into another.
_LOCAL_ROUND_TRIP = """
#a = #ttg.blocked<{{sizePerThread = [1, 4], threadsPerWarp = [4, 8], warpsPerCTA = [4, 1], order = [1, 0]}}>
#b = #ttg.blocked<{{sizePerThread = [2, 1], threadsPerWarp = [16, 2], warpsPerCTA = [1, 4], order = [0, 1]}}>
#shared = #ttg.swizzled_shared<{{vec = 1, perPhase = 1, maxPhase = 1, order = [1, 0]}}>
#smem = #ttg.shared_memory
module attributes {{"ttg.num-ctas" = 1 : i32, "ttg.num-warps" = 4 : i32, "ttg.threads-per-warp" = 32 : i32}} {{
  tt.func public @local_round_trip(%x: !tt.ptr<{t}>, %o: !tt.ptr<{t}>) {{
    %c32a = arith.constant dense<32> : tensor<32x1xi32, #a>
    %c32b = arith.constant dense<32> : tensor<32x1xi32, #b>
    %ra = tt.make_range {{end = 32 : i32, start = 0 : i32}} : tensor<32xi32, #ttg.slice<{{dim = 1, parent = #a}}>>
    %ca = tt.make_range {{end = 32 : i32, start = 0 : i32}} : tensor<32xi32, #ttg.slice<{{dim = 0, parent = #a}}>>
    %ra2 = tt.expand_dims %ra {{axis = 1 : i32}} : tensor<32xi32, #ttg.slice<{{dim = 1, parent = #a}}>> -> tensor<32x1xi32, #a>
    %ras = arith.muli %ra2, %c32a : tensor<32x1xi32, #a>
    %ca2 = tt.expand_dims %ca {{axis = 0 : i32}} : tensor<32xi32, #ttg.slice<{{dim = 0, parent = #a}}>> -> tensor<1x32xi32, #a>
    %rab = tt.broadcast %ras : tensor<32x1xi32, #a> -> tensor<32x32xi32, #a>
    %cab = tt.broadcast %ca2 : tensor<1x32xi32, #a> -> tensor<32x32xi32, #a>
    %offa = arith.addi %rab, %cab : tensor<32x32xi32, #a>
    %xs = tt.splat %x : !tt.ptr<{t}> -> tensor<32x32x!tt.ptr<{t}>, #a>
    %xp = tt.addptr %xs, %offa : tensor<32x32x!tt.ptr<{t}>, #a>, tensor<32x32xi32, #a>
    %v = tt.load %xp : tensor<32x32x!tt.ptr<{t}>, #a>
    %buf = ttg.local_alloc %v : (tensor<32x32x{t}, #a>) -> !ttg.memdesc<32x32x{t}, #shared, #smem>
    %w = ttg.local_load %buf : !ttg.memdesc<32x32x{t}, #shared, #smem> -> tensor<32x32x{t}, #b>
    %rb = tt.make_range {{end = 32 : i32, start = 0 : i32}} : tensor<32xi32, #ttg.slice<{{dim = 1, parent = #b}}>>
    %cb = tt.make_range {{end = 32 : i32, start = 0 : i32}} : tensor<32xi32, #ttg.slice<{{dim = 0, parent = #b}}>>
    %rb2 = tt.expand_dims %rb {{axis = 1 : i32}} : tensor<32xi32, #ttg.slice<{{dim = 1, parent = #b}}>> -> tensor<32x1xi32, #b>
    %rbs = arith.muli %rb2, %c32b : tensor<32x1xi32, #b>
    %cb2 = tt.expand_dims %cb {{axis = 0 : i32}} : tensor<32xi32, #ttg.slice<{{dim = 0, parent = #b}}>> -> tensor<1x32xi32, #b>
    %rbb = tt.broadcast %rbs : tensor<32x1xi32, #b> -> tensor<32x32xi32, #b>
    %cbb = tt.broadcast %cb2 : tensor<1x32xi32, #b> -> tensor<32x32xi32, #b>
    %offb = arith.addi %rbb, %cbb : tensor<32x32xi32, #b>
    %os = tt.splat %o : !tt.ptr<{t}> -> tensor<32x32x!tt.ptr<{t}>, #b>
    %op = tt.addptr %os, %offb : tensor<32x32x!tt.ptr<{t}>, #b>, tensor<32x32xi32, #b>
    tt.store %op, %w : tensor<32x32x!tt.ptr<{t}>, #b>
    tt.return
  }}
}}
"""


def _compile_ttgir(text: str, name: str):
    """Hand-written TTGIR compiled from a `.ttgir` file, as upstream's layout tests compile theirs."""
    import os
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, f"{name}.ttgir")
        with open(path, "w") as f:
            f.write(text)
        return triton.compile(path)


def _local_memory_runner(dtype: str, device: str):
    def run(dt):
        kernel = _compile_ttgir(_LOCAL_ROUND_TRIP.format(t=_MLIR[dt]), "local_round_trip")
        g = torch.Generator().manual_seed(5)
        t = getattr(torch, dt)
        if dt.startswith("float") or dt == "bfloat16":
            x = (torch.randn(32, 32, generator=g) * 100).to(t)
        else:
            info = torch.iinfo(t)
            x = torch.randint(max(info.min, -2**31), min(info.max, 2**31 - 1), (32, 32), generator=g).to(t)
        x = x.to(device)
        out = torch.zeros_like(x)
        kernel[(1, 1, 1)](x, out)
        if not torch.equal(out.cpu().view(torch.uint8), x.cpu().view(torch.uint8)):
            raise AssertionError(f"local_alloc/local_load round trip of {dt} changed values")
    return run


# -- fp8 conversions ----------------------------------------------------------------------------------


@triton.jit
def _fp8_round_trip_kernel(x_ptr, codes_ptr, back_ptr, n, FMT: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    if FMT == "float8e5":
        y = tl.load(x_ptr + i, mask=m).to(tl.float8e5)
    elif FMT == "float8e4nv":
        y = tl.load(x_ptr + i, mask=m).to(tl.float8e4nv)
    else:
        y = tl.load(x_ptr + i, mask=m).to(tl.float8e4b15)
    tl.store(codes_ptr + i, y.to(tl.uint8, bitcast=True), mask=m)
    tl.store(back_ptr + i, y.to(tl.float32), mask=m)


def _e4b15_reference(x: torch.Tensor):
    """(codes, values) of float32 `x` in fp8e4b15 as Triton's NVIDIA conversions make them: the float16
    magnitude rounded toward zero, clamped to 1.75, rounded half away from zero to 3 mantissa bits."""
    mags = torch.tensor([(m / 8 * 2.0**-14 if c >> 3 == 0 else (1 + m / 8) * 2.0**((c >> 3) - 15))
                         for c in range(128) for m in [c & 7]], dtype=torch.float64)
    a = torch.where(torch.isnan(x), torch.full_like(x, 1.75), x.abs().clamp(max=1.75)).double()
    h = a.half().double()
    h = torch.where(h > a, (a.half().view(torch.int16) - 1).view(torch.float16).double(), h)  # toward zero
    dist = (h[:, None] - mags[None, :]).abs()
    best = torch.where(dist == dist.min(1, keepdim=True).values, torch.arange(128), -1).max(1).values  # ties up
    codes = best | torch.where(x.signbit(), 0x80, 0)
    return codes.to(torch.uint8), (mags[best] * torch.where(x.signbit(), -1.0, 1.0)).float()


def _fp8_runner(fmt: str, device: str):
    def run(_):
        g = torch.Generator().manual_seed(11)
        x = torch.randn(N, generator=g) * (0.6 if fmt == "float8e4b15" else 30)
        x[:6] = torch.tensor([0.0, -0.0, float("nan"), float("inf"), -1e6, 1e-6])
        codes = torch.empty(N, dtype=torch.uint8, device=device)
        back = torch.empty(N, device=device)
        _fp8_round_trip_kernel[(triton.cdiv(N, 128), )](x.to(device), codes, back, N, FMT=fmt, BLOCK=128)
        if fmt == "float8e4b15":
            ref_codes, ref = _e4b15_reference(x)
            if not torch.equal(codes.cpu(), ref_codes):
                raise AssertionError("fp8e4b15 codes differ from NVIDIA's conversion")
        else:
            t, top = {"float8e5": (torch.float8_e5m2, 57344.0), "float8e4nv": (torch.float8_e4m3fn, 448.0)}[fmt]
            ref = torch.where(torch.isnan(x), x, x.clamp(-top, top)).to(t).float()
        torch.testing.assert_close(back.cpu(), ref, rtol=0, atol=0, equal_nan=True)

    return run


# -- other vendors' layouts in hand-written TTGIR ---------------------------------------------------------

_LAYOUT_SUM = """
#blk = #ttg.blocked<{{sizePerThread = [1, 4], threadsPerWarp = [4, 8], warpsPerCTA = [4, 1], order = [1, 0]}}>
#dst = {layout}
module attributes {{"ttg.num-ctas" = 1 : i32, "ttg.num-warps" = 4 : i32, "ttg.threads-per-warp" = 32 : i32}} {{
  tt.func public @layout_sum(%x: !tt.ptr<i32>, %o: !tt.ptr<i32>) {{
    %c64 = arith.constant dense<64> : tensor<64x1xi32, #blk>
    %r = tt.make_range {{end = 64 : i32, start = 0 : i32}} : tensor<64xi32, #ttg.slice<{{dim = 1, parent = #blk}}>>
    %r2 = tt.expand_dims %r {{axis = 1 : i32}} : tensor<64xi32, #ttg.slice<{{dim = 1, parent = #blk}}>> -> tensor<64x1xi32, #blk>
    %rs = arith.muli %r2, %c64 : tensor<64x1xi32, #blk>
    %rb = tt.broadcast %rs : tensor<64x1xi32, #blk> -> tensor<64x64xi32, #blk>
    %cc = tt.make_range {{end = 64 : i32, start = 0 : i32}} : tensor<64xi32, #ttg.slice<{{dim = 0, parent = #blk}}>>
    %cc2 = tt.expand_dims %cc {{axis = 0 : i32}} : tensor<64xi32, #ttg.slice<{{dim = 0, parent = #blk}}>> -> tensor<1x64xi32, #blk>
    %cb = tt.broadcast %cc2 : tensor<1x64xi32, #blk> -> tensor<64x64xi32, #blk>
    %off = arith.addi %rb, %cb : tensor<64x64xi32, #blk>
    %xs = tt.splat %x : !tt.ptr<i32> -> tensor<64x64x!tt.ptr<i32>, #blk>
    %xp = tt.addptr %xs, %off : tensor<64x64x!tt.ptr<i32>, #blk>, tensor<64x64xi32, #blk>
    %v = tt.load %xp : tensor<64x64x!tt.ptr<i32>, #blk>
    %vd = ttg.convert_layout %v : tensor<64x64xi32, #blk> -> tensor<64x64xi32, #dst>
    %s = "tt.reduce"(%vd) <{{axis = 1 : i32}}> ({{
    ^bb0(%a: i32, %b: i32):
      %t = arith.addi %a, %b : i32
      tt.reduce.return %t : i32
    }}) : (tensor<64x64xi32, #dst>) -> tensor<64xi32, #ttg.slice<{{dim = 1, parent = #dst}}>>
    %sb = ttg.convert_layout %s : tensor<64xi32, #ttg.slice<{{dim = 1, parent = #dst}}>> -> tensor<64xi32, #ttg.slice<{{dim = 1, parent = #blk}}>>
    %os = tt.splat %o : !tt.ptr<i32> -> tensor<64x!tt.ptr<i32>, #ttg.slice<{{dim = 1, parent = #blk}}>>
    %op = tt.addptr %os, %r : tensor<64x!tt.ptr<i32>, #ttg.slice<{{dim = 1, parent = #blk}}>>, tensor<64xi32, #ttg.slice<{{dim = 1, parent = #blk}}>>
    tt.store %op, %sb : tensor<64x!tt.ptr<i32>, #ttg.slice<{{dim = 1, parent = #blk}}>>
    tt.return
  }}
}}
"""
_MMA_V2 = "#ttg.nvidia_mma<{versionMajor = 2, versionMinor = 0, warpsPerCTA = [2, 2], instrShape = [16, 8]}>"
VENDOR_LAYOUTS = {
    "nvidia_mma v2": _MMA_V2,
    "nvidia_mma v3": "#ttg.nvidia_mma<{versionMajor = 3, versionMinor = 0, warpsPerCTA = [4, 1], instrShape = [16, 64, 16]}>",
    "dot_op of nvidia_mma": "#ttg.dot_op<{opIdx = 1, parent = " + _MMA_V2 + ", kWidth = 2}>",
    "amd_wmma": "#ttg.amd_wmma<{version = 2, isTranspose = true, ctaLayout = {warp = [[1, 0], [0, 1]]}}>",
}


def _vendor_layout_runner(layout: str, device: str):
    def run(_):
        kernel = _compile_ttgir(_LAYOUT_SUM.format(layout=VENDOR_LAYOUTS[layout]), "layout_sum")
        x = (torch.arange(64 * 64, dtype=torch.int32).reshape(64, 64) * 37) % 101 - 50
        out = torch.full((64, ), -1, dtype=torch.int32, device=device)
        kernel[(1, 1, 1)](x.to(device), out)
        if not torch.equal(out.cpu(), x.sum(1, dtype=torch.int32)):
            raise AssertionError(f"row sums on {layout} differ")

    return run


# -- kernel arguments -------------------------------------------------------------------------------------


@triton.jit
def _descriptor_kernel(pair, src_desc, dst_desc, scale, BM: tl.constexpr, BN: tl.constexpr):
    m = tl.program_id(0) * BM
    tile = src_desc.load([m, 0]) * scale + tl.load(pair[0]) * pair[1]
    dst_desc.store([m, 0], tile)


@triton.jit
def _three_descriptor_kernel(a_desc, b_desc, c_desc, out_desc, BM: tl.constexpr, BN: tl.constexpr):
    m = tl.program_id(0) * BM
    out_desc.store([m, 0], a_desc.load([m, 0]) + b_desc.load([m, 0]) * c_desc.load([m, 0]))


def _arguments_runner(case: str, device: str):
    def run(_):
        from triton.tools.tensor_descriptor import TensorDescriptor
        g = torch.Generator().manual_seed(13)
        a, b, c = (torch.randn(48, 32, generator=g).to(device) for _ in range(3))
        out = torch.zeros(48, 32, device=device)
        if case == "tuple + host TensorDescriptor":
            one = torch.tensor([0.25], device=device)
            _descriptor_kernel[(3, )]((one, 2.0), TensorDescriptor.from_tensor(a, [16, 32]),
                                      TensorDescriptor.from_tensor(out, [16, 32]), 3.0, BM=16, BN=32)
            ref = a * 3 + 0.5
        else:  # four descriptors: 44 kernel arguments, 40 scalars packed into one buffer
            descs = [TensorDescriptor.from_tensor(t, [16, 32]) for t in (a, b, c, out)]
            _three_descriptor_kernel[(3, )](*descs, BM=16, BN=32)
            ref = a + b * c
        torch.testing.assert_close(out.cpu(), ref.cpu(), rtol=1e-6, atol=1e-6)

    return run


# -- tensors larger than threadgroup memory ---------------------------------------------------------------


@triton.jit
def _big_move_kernel(x_ptr, i_ptr, o_ptr, M: tl.constexpr, N: tl.constexpr, GATHER: tl.constexpr):
    offs = tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :]
    x = tl.load(x_ptr + offs)
    if GATHER:
        tl.store(o_ptr + offs, tl.gather(x, tl.load(i_ptr + offs), 0))
    else:
        tl.store(o_ptr + tl.arange(0, N)[:, None] * M + tl.arange(0, M)[None, :], tl.permute(x, (1, 0)))


def _rounds_runner(op: str, dtype: str, device: str):
    def run(_):
        g = torch.Generator().manual_seed(17)
        M, N = (256, 64) if dtype == "int64" else (128, 128)  # 128 KB and 64 KB
        x = torch.randint(-1000, 1000, (M, N), generator=g).to(getattr(torch, dtype)).to(device)
        idx = torch.randint(0, M, (M, N), generator=g).to(device)
        out = torch.zeros(N * M, dtype=x.dtype, device=device)
        _big_move_kernel[(1, )](x, idx, out, M, N, GATHER=op == "gather")
        ref = torch.gather(x, 0, idx) if op == "gather" else x.T
        if not torch.equal(out.cpu().view(ref.shape), ref.cpu()):
            raise AssertionError(f"{op} of a {M}x{N} {dtype} tensor differs")

    return run


def all_cells(device: str):
    cells = []
    for op in _BINARY_REF:
        for dt in ALL_DTYPES:
            if op in _FLOAT_ONLY and dt in INT_DTYPES or op in _INT_ONLY and dt in FLOAT_DTYPES:
                continue
            cells.append(Cell("arithmetic", op, dt, _binary_runner(op, dt, device)))
    for op in _MATH_REF:
        for dt in ["float32"]:
            cells.append(Cell("math", op, dt, _math_runner(op, dt, device)))
    for op in ("sum", "max", "min", "argmax", "xor_sum", "cumsum", "cumprod"):
        for dt in ALL_DTYPES:
            if op == "xor_sum" and dt in FLOAT_DTYPES:
                continue
            cells.append(Cell("reduce/scan", op, dt, _reduce_runner(op, dt, device)))
    for op in ("add", "max", "min", "and", "or", "xor", "xchg", "cas"):
        for dt in ("int32", "uint32", "int64", "float32", "float64", "float16"):
            if op in ("and", "or", "xor") and dt in ("float32", "float64", "float16"):
                continue
            refused, by = None, "apple"
            if dt == "float16" and op not in ("add", "cas"):  # Triton's frontend allows only atomic_add on fp16
                refused, by = rf"atomic_{op} does not support fp16", "triton"
            cells.append(Cell("atomics", op, dt, _atomic_runner(op, dt, device), refused, by))
    for dt in ALL_DTYPES:
        cells.append(Cell("threadgroup memory", "local_alloc + local_load (hand-written TTGIR, unplaced)", dt,
                          _local_memory_runner(dt, device)))
    for op in ("permute", "gather"):
        for dt in ("float32", "int64"):
            cells.append(Cell("threadgroup memory", f"{op} of a 64-128 KB tensor (in rounds)", dt,
                              _rounds_runner(op, dt, device)))
    for fmt in ("float8e5", "float8e4nv", "float8e4b15"):
        cells.append(Cell("fp8", "float32 -> fp8 -> float32", fmt, _fp8_runner(fmt, device)))
    for layout in VENDOR_LAYOUTS:
        cells.append(Cell("layouts (hand-written TTGIR)", f"convert + row sum on {layout}", "int32",
                          _vendor_layout_runner(layout, device)))
    for case in ("tuple + host TensorDescriptor", "four host TensorDescriptors (44 arguments)"):
        cells.append(Cell("kernel arguments", case, "float32", _arguments_runner(case, device)))
    return cells

"""Code-quality report for tl.dot kernels on the apple backend (simdgroup_matrix path).

For the tutorial-style GEMM and flash-attention kernels of `bench/kernels.py`, this script compiles each
kernel for the active driver's target (`cpu`/apple7 on the emulator) without launching it, with the argument
specialisation Triton's JIT would derive from the example arguments (ints equal to 1 become constexprs,
multiples of 16 and 16-byte aligned tensors get tt.divisibility = 16), and reads the TTGIR, the MSL and the metadata:

  MMA share   dot FLOPs (2*M*N*K per `tt.dot` op in the TTGIR, per execution: loop trip counts are not
              weighted) whose lowering in the MSL contains `simdgroup_multiply_accumulate`. Each op of the
              MSL is preceded by a `// <op> <file>:<line>` comment; a dot on the FMA path has no
              simdgroup_multiply_accumulate between its comment and the next op comment. TTGIR dots and
              MSL dot sections are matched in order, and their source lines are checked to agree.
  smem        threadgroup memory bytes (`kernel.metadata.shared`; Metal allows 32 KB).
  loads/stores  for each `tt.load` / `tt.store` section of the MSL: its widest global access, vector
              (`*(device const half4*)p`) or scalar (`*p[r]`). Reported: the widest access of the kernel
              and how many of the load/store ops are scalar only.
  smem converts  `ttg.convert_layout` ops whose lowering goes through threadgroup memory (barrier, write,
              barrier, read), inside an scf.for body / in all: e.g. an accumulator leaving the MMA layout.

Then every kernel is launched once through the JIT on the emulator (small shapes with masked tails, all
multiples of 16 like typical problem sizes) against torch in float64 (error: max |out - ref| / (1 + |ref|)),
and the JIT's compilation is checked to have the cache key of the one analysed (same source, specialisation
and options), i.e. the analysed MSL is what ran. Exit status 1 if any check fails.

    python -m bench.mma_report [--no-run] [--dump DIR]        (from the repository root)
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

os.environ.setdefault("TRITON_APPLE_DEVICE", "emulator")

import torch  # noqa: E402
import triton  # noqa: E402

from . import kernels as kn  # noqa: E402
from .cases import compile_like_jit  # noqa: E402
from .msl_stats import Access, global_accesses, msl_sections, smem_converts  # noqa: E402
from .report_table import table  # noqa: E402


# ------------------------------------------------------------------------------------------------ TTGIR

_LOC_DEF = re.compile(r'^(#loc\d*) = loc\((.*)\)\s*$', re.M)
_FILE_LOC = re.compile(r'"([^"]+)":(\d+):\d+')
_LOC_REF = re.compile(r'(#loc\d*)')
_DOT = re.compile(r'= tt\.dot (.*)$', re.M)
_TENSOR = re.compile(r'tensor<([0-9x]+)x([a-z0-9]+)\b')


def _resolve_locs(ttgir: str) -> Dict[str, Tuple[str, int]]:
    """#locN alias -> (file basename, line), following name/callsite/fused wrappers to the first file loc."""
    raw = dict(_LOC_DEF.findall(ttgir))
    out: Dict[str, Tuple[str, int]] = {}

    def resolve(alias: str, depth: int = 0):
        if alias in out:
            return out[alias]
        body = raw.get(alias)
        if body is None or depth > 50:
            return None
        m = _FILE_LOC.search(body)
        res = (os.path.basename(m.group(1)), int(m.group(2))) if m else None
        if res is None:
            for ref in _LOC_REF.findall(body):
                res = resolve(ref, depth + 1)
                if res:
                    break
        out[alias] = res
        return res

    for a in raw:
        resolve(a)
    return out


@dataclass
class Dot:
    m: int
    n: int
    k: int
    batch: int
    a_type: str
    acc_type: str
    where: Optional[Tuple[str, int]]
    a_layout: str = ""
    b_layout: str = ""
    on_mma: bool = False
    msl_where: Optional[Tuple[str, int]] = None

    @property
    def flops(self) -> int:
        return 2 * self.batch * self.m * self.n * self.k


def ttgir_dots(ttgir: str) -> List[Dot]:
    locs = _resolve_locs(ttgir)
    dots = []
    for m in _DOT.finditer(ttgir):
        text = m.group(1)
        tensors = _TENSOR.findall(text)
        (a_shape, a_ty), (b_shape, _), (c_shape, c_ty) = tensors[0], tensors[1], tensors[-1]
        a_dims = [int(x) for x in a_shape.split("x")]
        c_dims = [int(x) for x in c_shape.split("x")]
        loc = re.search(r'loc\((#loc\d*)\)\s*$', text)
        layouts = re.findall(r'#ttg\.dot_op<\{opIdx = (\d), parent = (#[\w]+)(?:, kWidth = \d+)?\}>', text)
        dot = Dot(m=c_dims[-2], n=c_dims[-1], k=a_dims[-1], batch=c_dims[0] if len(c_dims) == 3 else 1,
                  a_type=a_ty, acc_type=c_ty, where=locs.get(loc.group(1)) if loc else None)
        if len(layouts) >= 2:
            dot.a_layout, dot.b_layout = (f"dot_op<{i}, {p}>" for i, p in layouts[:2])
        dots.append(dot)
    return dots


# ------------------------------------------------------------------------------------------------ report

@dataclass
class Case:
    name: str
    fn: object
    args: Dict[str, object]
    constexprs: Dict[str, object]
    grid: Tuple[int, ...]
    num_warps: int
    reference: object  # () -> expected output tensor
    out: str  # name of the output argument
    tol: float
    compile_error: Optional[str] = None  # expected compile error (a substring of its first line)


def _matmul_case(name, dtype, out_dtype, acc_f16=False, M=96, N=80, K=48, BM=64, BN=64, BK=32, tol=2e-2,
                 compile_error=None):
    torch.manual_seed(0)
    a = torch.randn(M, K).to(dtype)
    b = torch.randn(K, N).to(dtype)
    c = torch.empty(M, N, dtype=out_dtype)
    args = dict(a_ptr=a, b_ptr=b, c_ptr=c, M=M, N=N, K=K, stride_am=a.stride(0), stride_ak=a.stride(1),
                stride_bk=b.stride(0), stride_bn=b.stride(1), stride_cm=c.stride(0), stride_cn=c.stride(1))
    consts = dict(BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK, GROUP_M=8, ACC_F16=acc_f16)
    grid = (triton.cdiv(M, BM) * triton.cdiv(N, BN), )
    return Case(name, kn.matmul_kernel, args, consts, grid, 4, lambda: a.double() @ b.double(), "c_ptr", tol,
                compile_error)


def _attention_case(name, causal, H=2, N_CTX=80, D=64, BM=32, BN=32):
    torch.manual_seed(1)
    q, k, v = (torch.randn(H, N_CTX, D).half() for _ in range(3))
    o = torch.empty_like(q)
    sm_scale = D ** -0.5
    args = dict(Q=q, K=k, V=v, Out=o, sm_scale=sm_scale, stride_qh=q.stride(0), stride_qm=q.stride(1),
                stride_kh=k.stride(0), stride_kn=k.stride(1), stride_vh=v.stride(0), stride_vn=v.stride(1),
                stride_oh=o.stride(0), stride_om=o.stride(1), N_CTX=N_CTX)
    consts = dict(HEAD_DIM=D, BLOCK_M=BM, BLOCK_N=BN, CAUSAL=causal)

    def ref():
        return torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(),
                                                                is_causal=causal, scale=sm_scale)

    return Case(name, kn.attn_fwd_kernel, args, consts, (triton.cdiv(N_CTX, BM), H), 4, ref, "Out", 2e-2)


def cases() -> List[Case]:
    return [
        _matmul_case("matmul f16 (f32 acc) -> f16", torch.float16, torch.float16),
        _matmul_case("matmul bf16 (f32 acc) -> bf16", torch.bfloat16, torch.bfloat16, tol=8e-2),
        _matmul_case("matmul f32 -> f32", torch.float32, torch.float32, tol=1e-4),
        _matmul_case("matmul f16 (f16 acc) -> f16", torch.float16, torch.float16, acc_f16=True, tol=5e-2),
        _attention_case("flash-attn fwd f16, non-causal", False),
        _attention_case("flash-attn fwd f16, causal", True),
        # the tile of Triton's matmul tutorial configs (128x64x32, 4 warps): fits Metal's 32 KB because the
        # epilogue's conversion reuses the threadgroup memory of the dead A/B tiles
        _matmul_case("matmul f16 128x64x32 tile", torch.float16, torch.float16, BM=128, BN=64, BK=32),
        # the attention tutorial's test tile (BLOCK_M 128, BLOCK_N 64, HEAD_DIM 64, 4 warps): upstream allocates
        # 40 KB of operand buffers; Q and P stay in registers, K and V share what is left
        _attention_case("flash-attn fwd f16 128x64, D=64", False, N_CTX=192, BM=128, BN=64),
        _attention_case("flash-attn fwd f16 128x64, D=64, causal", True, N_CTX=192, BM=128, BN=64),
    ]


def run_on_emulator(case: Case):
    """Launches the kernel once through the JIT; returns (max |err| / (1 + |ref|), the JIT's CompiledKernel)."""
    names = case.fn.arg_names
    call = [case.args[n] if n in case.args else case.constexprs[n] for n in names]
    compiled = case.fn[case.grid](*call, num_warps=case.num_warps)
    out = case.args[case.out].double()
    ref = case.reference()
    err = ((out - ref).abs() / (1 + ref.abs())).max().item()
    return err, compiled


def analyse(case: Case, kernel) -> dict:
    ttgir = kernel.asm["ttgir"]
    msl = kernel.asm["msl"]
    msl = msl if isinstance(msl, str) else msl.decode()  # bytes before asm["msl"] became text
    dots = ttgir_dots(ttgir)
    dot_sections = [(sec.where, sec.body) for sec in msl_sections(msl) if sec.op == "tt.dot"]
    if len(dot_sections) != len(dots):
        raise RuntimeError(f"{case.name}: {len(dots)} tt.dot in the TTGIR but {len(dot_sections)} in the MSL")
    for dot, (w, body) in zip(dots, dot_sections):
        dot.msl_where = w
        if dot.where is not None and dot.where != w:
            raise RuntimeError(f"{case.name}: TTGIR dot at {dot.where} matched MSL dot at {w}")
        dot.on_mma = any("simdgroup_multiply_accumulate" in line for line in body)
    total = sum(d.flops for d in dots)
    mma = sum(d.flops for d in dots if d.on_mma)
    acc = global_accesses(msl)
    loads = [a for a in acc if a.op == "tt.load"]
    stores = [a for a in acc if a.op == "tt.store"]
    return dict(dots=dots, share=mma / total if total else 0.0, smem=kernel.metadata.shared, loads=loads,
                stores=stores, converts=smem_converts(msl), msl=msl, ttgir=ttgir)


def _widest(accs: List[Access]) -> str:
    if not accs:
        return "-"
    w = max(a.width for a in accs)
    n_scalar = sum(1 for a in accs if not a.vector)
    return f"{w:>2} B, {n_scalar}/{len(accs)} scalar"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-run", action="store_true", help="only compile and analyse; do not launch")
    ap.add_argument("--dump", metavar="DIR", help="write each kernel's .ttgir and .msl to DIR")
    opts = ap.parse_args(argv)
    target = triton.runtime.driver.active.get_current_target()
    print(f"triton {triton.__version__}, target {target.backend}/{target.arch}, "
          f"device {os.environ.get('TRITON_APPLE_DEVICE')}\n")
    rows, details, failures = [], [], 0
    for case in cases():
        try:
            kernel = compile_like_jit(case.fn, case.args, case.constexprs, case.num_warps)
        except Exception as e:  # noqa: BLE001 (reported in the table)
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
            ok = case.compile_error is not None and case.compile_error in msg
            failures += not ok
            rows.append((case.name, "-", "-", "-", "-", "-", "-", f"{'expected: ' if ok else ''}compile error"))
            details.append(f"  {case.name}: {msg}")
            continue
        if case.compile_error is not None:
            failures += 1
            details.append(f"  {case.name}: compiled, but a compile error was expected")
        info = analyse(case, kernel)
        if opts.dump:
            os.makedirs(opts.dump, exist_ok=True)
            stem = os.path.join(opts.dump, re.sub(r"[^a-z0-9]+", "_", case.name.lower()).strip("_"))
            with open(stem + ".ttgir", "w") as f:
                f.write(info["ttgir"])
            with open(stem + ".msl", "w") as f:
                f.write(info["msl"])
        check = "not run"
        if not opts.no_run:
            t1 = time.perf_counter()
            err, jit_kernel = run_on_emulator(case)
            ok = err <= case.tol
            same = jit_kernel.metadata.hash == kernel.metadata.hash
            check = f"{'ok' if ok else 'FAIL'} {err:.1e} <= {case.tol:.0e} ({time.perf_counter() - t1:.1f}s)"
            if not same:
                check += " [JIT compiled another specialisation]"
            failures += (not ok) + (not same)
        dots = info["dots"]
        in_loop, total = info["converts"]
        rows.append((case.name, f"{sum(d.on_mma for d in dots)}/{len(dots)}", f"{100 * info['share']:.0f}%",
                     f"{info['smem']}", _widest(info["loads"]), _widest(info["stores"]), f"{in_loop} / {total}",
                     check))
        for d in dots:
            path = "simdgroup MMA" if d.on_mma else "FMA"
            shape = f"{d.batch}x" if d.batch > 1 else ""
            details.append(f"  {case.name}: tt.dot {d.msl_where[0]}:{d.msl_where[1]} {shape}{d.m}x{d.n}x{d.k} "
                           f"{d.a_type}->{d.acc_type} [{d.a_layout} x {d.b_layout}] -> {path}")
    head = ("kernel", "dots on MMA", "MMA FLOP share", "smem bytes", "global loads: widest, scalar ops",
            "global stores: widest, scalar ops", "smem converts: in loop / all", "emulator vs torch: max err/(1+|ref|)")
    print(table(head, rows))
    print("\n" + "\n".join(details))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

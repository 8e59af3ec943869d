"""Compile-time benchmark: the apple backend against upstream's NVIDIA backend, same kernels, same run.

    python -m bench.compile_time [--repeat 5] [--kernels vector_add,matmul] [--sm 90] [--json out.json]
                                                                  (from the repository root)

For every kernel listed in `bench_kernels()` below (vector add, softmax, layer norm, a 2-D reduction, a cumsum
scan, a tl.dot matmul; the kernels are bench/kernels.py's) it measures
* apple  (target ``GPUTarget("metal", "apple7", 32)``): ``make_ttir`` + ``make_ttgir`` + ``make_msl``
  (TTIR -> MSL), and separately the emulator's clang compile of that MSL into a host shared object, the
  analogue of ptxas: the quick (-O0) library a kernel's first launch waits for ("clang.q"), and the optimised
  (-O2) one, which a kernel gets built in the background once it has run long enough ("clang");
* nvidia (target ``GPUTarget("cuda", 90, 32)``, no GPU needed): ``make_ttir`` + ``make_ttgir`` +
  ``make_llir`` + ``make_ptx`` (TTIR -> PTX), and separately ``make_cubin`` (ptxas, shipped in the
  triton wheel under ``triton/backends/nvidia/bin``). If ptxas cannot run, the cubin column is left
  out and the output says so.
The stage functions are called directly (through each backend's ``add_stages``), never through
``triton.compile``, so Triton's kernel cache is not involved; the emulator's clang cache lives under
``$TRITON_CACHE_DIR``, which is pointed at a fresh temporary directory for every clang measurement.
The Python frontend (AST -> TTIR, the same for both backends) is timed separately and not part of
either total.

Each measurement is repeated ``--repeat`` times after one untimed warm-up compile per kernel and
backend (so one-time costs such as imports, libdevice loading, the emulator runtime and the precompiled compat header,
built once per cache, are not
counted); the table shows medians in milliseconds. Wall time ("clang", "ptxas") and CPU time ("clang.cpu",
"ptxas.cpu": user + system time of this process and of the compiler processes it ran, from ``getrusage``) are
both shown: on a shared machine wall time also counts waiting for a core, CPU time does not, so compare the CPU
columns when the machine is busy.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Tuple

os.environ.setdefault("TRITON_APPLE_DEVICE", "emulator")
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # 3.9's default, set explicitly to silence its warning

_TMP_ROOT = tempfile.mkdtemp(prefix="triton_compile_bench_")
os.environ["TRITON_CACHE_DIR"] = os.path.join(_TMP_ROOT, "cache")

from triton._C.libtriton import ir  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402
from triton.compiler.compiler import make_backend  # noqa: E402

from . import kernels as kn  # noqa: E402
from .cpu import cpu_seconds  # noqa: E402
from .emulator_micro import load_runtime  # noqa: E402


@dataclass
class BenchKernel:
    name: str
    fn: object
    signature: Dict[str, str]          # every parameter, constexprs marked "constexpr"
    constexprs: Dict[str, object]
    options: Dict[str, object] = field(default_factory=lambda: {"num_warps": 4})

    def attrs(self):
        """Divisibility hints the JIT would attach for 16-byte aligned tensors and multiple-of-16 ints."""
        names = list(self.signature)
        return {(names.index(k), ): [["tt.divisibility", 16]] for k, t in self.signature.items()
                if t.startswith("*") or k in self._div16}

    _div16 = ("stride", "stride_m", "in_row_stride", "out_row_stride", "stride_am", "stride_bk", "stride_cm")


def bench_kernels() -> List[BenchKernel]:
    """The kernels timed, with the signature and constexprs each is compiled with."""
    p32, p16 = "*fp32", "*fp16"
    return [
        BenchKernel("vector_add", kn.vector_add_kernel,
                    {"x_ptr": p32, "y_ptr": p32, "out_ptr": p32, "n_elements": "i32", "BLOCK_SIZE": "constexpr"},
                    {"BLOCK_SIZE": 1024}),
        BenchKernel("softmax", kn.softmax_kernel,
                    {"out_ptr": p32, "in_ptr": p32, "in_row_stride": "i32", "out_row_stride": "i32", "n_rows": "i32",
                     "n_cols": "i32", "BLOCK_SIZE": "constexpr"}, {"BLOCK_SIZE": 1024}),
        BenchKernel("layer_norm", kn.layer_norm_fwd_kernel,
                    {"x_ptr": p32, "y_ptr": p32, "w_ptr": p32, "b_ptr": p32, "mean_ptr": p32, "rstd_ptr": p32,
                     "stride": "i32", "N": "i32", "eps": "fp32", "BLOCK_SIZE": "constexpr"}, {"BLOCK_SIZE": 1024}),
        BenchKernel("reduce_2d", kn.row_reduce_kernel,
                    {"x_ptr": p32, "sum_ptr": p32, "max_ptr": p32, "M": "i32", "N": "i32", "stride_m": "i32",
                     "BLOCK_M": "constexpr", "BLOCK_N": "constexpr"}, {"BLOCK_M": 16, "BLOCK_N": 128}),
        BenchKernel("cumsum", kn.row_cumsum_kernel,
                    {"x_ptr": p32, "y_ptr": p32, "N": "i32", "stride": "i32", "BLOCK": "constexpr"}, {"BLOCK": 1024}),
        BenchKernel("matmul", kn.masked_matmul_kernel,
                    {"a_ptr": p16, "b_ptr": p16, "c_ptr": p16, "M": "i32", "N": "i32", "K": "i32", "stride_am": "i32",
                     "stride_ak": "constexpr", "stride_bk": "i32", "stride_bn": "constexpr", "stride_cm": "i32",
                     "stride_cn": "constexpr", "BLOCK_M": "constexpr", "BLOCK_N": "constexpr", "BLOCK_K": "constexpr"},
                    # unit strides are specialised to constexpr 1, as the JIT does for row-major tensors
                    {"stride_ak": 1, "stride_bn": 1, "stride_cn": 1, "BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}),
    ]


APPLE_STAGES = ("ttir", "ttgir", "msl")
NVIDIA_STAGES = ("ttir", "ttgir", "llir", "ptx")


def run_stages(backend, target, kernel, stop_before=None):
    """Frontend + every stage of `backend` for `kernel`; returns ({stage: seconds}, {stage: output},
    metadata); the CPU seconds of each stage are in the first dict too, as ``<stage>.cpu``."""
    options = backend.parse_options(dict(kernel.options))
    src = ASTSource(kernel.fn, kernel.signature, kernel.constexprs, kernel.attrs())
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    codegen_fns = backend.get_codegen_implementation(options)
    module_map = backend.get_module_map()
    times, outputs = {}, {}
    t = time.perf_counter()
    module = src.make_ir(target, options, codegen_fns, module_map, context)
    times["frontend"] = time.perf_counter() - t
    stages = {}
    backend.add_stages(stages, options, src.language)
    metadata = {"hash": "compile-bench", "target": target, **options.__dict__}
    for name, stage in stages.items():
        if name == stop_before:
            break
        t, c = time.perf_counter(), cpu_seconds()
        module = stage(module, metadata)
        times[name] = time.perf_counter() - t
        times[f"{name}.cpu"] = cpu_seconds() - c
        outputs[name] = module
    return times, outputs, metadata


def clang_compile_seconds(msl: "str | bytes", name: str, n: int, quick: bool = False) -> Tuple[float, float]:
    """Fresh (uncached) emulator compile of `msl` (`quick`: its -O0 library), a new TRITON_CACHE_DIR for every
    compile: (wall, CPU) seconds."""
    from triton.backends.apple.emulator import build, clear_memory_cache, compile_msl
    load_runtime()  # the runtime shared object is built once per process: not part of a kernel compile
    source = msl if isinstance(msl, str) else msl.decode()  # bytes before asm["msl"] became text
    cache = os.path.join(_TMP_ROOT, f"clang-{name}-{n}-{int(quick)}")
    os.environ["TRITON_CACHE_DIR"] = cache
    clear_memory_cache()
    try:
        # the precompiled compat header is built once per cache, like the runtime: not part of a kernel's compile
        build.build_pch(quick)
        t, c = time.perf_counter(), cpu_seconds()
        k = compile_msl(source, name, quick)
        dt, dc = time.perf_counter() - t, cpu_seconds() - c
        assert not k.cache_hit
        return dt, dc
    finally:
        os.environ["TRITON_CACHE_DIR"] = os.path.join(_TMP_ROOT, "cache")
        shutil.rmtree(cache, ignore_errors=True)


def ptxas_usable(sm: int) -> str:
    """'' if the wheel's ptxas runs, else the reason it does not."""
    try:
        from triton.backends.nvidia.compiler import get_ptxas
        path = get_ptxas(sm).path
        res = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
        return "" if res.returncode == 0 else f"{path} --version failed: {res.stderr.strip()[:200]}"
    except Exception as e:  # noqa: BLE001
        return f"ptxas not usable: {e}"


def median_ms(xs):
    return 1000.0 * statistics.median(xs)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--kernels", default="", help="comma-separated subset of kernel names")
    ap.add_argument("--sm", type=int, default=90, help="NVIDIA compute capability of the target")
    ap.add_argument("--family", default="apple7", help="Apple GPU family of the target")
    ap.add_argument("--json", default="", help="also write the raw medians here")
    args = ap.parse_args(argv)

    apple_target = GPUTarget("metal", args.family, 32)
    nv_target = GPUTarget("cuda", args.sm, 32)
    apple, nvidia = make_backend(apple_target), make_backend(nv_target)
    no_ptxas = ptxas_usable(args.sm)

    kernels = bench_kernels()
    if args.kernels:
        wanted = args.kernels.split(",")
        kernels = [k for k in kernels if k.name in wanted]

    rows = []
    for k in kernels:
        # warm-up (untimed): imports, lazily loaded libraries, the emulator runtime
        _, a_out, a_meta = run_stages(apple, apple_target, k)
        clang_compile_seconds(a_out["msl"], a_meta["name"], -1)
        clang_compile_seconds(a_out["msl"], a_meta["name"], -1, quick=True)
        run_stages(nvidia, nv_target, k, stop_before="cubin" if no_ptxas else None)
        a_times, n_times, clang, ptxas, clang_cpu, ptxas_cpu, quick_cpu = [], [], [], [], [], [], []
        for i in range(args.repeat):
            t, out, meta = run_stages(apple, apple_target, k)
            a_times.append(t)
            wall, cpu = clang_compile_seconds(out["msl"], meta["name"], i)
            clang.append(wall)
            clang_cpu.append(cpu)
            quick_cpu.append(clang_compile_seconds(out["msl"], meta["name"], i, quick=True)[1])
            t, _, _ = run_stages(nvidia, nv_target, k, stop_before="cubin" if no_ptxas else None)
            n_times.append(t)
            if not no_ptxas:
                ptxas.append(t["cubin"])
                ptxas_cpu.append(t["cubin.cpu"])
        row = {"kernel": k.name}
        for s in ("frontend", ) + APPLE_STAGES:
            row[f"apple_{s}"] = median_ms([t[s] for t in a_times])
        for s in ("frontend", ) + NVIDIA_STAGES:
            row[f"nvidia_{s}"] = median_ms([t[s] for t in n_times])
        row["apple_total"] = median_ms([sum(t[s] for s in APPLE_STAGES) for t in a_times])
        row["nvidia_total"] = median_ms([sum(t[s] for s in NVIDIA_STAGES) for t in n_times])
        row["apple_clang"] = median_ms(clang)
        row["nvidia_ptxas"] = median_ms(ptxas) if ptxas else None
        row["apple_clang_cpu"] = median_ms(clang_cpu)
        row["apple_quick_cpu"] = median_ms(quick_cpu)
        row["nvidia_ptxas_cpu"] = median_ms(ptxas_cpu) if ptxas_cpu else None
        rows.append(row)
        print(f"  measured {k.name}", file=sys.stderr, flush=True)

    print(f"Compile time, median of {args.repeat} (ms); apple = {apple_target.backend}:{apple_target.arch}, "
          f"nvidia = cuda:sm_{args.sm}; one machine, one process, fresh caches")
    print("TTIR->MSL = make_ttir+make_ttgir+make_msl;  TTIR->PTX = make_ttir+make_ttgir+make_llir+make_ptx;  "
          "frontend = AST->TTIR (nvidia run; not in either total);  clang = emulator MSL->.so (-O2);  clang.q = "
          "the -O0 library a first launch gets;  ptxas = PTX->cubin;  .cpu = CPU time")
    hdr = ("kernel", "frontend", "a.ttir", "a.ttgir", "a.msl", "TTIR->MSL", "n.ttir", "n.ttgir", "n.llir", "n.ptx",
           "TTIR->PTX", "ratio", "clang", "ptxas", "ratio", "clang.cpu", "ptxas.cpu", "ratio", "clang.q.cpu",
           "ratio")
    fmt = "{:<11}" + "{:>10}" * (len(hdr) - 1)
    print(fmt.format(*hdr))

    def f(x):
        return "n/a" if x is None else f"{x:.1f}"

    for r in rows:
        ratio = r["apple_total"] / r["nvidia_total"]
        bratio = (r["apple_clang"] / r["nvidia_ptxas"]) if r["nvidia_ptxas"] else None
        cratio = (r["apple_clang_cpu"] / r["nvidia_ptxas_cpu"]) if r["nvidia_ptxas_cpu"] else None
        qratio = (r["apple_quick_cpu"] / r["nvidia_ptxas_cpu"]) if r["nvidia_ptxas_cpu"] else None
        print(fmt.format(r["kernel"], f(r["nvidia_frontend"]), f(r["apple_ttir"]), f(r["apple_ttgir"]),
                         f(r["apple_msl"]), f(r["apple_total"]), f(r["nvidia_ttir"]), f(r["nvidia_ttgir"]),
                         f(r["nvidia_llir"]), f(r["nvidia_ptx"]), f(r["nvidia_total"]), f"{ratio:.2f}x",
                         f(r["apple_clang"]), f(r["nvidia_ptxas"]), "n/a" if bratio is None else f"{bratio:.2f}x",
                         f(r["apple_clang_cpu"]), f(r["nvidia_ptxas_cpu"]), "n/a" if cratio is None else f"{cratio:.2f}x",
                         f(r["apple_quick_cpu"]), "n/a" if qratio is None else f"{qratio:.2f}x"))
    if rows:
        gm = statistics.geometric_mean([r["apple_total"] / r["nvidia_total"] for r in rows])
        line = f"geometric mean apple/nvidia: TTIR->MSL vs TTIR->PTX {gm:.2f}x"
        if all(r["nvidia_ptxas"] for r in rows):
            gb = statistics.geometric_mean([r["apple_clang"] / r["nvidia_ptxas"] for r in rows])
            gc = statistics.geometric_mean([r["apple_clang_cpu"] / r["nvidia_ptxas_cpu"] for r in rows])
            gq = statistics.geometric_mean([r["apple_quick_cpu"] / r["nvidia_ptxas_cpu"] for r in rows])
            line += f"; clang (emulator) vs ptxas {gb:.2f}x wall, {gc:.2f}x CPU; the -O0 library {gq:.2f}x CPU"
        print(line)
    if no_ptxas:
        print(f"ptxas could not run ({no_ptxas}): NVIDIA timed up to the PTX stage only.")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    shutil.rmtree(_TMP_ROOT, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

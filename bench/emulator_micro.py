"""Micro-benchmarks of the Metal-on-CPU emulator itself (not of kernels):

    python -m bench.emulator_micro [--only mma,shuffle] [--repeat 5] [--json out.json] [--baseline REV]
                                   [--msl-dir DIR]               (from the repository root)

* ``mma``: ``simdgroup_multiply_accumulate`` (half x half + float -> float, 8x8x8) per second and the GFLOP/s
  that makes (2 * 512 flops per op), 4 simdgroups per threadgroup;
* ``load``: ``simdgroup_load`` of a half 8x8 fragment from threadgroup memory, per second;
* ``shuffle``: ``simd_shuffle_xor`` of a float, simdgroup-wide operations per second (and ns per lane);
* ``sum``: ``simd_sum`` of a float, per second;
* ``barrier``: ``threadgroup_barrier`` of 256 threads, per second (ns per thread);
* ``threads``: ns per emulated thread of a kernel without barriers or SIMD-group functions in threadgroups of
  1,024 threads (every thread loads one float, thread 0 stores it doubled: the shape of upstream test_core's
  ``test_load_store_same_ptr``, 65,536 such threadgroups per launch): what the runtime costs per thread;
* ``launch``: ms per launch of an empty kernel with five 4-byte tensors, five 4 MB tensors, and five 4 MB
  tensors of which the kernel touches one element each (what a real small kernel on big tensors pays);
* ``fiber``: ns per switch between two fibers (one direction), the runtime's own measuring hook
  (``emulator.bench_fiber_switch``; left out for a revision that lacks it);
* ``compile``: clang's wall time per kernel (cold, a fresh cache directory), for the ``.msl`` files of
  ``--msl-dir`` (each file's first ``kernel void NAME`` is compiled) or, without it, this module's kernels.

Every rate is the best of ``--repeat`` launches on one host thread (``TRITON_APPLE_EMULATOR_THREADS`` does not
apply), after one warm-up launch. ``--baseline REV`` runs the same measurements in a subprocess against the
emulator of git revision REV (bench/revision.py: its whole ``third_party/apple`` exported) and prints both side
by side, so that a change is measured against its predecessor on the same machine in the same run. Without
``--baseline`` the table has no comparison column: the numbers are for reading against another run's.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

from . import revision

PRELUDE = "#include <metal_stdlib>\nusing namespace metal;\n"

MMA = PRELUDE + """
kernel void bench_mma(device const half* a [[buffer(0)]], device const half* b [[buffer(1)]],
                      device float* out [[buffer(2)]], constant uint& iters [[buffer(3)]],
                      uint sg [[simdgroup_index_in_threadgroup]], uint nsg [[simdgroups_per_threadgroup]],
                      uint3 tg [[threadgroup_position_in_grid]]) {
    simdgroup_half8x8 fa[2], fb[2];
    simdgroup_float8x8 acc[4];
    for (uint i = 0; i < 2; ++i) {
        simdgroup_load(fa[i], a + 64 * i, 8);
        simdgroup_load(fb[i], b + 64 * i, 8);
    }
    for (uint k = 0; k < 4; ++k)
        acc[k] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    for (uint it = 0; it < iters; ++it)
        for (uint i = 0; i < 2; ++i)
            for (uint j = 0; j < 2; ++j)
                simdgroup_multiply_accumulate(acc[2 * i + j], fa[i], fb[j], acc[2 * i + j]);
    for (uint k = 0; k < 4; ++k)
        simdgroup_store(acc[k], out + ((tg.x * nsg + sg) * 4 + k) * 64, 8);
}
"""

LOAD = PRELUDE + """
kernel void bench_load(device const half* a [[buffer(0)]], device float* out [[buffer(1)]],
                       constant uint& iters [[buffer(2)]], uint tid [[thread_index_in_threadgroup]],
                       uint3 tg [[threadgroup_position_in_grid]], uint nt [[threads_per_threadgroup]]) {
    threadgroup half tile[32 * 64];
    for (uint i = tid; i < 32 * 64; i += nt)
        tile[i] = a[i];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float s = 0.0f;
    simdgroup_half8x8 f;
    for (uint it = 0; it < iters; ++it) {
        simdgroup_load(f, tile + 8 * (it & 7) + 64 * 8 * ((it >> 3) & 3), 64);
        s += float(f.thread_elements()[0]);
    }
    out[tg.x * nt + tid] = s;
}
"""

SHUFFLE = PRELUDE + """
kernel void bench_shuffle(device float* out [[buffer(0)]], constant uint& iters [[buffer(1)]],
                          uint tid [[thread_index_in_threadgroup]], uint3 tg [[threadgroup_position_in_grid]],
                          uint nt [[threads_per_threadgroup]]) {
    float v = float(tid);
    for (uint it = 0; it < iters; ++it)
        v += simd_shuffle_xor(v, ushort((it & 15) + 1));
    out[tg.x * nt + tid] = v;
}
"""

SUM = PRELUDE + """
kernel void bench_sum(device float* out [[buffer(0)]], constant uint& iters [[buffer(1)]],
                      uint tid [[thread_index_in_threadgroup]], uint3 tg [[threadgroup_position_in_grid]],
                      uint nt [[threads_per_threadgroup]]) {
    float v = float(tid);
    for (uint it = 0; it < iters; ++it)
        v = simd_sum(v) * 0.03125f + 1.0f;
    out[tg.x * nt + tid] = v;
}
"""

BARRIER = PRELUDE + """
kernel void bench_barrier(device float* out [[buffer(0)]], constant uint& iters [[buffer(1)]],
                          uint tid [[thread_index_in_threadgroup]], uint3 tg [[threadgroup_position_in_grid]],
                          uint nt [[threads_per_threadgroup]]) {
    float v = float(tid);
    for (uint it = 0; it < iters; ++it) {
        v = v * 0.5f + 1.0f;
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    out[tg.x * nt + tid] = v;
}
"""

THREADS = PRELUDE + """
kernel void bench_threads(device float* x [[buffer(0)]], uint3 tg [[threadgroup_position_in_grid]],
                          uint tid [[thread_index_in_threadgroup]]) {
    float v = x[tg.x];
    if (tid == 0)
        x[tg.x] = v * 2.0f;
}
"""

EMPTY5 = PRELUDE + """
kernel void bench_empty5(device float* t0 [[buffer(0)]], device float* t1 [[buffer(1)]],
                         device float* t2 [[buffer(2)]], device float* t3 [[buffer(3)]],
                         device float* t4 [[buffer(4)]]) {
}
"""

TOUCH5 = PRELUDE + """
kernel void bench_touch5(device float* t0 [[buffer(0)]], device const float* t1 [[buffer(1)]],
                         device const float* t2 [[buffer(2)]], device const float* t3 [[buffer(3)]],
                         device float* t4 [[buffer(4)]], uint tid [[thread_position_in_grid]]) {
    if (tid == 0) {
        t0[7] = t1[100] + t2[1000] + t3[10000];
        t4[123456] = 1.0f;
    }
}
"""

KERNELS = {"bench_mma": MMA, "bench_load": LOAD, "bench_shuffle": SHUFFLE, "bench_sum": SUM,
           "bench_barrier": BARRIER, "bench_threads": THREADS, "bench_empty5": EMPTY5, "bench_touch5": TOUCH5}


def _best(fn, repeat):
    fn()  # warm-up (and first-launch costs)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def run(only, repeat):
    import torch
    from triton.backends.apple.emulator import Scalar, compile_msl

    res = {}

    def want(name):
        return not only or name in only

    if want("mma"):
        k = compile_msl(MMA, "bench_mma")
        a, b = torch.randn(128).half() * 0.1, torch.randn(128).half() * 0.1
        grid, nsg, iters = 16, 4, 64
        out = torch.zeros(grid * nsg * 4 * 64)
        t = _best(lambda: k.launch((grid, 1, 1), (32 * nsg, 1, 1),
                                   {0: a, 1: b, 2: out, 3: Scalar(iters, "uint")}, host_threads=1), repeat)
        ops = grid * nsg * iters * 4
        ref = (a[:64].float().view(8, 8) @ b[:64].float().view(8, 8)) * iters
        assert torch.allclose(out[:64].view(8, 8), ref, rtol=1e-3, atol=1e-3), "bench_mma: wrong result"
        res["mma"] = dict(per_s=ops / t, gflops=ops * 1024 / t / 1e9, seconds=t)
    if want("load"):
        k = compile_msl(LOAD, "bench_load")
        a = torch.randn(32 * 64).half()
        grid, nt, iters = 16, 128, 256
        out = torch.zeros(grid * nt)
        t = _best(lambda: k.launch((grid, 1, 1), (nt, 1, 1), {0: a, 1: out, 2: Scalar(iters, "uint")},
                                   host_threads=1), repeat)
        ops = grid * (nt // 32) * iters
        res["load"] = dict(per_s=ops / t, seconds=t)
    for name, src, kname in (("shuffle", SHUFFLE, "bench_shuffle"), ("sum", SUM, "bench_sum")):
        if want(name):
            k = compile_msl(src, kname)
            grid, nt, iters = 16, 128, 512
            out = torch.zeros(grid * nt)
            t = _best(lambda: k.launch((grid, 1, 1), (nt, 1, 1), {0: out, 1: Scalar(iters, "uint")},
                                       host_threads=1), repeat)
            ops = grid * (nt // 32) * iters
            res[name] = dict(per_s=ops / t, ns_per_lane=t / (ops * 32) * 1e9, seconds=t)
    if want("barrier"):
        k = compile_msl(BARRIER, "bench_barrier")
        grid, nt, iters = 8, 256, 256
        out = torch.zeros(grid * nt)
        t = _best(lambda: k.launch((grid, 1, 1), (nt, 1, 1), {0: out, 1: Scalar(iters, "uint")}, host_threads=1),
                  repeat)
        res["barrier"] = dict(per_s=grid * iters / t, ns_per_thread=t / (grid * iters * nt) * 1e9, seconds=t)
    if want("threads"):
        k = compile_msl(THREADS, "bench_threads")
        grid, nt = 4096, 1024
        x = torch.ones(grid)
        t = _best(lambda: k.launch((grid, 1, 1), (nt, 1, 1), {0: x}, host_threads=1), repeat)
        assert torch.all(x == 2.0 ** (repeat + 1)), "bench_threads: wrong result"
        res["threads"] = dict(ns_per_thread=t / (grid * nt) * 1e9, seconds=t)
    if want("fiber"):
        from triton.backends.apple import emulator
        switch = getattr(emulator, "bench_fiber_switch", None)
        if switch is not None:
            switch(10_000)  # warm-up (loads the runtime)
            res["fiber"] = dict(ns_per_switch=min(switch(200_000) for _ in range(repeat)))
    if want("launch"):
        k = compile_msl(EMPTY5, "bench_empty5")
        kt = compile_msl(TOUCH5, "bench_touch5")
        small = [torch.zeros(1) for _ in range(5)]
        big = [torch.zeros(1 << 20) for _ in range(5)]
        res["launch"] = dict(
            empty_4B_ms=1e3 * _best(lambda: k.launch((1, 1, 1), (1, 1, 1), small, host_threads=1), repeat),
            empty_4MB_ms=1e3 * _best(lambda: k.launch((1, 1, 1), (1, 1, 1), big, host_threads=1), repeat),
            touch_4MB_ms=1e3 * _best(lambda: kt.launch((1, 1, 1), (32, 1, 1), big, host_threads=1), repeat))
        assert big[0][7].item() == 0.0 and big[4][123456].item() == 1.0, "bench_touch5: wrong result"
    return res


def load_runtime() -> None:
    """Builds (once per cache) and loads the emulator's runtime library, so that a measurement after this
    leaves that one-time cost out. The package's API has no name for it: it is `runtime_library()` of the
    module that loads libraries, `library` in newer layouts and `runtime` in older ones."""
    import importlib
    for name in ("library", "runtime"):
        try:
            module = importlib.import_module(f"triton.backends.apple.emulator.{name}")
        except ImportError:
            continue
        if hasattr(module, "runtime_library"):
            module.runtime_library()
            return
    raise RuntimeError("this emulator has no runtime_library() in emulator.library or emulator.runtime")


def compile_times(msl_dir):
    """{kernel: seconds} of a cold compile of each kernel, in a fresh cache directory."""
    from triton import knobs as triton_knobs
    from triton.backends.apple import emulator
    from triton.backends.apple.emulator import compile_msl
    # run() compiled these kernels already: without clearing the in-process cache a "cold" compile is a lookup
    clear_memory_cache = getattr(emulator, "clear_memory_cache", lambda: None)
    sources = {}
    if msl_dir:
        for p in sorted(Path(msl_dir).glob("*.msl")):
            text = p.read_text()
            m = re.search(r"kernel\s+void\s+(\w+)", text)
            if m:
                sources[p.stem] = (text, m.group(1))
    else:
        sources = {name: (src, name) for name, src in KERNELS.items()}
    out = {}
    with tempfile.TemporaryDirectory(prefix="emu_bench_cache_") as tmp:
        old = triton_knobs.cache.dir
        triton_knobs.cache.dir = tmp
        try:
            load_runtime()
            # one-time costs of a fresh cache (the runtime, the precompiled header) are not a kernel's compile
            compile_msl(PRELUDE + "kernel void bench_warmup() {}\n", "bench_warmup")
            for name, (src, kname) in sources.items():
                clear_memory_cache()
                t = time.perf_counter()
                compile_msl(src, kname)
                out[name] = time.perf_counter() - t
        finally:
            triton_knobs.cache.dir = old
    return out


def run_baseline(rev: str, argv: list) -> dict:
    """The same measurements against git revision `rev`'s emulator, in a subprocess; returns its JSON."""
    with revision.export(rev) as base:
        out = base.tmp / "base.json"
        base.run("bench.emulator_micro", [*argv, "--json", str(out), "--quiet"])
        return json.loads(out.read_text())


def _fmt(key, field, v):
    if v is None:
        return "-"
    if field == "per_s":
        return f"{v / 1e6:.2f} M/s" if v >= 1e6 else f"{v / 1e3:.1f} k/s"
    if field == "gflops":
        return f"{v:.2f} GFLOP/s"
    if field.startswith("ns_"):
        return f"{v:.1f} ns"
    if field.endswith("_ms"):
        return f"{v:.2f} ms"
    if key == "compile":
        return f"{1e3 * v:.0f} ms"
    return f"{v:.4g}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="", help="comma-separated: mma,load,shuffle,sum,barrier,threads,fiber,launch,compile")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", default="")
    ap.add_argument("--baseline", default="", help="git revision to compare with (same run, subprocess)")
    ap.add_argument("--msl-dir", default="", help="directory of .msl files for the compile measurement")
    ap.add_argument("--quiet", action="store_true", help=argparse.SUPPRESS)
    opts = ap.parse_args(argv)
    only = {s.strip() for s in opts.only.split(",") if s.strip()}
    sub_argv = ["--repeat", str(opts.repeat)] + (["--only", opts.only] if opts.only else []) + (
        ["--msl-dir", opts.msl_dir] if opts.msl_dir else [])
    base = run_baseline(opts.baseline, sub_argv) if opts.baseline else None
    res = run(only, opts.repeat)
    if not only or "compile" in only:
        res["compile"] = compile_times(opts.msl_dir)
    if opts.json:
        Path(opts.json).write_text(json.dumps(res, indent=1))
    if opts.quiet:
        return 0
    load = os.getloadavg()
    print(f"Metal emulator micro-benchmarks: best of {opts.repeat}, 1 host thread; load average "
          f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} cores")
    rows = [("measure", "this tree") + ((f"baseline {opts.baseline}", "speed-up") if base else ())]
    for key, fields in res.items():
        for field, v in fields.items():
            if field == "seconds":
                continue
            b = base.get(key, {}).get(field) if base else None
            row = (f"{key} {field}", _fmt(key, field, v))
            if base:
                lower_better = field.endswith("_ms") or field.startswith("ns_") or key == "compile"
                ratio = (b / v if lower_better else v / b) if b else None
                row += (_fmt(key, field, b), f"{ratio:.1f}x" if ratio else "-")
            rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for i, r in enumerate(rows):
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))
        if i == 0:
            print("  ".join("-" * w for w in widths))
    return 0


if __name__ == "__main__":
    sys.exit(main())

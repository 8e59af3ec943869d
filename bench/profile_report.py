"""What the emulator's profiler measures on the tutorial-style, Liger and fla kernels: per kernel launch, global bytes
moved over the minimal bytes, the share of global traffic in 16-byte accesses, threadgroup-memory accesses and their
bank-conflict degree, barriers per threadgroup, the share of FLOPs on simdgroup_matrix and the SIMD lanes memory
instructions use; then a roofline estimate per Apple chip.

Every number comes from `triton.backends.apple.emulator.profile()` (emulator/tools.py; definitions in the emulator
README, "Sanitizer and profiler"): exact counts of what the generated MSL does on the emulator, not timings. Per
column:
- moved/min: bytes the kernel's SIMD-wide global instructions move (each instruction's distinct bytes) over the
  distinct bytes the launch touches; 1.00 means every byte once. It is the product of the next two.
- in tg: moved bytes over the distinct bytes of each threadgroup (summed): re-reads inside a threadgroup, by the
  same thread again (a kernel that loops over a row several times) or by lanes of several simdgroups that hold
  copies of one value (a layout replicated across simdgroups).
- across tg: those over the launch's distinct bytes: bytes several threadgroups each move (a weight vector every
  row's program reads). On a GPU the caches serve such re-reads, which the minimal bytes leave out.
- 16B: share of global bytes in 16-byte (float4-wide) accesses.
- B/acc: global bytes per lane access (16 when all are 16-byte; 8 where a layout gives each thread two floats).
- tg acc: SIMD-wide threadgroup-memory instructions per threadgroup.
- conflict: bank cycles over the fewest the bytes need, summed over those instructions (1.00: conflict-free), and
  the worst single instruction, under target.THREADGROUP_BANKS (32 banks of 4 bytes: Apple documents none).
- barriers: threadgroup barriers per threadgroup.
- sgm share: simdgroup_matrix FLOPs over simdgroup_matrix + fma() FLOPs (dots only; elementwise math is not
  counted).
- lanes: active lanes per memory instruction over 32.
Last, the attention forward's barriers per K step (from two context lengths).

The roofline (`triton.backends.apple.emulator.roofline`): for each Apple family's base chip (target.GPU_FAMILIES:
FP32 peak = GPU cores x 128 lanes x 2 x clock) with its peak DRAM bandwidth from the one chip table
(backend/host.py, PEAK_GBPS), the time the minimal bytes need at peak bandwidth and the time the counted FLOPs need
at peak: the larger bounds the kernel from below. With `--png-dir DIR`, one roofline plot per kernel launch in DIR
(needs matplotlib: `scripts/install.sh --test`).

Each launch is checked against torch; a wrong result exits with status 1.

    python -m bench.profile_report [--only tutorial,liger,fla] [--kernels "softmax,rms_norm"] [--png-dir DIR]
"""
from __future__ import annotations

import argparse
import sys
from typing import Callable, Dict, List, Optional, Tuple

import torch

from . import cases
from .report_table import table

# ------------------------------------------------------------------------------------------------ the kernels


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(g, *shape, scale=1.0, dtype=torch.float32):
    return (torch.randn(*shape, generator=g) * scale).to(dtype)


def _liger(module: str):
    import importlib
    return importlib.import_module(f"liger_kernel.ops.{module}")


def _rms(x, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def _rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


# name -> () -> (run, reference): run() returns the outputs, reference() the torch values; tolerance per case
LibraryCase = Tuple[Callable[[], object], Callable[[], object], float]


def _liger_cases() -> Dict[str, Callable[[], LibraryCase]]:
    import torch.nn.functional as F

    def rms_norm():
        g = _gen(1)
        x, w = _randn(g, 64, 1024), _randn(g, 1024)
        return (lambda: _liger("rms_norm").LigerRMSNormFunction.apply(x, w, 1e-6, 0.0, "llama", False),
                lambda: _rms(x, 1e-6) * w, 1e-4)

    def layer_norm():
        g = _gen(2)
        x, w, b = _randn(g, 64, 1024), _randn(g, 1024), _randn(g, 1024)
        return (lambda: _liger("layer_norm").LigerLayerNormFunction.apply(x, w, b, 1e-5),
                lambda: F.layer_norm(x, (1024, ), w, b, 1e-5), 1e-4)

    def swiglu():
        g = _gen(3)
        a, b = _randn(g, 64, 1024), _randn(g, 64, 1024)
        return (lambda: _liger("swiglu").LigerSiLUMulFunction.apply(a, b), lambda: F.silu(a) * b, 1e-5)

    def rope(B, H, KH, T, D):
        g = _gen(4)
        q, k = _randn(g, B, H, T, D), _randn(g, B, KH, T, D)
        inv = 1.0 / (10000**(torch.arange(0, D, 2, dtype=torch.float32) / D))
        emb = torch.cat((torch.outer(torch.arange(T, dtype=torch.float32), inv), ) * 2, -1)[None]
        cos, sin = emb.cos(), emb.sin()

        def ref():
            c, s = cos.unsqueeze(1), sin.unsqueeze(1)
            return q * c + _rotate_half(q) * s, k * c + _rotate_half(k) * s
        return (lambda: _liger("rope").LigerRopeFunction.apply(q.clone(), k.clone(), cos, sin), ref, 1e-5)

    def cross_entropy():
        g = _gen(5)
        x, t = _randn(g, 32, 2048, scale=2.0), torch.randint(0, 2048, (32, ), generator=g)
        return (lambda: _liger("cross_entropy").LigerCrossEntropyFunction.apply(x.clone(), t, None, -100)[0],
                lambda: F.cross_entropy(x, t), 1e-4)

    # rope at two shapes: with 4 query heads of 64 a program's half tile is 4 x 32, one element per thread (scalar
    # accesses on upstream's NVIDIA backend too); with 32 heads of 128 (Llama's) 16 per thread
    return {"liger rms_norm": rms_norm, "liger layer_norm": layer_norm, "liger swiglu": swiglu,
            "liger rope 4x64": lambda: rope(2, 4, 2, 64, 64), "liger rope 32x128": lambda: rope(1, 32, 8, 32, 128),
            "liger cross_entropy": cross_entropy}


def _fla_cases() -> Dict[str, Callable[[], LibraryCase]]:

    def layer_norm():
        from fla.modules.norm.layernorm import layer_norm as fla_layer_norm
        g = _gen(6)
        x, w, b = _randn(g, 64, 512), _randn(g, 512), _randn(g, 512)
        return (lambda: fla_layer_norm(x, w, b, eps=1e-5),
                lambda: torch.nn.functional.layer_norm(x, (512, ), w, b, 1e-5), 1e-4)

    def chunk_linear_attn():
        from fla.ops.linear_attn import chunk_linear_attn as fla_chunk
        g = _gen(7)
        q, k, v = (_randn(g, 1, 64, 2, 32) for _ in range(3))

        def ref():
            s = torch.einsum("bthd,bshd->bhts", q, k) * 32**-0.5
            causal = torch.tril(torch.ones(64, 64, dtype=torch.bool))
            return torch.einsum("bhts,bshd->bthd", s.masked_fill(~causal, 0.0), v)
        return (lambda: fla_chunk(q, k, v, normalize=False)[0], ref, 1e-3)

    return {"fla layer_norm": layer_norm, "fla chunk_linear_attn": chunk_linear_attn}


def _close(got, want, tol: float) -> bool:
    got = got if isinstance(got, (tuple, list)) else (got, )
    want = want if isinstance(want, (tuple, list)) else (want, )
    return all(torch.allclose(a.detach().double(), b.detach().double(), atol=tol, rtol=tol) for a, b in zip(got, want))


# ------------------------------------------------------------------------------------------------ the report


def _last_per_kernel(case: str, profiles: List[dict]) -> List[Tuple[str, dict]]:
    """One launch per kernel of a case, its last: libraries autotune (every config launches while it is timed;
    the last launch runs the chosen one)."""
    last: Dict[str, dict] = {}
    for d in profiles:
        last.pop(d["kernel"], None)
        last[d["kernel"]] = d
    return [(case, d) for d in last.values()]


def _fmt(x: Optional[float], digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _bytes_per_access(d: dict) -> Optional[float]:
    n = sum(d["global_loads_by_width"].values()) + sum(d["global_stores_by_width"].values())
    return (d["global_bytes_read"] + d["global_bytes_written"]) / n if n else None


def _row(case: str, d: dict) -> List[str]:
    tgs = max(1, d["threadgroups"])
    worst = d["bank_conflict_worst"]
    conflict = "-" if d["bank_conflict_degree"] is None else f"{_fmt(d['bank_conflict_degree'])} (worst {_fmt(worst)})"
    return [case, d["kernel"], str(d["threadgroups"]), _fmt(d["moved_over_minimal"]),
            _fmt(d["moved_over_threadgroup_distinct"]), _fmt(d["threadgroup_distinct_over_minimal"]),
            _fmt(d["share_16_byte"]), _fmt(_bytes_per_access(d), 1),
            _fmt(d["threadgroup_simd_accesses"] / tgs, 1), conflict, _fmt(d["barriers_per_threadgroup"], 1),
            _fmt(d["simdgroup_matrix_share"]), _fmt(d["simd_lane_utilisation"])]


def roofline(launches: List[Tuple[str, dict]]) -> str:
    """Per family base chip: lower bounds on each launch's time from its minimal bytes and its counted FLOPs."""
    from triton.backends.apple.emulator import roofline as rl
    rows = []
    for case, d in launches:
        row = [case, d["kernel"], f"{d['global_bytes_minimal'] / 1e6:.3f}", f"{rl.counted_flops(d) / 1e6:.2f}"]
        row += [f"{b.seconds * 1e6:.2f} ({'memory' if b.memory_bound else 'compute'})" for b in rl.bounds(d)]
        rows.append(row)
    head = ["case", "kernel", "min MB", "MFLOP"] + [f"{r.chip} µs (bound)" for r in rl.roofs()]
    return table(head, rows)


def write_plots(launches: List[Tuple[str, dict]], directory: str) -> List[str]:
    """One roofline PNG per launch in `directory`, named after its case and kernel; their paths."""
    import os
    import re
    from triton.backends.apple.emulator import roofline as rl
    os.makedirs(directory, exist_ok=True)
    paths = []
    for case, d in launches:
        name = re.sub(r"[^A-Za-z0-9]+", "_", f"{case} {d['kernel']}").strip("_")
        paths.append(rl.plot(d, os.path.join(directory, f"{name}.png")).path)
    return paths


def attention_barriers_per_step() -> Tuple[float, float]:
    """(barriers, simdgroup_matrix ops) per K step of the attention forward's loop, per threadgroup: the difference
    between two context lengths (non-causal: every program runs every step) over the difference in steps."""
    from triton.backends.apple import emulator as emu
    per = []
    for ctx in (64, 128):
        launch = cases.attention("cpu", heads=1, ctx=ctx)
        with emu.profile() as p:
            launch.call()
        d = p.launches[-1]
        per.append((ctx // launch.constexprs["BLOCK_N"], d["barriers"] / d["threadgroups"],
                    d["simdgroup_matrix_ops"] / d["threadgroups"]))
    (s1, b1, m1), (s2, b2, m2) = per
    return (b2 - b1) / (s2 - s1), (m2 - m1) / (s2 - s1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="tutorial,liger,fla", help="comma list of tutorial, liger, fla")
    ap.add_argument("--kernels", default="", help="comma list of case names (substrings) to run")
    ap.add_argument("--png-dir", default="", help="write a roofline plot (PNG) per kernel launch here")
    args = ap.parse_args(argv)
    groups = set(args.only.split(","))
    wanted = [w.strip() for w in args.kernels.split(",") if w.strip()]
    from triton.backends.apple import emulator as emu

    def chosen(name: str) -> bool:
        return not wanted or any(w in name for w in wanted)

    launches: List[Tuple[str, dict]] = []
    failures = []
    if "tutorial" in groups:
        for c in cases.CASES:
            if not chosen(c.name):
                continue
            launch = c.launch("cpu", "report")
            with emu.profile() as p:
                launch.call()
            err = launch.error()
            if not err <= launch.tol:
                failures.append(f"{c.name}: error {err:.3g} > {launch.tol:.3g}")
            launches += _last_per_kernel(c.name, p.launches)
    library = {}
    if "liger" in groups:
        library.update(_liger_cases())
    if "fla" in groups:
        library.update(_fla_cases())
    for name, build in library.items():
        if not chosen(name):
            continue
        run, ref, tol = build()
        with emu.profile() as p:
            got = run()
        if not _close(got, ref(), tol):
            failures.append(f"{name}: differs from torch")
        launches += _last_per_kernel(name, p.launches)
    head = ["case", "kernel", "threadgroups", "moved/min", "in tg", "across tg", "16B", "B/acc", "tg acc", "conflict",
            "barriers", "sgm share", "lanes"]
    print(table(head, [_row(c, d) for c, d in launches]))
    print()
    print(roofline(launches))
    if "tutorial" in groups and chosen("attention fwd fp16"):
        barriers, mma = attention_barriers_per_step()
        print(f"\nattention fwd fp16, per K step and threadgroup: {barriers:.1f} threadgroup barriers, "
              f"{mma:.1f} simdgroup_matrix multiplies")
    if args.png_dir:
        paths = write_plots(launches, args.png_dir)
        print(f"\n{len(paths)} roofline plots in {args.png_dir}")
    for f in failures:
        print("WRONG RESULT:", f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

"""Whole models, cold and warm: the first forward and the first compiled training step of tiny models built from
real libraries' classes, on the emulator, with where the time went.

    python -m bench.models [--models hybrid,mamba2,liger] [--phases eager,compiled] [--baseline-rev REV]
                           [--json out.json]                                     (from the repository root)

Models (each seeded and randomly initialised, CPU tensors):
* ``hybrid``: transformers' ``Qwen3_5ForCausalLM`` (a gated-delta-net layer and a full-attention layer) whose
  linear attention runs fla-core's Triton kernels (the models of test/models, built by test/support/tiny_models.py);
* ``mamba2``: transformers' ``Mamba2ForCausalLM`` on mamba-ssm's Triton SSD kernels (its CUDA build skipped;
  the host-side shims of the model tests are applied here too);
* ``liger``: transformers' ``LlamaForCausalLM`` patched by liger-kernel's ``apply_liger_kernel_to_llama``.

Phases, each timed in a fresh process (the worker: ``--worker MODEL --phase PHASE``):
* ``eager``: the first forward of the model (fla's and mamba-ssm's autotuners benchmark their configs in it),
  then the same forward again (warm in memory), and the model's torch-only path (the library's own PyTorch
  functions, or the unpatched model) for torch eager on the same CPU;
* ``compiled``: ``torch.compile`` (inductor, ``cpu_backend="triton"``, compiling in this process unless
  ``--compile-threads N`` lets inductor use its compile worker processes) of one
  training step, forward + loss + backward (Mamba2 and the Liger model: the forward only, see
  docs/integration.md), then the same step again.

Each phase runs twice: **cold** (empty Triton, emulator and inductor caches: a fresh ``TRITON_CACHE_DIR`` and
``TORCHINDUCTOR_CACHE_DIR``) and **warm** (the same directories again, in a new process). The split comes from
Triton's compilation listener (the Python frontend, upstream's TTIR and TTGIR passes, our `msl` stage) and the
backend's own events (`compile_log`: clang's time per library). These are wall times summed over the threads
that compile: with an autotuned kernel's configs compiling two at a time beside the library builds, each stage's
time includes waiting for a core and for the interpreter, so a stage's column can be several times its CPU time
and the columns can exceed the first call's wall time. "other" is the rest of the first call (kernel
launches, autotune benchmarking, PyTorch, dynamo and inductor's own work); "cold cpu s" is the CPU time this
process and the clang and linker processes it waited for spent in the cold first call (with compiles and builds
overlapping, up to the core count times the wall time). Kernel counts: Triton compiles,
libraries clang built, libraries loaded from the cache, distinct kernels launched through the backend.

Ratios are against the same run: the cold first call over the warm one, and over torch eager. With
``--baseline-rev REV`` every cold and warm run is repeated with REV's backend (bench/revision.py), and the
table gives the ratio of this tree's time to REV's.

Every forward is checked against the model's torch-only path (a wrong result exits 1). Nothing is asserted
about speed.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

os.environ.setdefault("TRITON_APPLE_DEVICE", "emulator")

REPO = Path(__file__).resolve().parents[1]
# The tiny models are the model tests' (test/support/, imported as `support.*` the way the suite sees it); test/
# goes on sys.path for them, as tools/coverage_table.py does for the conformance matrix.
sys.path.insert(0, str(REPO / "test"))
from support import tiny_models  # noqa: E402
from support.model_checks import torch_only_path  # noqa: E402

from .cpu import cpu_seconds  # noqa: E402
MODELS = ("hybrid", "mamba2", "liger")
PHASES = ("eager", "compiled")


# ------------------------------------------------------------------------------------------------ models

class Model:
    """A model, its input, and a context manager selecting its torch-only path."""

    def __init__(self, module, tokens, torch_path, train_step: bool):
        self.module, self.tokens, self.torch_path, self.train_step = module, tokens, torch_path, train_step


def build_model(name: str) -> Model:
    import torch
    tokens = tiny_models.tokens(32 if name == "mamba2" else 16)
    torch.manual_seed(0)
    if name == "hybrid":
        from transformers.models.qwen3_5 import modeling_qwen3_5 as m
        return Model(m.Qwen3_5ForCausalLM(tiny_models.hybrid_config()), tokens,
                     functools.partial(torch_only_path, m, tiny_models.FLA_PATH), True)
    if name == "mamba2":
        _mamba_ssm_shims()
        from transformers.models.mamba2 import modeling_mamba2 as m
        return Model(m.Mamba2ForCausalLM(tiny_models.mamba2_config()).eval(), tokens,
                     functools.partial(torch_only_path, m, tiny_models.MAMBA_PATH), False)
    if name == "liger":
        import copy
        from liger_kernel.transformers import apply_liger_kernel_to_llama
        from transformers.models.llama import modeling_llama as m
        reference = m.LlamaForCausalLM(tiny_models.llama_config()).eval()
        saved = dict(vars(m))
        patched = copy.deepcopy(reference)
        apply_liger_kernel_to_llama(model=patched)
        patched_vars = dict(vars(m))

        @contextlib.contextmanager
        def torch_path():  # the unpatched model, with transformers' module as it was before Liger
            for k, v in saved.items():
                setattr(m, k, v)
            holder = model.module
            model.module = reference
            try:
                yield
            finally:
                model.module = holder
                for k, v in patched_vars.items():
                    setattr(m, k, v)

        model = Model(patched.eval(), tokens, torch_path, False)
        return model
    raise SystemExit(f"unknown model {name!r}; expected one of {', '.join(MODELS)}")


def _mamba_ssm_shims() -> None:
    """The host-side shims of the model tests, for this whole worker process (support/tiny_models.py)."""
    import torch
    # dynamo keys its model of `torch.cuda.device` on the class it finds when it is imported: imported after the
    # shim, it took the shim for CUDA's device switch (the compiled phase failed in torch.cuda._exchange_device)
    import torch._dynamo  # noqa: F401
    tiny_models.stub_selective_scan_cuda()
    torch.cuda.get_device_properties = tiny_models.cpu_device_properties(torch.cuda.get_device_properties)
    torch.cuda.device = tiny_models.NoCudaDevice


# ------------------------------------------------------------------------------------------------ worker

class Split:
    """Where compile time went, from Triton's compilation listener and the backend's compile_log events."""

    def __init__(self):
        self.seconds = collections.Counter()
        self.counts = collections.Counter()
        self.launched = set()

    def install(self):
        import triton
        from triton.backends.apple import compile_log
        from triton.backends.apple.driver import EmulatorFunction

        def listener(src, metadata, metadata_group, times, cache_hit):
            self.counts["triton cache hits" if cache_hit else "triton compiles"] += 1
            self.seconds["frontend"] += times.ir_initialization / 1e6
            for stage, us in times.lowering_stages:
                key = "ours" if stage == "msl" else "upstream passes" if stage in ("ttir", "ttgir") else "other stages"
                self.seconds[key] += us / 1e6

        def event(e):
            if e.what == compile_log.COMPILED:
                self.counts["clang builds"] += 1
                self.seconds["clang"] += e.seconds
            elif e.what == compile_log.LOADED:
                self.counts["libraries loaded"] += 1

        def launch(metadata):
            data = metadata.get()
            if isinstance(data.get("function"), EmulatorFunction):
                self.launched.add(data["name"])

        triton.knobs.compilation.listener = listener
        triton.knobs.runtime.launch_enter_hook = launch
        compile_log.listen(event)
        return self

    def snapshot(self) -> dict:
        return {"seconds": dict(self.seconds), "counts": dict(self.counts, **{"kernels launched": len(self.launched)})}


def _check(got, want, what: str) -> None:
    import torch
    if not torch.allclose(got, want, rtol=1e-4, atol=1e-5):
        print(f"bench.models: {what} differs from the torch-only path: max |error| "
              f"{(got - want).abs().max().item():.3e}", file=sys.stderr)
        raise SystemExit(1)


def worker(name: str, phase: str, out: str, compile_threads: int = 1) -> None:
    import torch
    t0 = time.perf_counter()
    model = build_model(name)
    setup = time.perf_counter() - t0
    split = Split().install()
    result: Dict[str, object] = {"model": name, "phase": phase, "setup s": setup}
    if phase == "eager":
        with torch.no_grad():
            t, cpu = time.perf_counter(), cpu_seconds()
            got = model.module(model.tokens).logits
            result["first s"] = time.perf_counter() - t
            result["first cpu s"] = cpu_seconds() - cpu
            result["split"] = split.snapshot()
            t = time.perf_counter()
            model.module(model.tokens)
            result["again s"] = time.perf_counter() - t
            with model.torch_path():
                model.module(model.tokens)  # once untimed: torch's own first-call costs
                t = time.perf_counter()
                want = model.module(model.tokens).logits
                result["torch eager s"] = time.perf_counter() - t
        _check(got, want, f"{name}: the first forward")
    else:
        import torch._inductor.config as cfg
        with cfg.patch(cpu_backend="triton", compile_threads=compile_threads):
            compiled = torch.compile(model.module)

            def step():
                if model.train_step:
                    model.module.train()
                    out = compiled(model.tokens, labels=model.tokens)
                    out.loss.backward()
                    model.module.zero_grad()
                    return out.logits.detach()
                with torch.no_grad():
                    return compiled(model.tokens).logits

            t, cpu = time.perf_counter(), cpu_seconds()
            got = step()
            result["first s"] = time.perf_counter() - t
            result["first cpu s"] = cpu_seconds() - cpu
            result["split"] = split.snapshot()
            t = time.perf_counter()
            step()
            result["again s"] = time.perf_counter() - t
        with torch.no_grad(), model.torch_path():
            want = model.module(model.tokens).logits
        _check(got, want, f"{name}: the compiled step's logits")
    Path(out).write_text(json.dumps(result))


# ------------------------------------------------------------------------------------------------ driver

def _run(name: str, phase: str, cache: Path, revision=None, compile_threads: int = 1) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    args = ["--worker", name, "--phase", phase, "--out", out, "--compile-threads", str(compile_threads)]
    env = {"TRITON_CACHE_DIR": str(cache / "triton"), "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
           "TRITON_APPLE_DEVICE": "emulator"}
    started = time.perf_counter()
    try:
        if revision is None:
            subprocess.run([sys.executable, "-m", "bench.models", *args], cwd=REPO, env=dict(os.environ, **env),
                           check=True)
        else:
            revision.run("bench.models", args, env=env)
        result = json.loads(Path(out).read_text())
        result["process s"] = time.perf_counter() - started  # the whole process, exit included
        return result
    finally:
        os.unlink(out)


def _cold_and_warm(name: str, phase: str, revision=None, compile_threads: int = 1) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench_models_") as tmp:
        cold = _run(name, phase, Path(tmp), revision, compile_threads)
        warm = _run(name, phase, Path(tmp), revision, compile_threads)
    return {"cold": cold, "warm": warm}


def _row(label: str, runs: dict, base: Optional[dict]) -> List[str]:
    cold, warm = runs["cold"], runs["warm"]
    s, c = cold["split"]["seconds"], cold["split"]["counts"]
    other = cold["first s"] - sum(s.get(k, 0.0) for k in ("frontend", "upstream passes", "ours", "clang"))
    row = [label, f"{cold['first s']:.1f}", f"{cold['first cpu s']:.1f}", f"{warm['first s']:.2f}",
           f"{cold['first s'] / warm['first s']:.0f}x"]
    row.append(f"{cold['first s'] / cold['torch eager s']:.0f}x" if "torch eager s" in cold else "")
    row += [f"{s.get('frontend', 0):.1f}", f"{s.get('upstream passes', 0):.1f}", f"{s.get('ours', 0):.1f}",
            f"{s.get('clang', 0):.1f}", f"{other:.1f}",
            f"{c.get('triton compiles', 0)} / {c.get('clang builds', 0)} / {warm['split']['counts'].get('libraries loaded', 0)}"
            f" / {c.get('kernels launched', 0)}"]
    if base is not None:
        row += [f"{base['cold']['first s']:.1f}", f"{cold['first s'] / base['cold']['first s']:.2f}x",
                f"{warm['first s'] / base['warm']['first s']:.2f}x"]
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--phases", default=",".join(PHASES))
    ap.add_argument("--baseline-rev", default=None, help="also run every measurement with this revision's backend")
    ap.add_argument("--json", default=None)
    ap.add_argument("--compile-threads", type=int, default=1,
                    help="inductor's compile_threads for the compiled phase (1: in this process; more: its worker "
                         "processes)")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--phase", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    opts = ap.parse_args(argv)
    if opts.worker:
        worker(opts.worker, opts.phase, opts.out, opts.compile_threads)
        return 0
    from .report_table import table
    revision = None
    if opts.baseline_rev:
        from . import revision as rev_mod
        revision = rev_mod.export(opts.baseline_rev)
    results = {}
    rows = []
    try:
        for name in opts.models.split(","):
            for phase in opts.phases.split(","):
                runs = _cold_and_warm(name, phase, None, opts.compile_threads)
                base = _cold_and_warm(name, phase, revision, opts.compile_threads) if revision is not None else None
                results[f"{name} {phase}"] = {"this tree": runs, "baseline": base}
                rows.append(_row(f"{name} {phase}", runs, base))
                print(f"bench.models: {name} {phase}: cold {runs['cold']['first s']:.1f} s (process "
                      f"{runs['cold']['process s']:.1f} s), warm {runs['warm']['first s']:.2f} s (process "
                      f"{runs['warm']['process s']:.1f} s)", file=sys.stderr, flush=True)
    finally:
        if revision is not None:
            revision.close()
    head = ["model / phase", "cold s", "cold cpu s", "warm s", "cold / warm", "cold / torch eager", "frontend s",
            "upstream passes s", "our passes + lowering s", "clang s", "other s",
            "compiles / clang builds / loaded warm / launched"]
    if revision is not None:
        head += [f"cold s ({opts.baseline_rev})", "cold vs baseline", "warm vs baseline"]
    print(table(head, rows))
    if opts.json:
        Path(opts.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

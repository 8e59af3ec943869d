"""Runs one generated kernel on the apple backend (emulator) and under Triton's interpreter, and
compares the results. The comparison rules (ULP bounds) are documented in ``fuzz_grammar``.
"""
from __future__ import annotations

import atexit
import hashlib
import importlib.util
import json
import os
import select
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
WORKER = HERE / "interp_worker.py"
INTERP_TIMEOUT_S = float(os.environ.get("FUZZ_INTERP_TIMEOUT", "600"))


def work_dir() -> Path:
    d = os.environ.get("FUZZ_WORK_DIR")
    if d:
        p = Path(d)
        p.mkdir(parents=True, exist_ok=True)
        return p
    global _TMP
    if _TMP is None:
        _TMP = tempfile.TemporaryDirectory(prefix="triton_apple_fuzz_")
    return Path(_TMP.name)


_TMP = None


def write_module(source: str) -> Path:
    """Write generated kernel source to ``<work dir>/k_<hash>.py`` (Triton's JIT needs a file)."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:20]
    path = work_dir() / f"k_{digest}.py"
    if not path.exists():
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(source)
        os.replace(tmp, path)
    return path


_emu_modules = {}


def load_module(path: Path):
    """Import a generated module in this process (ordinary ``@triton.jit``: the apple backend)."""
    mod = _emu_modules.get(path)
    if mod is None:
        name = "fuzz_emu_" + path.stem
        spec = importlib.util.spec_from_file_location(name, str(path))
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        _emu_modules[path] = mod
    return mod


class InterpreterError(RuntimeError):
    pass


class InterpreterWorker:
    """A long-lived ``interp_worker.py --serve`` subprocess with ``TRITON_INTERPRET=1``."""

    def __init__(self):
        self.proc: Optional[subprocess.Popen] = None

    def _start(self):
        env = dict(os.environ)
        env["TRITON_INTERPRET"] = "1"
        self.proc = subprocess.Popen([sys.executable, str(WORKER), "--serve"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True,
                                     bufsize=1)
        self._read(120)

    def _read(self, timeout):
        r, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not r:
            self.close()
            raise InterpreterError(f"interpreter worker did not answer within {timeout} s")
        line = self.proc.stdout.readline()
        if not line:
            self.close()
            raise InterpreterError("interpreter worker exited")
        return json.loads(line)

    def run(self, module: Path, job: dict, kernel: str = "kernel") -> List[torch.Tensor]:
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        d = work_dir()
        job_path = d / f"job_{os.getpid()}.pt"
        res_path = d / f"res_{os.getpid()}.pt"
        torch.save(job, job_path)
        req = {"module": str(module), "kernel": kernel, "job": str(job_path), "result": str(res_path)}
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        reply = self._read(INTERP_TIMEOUT_S)
        if not reply.get("ok"):
            raise InterpreterError(reply.get("error", "unknown interpreter error"))
        return torch.load(res_path, weights_only=False)

    def close(self):
        if self.proc is not None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None


_worker: Optional[InterpreterWorker] = None


def worker() -> InterpreterWorker:
    global _worker
    if _worker is None:
        _worker = InterpreterWorker()
        atexit.register(_worker.close)
    return _worker


# ------------------------------------------------------------------------------------------------
# Float comparison helpers


_FLOAT_INFO = {
    # dtype: (int view dtype, sign mask, unit roundoff u = 2**-p, largest finite)
    torch.float32: (np.int32, 0x7FFFFFFF, 2.0**-24, float(torch.finfo(torch.float32).max)),
    torch.float16: (np.int16, 0x7FFF, 2.0**-11, float(torch.finfo(torch.float16).max)),
    torch.bfloat16: (np.int16, 0x7FFF, 2.0**-8, float(torch.finfo(torch.bfloat16).max)),
}


def bits(t: torch.Tensor) -> np.ndarray:
    view = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}[t.dtype]
    return t.contiguous().view(view).numpy().astype(np.int64)


def ordered(t: torch.Tensor) -> np.ndarray:
    """Integers in the order of the floats, one apart per ULP; -0.0 and +0.0 both map to 0."""
    b = bits(t)
    mag = b & _FLOAT_INFO[t.dtype][1]
    return np.where(b < 0, -mag, mag)


def ulp_distance(a: torch.Tensor, b: torch.Tensor) -> np.ndarray:
    return np.abs(ordered(a) - ordered(b))


def as_f64(t: torch.Tensor) -> np.ndarray:
    return t.to(torch.float64).numpy()


def as_int(t: torch.Tensor) -> np.ndarray:
    if t.dtype == torch.bool:
        return t.numpy().astype(np.int64)
    if t.dtype == torch.uint32:
        return t.view(torch.int32).numpy().view(np.uint32).astype(np.int64)
    return t.numpy().astype(np.int64)


@dataclass
class Mismatch:
    output: str
    kind: str
    detail: str
    indices: list = field(default_factory=list)

    def __str__(self):
        return f"{self.output} [{self.kind}]: {self.detail}"


# ------------------------------------------------------------------------------------------------
# Comparison (rules documented in fuzz_grammar's docstring)


def _first(idx_mask: np.ndarray, limit: int = 5) -> list:
    return [tuple(int(i) for i in ix) for ix in np.argwhere(idx_mask)[:limit]]


def _fmt(t: torch.Tensor, ix) -> str:
    v = t[ix].item()
    return repr(v)


def _blocked(v: np.ndarray, spec, out) -> np.ndarray:
    """The reduced axis of `out` made explicit: returns an array [..., k] (k terms per result) of the
    values a reduction/scan combined, zero-padded where the mask is off."""
    if spec.layout == "1d":
        (b, ), (g, ) = spec.block, spec.grid
        pad = np.zeros(g * b, dtype=v.dtype)
        pad[:v.shape[0]] = v
        return pad.reshape(g, b)
    (bm, bn), (gm, gn) = spec.block, spec.grid
    pad = np.zeros((gm * bm, gn * bn), dtype=v.dtype)
    pad[:v.shape[0], :v.shape[1]] = v
    if out.axis is None:
        return pad.reshape(gm, bm, gn, bn).transpose(0, 2, 1, 3).reshape(gm, gn, bm * bn)
    if out.axis == 1:
        return pad.reshape(gm * bm, gn, bn)
    return pad.reshape(gm, bm, gn * bn).transpose(0, 2, 1)  # [gm, N, bm]


def _unblock_scan(s: np.ndarray, spec, out) -> np.ndarray:
    if spec.layout == "1d":
        return s.reshape(-1)[:spec.extent[0]]
    if out.axis == 1:
        return s.reshape(s.shape[0], -1)[:spec.extent[0], :spec.extent[1]]
    gm, n, bm = s.shape
    return s.transpose(0, 2, 1).reshape(gm * bm, n)[:spec.extent[0], :spec.extent[1]]


def _sum_bound(spec, out, src_vals: torch.Tensor):
    """(abs-sum per result, any non-finite term per result, number of terms) for a sum/cumsum."""
    v = src_vals.to(torch.float64).numpy()
    blk = _blocked(v, spec, out)
    finite = np.isfinite(blk)
    absv = np.where(finite, np.abs(blk), 0.0)
    nonfin = ~finite
    k = blk.shape[-1]
    if out.kind == "sum":
        a, n = absv.sum(-1), nonfin.any(-1)
        if spec.layout == "2d" and out.axis is not None:  # crop the padding of the kept axis
            a, n = (a[:spec.extent[0]], n[:spec.extent[0]]) if out.axis == 1 else (a[:, :spec.extent[1]],
                                                                                  n[:, :spec.extent[1]])
        return a, n, k
    if out.reverse:
        absv, nonfin = absv[..., ::-1], nonfin[..., ::-1]
    a, n = np.cumsum(absv, -1), np.logical_or.accumulate(nonfin, -1)
    if out.reverse:
        a, n = a[..., ::-1], n[..., ::-1]
    return _unblock_scan(a, spec, out), _unblock_scan(n, spec, out), k


def compare(spec, got: List[torch.Tensor], exp: List[torch.Tensor]):
    """Returns (mismatches, number of skipped elements)."""
    from support.fuzz_grammar import TORCH_DTYPE
    mismatches: List[Mismatch] = []
    skipped = 0
    for out, g, e in zip(spec.outputs, got, exp):
        if g.dtype != e.dtype or g.shape != e.shape:
            mismatches.append(Mismatch(out.name, "shape", f"{g.dtype}{list(g.shape)} vs {e.dtype}{list(e.shape)}"))
            continue
        if out.kind == "value" and out.dtype == "bfloat16":
            # the interpreter's float32 -> bfloat16 cast truncates: round its float32 shadow ourselves
            e = exp[out.shadow].to(torch.bfloat16)
        if out.dtype not in ("float16", "float32", "bfloat16"):
            bad = as_int(g) != as_int(e)
            if bad.any():
                ix = _first(bad)
                mismatches.append(Mismatch(out.name, out.kind, f"{int(bad.sum())} of {bad.size} differ; first "
                                           + ", ".join(f"{i}: got {_fmt(g, i)} expected {_fmt(e, i)}" for i in ix),
                                           ix))
            continue
        gn, en = torch.isnan(g).numpy(), torch.isnan(e).numpy()
        if out.kind in ("value", "shadow"):
            if out.ulp == 0:
                bad = (bits(g) != bits(e)) & ~(gn & en)
            else:
                bad = (ulp_distance(g, e) > out.ulp) & ~(gn & en)
                bad |= gn != en
        elif out.kind in ("max", "min"):
            bad = (ulp_distance(g, e) > out.ulp) | (gn != en)
            bad &= ~(gn & en)
        elif out.kind in ("sum", "cumsum"):
            u = _FLOAT_INFO[TORCH_DTYPE[out.dtype]][2]
            fmax = _FLOAT_INFO[TORCH_DTYPE[out.dtype]][3]
            absum, nonfin, k = _sum_bound(spec, out, exp[out.source])
            gd, ed = as_f64(g), as_f64(e)
            tol = (2 * (k - 1) + 2 * out.ulp + 2) * u * absum
            skip = (absum > fmax / 2) & ~(np.isfinite(gd) & np.isfinite(ed))
            skipped += int(skip.sum())
            with np.errstate(invalid="ignore"):
                close = np.abs(gd - ed) <= tol
                same = (gd == ed) | (gn & en)
            bad = np.where(nonfin, ~same, ~close & ~(gn & en)) & ~skip
        else:
            raise AssertionError(out.kind)
        if bad.any():
            ix = _first(bad)
            note = f", {out.note}" if out.note else ""
            detail = (f"{int(bad.sum())} of {bad.size} differ (bound {out.ulp} ULP{note}); first "
                      + ", ".join(f"{i}: got {_fmt(g, i)} expected {_fmt(e, i)}" for i in ix))
            mismatches.append(Mismatch(out.name, out.kind, detail, ix))
    return mismatches, skipped


@dataclass
class CaseResult:
    mismatches: List[Mismatch]
    skipped: int = 0
    error: Optional[str] = None   # "emulator: ..." / "interpreter: ..."

    @property
    def ok(self):
        return not self.mismatches and self.error is None


def run_case(spec, device: str = "cpu") -> CaseResult:
    """Run `spec` on the apple backend (in this process, tensors on `device`: "cpu" for the emulator,
    "mps" on a Mac) and under the interpreter (worker process)."""
    import traceback
    from support.fuzz_grammar import KERNEL_NAME, build_args
    path = write_module(spec.source)
    args_e, out_idx = build_args(spec)
    try:
        if device != "cpu":
            args_e = [a.to(device) if isinstance(a, torch.Tensor) else a for a in args_e]
        fn = getattr(load_module(path), KERNEL_NAME)
        fn[spec.grid](*args_e, **spec.constexprs, num_warps=spec.num_warps)
        args_e = [a.cpu() if isinstance(a, torch.Tensor) else a for a in args_e]
    except Exception as e:  # a compile or launch failure is a finding too
        emu_err = "".join(traceback.format_exception_only(e)).strip()
    else:
        emu_err = None
    args_i, _ = build_args(spec)
    try:
        exp = worker().run(path, {"args": args_i, "kwargs": dict(spec.constexprs), "grid": spec.grid,
                                  "outputs": out_idx}, kernel=KERNEL_NAME)
    except InterpreterError as e:
        return CaseResult([], error="interpreter: " + str(e)[-3000:])
    if emu_err is not None:
        return CaseResult([], error="emulator: " + emu_err[-3000:])
    try:
        mism, skipped = compare(spec, [args_e[i] for i in out_idx], exp)
    except Exception:
        return CaseResult([], error="harness: " + traceback.format_exc()[-3000:])
    return CaseResult(mism, skipped)


def report(spec, res: CaseResult) -> str:
    lines = [spec.describe()]
    if res.error:
        lines.append(res.error)
    lines += [str(m) for m in res.mismatches]
    lines.append("kernel source:")
    lines.append(spec.source)
    return "\n".join(lines)

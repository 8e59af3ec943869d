"""The self-check (`python -m triton.backends.apple.selfcheck`) on Linux: the emulator half for real, the Metal
half on the MPS stand-in, at its quick sizes; the report must say what ran, what matched and what was timed."""
import os
import re
import subprocess
import sys

import torch
import triton

from triton.backends.apple import selfcheck, selfcheck_cases


def _check_report(text: str) -> None:
    assert text.startswith("# triton-apple self-check\n\n**Result: every check passed.**")
    assert re.search(r"\| Metal device \| none: the MPS stand-in", text)
    assert re.search(r"\| MSL version \| 3\.\d", text) and re.search(r"\| emulator \| .*clang", text)
    n = len(selfcheck_cases.CASES)
    assert f"{n} of {n} cases match" in text
    for case in selfcheck_cases.CASES:
        assert re.search(rf"\| `{case.name}` \| [^|]+ \| match \|", text), case.name
    number = r"([\d.]+(?:e[+-]\d+)?)"
    add = re.search(rf"\| 16384 \| {number} \| {number} \| {number} \| unknown \(not a Mac\) \| - \|", text)
    assert add and float(add.group(1)) > 0 and float(add.group(2)) > 0
    gemm = re.search(rf"\| 64 \| {number} \| {number} \| {number} \| {number} \|", text)
    assert gemm and float(gemm.group(1)) > 0 and float(gemm.group(4)) < 1e-2
    assert "timings are the emulator's and say nothing about Apple hardware" in text


def test_selfcheck_on_the_standin(mps):
    report = selfcheck.run(size="quick")
    _check_report(report.markdown())
    assert report.ok
    assert any(d.kernel == "vector_add" for d in mps.dispatches)  # the Metal half went through the stand-in
    assert any(d.kernel == "gemm" for d in mps.dispatches)


def test_the_command_writes_the_report(tmp_path):
    out = tmp_path / "selfcheck.md"
    env = dict(os.environ, TRITON_APPLE_DEVICE="emulator")
    res = subprocess.run([sys.executable, "-m", "triton.backends.apple.selfcheck", "--report", str(out)],
                         capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "self-check report written to" in res.stdout and "passed" in res.stdout
    _check_report(out.read_text(encoding="utf-8"))


def _driver_mode() -> str:
    return triton.runtime.driver.active.mode


def _differs(k, dev, g):
    return [torch.tensor([1.0 if _driver_mode() == "metal" else 2.0])]


def _signed_zero(k, dev, g):
    return [torch.tensor([-0.0 if _driver_mode() == "metal" else 0.0, float("nan")])]


def _fails_on_the_gpu(k, dev, g):
    if _driver_mode() == "metal":
        raise RuntimeError("boom")
    return [torch.zeros(1)]


def _close(k, dev, g):
    return [torch.tensor([1.0 + (1e-7 if _driver_mode() == "metal" else 0.0), float("inf")])]


def test_a_difference_fails_the_selfcheck(mps, monkeypatch):
    body = selfcheck_cases.CASES[0].body
    monkeypatch.setattr(selfcheck_cases, "CASES", [
        selfcheck_cases.Case("differs", "a planted difference", body, _differs),
        selfcheck_cases.Case("signed_zero", "-0.0 against 0.0, bit for bit", body, _signed_zero),
        selfcheck_cases.Case("fails", "a GPU error", body, _fails_on_the_gpu),
        selfcheck_cases.Case("close", "within tolerance", body, _close, 1e-6, 0.0),
    ])
    monkeypatch.setattr(selfcheck, "SIZES", {"quick": dict(add=[256], gemm=[64], warmup=0.1, rep=0.1)})
    report = selfcheck.run(size="quick")
    text = report.markdown()
    assert not report.ok and "**Result: FAILED**" in text
    assert "1 of 4 cases match" in text
    assert re.search(r"\| `differs` \| .* \| DIFFERENT \| 1\.0 \|", text)
    assert re.search(r"\| `signed_zero` \| .* \| DIFFERENT \|", text)
    assert re.search(r"\| `fails` \| .* \| gpu failed: RuntimeError: boom \|", text)
    assert re.search(r"\| `close` \| .* \| match \|", text)
    assert len(report.failures) == 3


def test_without_the_metal_half_the_report_is_incomplete():
    report = selfcheck.run(size="quick", metal="skip")
    text = report.markdown()
    assert report.exit_status == 2 and report.ok
    assert "**Result: incomplete** — the Metal half did not run (--metal skip): nothing was compared." in text
    assert f"0 of {len(selfcheck_cases.CASES)} cases match" in text and "| not compared |" in text
    assert "## Vector add" not in text

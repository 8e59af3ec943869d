"""tools/check_installed_triton.py, the check the macOS workflow runs on its wheel in a fresh virtualenv, run here
on this development install: it passes on the emulator, and each of its conditions fails with its reason (this
install's backend is an editable one, loaded from the checkout, which `--installed` refuses; no kernel runs on
`mps` here)."""
import os
import subprocess
import sys
from pathlib import Path

TOOL = Path(__file__).resolve().parents[2] / "tools" / "check_installed_triton.py"


def _run(tmp_path, *args):
    # from outside the checkout, as the workflow runs it
    return subprocess.run([sys.executable, str(TOOL), *args], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "TRITON_APPLE_DEVICE": "emulator"})


def test_it_runs_a_kernel_on_the_emulator_and_says_where_everything_came_from(tmp_path):
    res = _run(tmp_path, "--expect-device", "cpu")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "'apple'" in res.stdout and "apple backend from " in res.stdout
    assert "vector add of 1000 float32 on cpu: equal to torch" in res.stdout


def test_each_condition_fails_with_its_reason(tmp_path):
    res = _run(tmp_path, "--expect-device", "mps", "--installed")
    assert res.returncode == 1, res.stdout + res.stderr
    assert "FAILED: the kernel runs on cpu, expected mps" in res.stderr
    assert "not from this interpreter's site-packages" in res.stderr and "editable install" in res.stderr

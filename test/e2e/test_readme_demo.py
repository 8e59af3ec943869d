"""The README's sample output is what `python examples/demo.py` prints (times aside)."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _normalise(text: str) -> list:
    lines = [line.rstrip() for line in text.strip().splitlines()]
    lines = [re.sub(r"\s+[\d.]+ ms\b", " <time> ms", line) for line in lines]
    return [re.sub(r"(compiled kernels are cached in ).*\)$", r"\1<cache>)", line) for line in lines]


def _readme_sample() -> str:
    readme = (ROOT / "README.md").read_text()
    start = readme.index("prints their error against torch")
    block = re.search(r"```\n(.*?)```", readme[start:], re.S)
    assert block, "README: no sample output block after the demo's description"
    return block.group(1)


@pytest.mark.emulator_only
def test_readme_sample_output_is_the_demos():
    env = dict(os.environ, TRITON_APPLE_DEVICE="emulator")
    run = subprocess.run([sys.executable, "examples/demo.py"], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert _normalise(run.stdout) == _normalise(_readme_sample())

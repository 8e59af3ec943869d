"""The sanitizer is silent on correct kernels: a representative part of test/e2e (the tutorial kernels, layout
conversions through threadgroup memory, reductions on the SIMD builtins, atomics, scans, dots on simdgroup_matrix)
runs under TRITON_APPLE_EMULATOR_SANITIZE=race,init in a subprocess, with the profiler on too so that the run shows
its launches went through the instrumented libraries. Slow: the whole set takes minutes under the tools."""
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
FILES = ["test/e2e/test_tutorial_kernels.py", "test/e2e/test_layout_conversions.py",
         "test/e2e/test_reduce_builtins.py", "test/e2e/test_atomics.py", "test/e2e/test_scan_levels.py",
         "test/e2e/test_mma_register_operands.py"]


@pytest.mark.slow
def test_e2e_subset_is_silent_under_race_and_init(tmp_path):
    env = dict(os.environ, TRITON_APPLE_EMULATOR_SANITIZE="race,init", TRITON_APPLE_EMULATOR_SANITIZE_REPORT="error",
               TRITON_APPLE_EMULATOR_PROFILE="1")
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", *FILES], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=3600)
    summary = res.stdout.strip().splitlines()[-1] if res.stdout.strip() else ""
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-3000:]
    passed = int(re.search(r"(\d+) passed", summary).group(1))
    launches = res.stderr.count("emulator profile: ")
    assert passed > 100 and launches >= passed, (summary, launches)

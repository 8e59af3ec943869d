"""The macOS workflow (.github/workflows/macos.yml), read with a YAML parser: it parses, and it wires what the first
Mac run needs: upstream's build toolchain, macos-15 beside the larger runner, the Metal device probe and the decision
it feeds (the GPU steps run only where MPS is available and the probe found the device fit), a per-test timeout on
every pytest step, the wheel (built from the build's tree, uploaded, checked in a fresh virtualenv), the emulator
suite with every lowered kernel collected into an empty cache, Apple's compiler on the collection and on the probe
of unverified constructs, the self-check's report, the upload. The commands it runs exist with the options it
passes, and its per-test timeout does what it is there for (nothing here can run the workflow itself: it needs a
Mac)."""
import json
import re
import shlex
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "macos.yml"


def _job():
    doc = yaml.safe_load(WORKFLOW.read_text())
    (job, ) = doc["jobs"].values()
    return job


def _step(job, starts: str) -> dict:
    (step, ) = [s for s in job["steps"] if s.get("name", "").startswith(starts)]
    return step


def _index(job, step: dict) -> int:
    return job["steps"].index(step)


def _gpu_steps(job):
    return [s for s in job["steps"] if s.get("name", "").startswith("GPU: ")]


def test_it_parses_and_runs_on_macos_15_beside_the_larger_runner():
    job = _job()
    assert "macos-15" in job["strategy"]["matrix"]["runner"] and "macos-latest-xlarge" in job["strategy"]["matrix"]["runner"]
    assert job["strategy"]["fail-fast"] is False


def test_the_build_is_upstreams():
    job = _job()
    brew = _step(job, "Install Homebrew dependencies")["run"]
    assert all(f in brew.split() for f in ("llvm@19", "lld", "ccache"))
    assert "llvm@19" in _step(job, "Toolchain on PATH")["run"]
    build = _step(job, "Build Triton with the apple plugin")
    env = job["env"]  # the build's configuration is the job's, so that the wheel step builds with the same
    assert str(env["MAX_JOBS"]) == "3" and env["TRITON_BUILD_WITH_O1"] == "true"
    assert "libc++" in env["CXXFLAGS"] and "make dev-install" in build["run"]
    assert env["TRITON_PLUGIN_DIRS"].endswith("triton-apple/third_party/apple")
    assert env["TRITON_BUILD_WITH_CLANG_LLD"] == "TRUE"
    assert not {"MAX_JOBS", "TRITON_BUILD_WITH_O1", "CXXFLAGS", "TRITON_PLUGIN_DIRS"} & set(build.get("env", {}))
    assert '"pytest-timeout==2.4.0"' in build["run"]  # the pin of pyproject.toml and scripts/install.sh


def test_the_probe_runs_before_the_decision_and_the_gpu_steps_wait_for_it():
    job = _job()
    probe = _step(job, "Probe the Metal device")
    assert probe["if"] == "${{ !cancelled() }}" and probe["id"] == "probe" and probe["timeout-minutes"] <= 15
    run = probe["run"]
    assert "xcrun -sdk macosx clang -fobjc-arc" in run and "-framework Metal -framework Foundation" in run
    assert "tools/metal_device_probe.m" in run
    assert re.search(r'metal_device_probe" tools/metal_device_probe\.json --timeout \d+', run)
    assert all(f'--{o} "$REPORTS/metal_device_probe.{o.replace("markdown", "md")}"' in run for o in ("json", "markdown"))
    assert '--outputs "$GITHUB_OUTPUT"' in run and '"$GITHUB_STEP_SUMMARY"' in run
    gate = _step(job, "Decide whether the GPU steps run")
    assert gate["id"] == "gate" and _index(job, gate) > _index(job, probe)
    assert _index(job, gate) > _index(job, _step(job, "Check the build, look for the GPU"))
    # the gate reads every feature the probe's table reports, and MPS
    features = {k["feature"] for k in json.loads((ROOT / "tools" / "metal_device_probe.json").read_text())["kernels"]}
    read = set(re.findall(r"steps\.probe\.outputs\.(\w+)", json.dumps(gate["env"])))
    assert read == features, (read, features)
    assert gate["env"]["MPS"] == "${{ steps.gpu.outputs.mps }}"
    for var in gate["env"]:
        if var not in ("GPU_EXPECTED", ):
            assert f'"${var}"' in gate["run"], var  # each is part of the decision
    assert "run=true" in gate["run"] and "run=false" in gate["run"] and "GITHUB_STEP_SUMMARY" in gate["run"]
    assert "'GPU: ...'" in gate["run"]  # the summary names the steps it skips by their prefix
    gpu = _gpu_steps(job)
    assert len(gpu) == 3, [s["name"] for s in gpu]
    for step in gpu:
        assert "steps.gate.outputs.run == 'true'" in step["if"] and _index(job, step) > _index(job, gate)
        assert "steps.gpu.outputs.mps" not in step["if"]
        assert step["timeout-minutes"] <= 120
    # every step that waits for the decision is named so
    gated = [s for s in job["steps"] if "steps.gate.outputs.run == 'true'" in s.get("if", "")]
    assert gated == gpu


def test_every_pytest_step_has_a_per_test_timeout():
    job = _job()
    guard = shlex.split(job["env"]["PYTEST_HANG_GUARD"])
    assert "--timeout-method=thread" in guard and "-n" in guard and any(g.startswith("--timeout=") for g in guard)
    assert any(g.startswith("--max-worker-restart=") for g in guard)
    pytest_steps = [s for s in job["steps"] if "python -m pytest" in s.get("run", "")]
    assert len(pytest_steps) == 3 and _step(job, "GPU: the test suite") in pytest_steps
    for step in pytest_steps:
        for command in re.findall(r"python -m pytest[^\n]*", step["run"].replace("\\\n", " ")):  # continued lines
            assert "$PYTEST_HANG_GUARD" in command, (step["name"], command)


PLANTED = textwrap.dedent("""
    import time

    import pytest


    @pytest.mark.parametrize("i", range(3))
    def test_before(i):
        assert i >= 0


    def test_hangs():
        time.sleep(3600)


    @pytest.mark.parametrize("i", range(3))
    def test_after(i):
        assert i >= 0
""")


def test_the_hang_guard_fails_the_hung_test_and_the_run_goes_on(tmp_path):
    """The workflow's PYTEST_HANG_GUARD on a planted hanging test (its timeout shortened): that test fails, its
    worker is replaced, every other test passes, and the run ends."""
    (tmp_path / "test_planted.py").write_text(PLANTED)
    guard = shlex.split(_job()["env"]["PYTEST_HANG_GUARD"])
    start = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *guard, "--timeout=3",
                          "test_planted.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    out = res.stdout + res.stderr
    assert res.returncode == 1, out
    assert re.search(r"^1 failed, 6 passed", out, re.M), out
    assert re.search(r"^FAILED test_planted\.py::test_hangs\b", out, re.M), out
    assert "crashed while running 'test_planted.py::test_hangs'" in out, out
    assert time.monotonic() - start < 240


def test_the_wheel_is_built_uploaded_and_checked_in_a_fresh_virtualenv():
    job = _job()
    build, wheel = _step(job, "Build Triton with the apple plugin"), _step(job, "Wheel of Triton v3.9.0")
    assert _index(job, wheel) == _index(job, build) + 2  # right after the build (and the probe)
    assert wheel["working-directory"] == "triton" and "steps.build.outcome == 'success'" in wheel["if"]
    assert 'python -m pip wheel . --no-build-isolation --no-deps -w "$WHEELS"' in wheel["run"]
    upload = _step(job, "Upload the wheel")
    assert _index(job, upload) == _index(job, wheel) + 1 and "steps.wheel.outcome == 'success'" in upload["if"]
    assert upload["uses"].startswith("actions/upload-artifact@")
    assert upload["with"]["name"] == "triton-wheel-${{ join(matrix.runner, '-') }}"
    assert upload["with"]["path"] == "${{ env.WHEELS }}/triton-*.whl" and upload["with"]["if-no-files-found"] == "error"
    check = _step(job, "The wheel in a fresh virtualenv")
    assert _index(job, check) > _index(job, _step(job, "Decide whether the GPU steps run"))
    assert "steps.wheel.outcome == 'success'" in check["if"] and check["working-directory"] == "${{ runner.temp }}"
    run = check["run"]
    assert "python -m venv wheel-venv" in run and 'wheel-venv/bin/python -m pip install "$WHEELS"/triton-*.whl' in run
    assert "TRITON_APPLE_DEVICE=emulator wheel-venv/bin/python \"$check\" --installed --expect-device cpu" in run
    assert "TRITON_APPLE_DEVICE=metal wheel-venv/bin/python \"$check\" --installed --expect-device mps" in run
    assert check["env"]["ON_GPU"] == "${{ steps.gate.outputs.run }}" and '[ "$ON_GPU" = "true" ]' in run
    assert "tools/check_installed_triton.py" in run


def test_every_kernel_of_the_suite_meets_apples_compiler():
    job = _job()
    suite = _step(job, "The test suite on the emulator, every kernel's MSL collected")
    env = suite["env"]
    assert env["TRITON_APPLE_DEVICE"] == "emulator" and env["TRITON_APPLE_COLLECT_MSL"].endswith("msl-collection")
    assert "runner.temp" in env["TRITON_CACHE_DIR"]  # an empty cache: every kernel is lowered, so collected
    assert "pytest" in suite["run"] and " test " in suite["run"]
    compile_step = _step(job, "Apple's compiler on every collected kernel")["run"]
    assert 'tools/compile_with_xcrun.py "$REPORTS/msl-collection"' in compile_step
    assert 'tools/metal_surface.py --check-collection "$REPORTS/msl-collection"' in compile_step
    probe = _step(job, "Apple's compiler on the probe")["run"]
    assert "tools/compile_with_xcrun.py --probe tools/metal_probe.metal" in probe
    assert "downloadComponent MetalToolchain" in _step(job, "Apple's Metal compiler")["run"]
    names = [s.get("name", "") for s in job["steps"]]
    assert names.index("Apple's compiler on every collected kernel") > names.index(suite["name"])


def test_the_self_check_runs_and_its_report_is_uploaded():
    job = _job()
    step = _step(job, "Self-check")
    selfcheck = step["run"]
    assert 'python -m triton.backends.apple.selfcheck --metal "$metal" --report "$REPORTS/selfcheck.md"' in selfcheck
    # its Metal half runs on MPS only where the GPU steps do (a device the probe found unfit could hang)
    assert step["env"]["ON_GPU"] == "${{ steps.gate.outputs.run }}" and "metal=skip" in selfcheck
    assert _index(job, step) > _index(job, _step(job, "Decide whether the GPU steps run"))
    upload = _step(job, "Upload the reports")
    assert upload["if"] == "${{ always() }}" and upload["with"]["path"] == "${{ env.REPORTS }}"


def test_the_commands_it_runs_take_the_options_it_passes():
    for tool, options in (("compile_with_xcrun.py", ("--probe", "--out", "--jobs")),
                          ("metal_surface.py", ("--check-collection", )),
                          ("check_installed_triton.py", ("--installed", "--expect-device"))):
        text = subprocess.run([sys.executable, str(ROOT / "tools" / tool), "--help"], capture_output=True, text=True,
                              check=True).stdout
        assert all(o in text for o in options), (tool, text)
    from triton.backends.apple import selfcheck
    assert "--report" in subprocess.run([sys.executable, "-m", "triton.backends.apple.selfcheck", "--help"],
                                        capture_output=True, text=True, check=True).stdout
    assert "--metal" in subprocess.run([sys.executable, "-m", "triton.backends.apple.selfcheck", "--help"],
                                       capture_output=True, text=True, check=True).stdout
    assert (ROOT / "tools" / "metal_probe.metal").is_file() and selfcheck.__name__
    # the probe tool (compiled only on a Mac) takes the options the workflow passes, and reads its table
    tool = (ROOT / "tools" / "metal_device_probe.m").read_text()
    assert all(f'@"--{o}"' in tool for o in ("json", "markdown", "outputs", "timeout"))
    assert all(f'@"{key}"' in tool for key in ("kernels", "source", "name", "feature", "threadgroups",
                                                 "threads_per_threadgroup", "type", "outputs", "expected", "what"))


def test_the_install_instructions_name_what_the_workflow_uploads():
    """README's "On a Mac" and docs/mac.md tell a user to download a wheel artifact by name, for the Python the
    workflow built it with: the names are ones the workflow uploads, the Python is the workflow's."""
    job = _job()
    template = _step(job, "Upload the wheel")["with"]["name"]
    runners = json.loads(re.search(r"'(\[.*\])'", job["strategy"]["matrix"]["runner"]).group(1))  # the default
    uploaded = {template.replace("${{ join(matrix.runner, '-') }}", r) for r in runners}
    (python, ) = [s["with"]["python-version"] for s in job["steps"] if s.get("uses", "").startswith("actions/setup-python")]
    for doc in (ROOT / "README.md", ROOT / "docs" / "mac.md"):
        text = doc.read_text()
        named = set(re.findall(r"--name (triton-wheel-[\w-]+)", text))
        assert named and named <= uploaded, (doc.name, named, uploaded)
        assert f"python{python} -m venv" in text and "pip install wheel/triton-3.9.0*.whl" in text, doc.name

"""The macOS workflow (.github/workflows/macos.yml), read with a YAML parser: it parses, and it wires what issue 24
asks of the first Mac run: upstream's build toolchain, macos-15 beside the larger runner, the emulator suite with
every lowered kernel collected into an empty cache, Apple's compiler on the collection and on the probe, the
self-check's report, the upload. The commands it runs exist with the options it passes (nothing here can run
the workflow itself: it needs a Mac)."""
import subprocess
import sys
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
    assert str(build["env"]["MAX_JOBS"]) == "3" and build["env"]["TRITON_BUILD_WITH_O1"] == "true"
    assert "libc++" in build["env"]["CXXFLAGS"] and "make dev-install" in build["run"]
    assert build["env"]["TRITON_PLUGIN_DIRS"].endswith("triton-apple/third_party/apple")
    assert job["env"]["TRITON_BUILD_WITH_CLANG_LLD"] == "TRUE"


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
    selfcheck = _step(job, "Self-check")["run"]
    assert 'python -m triton.backends.apple.selfcheck --report "$REPORTS/selfcheck.md"' in selfcheck
    upload = _step(job, "Upload the reports")
    assert upload["if"] == "${{ always() }}" and upload["with"]["path"] == "${{ env.REPORTS }}"


def test_the_commands_it_runs_take_the_options_it_passes():
    for tool, options in (("compile_with_xcrun.py", ("--probe", "--out", "--jobs")),
                          ("metal_surface.py", ("--check-collection", ))):
        text = subprocess.run([sys.executable, str(ROOT / "tools" / tool), "--help"], capture_output=True, text=True,
                              check=True).stdout
        assert all(o in text for o in options), (tool, text)
    from triton.backends.apple import selfcheck
    assert "--report" in subprocess.run([sys.executable, "-m", "triton.backends.apple.selfcheck", "--help"],
                                        capture_output=True, text=True, check=True).stdout
    assert (ROOT / "tools" / "metal_probe.metal").is_file() and selfcheck.__name__

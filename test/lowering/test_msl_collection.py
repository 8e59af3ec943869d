"""TRITON_APPLE_COLLECT_MSL (lowering/collection.py) collects every kernel the backend lowers, and
tools/compile_with_xcrun.py compiles each at the MSL versions it targets: kernels of several op families, GPU
families and MSL versions are lowered with the knob set and an empty Triton cache, and the collection holds exactly
their sources, once each, with every target they were lowered for. The compile script runs against a stand-in for
Apple's compiler (test/support/fake_metal.py; no Mac here)."""
import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from triton.backends.apple.lowering import collection

from support.device import compile_for_apple, device_name

ROOT = Path(__file__).resolve().parents[2]


def _tool():
    spec = importlib.util.spec_from_file_location("compile_with_xcrun", ROOT / "tools" / "compile_with_xcrun.py")
    mod = sys.modules["compile_with_xcrun"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@triton.jit
def _axpy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + i, 2.0 * tl.load(x_ptr + i, mask=i < n) + tl.load(y_ptr + i, mask=i < n), mask=i < n)


@triton.jit
def _row_sum(x_ptr, out_ptr, N: tl.constexpr):
    r = tl.program_id(0)
    tl.store(out_ptr + r, tl.sum(tl.load(x_ptr + r * N + tl.arange(0, N)), axis=0))


@triton.jit
def _matmul(a_ptr, b_ptr, c_ptr, M: tl.constexpr):
    i = tl.arange(0, M)
    a = tl.load(a_ptr + i[:, None] * M + i[None, :])
    b = tl.load(b_ptr + i[:, None] * M + i[None, :])
    tl.store(c_ptr + i[:, None] * M + i[None, :], tl.dot(a, b))


@triton.jit
def _count(c_ptr, SEM: tl.constexpr):
    tl.atomic_add(c_ptr + tl.arange(0, 32) % 4, 1, sem=SEM)


@triton.jit
def _umax64(h_ptr, v_ptr):
    i = tl.arange(0, 32)
    tl.atomic_max(h_ptr + i % 2, tl.load(v_ptr + i))


@triton.jit
def _pow(x_ptr, n):
    i = tl.arange(0, 64)
    tl.store(x_ptr + i, libdevice.pow(tl.load(x_ptr + i), n))


@pytest.fixture(scope="module")
def collected(tmp_path_factory):
    """(collection directory, [(CompiledKernel, family)]) for kernels of several families, lowered fresh (once: a
    kernel the JIT has compiled in this process is not lowered again)."""
    tmp_path = tmp_path_factory.mktemp("collect")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
        mp.setenv("TRITON_APPLE_COLLECT_MSL", str(tmp_path / "msl"))
        return tmp_path / "msl", _compile_all(compile_for_apple, device_name())


def _compile_all(apple_compile, device):
    compiled = []
    x = torch.randn(100, device=device)
    y = torch.randn(100, device=device)
    compiled.append((_axpy[(2, )](x, y, 100, BLOCK=64), "apple7"))  # through the JIT and a launch
    for family in ("apple7", "apple9"):
        compiled.append((apple_compile(_row_sum, {"x_ptr": "*fp32", "out_ptr": "*fp32", "N": "constexpr"}, {"N": 64},
                                       family=family), family))
    compiled.append((apple_compile(_matmul, {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp32", "M": "constexpr"},
                                   {"M": 32}), "apple7"))
    for version in ("3.1", "3.2"):
        compiled.append((apple_compile(_count, {"c_ptr": "*i32", "SEM": "constexpr"}, {"SEM": "relaxed"},
                                       msl_version=version), "apple7"))
    compiled.append((apple_compile(_count, {"c_ptr": "*i32", "SEM": "constexpr"}, {"SEM": "acq_rel"}), "apple7"))
    compiled.append((apple_compile(_umax64, {"h_ptr": "*u64", "v_ptr": "*u64"}, family="apple9"), "apple9"))
    compiled.append((apple_compile(_pow, {"x_ptr": "*fp32", "n": "i32"}), "apple7"))
    # the same kernel again: Triton's cache serves it, nothing is lowered, the collection does not change
    compiled.append((apple_compile(_pow, {"x_ptr": "*fp32", "n": "i32"}), "apple7"))
    return compiled


@pytest.mark.slow  # the fixture lowers 10 kernels (about 20 s)
def test_every_lowered_kernel_is_collected_once_with_every_target(collected):
    directory, compiled = collected
    kernels = {k.digest: k for k in collection.load(str(directory))}
    sources = {collection.digest(k.asm["msl"]): k for k, _ in compiled}
    assert set(kernels) == set(sources) and len(kernels) == 7  # 10 compiles; _row_sum, relaxed _count, _pow share
    for digest, k in kernels.items():
        assert k.source == sources[digest].asm["msl"]
    for ck, family in compiled:
        k = kernels[collection.digest(ck.asm["msl"])]
        target = collection.CollectedTarget(ck.metadata.name, family, ck.metadata.msl_version, ck.metadata.msl_std,
                                            False)
        assert target in k.targets
    row_sum = kernels[collection.digest(compiled[1][0].asm["msl"])]
    assert sorted(t.family for t in row_sum.targets) == ["apple7", "apple9"]
    count = kernels[collection.digest(compiled[4][0].asm["msl"])]
    assert sorted(t.msl_version for t in count.targets) == ["3.1", "3.2"]
    fenced = kernels[collection.digest(compiled[6][0].asm["msl"])]
    assert [t.msl_std for t in fenced.targets] == ["metal3.2"]


def test_an_unwritable_collection_names_the_knob_and_the_kernel(tmp_path, monkeypatch, apple_compile):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TRITON_APPLE_COLLECT_MSL", str(blocker / "msl"))
    with pytest.raises(Exception, match="TRITON_APPLE_COLLECT_MSL=.*cannot write kernel '_pow'"):
        apple_compile(_pow, {"x_ptr": "*fp32", "n": "i32"})


def _fake() -> str:
    return f"{sys.executable} {ROOT / 'test' / 'support' / 'fake_metal.py'}"


@pytest.mark.slow  # the fixture lowers 10 kernels (about 20 s)
def test_apples_compiler_runs_on_every_source_at_each_version_it_targets(collected, tmp_path):
    directory, compiled = collected
    tool = _tool()
    assert tool.main([str(directory), "--out", str(tmp_path / "report"), "--metal", _fake(), "--jobs", "2"]) == 0
    report = json.loads((tmp_path / "report" / "xcrun_report.json").read_text())
    assert report["stds"] == ["metal3.1", "metal3.2"]  # the stand-in has no metal4.0: skipped, not failed
    by_source = {}
    for r in report["results"]:
        by_source.setdefault(r["digest"], []).append(r["std"])
        assert r["status"] == "ok"
    for fenced in (compiled[6][0], compiled[7][0]):  # acq_rel atomics: their #error guard stops them at 3.1
        assert fenced.metadata.msl_std == "metal3.2"
        assert by_source.pop(collection.digest(fenced.asm["msl"])) == ["metal3.2"]
    assert all(stds == ["metal3.1", "metal3.2"] for stds in by_source.values()) and len(by_source) == 5


@pytest.mark.slow  # the fixture lowers 10 kernels (about 20 s)
def test_a_rejected_or_warning_kernel_fails_the_run_with_apples_diagnostics(collected, tmp_path):
    directory, compiled = collected
    bad = tmp_path / "bad"
    shutil.copytree(directory, bad)
    for marker, kernel in (("FAKE_REJECT", "rejected_one"), ("FAKE_WARN", "warning_one")):
        src = f"kernel void {kernel}(device int* p [[buffer(0)]]) {{ int {marker} = 0; }}\n"
        d = collection.digest(src)
        (bad / f"{d}.metal").write_text(src)
        (bad / f"{d}.apple7.3.2.json").write_text(json.dumps({"kernel": kernel, "family": "apple7", "msl_version": "3.2",
                                                             "msl_std": "metal3.1", "fast_math": False}))
    out = tmp_path / "report"
    assert _tool().main([str(bad), "--out", str(out), "--metal", _fake()]) == 1
    md = (out / "xcrun_report.md").read_text()
    assert "## rejected: kernel `rejected_one` at -std=metal3.1" in md
    assert "use of undeclared identifier 'FAKE_REJECT'" in md
    assert "## warnings: kernel `warning_one` at -std=metal3.2" in md and "unused variable 'FAKE_WARN'" in md
    assert "9 sources, 16 compiles: 12 clean, 2 with warnings (fail under -Werror), 2 rejected" in md
    assert any(p.name.startswith("rejected-rejected_one-metal3.1") for p in out.iterdir())


def test_the_probe_report_puts_each_diagnostic_under_its_construct(tmp_path):
    probe = tmp_path / "probe.metal"
    probe.write_text("#include <metal_stdlib>\n// probe 0: fine\nkernel void a(device int* p [[buffer(0)]]) { p[0] = 0; }\n"
                     "// probe 1: questionable\nkernel void b(device int* p [[buffer(0)]]) {\n    p[0] = FAKE_REJECT;\n}\n")
    assert _tool().main(["--probe", str(probe), "--out", str(tmp_path / "r"), "--metal", _fake()]) == 0
    report = json.loads((tmp_path / "r" / "xcrun_report.json").read_text())["probe"]
    for std in ("metal3.1", "metal3.2"):
        assert report[std]["constructs"]["probe 0: fine"] == []
        assert report[std]["constructs"]["probe 1: questionable"] == ["error: use of undeclared identifier 'FAKE_REJECT'"]
    assert "| probe 1: questionable | error: use of undeclared identifier 'FAKE_REJECT' |" in \
        (tmp_path / "r" / "xcrun_report.md").read_text()


def test_the_checked_in_probe_covers_every_construct_with_a_kernel():
    text = (ROOT / "tools" / "metal_probe.metal").read_text()
    numbers = [int(line.split()[2].rstrip(":")) for line in text.splitlines() if line.startswith("// probe ")]
    assert numbers == list(range(len(numbers))) and len(numbers) > 20
    assert text.count("kernel void probe_") == len(numbers)  # one kernel per construct

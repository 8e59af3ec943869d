"""Kernel libraries compiled to an object and linked with the driver's own link line run directly (emulator/link.py):
the library is the file a one-call build writes, a link line that fails falls back to the one-call build, link
errors read as the driver reports them, and the driver's ``-###`` output is parsed strictly."""
import shutil
import time

import pytest
import torch

from support.emulator_msl import msl
from triton.backends.apple.emulator import build, clang, link

# Half and bfloat conversions (compiler-rt), a threadgroup barrier and a SIMD sum (runtime hooks), integer division
# (a sanitizer check): what the link has to resolve or leave to the runtime.
KERNEL = """
kernel void mix(device float* x [[buffer(0)]], device half* h [[buffer(1)]], device bfloat* b [[buffer(2)]],
                constant int& d [[buffer(3)]], uint tid [[thread_position_in_threadgroup]]) {
    threadgroup float t[32];
    t[tid] = x[tid] / (float)(int(tid) / d + 1);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float s = simd_sum(t[31 - tid]);
    h[tid] = (half)s;
    b[tid] = bfloat(s * 0.5f);
    x[tid] = s;
}
"""


def _source(tag: str) -> str:
    return msl(KERNEL + f"// {tag} {time.time_ns()}\n")


def _launch(kernel) -> list:
    x, h, b = torch.arange(32, dtype=torch.float32), torch.zeros(32, dtype=torch.float16), torch.zeros(32, dtype=torch.bfloat16)
    kernel.launch(grid=1, threadgroup=32, buffers=[x, h, b, torch.tensor([4], dtype=torch.int32)])
    return [x.tolist(), h.tolist(), b.tolist()]


@pytest.fixture
def fresh_link_lines(monkeypatch):
    """Link lines learned in this test only."""
    monkeypatch.setattr(link, "_lines", {})


def test_the_driver_gives_a_link_line_on_linux_and_none_on_macos(emu, fresh_link_lines):
    cxx = clang.find_compiler()
    line = link.link_line([cxx, *clang.KERNEL_FLAGS], clang.extra_link_flags())
    if clang.IS_DARWIN:  # the driver's dsymutil step would be lost (link.py)
        assert line is None
        return
    assert line is not None
    cmd = line.command("k.o", "k.so")
    assert cmd[line.object_index] == "k.o" and cmd[line.output_index - 1:line.output_index + 1] == ["-o", "k.so"]
    assert "-c" not in cmd and not any("triton-apple-link-probe" in a for a in cmd)


@pytest.mark.parametrize("tools", [False, True], ids=["plain", "tools"])
def test_split_build_writes_the_library_a_one_call_build_writes(emu, fresh_cache, fresh_link_lines, monkeypatch,
                                                               tools):
    src = _source("split")
    k = emu.compile_msl(src, "mix")
    split = (k._tools_library() if tools else k.so_path).read_bytes()
    got = _launch(k)
    assert sorted(p.name for p in k.so_path.parent.iterdir()) == sorted(
        [".lock", "entry.cpp", "mix.metal", build.KERNEL_LIB, "manifest.json"] +
        ([build.KERNEL_LIB + ".dSYM"] if clang.IS_DARWIN else []))  # no object left behind
    shutil.rmtree(k.so_path.parent)
    if tools:
        shutil.rmtree(k._tools_library().parent)
    emu.clear_memory_cache()
    with monkeypatch.context() as m:
        m.setattr(build, "link_line", lambda before, after: None)
        again = emu.compile_msl(src, "mix")
        one_call = (again._tools_library() if tools else again.so_path).read_bytes()
    assert not again.cache_hit
    assert split == one_call
    assert _launch(again) == got
    if not clang.IS_DARWIN:
        assert link._lines and all(line is not None for line in link._lines.values())  # the split path ran


def test_a_failing_link_line_falls_back_to_the_driver_and_is_dropped(emu, fresh_cache, monkeypatch):
    """A link line that no longer works (here: its linker is gone) costs one one-call build, once."""
    gone = link.LinkLine(("/nonexistent/ld.lld", "-shared", "-o", "OUTPUT", "OBJECT"), 4, 3)
    dropped = []
    monkeypatch.setattr(build, "link_line", lambda before, after: None if dropped else gone)
    monkeypatch.setattr(build, "forget_link_line", lambda before, after: dropped.append((before, after)))
    k = emu.compile_msl(_source("fallback"), "mix")
    assert not k.cache_hit and dropped == [([clang.find_compiler(), *clang.KERNEL_FLAGS], clang.extra_link_flags())]
    expected = _launch(emu.compile_msl(_source("reference"), "mix"))  # built by the one-call path
    assert _launch(k) == expected


def test_link_errors_read_as_the_driver_reports_them(emu, fresh_cache, fresh_link_lines, monkeypatch):
    real = build.extra_link_flags
    monkeypatch.setattr(build, "extra_link_flags", lambda: [*real(), "-lthis_library_does_not_exist"])
    with pytest.raises(emu.EmulatorCompileError, match=r"(?s)MSL compile of kernel 'mix' failed.*"
                       r"this_library_does_not_exist.*linker command failed") as info:
        emu.compile_msl(_source("linkerror"), "mix")
    assert info.value.kernel_name == "mix"


PROBE = "/tmp/triton-apple-link-probe-x"
LD = (' "/usr/bin/ld.lld" "--build-id" "-shared" "-o" "{d}/probe-library{s}" "/usr/lib/crti.o" "{d}/probe-object.o"'
      ' "-lm" "/usr/lib/crtn.o"')


def _job(**kw) -> str:
    return LD.format(d=PROBE, s=clang.SHLIB_SUFFIX, **kw)


def test_parse_link_job_takes_the_one_job_with_object_and_output():
    out = "clang version 22\nTarget: x86_64-pc-linux-gnu\nThread model: posix\nInstalledDir: /usr/bin\n" + _job()
    line = link.parse_link_job(out, PROBE)
    assert line.command("a.o", "a.so") == ["/usr/bin/ld.lld", "--build-id", "-shared", "-o", "a.so",
                                           "/usr/lib/crti.o", "a.o", "-lm", "/usr/lib/crtn.o"]


def test_parse_link_job_reads_quoted_arguments_as_the_driver_writes_them():
    out = _job() + ' "-rpath" "/opt/a \\"b\\" \\$c"'
    assert link.parse_link_job(out, PROBE).argv[-1] == '/opt/a "b" $c'


@pytest.mark.parametrize("out", [
    "",                                                                         # no job
    _job() + "\n" + ' "/usr/bin/dsymutil" "-o" "x.dSYM" "x"',                   # a second job (macOS's dsymutil)
    _job().replace(f"{PROBE}/probe-object.o", "other.o"),                       # the object is not in it
    _job() + f' "{PROBE}/probe-object.o"',                                      # the object twice
    _job().replace('"-o" ', ""),                                                # the output is not after -o
    _job() + f' "--Map={PROBE}/probe-library.map"',                             # something else from the probe
    _job().replace('"/usr/bin/ld.lld"', '"ld.lld"'),                           # a program that is not a path
    _job() + ' "unterminated',                                                  # unparsable
], ids=["none", "two-jobs", "no-object", "object-twice", "no-dash-o", "probe-dir-elsewhere", "relative-program",
        "unparsable"])
def test_parse_link_job_refuses_what_it_cannot_reproduce(out):
    assert link.parse_link_job(out, PROBE) is None


def test_a_driver_that_cannot_answer_gives_no_link_line(emu):
    assert link.ask_driver(["/nonexistent/clang++"], []) is None                  # does not start
    assert link.ask_driver([clang.find_compiler(), "--no-such-flag"], []) is None  # fails

"""The MSL version kernels are compiled for (target.MSL_VERSIONS, TRITON_APPLE_MSL_VERSION): what needs MSL 3.2 is
guarded in the source or refused at 3.1 naming macOS 15, and the emulator, compiling at the chosen version
(`__METAL_VERSION__`), rejects what that version rejects."""
import pytest
import torch
import triton
import triton.language as tl

from triton.backends.apple import knobs
from triton.backends.apple.errors import UnsupportedFeatureError
from triton.backends.apple.target import MSL_VERSIONS, default_msl_version, msl_version, msl_version_of_macos

from support.emulator_msl import line_of, msl


@triton.jit
def _add_one(x_ptr, n, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.store(x_ptr + i, tl.load(x_ptr + i, mask=i < n) + 1, mask=i < n)


@triton.jit
def _count(c_ptr, SEM: tl.constexpr):
    tl.atomic_add(c_ptr + tl.arange(0, 32) % 4, 1, sem=SEM)


@triton.jit
def _exchange64(h_ptr, v_ptr):
    tl.store(v_ptr, tl.atomic_xchg(h_ptr, tl.load(v_ptr)))


def _source(k) -> str:
    return k.asm["msl"]


def test_the_version_table_and_the_macos_each_belongs_to():
    assert [(v.name, v.number, v.macos, v.std) for v in MSL_VERSIONS.values()] == [
        ("3.1", 310, 14, "metal3.1"), ("3.2", 320, 15, "metal3.2"), ("4.0", 400, 26, "metal4.0")]
    assert [msl_version_of_macos(r) for r in ("14.7.1", "15.0", "15.4", "26.1", "27.0")] == [
        "3.1", "3.2", "3.2", "4.0", "4.0"]
    with pytest.raises(ValueError, match="unknown MSL version '3.0'"):
        msl_version("3.0")


def test_the_knob_chooses_and_refuses_other_values(monkeypatch):
    monkeypatch.setenv("TRITON_APPLE_MSL_VERSION", "3.1")
    assert default_msl_version() == "3.1"
    monkeypatch.setenv("TRITON_APPLE_MSL_VERSION", "3.3")
    with pytest.raises(knobs.KnobError, match="TRITON_APPLE_MSL_VERSION='3.3': expected one of 3.1, 3.2, 4.0"):
        default_msl_version()


@pytest.mark.parametrize("version", ["3.1", "3.2"])
def test_a_plain_kernel_is_the_same_source_at_every_version_and_needs_31(apple_compile, version):
    k = apple_compile(_add_one, {"x_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}, {"BLOCK": 64},
                      msl_version=version)
    src = _source(k)
    assert k.metadata.msl_std == "metal3.1"
    head = src.splitlines()[:5]
    assert head == ["#include <metal_stdlib>", "using namespace metal;", "#if __METAL_VERSION__ >= 320",
                    "#pragma METAL fp math_mode(safe)", "#endif"]
    assert "#error" not in src
    other = apple_compile(_add_one, {"x_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}, {"BLOCK": 64},
                          msl_version="3.2" if version == "3.1" else "3.1")
    assert _source(other) == src


def test_acquire_release_atomics_need_32_and_say_so_in_the_source(apple_compile):
    k = apple_compile(_count, {"c_ptr": "*i32", "SEM": "constexpr"}, {"SEM": "acq_rel"}, msl_version="3.2")
    src = _source(k)
    assert k.metadata.msl_std == "metal3.2"
    assert "atomic_thread_fence(mem_flags::mem_device, memory_order_seq_cst, thread_scope_device);" in src
    guard = src.splitlines()[5:8]
    assert guard[0] == "#if __METAL_VERSION__ < 320" and guard[2] == "#endif"
    assert guard[1].startswith("#error \"kernel '_count' needs MSL 3.2 (macOS 15): tt.atomic_rmw with sem='acq_rel'")


def test_acquire_release_atomics_are_refused_at_31_naming_macos_15_and_the_line(apple_compile):
    with pytest.raises(UnsupportedFeatureError) as ei:
        apple_compile(_count, {"c_ptr": "*i32", "SEM": "constexpr"}, {"SEM": "acq_rel"}, msl_version="3.1")
    text = str(ei.value)
    assert "kernel '_count' (op tt.atomic_rmw)" in text
    assert "needs MSL 3.2 (macOS 15), and this kernel is compiled for MSL 3.1 (macOS 14)" in text
    assert "pass sem='relaxed'" in text and "TRITON_APPLE_MSL_VERSION=3.2" in text
    assert f"test_msl_version.py:{_count.fn.__code__.co_firstlineno + 2}" in text  # the tl.atomic_add line


def test_relaxed_atomics_compile_and_run_at_31(monkeypatch, device):
    monkeypatch.setenv("TRITON_APPLE_MSL_VERSION", "3.1")
    c = torch.zeros(4, dtype=torch.int32, device=device)
    k = _count[(3, )](c, SEM="relaxed")
    assert k.metadata.msl_version == "3.1" and k.metadata.msl_std == "metal3.1"
    assert "atomic_thread_fence" not in k.asm["msl"]
    assert c.tolist() == [24, 24, 24, 24]


def test_locked_64_bit_atomics_are_refused_at_31(apple_compile):
    with pytest.raises(UnsupportedFeatureError, match="64-bit atomics under a lock .* needs MSL 3.2 \\(macOS 15\\)"):
        apple_compile(_exchange64, {"h_ptr": "*i64", "v_ptr": "*i64"}, msl_version="3.1")


def test_the_emulator_at_31_rejects_a_fence_naming_msl_32(emu, monkeypatch):
    src = msl("""
kernel void fenced(device atomic_int* c [[buffer(0)]]) {
    atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
    atomic_thread_fence(mem_flags::mem_device, memory_order_seq_cst, thread_scope_device);
}
""")
    emu.compile_msl(src, "fenced")  # the default, 3.2
    monkeypatch.setenv("TRITON_APPLE_MSL_VERSION", "3.1")
    with pytest.raises(emu.EmulatorCompileError) as ei:
        emu.compile_msl(src, "fenced")
    assert "'atomic_thread_fence' is unavailable: atomic_thread_fence needs MSL 3.2 (macOS 15)" in str(ei.value)
    assert line_of(src, "atomic_thread_fence") in ei.value.msl_lines


def test_a_kernel_lowered_for_32_does_not_compile_at_31_and_says_why(apple_compile, emu, monkeypatch):
    k = apple_compile(_count, {"c_ptr": "*i32", "SEM": "constexpr"}, {"SEM": "release"}, msl_version="3.2")
    monkeypatch.setenv("TRITON_APPLE_MSL_VERSION", "3.1")  # what macOS 14's compile_shader would compile at
    with pytest.raises(emu.EmulatorCompileError, match="kernel '_count' needs MSL 3.2 \\(macOS 15\\): tt.atomic_rmw "
                       "with sem='release'"):
        emu.compile_msl(k.asm["msl"], k.metadata.name)


def test_acquire_release_atomics_run_at_32(device):
    c = torch.zeros(4, dtype=torch.int32, device=device)
    _count[(2, )](c, SEM="acq_rel", msl_version="3.2")
    assert c.tolist() == [16, 16, 16, 16]

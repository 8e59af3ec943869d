"""Portability of the emulator's native code (issue 11): the limits header agrees with target.py, every native
source compiles for aarch64-linux-gnu, and (slow) the runtime runs kernels for AArch64 under qemu-user.

Tools these tests need (scripts/install.sh installs them): clang++-22 (clang-22), the AArch64 cross headers and
libraries (libc6-dev-arm64-cross, libstdc++-12-dev-arm64-cross), ld.lld-22 (lld-22), qemu-aarch64-static
(qemu-user-static) and nanobind's headers (pip: nanobind) for triton_apple.cc. A missing tool fails the test
with the package to install; nothing is skipped."""
import os
import re
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from triton.backends.apple import target
from triton.backends.apple.emulator import signature as sig
from triton.backends.apple.emulator import build, clang, link
from triton.backends.apple.emulator.launcher import LAUNCHER_SOURCE

INC, LIB = build.native_dirs()
APPLE = Path(__file__).resolve().parents[2] / "third_party" / "apple"
TARGET = "--target=aarch64-linux-gnu"


def _need_file(path: str, package: str) -> None:
    assert os.path.exists(path), f"{path} is missing: apt-get install {package}"


def _need_tool(name: str, package: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} not found: apt-get install {package}"
    return path


def _cross_ready() -> str:
    _need_file("/usr/aarch64-linux-gnu/include/stdio.h", "libc6-dev-arm64-cross")
    _need_file("/usr/aarch64-linux-gnu/include/c++", "libstdc++-12-dev-arm64-cross")
    return clang.find_compiler()


def _check(cmd, cwd=None):
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=300)
    assert res.returncode == 0, " ".join(map(str, cmd)) + "\n" + res.stderr[-4000:]
    return res


def test_limits_header_agrees_with_target_py():
    text = (INC / "metal_limits.h").read_text()
    defines = {m.group(1): int(m.group(2)) for m in re.finditer(r"#define (TT_EMU_\w+) (\d+)", text)}
    assert defines == {
        "TT_EMU_SIMD_WIDTH": target.SIMD_WIDTH,
        "TT_EMU_MAX_THREADS": target.MAX_THREADS_PER_THREADGROUP,
        "TT_EMU_MAX_SLOTS": target.MAX_BUFFER_SLOTS,
        "TT_EMU_TG_MEM_LIMIT": target.MAX_THREADGROUP_MEMORY,
    }
    # no other native file spells a limit of its own
    for path in list(INC.iterdir()) + list(LIB.iterdir()):
        if path.is_file() and path.name != "metal_limits.h":
            assert not re.search(r"#define TT_EMU_(SIMD_WIDTH|MAX_THREADS|MAX_SLOTS|TG_MEM_LIMIT)\b",
                                 path.read_text()), path


# A kernel that touches every part of the compat header the lowering uses: threadgroup arrays and barriers,
# SIMD functions, atomics, half/bfloat math, simdgroup_matrix, integer functions, vectors.
KITCHEN_SINK = """#include <metal_stdlib>
using namespace metal;
kernel void sink(device float* x [[buffer(0)]], device atomic_int* counter [[buffer(1)]],
                 device half* h [[buffer(2)]], device bfloat* b [[buffer(3)]], constant uint& n [[buffer(4)]],
                 uint tid [[thread_index_in_threadgroup]], uint2 gid [[thread_position_in_grid]],
                 uint lane [[thread_index_in_simdgroup]]) {
    threadgroup float tile[64];
    TT_THREADGROUP_BUFFER(scratch, 256);
    tile[tid] = x[gid.x];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float v = simd_sum(tile[63 - tid]) + simd_shuffle_xor(tile[tid], 1u);
    atomic_fetch_add_explicit(counter, (int)popcount(tid), memory_order_relaxed);
    h[gid.x] = (half)(metal::exp(v) * 1.5h);
    b[gid.x] = bfloat(metal::sqrt(fabs(v)));
    float4 f4 = float4{v, 1.0f, 2.0f, 3.0f};
    simdgroup_float8x8 a = make_filled_simdgroup_matrix<float, 8, 8>(f4.x);
    simdgroup_float8x8 c;
    simdgroup_multiply(c, a, a);
    simdgroup_store(c, (threadgroup float*)scratch, 8);
    x[gid.x] = dot(f4, f4) + float(n / (tid + 1)) + (float)mulhi(tid, n);
}
"""


def _kernel_tu(tmp: Path, src: str, name: str) -> Path:
    """The translation unit compile_msl builds: the rewritten MSL and the generated trampoline."""
    s = sig.parse_signature(src, name)
    tramp, _ = sig.make_trampoline(s, name + ".metal")
    (tmp / (name + ".metal")).write_text(sig.rewrite_source(src))
    entry = tmp / f"entry_{name}.cpp"
    entry.write_text(tramp)
    return entry


def test_native_sources_compile_for_aarch64_linux(tmp_path):
    cxx = _cross_ready()
    base = [cxx, TARGET, "-std=c++17", "-fsyntax-only", "-Wall", "-Werror", "-I", str(INC)]
    runtime = str(LIB / "emulator_runtime.cpp")
    _check(base + [runtime])                       # hand-written AArch64 context switch
    _check(base + ["-DTT_EMU_UCONTEXT=1", runtime])  # <ucontext.h> fallback
    entry = _kernel_tu(tmp_path, KITCHEN_SINK, "sink")
    flags = [f for f in clang.kernel_flags(x86_64=False, darwin=False) if f not in ("-shared", "-w")]
    _check([cxx, TARGET, *flags, "-fsyntax-only", "-I", str(INC), str(entry)])
    try:
        import nanobind
    except ImportError:
        raise AssertionError("nanobind's headers are needed to check triton_apple.cc: pip install nanobind") from None
    import sysconfig
    _check(base + ["-I", nanobind.include_dir(), "-I", sysconfig.get_paths()["include"], str(APPLE / "triton_apple.cc")])
    # the native launcher (emulator/native/launcher.c), a C extension: with this Python's headers (LP64 like AArch64)
    _check([cxx, TARGET, "-x", "c", "-std=c11", "-fsyntax-only", "-Wall", "-Werror", "-I", str(INC), "-I",
            sysconfig.get_paths()["include"], str(LAUNCHER_SOURCE)])


def test_kernel_flags_are_accepted_by_the_host_compiler_for_every_host_kind(tmp_path):
    """x86-64 only flags (-fexcess-precision=16) used to break every kernel compile on AArch64 and Macs.
    The macOS check compiles the kernel translation unit (which needs only <stddef.h>/<stdint.h>, here
    clang's own through -ffreestanding: no macOS SDK on this machine) with the Darwin flags."""
    cxx = _cross_ready()
    entry = _kernel_tu(tmp_path, KITCHEN_SINK, "sink")
    for tgt, x86, darwin, extra in (("--target=x86_64-linux-gnu", True, False, []), (TARGET, False, False, []),
                                    ("--target=arm64-apple-macos14", False, True, ["-ffreestanding"])):
        flags = [f for f in clang.kernel_flags(x86_64=x86, darwin=darwin) if f != "-shared"]
        _check([cxx, tgt, *extra, *flags, "-fsyntax-only", "-I", str(INC), str(entry)])


def test_split_build_writes_the_one_call_library_for_aarch64_linux(tmp_path):
    """The link line learned from the driver (emulator/link.py) on another target: compiling to an object and
    running that line gives the library the one-call build gives, byte for byte."""
    cxx = _cross_ready()
    _need_tool("ld.lld-22", "lld-22")
    before, after = [cxx, TARGET, "-fuse-ld=lld", *clang.kernel_flags(x86_64=False, darwin=False)], ["-lm"]
    line = link.ask_driver(before, after)
    assert line is not None and "aarch64" in " ".join(line.argv)
    entry = _kernel_tu(tmp_path, KITCHEN_SINK, "sink")
    _check([*before, "-I", str(INC), entry.name, *after, "-o", "one_call.so"], cwd=tmp_path)
    _check([*before, "-I", str(INC), "-c", entry.name, "-o", "sink.o"], cwd=tmp_path)
    _check(line.command("sink.o", "split.so"), cwd=tmp_path)
    assert (tmp_path / "split.so").read_bytes() == (tmp_path / "one_call.so").read_bytes()


DRIVER = r"""
// Runs kernels through the runtime's C ABI (emulator_runtime.h); built for AArch64 and run under qemu.
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include "emulator_runtime.h"

static int (*launch)(const tt_launch_desc *, tt_launch_result *);

static int run(const char *so, tt_buffer_desc *bufs, uint32_t nbuf, uint32_t grid, uint32_t tg, uint32_t timeout_ms,
               tt_launch_result *res) {
  void *h = dlopen(so, RTLD_NOW);
  if (!h) {
    printf("dlopen %s: %s\n", so, dlerror());
    return -100;
  }
  tt_launch_desc d;
  memset(&d, 0, sizeof(d));
  d.entry = (tt_entry_fn)dlsym(h, "__tt_emu_entry");
  d.kernel_name = so;
  d.grid[0] = grid;
  d.grid[1] = d.grid[2] = 1;
  d.tg[0] = tg;
  d.tg[1] = d.tg[2] = 1;
  d.nbuffers = nbuf;
  d.buffers = bufs;
  d.host_threads = 2;
  d.timeout_ms = timeout_ms;
  return launch(&d, res);
}

int main() {
  void *rt = dlopen("./runtime.so", RTLD_NOW | RTLD_GLOBAL);
  if (!rt) {
    printf("runtime: %s\n", dlerror());
    return 1;
  }
  launch = (int (*)(const tt_launch_desc *, tt_launch_result *))dlsym(rt, "tt_emu_launch");
  static tt_launch_result res;
  float x[128];
  for (int i = 0; i < 128; i++)
    x[i] = (float)i;
  tt_buffer_desc b[2];
  memset(b, 0, sizeof(b));
  b[0].host = x;
  b[0].nbytes = sizeof(x);
  b[0].elem_size = 4;
  b[0].name = "x";
  int st = run("./k_basic.so", b, 1, 2, 64, 0, &res);
  int ok = st == 0;
  for (int i = 0; i < 128; i++)
    ok = ok && x[i] == (float)((i / 64) * 64 + 63 - i % 64) + 32.0f;
  printf("basic ok=%d\n", ok);
  int off = -3000;
  b[1].host = &off;
  b[1].nbytes = 4;
  b[1].slot = 1;
  b[1].elem_size = 4;
  b[1].flags = TT_BUF_SCALAR | TT_BUF_READONLY;
  b[1].name = "off";
  st = run("./k_oob.so", b, 2, 1, 32, 0, &res);
  printf("oob ok=%d slot=%d index=%lld write=%d\n", st == TT_ERR_OOB, res.slot, (long long)res.index,
         res.is_write);
  int flag = 0;
  b[0].host = &flag;
  b[0].nbytes = 4;
  st = run("./k_spin.so", b, 1, 1, 4, 200, &res);
  printf("timeout ok=%d running=%d\n", st == TT_ERR_TIMEOUT, strstr(res.message, "running kernel code") != 0);
  int q[4] = {7, -7, 0, 9};
  b[0].host = q;
  b[0].nbytes = sizeof(q);
  st = run("./k_div.so", b, 1, 1, 4, 0, &res);
  printf("div ok=%d events=%u kind=%u q=%d,%d,%d,%d\n", st == 0, res.nevents, res.nevents ? res.events[0].kind : 0,
         q[0], q[1], q[2], q[3]);
  return 0;
}
"""

QEMU_KERNELS = {
    "basic": """kernel void basic(device float* x [[buffer(0)]], uint tid [[thread_index_in_threadgroup]],
                  uint gid [[thread_position_in_grid]]) {
    threadgroup float s[64];
    s[tid] = x[gid];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    x[gid] = s[63 - tid] + simd_sum(1.0f);
}""",
    "oob": """kernel void oob(device float* x [[buffer(0)]], constant int& off [[buffer(1)]],
                uint gid [[thread_position_in_grid]]) {
    x[gid] = x[(int)gid + off];
}""",
    "spin": """kernel void spin(device int* flag [[buffer(0)]]) {
    while (flag[0] == 0) { }
}""",
    "div": """kernel void div(device int* q [[buffer(0)]], uint tid [[thread_index_in_threadgroup]]) {
    q[tid] = q[tid] / q[2];
}""",
}


@pytest.mark.slow
def test_runtime_runs_kernels_on_aarch64_under_qemu(tmp_path):
    """The AArch64 paths (context switch, barrier/SIMD rendezvous, fault decoding with the base register,
    cancellation by signal, integer division that does not trap) executed under qemu-user."""
    cxx = _cross_ready()
    _need_tool("ld.lld-22", "lld-22")
    qemu = _need_tool("qemu-aarch64-static", "qemu-user-static")
    link = [TARGET, "-fuse-ld=lld"]
    _check([cxx, *link, *clang.RUNTIME_FLAGS, "-I", str(INC), str(LIB / "emulator_runtime.cpp"), "-o",
            "runtime.so", "-ldl"], cwd=tmp_path)
    flags = clang.kernel_flags(x86_64=False, darwin=False)
    for name, body in QEMU_KERNELS.items():
        entry = _kernel_tu(tmp_path, "#include <metal_stdlib>\nusing namespace metal;\n" + body, name)
        _check([cxx, *link, *flags, "-I", str(INC), entry.name, "-o", f"k_{name}.so", "-lm"], cwd=tmp_path)
    (tmp_path / "driver.cpp").write_text(textwrap.dedent(DRIVER))
    _check([cxx, *link, "-O1", "-I", str(INC), "driver.cpp", "-o", "driver", "-ldl"], cwd=tmp_path)
    res = _check([qemu, "-L", "/usr/aarch64-linux-gnu", "./driver"], cwd=tmp_path)
    out = res.stdout
    assert "basic ok=1" in out, out
    assert "oob ok=1 slot=0 index=-3000 write=0" in out, out  # a read, from the instruction (qemu has no ESR)
    assert "timeout ok=1 running=1" in out, out
    assert "div ok=1 events=1 kind=1 q=0,0,0,0" in out, out  # AArch64: x / 0 == 0, reported as an event

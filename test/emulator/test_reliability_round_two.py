"""Reliability, round two (issue 22): freed and shrunk storages, grids of index integers, the copy-back rule of
failed launches (device asserts included), evicted kernels whose cache entry went away, full disks, the
symbolizer at exit, fork safety, the launcher's trust rule and inline assembly."""
import errno
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from support.emulator_msl import line_of, msl
from triton.backends.apple.abi.debug_buffer import DeviceAssertionError
from triton.backends.apple.errors import KernelArgError

COPY = msl("""
kernel void copy(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                 uint i [[thread_position_in_grid]]) {
    y[i] = x[i] + 1.0f;
}
""")


def _run_python(tmp_path, code: str, timeout: float = 60, env=None) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter, from a file (triton.jit reads its kernels' source): a crash or a hang
    there fails the test, not the session."""
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(code))
    full_env = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=timeout,
                          env=full_env)


@triton.jit
def add_one(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(y_ptr + i, tl.load(x_ptr + i, mask=m) + 1, mask=m)


# ---- item 2: tensors whose storage was freed or shrunk ------------------------------------------------------


def test_freed_storage_is_refused_naming_the_parameter_not_a_crash(tmp_path):
    res = _run_python(tmp_path, """
        import torch, triton, triton.language as tl
        from triton.backends.apple import emulator as emu
        from triton.backends.apple.errors import KernelArgError
        src = '''#include <metal_stdlib>
        using namespace metal;
        kernel void copy(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                         uint i [[thread_position_in_grid]]) { y[i] = x[i] + 1.0f; }
        '''
        k = emu.compile_msl(src, "copy")
        x, y = torch.ones(256), torch.zeros(256)
        x.untyped_storage().resize_(0)
        try:
            k.launch(grid=1, threadgroup=256, buffers=[x, y])
        except emu.EmulatorLaunchError as e:
            print("API:", e.param, "|", e)

        @triton.jit
        def add_one(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
            i = tl.arange(0, BLOCK)
            tl.store(y_ptr + i, tl.load(x_ptr + i, mask=i < n) + 1, mask=i < n)
        a, b = torch.ones(64), torch.zeros(64)
        add_one[(1, )](a, b, 64, BLOCK=64)
        b.untyped_storage().resize_(0)
        try:
            add_one[(1, )](a, b, 64, BLOCK=64)
        except KernelArgError as e:
            print("JIT:", e)
    """)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "API: x |" in res.stdout and "storage" in res.stdout, res.stdout
    assert "JIT:" in res.stdout and "'y_ptr'" in res.stdout and "freed" in res.stdout, res.stdout


def test_shrunk_storage_is_refused_and_nothing_past_it_is_touched(emu):
    k = emu.compile_msl(COPY, "copy")
    big = torch.ones(1024)
    out = torch.zeros(1024)
    out.untyped_storage().resize_(256)  # 64 floats left; the view still says 1024
    after = torch.frombuffer(bytearray(16), dtype=torch.uint8)
    with pytest.raises(emu.EmulatorLaunchError, match=r"(?s)parameter 'y'.*storage.*256 bytes") as info:
        k.launch(grid=1, threadgroup=1024, buffers=[big, out])
    assert info.value.param == "y"
    assert not after.any()
    small = torch.ones(1024)
    small.untyped_storage().resize_(512)
    y = torch.zeros(1024)
    with pytest.raises(KernelArgError, match=r"kernel 'add_one' argument 'x_ptr'.*storage"):
        add_one[(4, )](small, y, 1024, BLOCK=256)
    assert not y.any()  # nothing ran


def test_a_view_inside_its_storage_still_launches(emu):
    k = emu.compile_msl(COPY, "copy")
    base = torch.arange(64, dtype=torch.float32)
    x, y = base[8:40], torch.zeros(32)
    k.launch(grid=1, threadgroup=32, buffers=[x, y])
    assert torch.equal(y, base[8:40] + 1)


# ---- item 6: grids of __index__ integers, refusals naming the kernel ------------------------------------------


@pytest.mark.parametrize("grid", [(np.int64(2), ), (torch.tensor(2), np.int32(1)), (2, torch.tensor(1), np.uint8(1))])
def test_grids_of_index_integers_launch(grid):
    x = torch.arange(512, dtype=torch.float32)
    y = torch.zeros(512)
    add_one[grid](x, y, 512, BLOCK=256)
    assert torch.equal(y, x + 1)


def test_grid_that_is_not_an_integer_names_the_kernel():
    x, y = torch.zeros(8), torch.zeros(8)
    with pytest.raises((KernelArgError, TypeError), match="add_one"):
        add_one[(1.5, )](x, y, 8, BLOCK=8)


def test_emulator_api_takes_index_integers(emu):
    k = emu.compile_msl(COPY, "copy")
    x, y = torch.ones(64), torch.zeros(64)
    k.launch(grid=(np.int64(2), ), threadgroup=np.int32(32), buffers=[x, y])
    assert torch.all(y == 2)
    with pytest.raises(emu.EmulatorLaunchError, match="kernel 'copy'"):
        k.launch(grid=(2.0, ), threadgroup=32, buffers=[x, y])


# ---- item 9: one copy-back rule: a failed launch leaves every argument untouched ------------------------------


@triton.jit
def assert_then_store(x_ptr, y_ptr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i)
    tl.device_assert(x < 100, "x must stay below 100")
    tl.store(x_ptr + i, x + 1)
    tl.store(y_ptr + i, x * 2)


def _check_assert_leaves_arguments_untouched():
    x, y = torch.zeros(32), torch.full((32, ), -1.0)
    assert_then_store[(1, )](x, y, BLOCK=32, debug=True)
    assert torch.equal(x, torch.ones(32)) and torch.equal(y, torch.zeros(32))
    x[5] = 1000
    x_before, y_before = x.clone(), y.clone()
    with pytest.raises(DeviceAssertionError, match=r"(?s)x must stay below 100.*idx \(5\)"):
        assert_then_store[(1, )](x, y, BLOCK=32, debug=True)
    assert torch.equal(x, x_before) and torch.equal(y, y_before)  # the asserting thread's store included


def test_failed_device_assert_leaves_every_output_untouched_on_the_emulator():
    _check_assert_leaves_arguments_untouched()


def test_failed_device_assert_leaves_every_output_untouched_on_the_metal_path(mps):
    _check_assert_leaves_arguments_untouched()


@triton.jit
def alias_assert(x_ptr, y_ptr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i)
    tl.device_assert(x >= 0, "negative")
    tl.store(y_ptr + i, x + 1)


def test_assert_kernels_keep_aliasing_between_views_of_one_storage():
    base = torch.arange(64, dtype=torch.float32)
    alias_assert[(1, )](base[:32], base[32:], BLOCK=32, debug=True)  # two views of one storage
    assert torch.equal(base[32:], torch.arange(32, dtype=torch.float32) + 1)
    assert torch.equal(base[:32], torch.arange(32, dtype=torch.float32))
    alias_assert[(1, )](base[8:40], base[8:40], BLOCK=32, debug=True)  # in place: what is read is what is written
    assert torch.equal(base[8:40], torch.cat([torch.arange(8, 32.0), torch.arange(1, 9.0)]) + 1)
    base[8] = -1
    before = base.clone()
    with pytest.raises(DeviceAssertionError, match="negative"):
        alias_assert[(1, )](base[:32], base[32:], BLOCK=32, debug=True)
    assert torch.equal(base, before)


# ---- item 5: an evicted kernel whose cache entry was removed is built again --------------------------------


def _fresh_src(tag: str, value: float) -> str:
    return msl(f"kernel void fresh(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]])"
               f" {{ x[i] = {value}f; }} // {tag} {os.getpid()} {time.time_ns()}\n")


def test_evicted_kernel_whose_entry_was_removed_is_rebuilt(emu, fresh_cache, monkeypatch):
    monkeypatch.setenv("TRITON_APPLE_EMULATOR_MAX_LOADED", "1")
    a = emu.compile_msl(_fresh_src("a", 1.0), "fresh")
    b = emu.compile_msl(_fresh_src("b", 2.0), "fresh")
    x = torch.zeros(4)
    a.launch(grid=1, threadgroup=4, buffers=[x])
    b.launch(grid=1, threadgroup=4, buffers=[x])  # unloads a's library
    assert str(a.so_path) not in emu.library.LOADED_LIBRARIES.loaded()
    shutil.rmtree(a.so_path.parent)  # a cache cleanup
    a.launch(grid=1, threadgroup=4, buffers=[x])
    assert x.tolist() == [1.0] * 4 and a.so_path.is_file()


# ---- item 7: full disks and missing files say so, with the path and the kernel ------------------------------


def test_disk_full_while_writing_a_cache_file_names_file_and_kernel(emu, fresh_cache, monkeypatch):
    from triton.backends.apple.emulator import cache
    real_fdopen = os.fdopen

    class FullDisk:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(cache.os, "fdopen", lambda fd, *a, **k: FullDisk(real_fdopen(fd, *a, **k)))
    with pytest.raises(emu.EmulatorCacheIOError, match=r"(?s)no space left.*fresh.*kernel 'fresh'") as info:
        emu.compile_msl(_fresh_src("full", 3.0), "fresh")
    assert info.value.errno == errno.ENOSPC and str(fresh_cache) in str(info.value)


def test_linker_crash_on_a_full_disk_is_reported_as_the_full_disk(emu, fresh_cache, monkeypatch):
    from triton.backends.apple.emulator import build
    real_run = build._run

    def crashing_link(cmd, cwd):
        return subprocess.CompletedProcess(cmd, 1, "", "PLEASE submit a bug report to https://github.com/llvm\n"
                                           "Stack dump:\n0. Program arguments: ld.lld ...\n"
                                           "clang++: error: unable to execute command: Bus error\n"
                                           "clang++: error: linker command failed due to signal\n")

    monkeypatch.setattr(build, "_run", crashing_link)
    monkeypatch.setattr(build, "free_bytes", lambda path: 4096)
    with pytest.raises(emu.EmulatorCacheIOError, match=r"(?s)no space left.*kernel 'fresh'.*4096 bytes free") as info:
        emu.compile_msl(_fresh_src("bus", 4.0), "fresh")
    assert "MSL compile" not in str(info.value)
    monkeypatch.setattr(build, "free_bytes", lambda path: 1 << 40)  # a crash with space left is the compiler's
    with pytest.raises(emu.EmulatorCompileError):
        emu.compile_msl(_fresh_src("bus2", 4.0), "fresh")


def test_cache_removed_under_a_compile_is_not_blamed_on_the_kernel(emu, fresh_cache, monkeypatch):
    from triton.backends.apple.emulator import build
    real_run = build._run

    def remove_then_run(cmd, cwd):
        shutil.rmtree(cwd)
        return real_run(cmd, "/")

    monkeypatch.setattr(build, "_run", remove_then_run)
    with pytest.raises(emu.EmulatorCacheIOError, match=r"(?s)went missing.*kernel 'fresh'.*removed"):
        emu.compile_msl(_fresh_src("gone", 5.0), "fresh")


# ---- item 4: the symbolizer never delays exit ----------------------------------------------------------------


EXIT_SCRIPT = '''
import os, time, torch
from triton.backends.apple import emulator as emu
src = """#include <metal_stdlib>
using namespace metal;
kernel void oob(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) { x[i + 100] = 1.0f; }
"""
k = emu.compile_msl(src, "oob")
try:
    k.launch(grid=1, threadgroup=1, buffers=[torch.zeros(4)])
except emu.EmulatorLaunchError as e:
    assert "MSL line" in str(e), e  # the symbolizer ran
pid = os.fork()
if pid == 0:  # alive at the parent's exit, its output away from the test's pipes
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 1)
    os.dup2(null, 2)
    time.sleep(30)
    os._exit(0)
print("PID", pid, "AT", time.monotonic(), flush=True)  # the clock is system-wide: the test reads it too
'''


def test_a_forked_child_alive_at_exit_does_not_delay_it(tmp_path):
    res = _run_python(tmp_path, EXIT_SCRIPT, timeout=60)
    exited = time.monotonic()
    child = int(res.stdout.split("PID")[1].split()[0])
    exit_delay = exited - float(res.stdout.split("AT")[1].split()[0])
    try:
        os.kill(child, 9)
    except ProcessLookupError:
        pass
    assert res.returncode == 0, res.stderr[-2000:]
    assert "Traceback" not in res.stderr and "TimeoutExpired" not in res.stderr, res.stderr[-2000:]
    # from the script's last statement to the end of the process: interpreter teardown (well under 1 s, even on
    # a loaded machine); the old exit waited 5 s more for the symbolizer, which the child kept alive
    assert exit_delay < 3.5, exit_delay


# ---- item 3: fork safety: children forked during a build, a launch and a fault --------------------------------


def _fork_and_wait(child, timeout: float = 60) -> int:
    """Run `child()` in a forked child (exit status 0 when it returns True); the child is killed when it does
    not finish within `timeout` seconds, so that a hang fails the test instead of stopping it."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = 0 if child() else 2
        except BaseException:  # noqa: BLE001 (the child reports through its exit status)
            import traceback
            traceback.print_exc()
        os._exit(code)
    return pid


def _reap(pid: int, timeout: float = 30) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return -9  # hung


SPIN = msl("""
kernel void spin(device atomic_int* flag [[buffer(0)]], device int* out [[buffer(1)]],
                 uint tid [[thread_position_in_grid]]) {
    while (atomic_load_explicit(flag, memory_order_relaxed) == 0) { }
    out[tid] = 7;
}
""")
OOB = msl("""
kernel void oob(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) {
    x[i + 1000] = 1.0f;
}
""")


def test_child_forked_during_a_build_launches_that_kernel(emu, fresh_cache, monkeypatch):
    from triton.backends.apple.emulator import build
    real_run = build._run
    entered, release = threading.Event(), threading.Event()

    def slow_run(cmd, cwd):
        entered.set()
        release.wait(30)
        return real_run(cmd, cwd)

    src = _fresh_src("fork during build", 6.0)
    monkeypatch.setattr(build, "_run", slow_run)
    builder = threading.Thread(target=emu.compile_msl, args=(src, "fresh"))
    builder.start()
    assert entered.wait(30)

    def child():
        build._run = real_run
        x = torch.zeros(4)
        emu.compile_msl(src, "fresh").launch(grid=1, threadgroup=4, buffers=[x])
        return x.tolist() == [6.0] * 4

    pid = _fork_and_wait(child)
    release.set()
    builder.join()
    assert _reap(pid) == 0


def test_child_forked_during_a_launch_launches(emu):
    spin = emu.compile_msl(SPIN, "spin")  # spins on its copy of the flag: until the launch's timeout
    copy = emu.compile_msl(COPY, "copy")
    flag, out = torch.zeros(1, dtype=torch.int32), torch.zeros(4, dtype=torch.int32)
    errors = []

    def spinning():
        try:
            spin.launch(grid=1, threadgroup=4, buffers=[flag, out], timeout=1.5)
        except emu.EmulatorLaunchError as e:
            errors.append(e.kind)

    launcher = threading.Thread(target=spinning)
    launcher.start()
    time.sleep(0.3)  # the spinning launch holds the runtime

    def child():
        x, y = torch.ones(8), torch.zeros(8)
        copy.launch(grid=1, threadgroup=8, buffers=[x, y])
        return torch.all(y == 2).item()

    pid = _fork_and_wait(child)
    launcher.join(30)
    assert errors == ["timeout"]
    assert _reap(pid) == 0


def test_child_forked_during_a_fault_reports_its_own(emu, monkeypatch):
    from triton.backends.apple.emulator import symbolizer
    k = emu.compile_msl(OOB, "oob")
    line = f"MSL line {line_of(OOB, 'x[i + 1000]')}"
    with pytest.raises(emu.EmulatorLaunchError, match=line):
        k.launch(grid=1, threadgroup=1, buffers=[torch.zeros(4)])  # the session's symbolizer runs
    sym = symbolizer._SYMBOLIZER
    real_query = sym._query
    entered, release = threading.Event(), threading.Event()

    def slow_query(module, offset):
        entered.set()
        release.wait(30)
        return real_query(module, offset)

    monkeypatch.setattr(sym, "_query", slow_query)
    sym._cache.clear()
    faulting = threading.Thread(target=lambda: pytest.raises(emu.EmulatorLaunchError, k.launch, grid=1,
                                                             threadgroup=2, buffers=[torch.zeros(4)]))
    faulting.start()
    assert entered.wait(30)  # the parent's thread holds the symbolizer, mid-query

    def child():
        symbolizer._SYMBOLIZER._query = real_query
        try:
            k.launch(grid=1, threadgroup=3, buffers=[torch.zeros(4)])
        except emu.EmulatorLaunchError as e:
            return line in str(e)
        return False

    pid = _fork_and_wait(child)
    release.set()
    faulting.join(30)
    assert _reap(pid) == 0


# ---- item 1: the native launcher passes the same trust rule as the kernel libraries --------------------------


LAUNCHER_PLANT = '''
import os, sys
from pathlib import Path
from triton.runtime.build import compile_so_from_file
from triton.backends.apple.emulator import launcher as L
from triton.backends.apple.emulator import EmulatorCacheError
path = Path(L._compile_launcher().__file__)  # the real one, compiled into this cache
mode = sys.argv[1]
planted = path.read_bytes()
os.unlink(path)
path.write_bytes(planted)  # "another user's" file at the launcher's key
if mode == "writable":
    os.chmod(path, 0o666)
elif mode == "dir-writable":
    os.chmod(path.parent, 0o777)
elif mode == "owner":
    os.chown(path, 12345, 12345)
L._launcher = None
sys.modules.pop("apple_launcher", None)
from triton.backends.apple.emulator import cache
cache._trusted_dirs.clear()  # checked when the real one loaded: a fresh process would check it again
try:
    L._compile_launcher()
    print("LOADED")
except EmulatorCacheError as e:
    print("REFUSED", e)
'''


@pytest.mark.parametrize("mode", ["writable", "dir-writable", "owner"])
def test_planted_launcher_is_refused_naming_file_and_rule(tmp_path, mode):
    if mode == "owner" and os.geteuid() != 0:
        pytest.skip("needs root to give a file to another user")
    script = tmp_path / "plant.py"
    script.write_text(LAUNCHER_PLANT)
    env = dict(os.environ, TRITON_CACHE_DIR=str(tmp_path / "shared"))
    res = subprocess.run([sys.executable, str(script), mode], capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "REFUSED" in res.stdout, res.stdout + res.stderr[-2000:]
    assert "apple_launcher" in res.stdout and "the rule:" in res.stdout
    assert "C compiler" not in res.stdout and "could not be compiled" not in res.stdout


# ---- item 8: inline assembly is refused by name, not an internal parse error --------------------------------


@triton.jit
def asm_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    y = tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [tl.load(x_ptr + i)], dtype=tl.int32, is_pure=True,
                                  pack=1)
    tl.store(y_ptr + i, y)


def test_inline_asm_is_refused_naming_op_kernel_and_line():
    from triton.backends.apple.errors import UnsupportedFeatureError
    x = torch.arange(32, dtype=torch.int32)
    with pytest.raises(UnsupportedFeatureError,
                       match=r"(?s)kernel 'asm_kernel'.*tt.elementwise_inline_asm.*Metal cannot run.*"
                             r"test_reliability_round_two.py:\d+"):
        asm_kernel[(1, )](x, torch.empty_like(x), BLOCK=32)

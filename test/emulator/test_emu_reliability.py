"""Reliability of the emulator (issue 12): concurrent compiles, a cache that heals, loops that keep their
meaning, launches that can be interrupted or time out, out-of-bounds attribution, argument errors, memory,
cache permissions and the cost of a failing launch."""
import os
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
import warnings

import pytest
import torch

from support.emulator_msl import line_of, msl
from triton.backends.apple.emulator.build import KERNEL_LIB

SPIN = msl("""
kernel void spin(device int* flag [[buffer(0)]],
                 device int* out [[buffer(1)]],
                 uint tid [[thread_position_in_grid]]) {
    while (flag[0] == 0) { }
    out[tid] = 7;
}
""")
SPIN_LINE = line_of(SPIN, "while (flag[0] == 0)")


def _unique_kernel(tag: str) -> str:
    """A kernel whose source (hence cache key) is new in every test run."""
    return msl(f"""
kernel void fresh(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) {{
    x[i] = x[i] + {time.time_ns() % 1000003 + 1}.0f; // {tag}
}}
""")


def _entry_dir(kernel) -> "os.PathLike":
    return kernel.so_path.parent


# ---- compile and cache -------------------------------------------------------------------------------


def test_threads_compiling_the_same_new_kernel_all_succeed(emu, fresh_cache):
    src = _unique_kernel("threads")
    results, errors = [], []
    barrier = threading.Barrier(8)

    def work():
        try:
            barrier.wait()
            results.append(emu.compile_msl(src, "fresh"))
        except BaseException as e:  # noqa: BLE001 - collected and asserted below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(results) == 8
    assert len({str(k.so_path) for k in results}) == 1
    assert sum(not k.cache_hit for k in results) == 1  # built once, the other seven found it
    entry = _entry_dir(results[0])
    assert not [p for p in os.listdir(entry) if p.startswith(".tmp-")]
    x = torch.zeros(4)
    results[3].launch(grid=1, threadgroup=4, buffers=[x])
    assert torch.all(x > 0)


def _rewrite(path, data: bytes):
    """Replace the file's content through a new inode: this process has the library mapped, and writing
    into a mapped library would damage the running copy, not (only) the cached one."""
    os.unlink(path)
    path.write_bytes(data)


def _damage_truncate(path):
    data = path.read_bytes()
    _rewrite(path, data[:len(data) // 2])


def _damage_garbage(path):
    _rewrite(path, os.urandom(path.stat().st_size))


def _damage_edit(path):
    _rewrite(path, path.read_bytes().replace(b"x[i] = x[i] +", b"x[i] = x[i] -"))


@pytest.mark.parametrize("target,damage", [
    (KERNEL_LIB, _damage_truncate),
    (KERNEL_LIB, _damage_garbage),
    ("fresh.metal", _damage_garbage),
    ("fresh.metal", _damage_edit),
    ("entry.cpp", _damage_truncate),
    ("manifest.json", _damage_garbage),
])
def test_damaged_cache_entry_is_rebuilt_with_one_warning(emu, fresh_cache, target, damage):
    src = _unique_kernel(f"damage {target} {damage.__name__}")
    k = emu.compile_msl(src, "fresh")
    entry = _entry_dir(k)
    damage(entry / target)
    emu.clear_memory_cache()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        k2 = emu.compile_msl(src, "fresh")
    cache_warnings = [w for w in caught if issubclass(w.category, emu.EmulatorCacheWarning)]
    assert len(cache_warnings) == 1, [str(w.message) for w in caught]
    assert str(entry / target) in str(cache_warnings[0].message)
    assert not k2.cache_hit
    assert emu.cache._verify(entry, [KERNEL_LIB]) is None  # intact again
    x = torch.zeros(4)
    k2.launch(grid=1, threadgroup=4, buffers=[x])
    assert torch.all(x > 0)
    # and the next compile is a plain cache hit, without a warning
    emu.clear_memory_cache()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert emu.compile_msl(src, "fresh").cache_hit


RUNTIME_DAMAGE_CHILD = textwrap.dedent("""
    import warnings, torch
    from triton.backends.apple import emulator
    warnings.simplefilter("always")
    src = '''#include <metal_stdlib>
    using namespace metal;
    kernel void k(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) { x[i] = 2.0f; }
    '''
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        k = emulator.compile_msl(src, "k")
    x = torch.zeros(4)
    k.launch(grid=1, threadgroup=4, buffers=[x])
    assert x.tolist() == [2.0] * 4
    print("WARNINGS", [str(w.message) for w in caught if issubclass(w.category, emulator.EmulatorCacheWarning)])
""")


@pytest.mark.slow
def test_damaged_runtime_library_is_rebuilt(emu, tmp_path):
    """A truncated runtime library used to kill every later process with SIGBUS."""
    import shutil
    so = emu.build.build_runtime()
    cache = tmp_path / "cache" / "apple_emulator"
    shutil.copytree(so.parent, cache / so.parent.name)  # the built runtime, with its manifest
    _damage_truncate(cache / so.parent.name / so.name)
    env = dict(os.environ, TRITON_CACHE_DIR=str(tmp_path / "cache"))
    res = subprocess.run([sys.executable, "-c", RUNTIME_DAMAGE_CHILD], env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("WARNINGS"))
    assert line.count("rebuilding it") == 1 and str(cache / so.parent.name / so.name) in line


KILLED_COMPILE_CHILD = textwrap.dedent("""
    import sys
    from triton.backends.apple import emulator
    emulator.library.runtime_library()
    print("READY", flush=True)
    emulator.compile_msl(sys.stdin.read(), "fresh")
""")


def test_compile_killed_halfway_leaves_nothing_that_breaks_the_next_one(emu, fresh_cache, tmp_path):
    src = _unique_kernel("killed")
    env = dict(os.environ, TRITON_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.Popen([sys.executable, "-c", KILLED_COMPILE_CHILD], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "READY"
    proc.stdin.write(src)
    proc.stdin.close()
    deadline = time.time() + 60
    temporaries = []
    while time.time() < deadline and not temporaries:  # wait until clang writes its output temporary
        temporaries = [os.path.join(d, f) for d, _, fs in os.walk(fresh_cache) for f in fs
                       if f.startswith(".tmp-") and "kernel" in f]
        time.sleep(0.002)
    proc.kill()
    proc.wait()
    assert temporaries, "the child never started compiling"
    # The killed child's compiler (clang, its linker) is an orphan that may still write its output temporary;
    # the next compile removes temporaries of dead writers, so wait until no process writes into the cache.
    deadline = time.time() + 60
    while time.time() < deadline:
        ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        if str(fresh_cache) not in ps:
            break
        time.sleep(0.05)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an unfinished entry is not damage: no warning
        k = emu.compile_msl(src, "fresh")
    assert not k.cache_hit
    assert sorted(os.listdir(_entry_dir(k))) == sorted([".lock", "entry.cpp", "fresh.metal", KERNEL_LIB, "manifest.json"]
                                                       + ([KERNEL_LIB + ".dSYM"] if sys.platform == "darwin" else []))
    x = torch.zeros(4)
    k.launch(grid=1, threadgroup=4, buffers=[x])
    assert torch.all(x > 0)


def test_msl_source_that_is_not_text_names_the_kernel(emu):
    with pytest.raises(emu.EmulatorCompileError, match="kernel 'k'.*not UTF-8.*offset 3") as ei:
        emu.compile_msl(b"abc\xff\xfe", "k")
    assert ei.value.kernel_name == "k"


# ---- loops, interrupts, timeouts --------------------------------------------------------------------


def test_spin_loop_is_not_deleted_and_times_out(emu):
    k = emu.compile_msl(SPIN, "spin")
    out = torch.zeros(4, dtype=torch.int32)
    t0 = time.perf_counter()
    with pytest.raises(emu.EmulatorLaunchError) as ei:
        k.launch(grid=1, threadgroup=4, buffers=[torch.zeros(1, dtype=torch.int32), out], timeout=0.3)
    assert time.perf_counter() - t0 < 5
    e = ei.value
    assert e.kind == "timeout" and e.kernel_name == "spin" and e.msl_lines == [SPIN_LINE]
    assert "kernel 'spin': timed out" in str(e) and "running kernel code" in str(e)
    assert f"at MSL line {SPIN_LINE}" in str(e)
    assert out.tolist() == [0, 0, 0, 0]  # nothing invented, nothing copied back
    # the runtime is usable afterwards, and the loop does end when the flag is set
    k.launch(grid=1, threadgroup=4, buffers=[torch.ones(1, dtype=torch.int32), out])
    assert out.tolist() == [7, 7, 7, 7]


BARRIER_SPIN = msl("""
kernel void bspin(device int* flag [[buffer(0)]],
                  uint tid [[thread_index_in_threadgroup]]) {
    if (tid == 5) {
        while (flag[0] == 0) { }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    flag[1] = 1;
}
""")


def test_timeout_knob_says_where_every_thread_is(emu, monkeypatch):
    monkeypatch.setenv("TRITON_APPLE_EMULATOR_TIMEOUT", "0.2")
    k = emu.compile_msl(BARRIER_SPIN, "bspin")
    with pytest.raises(emu.EmulatorLaunchError) as ei:
        k.launch(grid=3, threadgroup=32, buffers=[torch.zeros(2, dtype=torch.int32)], host_threads=2,
                 schedule="forward")
    msg = str(ei.value)
    barrier = line_of(BARRIER_SPIN, "threadgroup_barrier")
    assert ei.value.kind == "timeout" and "TRITON_APPLE_EMULATOR_TIMEOUT allows 0.20 s" in msg
    assert "thread 5 (position (5,0,0)" in msg and "running kernel code" in msg
    assert f"threads 0-4 wait at threadgroup_barrier (MSL line {barrier}:" in msg
    assert "threads 5 are still running" in msg and "threads 6-31 have not started" in msg
    assert "0 of 3 threadgroups had finished" in msg


@pytest.mark.parametrize("host_threads", [1, 2])
def test_sigint_interrupts_a_spinning_launch(emu, host_threads, sigint_raises):
    k = emu.compile_msl(SPIN, "spin")
    out = torch.zeros(64, dtype=torch.int32)
    timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    t0 = time.perf_counter()
    try:
        with pytest.raises(KeyboardInterrupt):
            k.launch(grid=2, threadgroup=32, buffers=[torch.zeros(1, dtype=torch.int32), out],
                     host_threads=host_threads)
    finally:
        timer.cancel()
    assert time.perf_counter() - t0 < 5
    assert out.tolist() == [0] * 64
    k.launch(grid=2, threadgroup=32, buffers=[torch.ones(1, dtype=torch.int32), out], host_threads=host_threads)
    assert out.tolist() == [7] * 64


# ---- out-of-bounds attribution ------------------------------------------------------------------------

OOB = msl("""
kernel void far(device const float* x [[buffer(0)]],
                device float* out [[buffer(1)]],
                constant int& off [[buffer(2)]],
                uint gid [[thread_position_in_grid]]) {
    out[gid] = x[(int)gid + off];
}
""")


@pytest.mark.parametrize("off", [-100_000_000, 100_000_000, -(2**31), 2**31 - 1 - 64])
def test_far_out_of_bounds_is_blamed_on_the_pointer_it_came_from(emu, off):
    """A load 400 MB before `x` used to be reported against the scalar `off`."""
    k = emu.compile_msl(OOB, "far")
    with pytest.raises(emu.EmulatorLaunchError) as ei:
        k.launch(grid=1, threadgroup=64, buffers=[torch.zeros(64), torch.zeros(64), emu.Scalar(off, "int")],
                 schedule="forward", host_threads=1)
    e = ei.value
    assert e.kind == "out_of_bounds" and e.param == "x" and e.slot == 0 and e.index == off
    assert "a guess" not in str(e)


GUESS = msl("""
kernel void guess(device const float* x [[buffer(0)]],
                  device float* out [[buffer(1)]],
                  constant ulong& addr [[buffer(2)]],
                  uint gid [[thread_position_in_grid]]) {
    device const float* p = (device const float*)addr;
    out[gid] = p[gid];
}
""")


def test_address_from_nowhere_is_a_labelled_guess_never_a_scalar(emu):
    k = emu.compile_msl(GUESS, "guess")
    x = torch.zeros(64)
    addr = x.data_ptr() - (1 << 36)  # an integer turned into a pointer: no provenance
    with pytest.raises(emu.EmulatorLaunchError) as ei:
        k.launch(grid=1, threadgroup=1, buffers=[x, torch.zeros(1), emu.Scalar(addr, "ulong")])
    e = ei.value
    assert e.param != "addr"
    if e.param is not None:  # the nearest buffer, and saying so
        assert "a guess" in str(e)
    else:
        assert "not inside any bound buffer" in str(e)


# ---- argument errors ------------------------------------------------------------------------------------

ARGS = msl("""
kernel void args(device float* x [[buffer(0)]],
                 constant float& scale [[buffer(1)]],
                 constant int& n [[buffer(2)]],
                 uint i [[thread_position_in_grid]]) {
    if ((int)i < n) x[i] = x[i] * scale;
}
""")


@pytest.mark.parametrize("kwargs,pattern", [
    (dict(grid=-1), r"kernel 'args': grid \(-1,\): dimension x is -1; each dimension must be from 0 to 4294967295"),
    (dict(grid=(1, 2**32)), r"kernel 'args': grid \(1, 4294967296\): dimension y is 4294967296"),
    (dict(grid=(1.5, )), r"kernel 'args': grid \(1.5,\) must be an integer or a tuple of 1 to 3 integers"),
    (dict(threadgroup=0), r"kernel 'args': threadgroup \(0,\): dimension x is 0; each dimension must be from 1"),
    (dict(threadgroup=(1024, 2)), r"kernel 'args': threadgroup \(1024, 2, 1\) has 2048 threads; Metal allows 1 to "
     r"1024"),
    (dict(scale=1e300), r"kernel 'args': parameter 'scale' \(constant float&\): 1e\+300 does not fit in float "
     r"\(largest finite value 3.4028235e\+38\); it would become infinity"),
    (dict(n=2**40), r"kernel 'args': parameter 'n' \(constant int&\): 1099511627776 does not fit in int \(32 bits: "
     r"-2147483648 to 4294967295"),
    (dict(n="ten"), r"kernel 'args': parameter 'n' \(constant int&\): expects an integer, got str"),
])
def test_bad_launch_arguments_name_kernel_parameter_and_fix(emu, kwargs, pattern):
    k = emu.compile_msl(ARGS, "args")
    x = torch.ones(8)
    scale, n = kwargs.pop("scale", 2.0), kwargs.pop("n", 8)
    launch = dict(grid=1, threadgroup=8)
    launch.update(kwargs)
    with pytest.raises(emu.EmulatorLaunchError, match=pattern) as ei:
        k.launch(buffers=[x, emu.Scalar(scale, "float"), emu.Scalar(n, "int")], **launch)
    assert ei.value.kernel_name == "args"
    assert torch.equal(x, torch.ones(8))


def test_scalars_accept_every_bit_pattern_of_their_width(emu):
    k = emu.compile_msl(ARGS, "args")
    x = torch.ones(8)
    k.launch(grid=1, threadgroup=8, buffers=[x, emu.Scalar(float("inf"), "float"), emu.Scalar(2**32 - 1, "int")])
    assert torch.equal(x, torch.ones(8))  # n == -1: nothing written
    k.launch(grid=1, threadgroup=8, buffers=[x, emu.Scalar(3.0, "float"), emu.Scalar(2**31 - 1, "int")])
    assert torch.equal(x, torch.full((8, ), 3.0))


# ---- memory ---------------------------------------------------------------------------------------------

COPY = msl("""
kernel void gather(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                   uint i [[thread_position_in_grid]]) {
    out[i] = x[i * 1000000];
}
""")


def _rss_mb() -> float:
    """Resident memory of this process in MB."""
    if os.path.exists("/proc/self/statm"):
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    out = subprocess.run(["ps", "-o", "rss=", "-p", str(os.getpid())], capture_output=True, text=True).stdout
    return int(out.strip()) / 1024  # KB


def _is_loaded(path) -> bool:
    """Whether the dynamic loader has `path` loaded (RTLD_NOLOAD: look, never load)."""
    import _ctypes
    import ctypes
    try:
        lib = ctypes.CDLL(str(path), mode=os.RTLD_NOLOAD)
    except OSError:
        return False
    _ctypes.dlclose(lib._handle)  # RTLD_NOLOAD still counts a reference
    return True


def test_big_launch_leaves_no_copy_resident(emu):
    """A 400 MB launch used to leave ~400 MB resident (the copy stayed in the buffer pool)."""
    k = emu.compile_msl(COPY, "gather")
    out = torch.zeros(100)
    k.launch(grid=1, threadgroup=1, buffers=[torch.ones(1), out])  # start the workers and their stacks
    big = torch.ones(100_000_000)  # 400 MB
    before = _rss_mb()
    k.launch(grid=1, threadgroup=100, buffers=[big, out])
    after = _rss_mb()
    assert torch.equal(out, torch.ones(100))
    assert after - before < 64, (before, after)


def test_loaded_kernel_libraries_are_bounded(emu, monkeypatch):
    monkeypatch.setenv("TRITON_APPLE_EMULATOR_MAX_LOADED", "2")
    kernels = []
    for v in range(4):
        src = msl(f"kernel void lru(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]])"
                  f" {{ x[i] = {v + 1}.0f; }}\n")
        kernels.append(emu.compile_msl(src, "lru"))
        x = torch.zeros(2)
        kernels[-1].launch(grid=1, threadgroup=2, buffers=[x])
    loaded = emu.library.LOADED_LIBRARIES.loaded()
    assert len(loaded) <= 2 and str(kernels[0].so_path) not in loaded
    assert not _is_loaded(kernels[0].so_path) and _is_loaded(kernels[3].so_path)  # really unloaded
    x = torch.zeros(2)
    kernels[0].launch(grid=1, threadgroup=2, buffers=[x])  # a live kernel object loads it again
    assert x.tolist() == [1.0, 1.0]


# ---- cache permissions ----------------------------------------------------------------------------------


def _modes(root):
    for d, dirs, files in os.walk(root):
        for name in dirs + files:
            if name != ".lock":
                yield os.path.join(d, name), stat.S_IMODE(os.stat(os.path.join(d, name)).st_mode)


def test_cache_files_are_never_group_or_world_writable(emu, fresh_cache):
    old = os.umask(0)
    try:
        k = emu.compile_msl(_unique_kernel("umask 000"), "fresh")
    finally:
        os.umask(old)
    modes = dict(_modes(fresh_cache))
    assert str(k.so_path) in modes and len(modes) >= 5
    assert all(m & 0o022 == 0 for m in modes.values()), {p: oct(m) for p, m in modes.items()}
    assert modes[str(k.so_path)] & 0o755 == 0o755  # umask 000: readable and executable by everyone


def test_cache_writable_by_others_is_refused_unless_trusted(emu, tmp_path, monkeypatch):
    emu.library.runtime_library()
    cache = tmp_path / "shared"
    (cache / "apple_emulator").mkdir(parents=True)
    os.chmod(cache / "apple_emulator", 0o777)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache))
    emu.clear_memory_cache()
    src = _unique_kernel("shared")
    with pytest.raises(emu.EmulatorCacheError, match="writable by group and others.*TRITON_APPLE_EMULATOR_TRUST_CACHE"):
        emu.compile_msl(src, "fresh")
    monkeypatch.setenv("TRITON_APPLE_EMULATOR_TRUST_CACHE", "1")
    x = torch.zeros(2)
    emu.compile_msl(src, "fresh").launch(grid=1, threadgroup=2, buffers=[x])
    assert torch.all(x > 0)


# ---- cost of a failing launch -------------------------------------------------------------------------


def test_failing_launch_costs_about_what_a_launch_costs(emu):
    """Every failing launch used to start llvm-symbolizer (~40 ms)."""
    k = emu.compile_msl(OOB, "far")
    x, out = torch.zeros(64), torch.zeros(64)

    def timed(off):
        t0 = time.perf_counter()
        try:
            k.launch(grid=1, threadgroup=64, buffers=[x, out, emu.Scalar(off, "int")])
        except emu.EmulatorLaunchError:
            pass
        return time.perf_counter() - t0

    timed(5000)  # the first failure of the process starts the symbolizer
    ok = sorted(timed(0) for _ in range(7))[3]
    bad = sorted(timed(5000 + i) for i in range(7))[3]
    assert bad < max(5 * ok, 0.010), (ok, bad)  # it was ~40 ms


def test_launches_from_several_threads_take_turns(emu):
    src = msl("""
kernel void scale(device float* x [[buffer(0)]], constant float& s [[buffer(1)]],
                  uint i [[thread_position_in_grid]]) {
    threadgroup_barrier(mem_flags::mem_threadgroup);
    x[i] = x[i] * s;
}
""")
    k = emu.compile_msl(src, "scale")
    errors = []

    def work(t):
        try:
            for _ in range(20):
                x = torch.full((256, ), float(t))
                k.launch(grid=4, threadgroup=64, buffers=[x, emu.Scalar(2.0, "float")])
                assert torch.equal(x, torch.full((256, ), 2.0 * t))
        except BaseException as e:  # noqa: BLE001 - collected and asserted below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t, )) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


STRIDE = msl("""
kernel void strided(device float* x [[buffer(0)]], constant long& stride [[buffer(1)]],
                    uint gid [[thread_position_in_grid]]) {
    x[gid * stride] = 1.0f;
}
""")


def test_pointer_arithmetic_leaving_the_address_space_is_reported(emu):
    """A stride of 2^61 floats puts thread 1's address 2^63 bytes away: outside the 48-bit address space.
    (A stride of 2^62 wraps around to the buffer itself: nothing faults, nothing can notice.)"""
    import platform
    k = emu.compile_msl(STRIDE, "strided")
    x = torch.zeros(16)
    with pytest.raises(emu.EmulatorLaunchError) as ei:
        k.launch(grid=1, threadgroup=4, buffers=[x, emu.Scalar(2**61, "long")], host_threads=1)
    e = ei.value
    assert e.kind == "out_of_bounds" and e.param == "x" and e.thread == 1
    if platform.machine() in ("x86_64", "AMD64"):  # x86 reports such an access without its address
        assert "outside the 48-bit address space: the pointer arithmetic overflowed" in str(e)
        assert e.is_write is None
    assert torch.count_nonzero(x) == 0

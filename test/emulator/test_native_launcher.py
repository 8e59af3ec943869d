"""The emulator's native launcher (emulator/native/launcher.c): how it is built, what it binds, and that it keeps every
check and error of the Python binding it replaced.

References: the Python packing of emulator.Scalar (the bytes the ctypes launcher passed), the Python span of a
tensor view (`kernel._span_bytes`), torch for results, and the messages of abi.arguments.scalar_bytes /
tensor_argument / EmulatorKernel._bind."""
import gc
import os
import shutil
import signal
import sys
import threading
import time
import weakref
from types import SimpleNamespace

import pytest
import torch

import triton
import triton.language as tl
from triton.backends.apple import driver as drv
from triton.backends.apple import emulator
from triton.backends.apple.emulator import build as emu_build
from triton.backends.apple.emulator import kernel as emu_kernel
from triton.backends.apple.emulator import launcher as runtime
from triton.backends.apple.emulator import library as emu_library
from triton.backends.apple.emulator import signature as emu_signature
from triton.backends.apple.errors import KernelArgError

pytestmark = pytest.mark.emulator_only

PRELUDE = "#include <metal_stdlib>\nusing namespace metal;\n"

# ------------------------------------------------------------------------------------------------
# Building it


def test_launcher_is_a_module_in_tritons_cache():
    mod = runtime.launcher()
    from triton import knobs as triton_knobs
    assert mod.__name__ == "apple_launcher"
    assert os.path.realpath(mod.__file__).startswith(os.path.realpath(triton_knobs.cache.dir))
    assert mod.ABI_VERSION == emu_library.ABI_VERSION
    assert runtime.LAUNCHER_SOURCE.name == "launcher.c" and runtime.LAUNCHER_SOURCE.parent == emu_build.NATIVE_DIR


def _copy_native(tmp_path, header_extra: str = ""):
    """A copy of the native sources (emulator/native), with `header_extra` appended to emulator_runtime.h."""
    _, native = emu_build.native_dirs()
    shutil.copytree(native, tmp_path / "native")
    if header_extra:
        h = tmp_path / "native" / "include" / "emulator_runtime.h"
        h.write_text(h.read_text() + header_extra)
    return tmp_path / "native" / "include", tmp_path / "native"


def test_launcher_is_cached_and_rebuilt_when_the_runtime_header_changes(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
    first = runtime._compile_launcher().__file__
    assert first.startswith(str(tmp_path / "cache"))
    assert runtime._compile_launcher().__file__ == first  # a cache hit
    dirs = _copy_native(tmp_path / "changed", "\n/* a change */\n")
    monkeypatch.setattr(emu_build, "native_dirs", lambda: dirs)
    changed = runtime._compile_launcher().__file__
    assert changed != first and changed.startswith(str(tmp_path / "cache"))


@pytest.fixture
def fresh_launcher_source(tmp_path, monkeypatch):
    """A launcher source no cache has seen (a comment added), not loaded yet: the next launcher() compiles it."""
    from triton.runtime import build
    src = tmp_path / "launcher.c"
    src.write_text(runtime.LAUNCHER_SOURCE.read_text() + f"\n/* {time.time_ns()} */\n")
    monkeypatch.setattr(runtime, "LAUNCHER_SOURCE", src)
    monkeypatch.setattr(runtime, "_launcher", None)
    build._find_compiler.cache_clear()
    yield
    build._find_compiler.cache_clear()  # Triton caches its compiler lookup: forget the test's


def _failing_cc(tmp_path) -> str:
    cc = tmp_path / "cc"
    cc.write_text("#!/bin/sh\necho 'cc: simulated failure' >&2\nexit 1\n")
    cc.chmod(0o755)
    return str(cc)


@pytest.fixture
def view_kernel_on_disk():
    """VIEW_KERNEL compiled into the on-disk cache, and forgotten in memory: compile_msl makes a new kernel
    object from the cache next time (no clang)."""
    emulator.compile_msl(VIEW_KERNEL, "view")
    emulator.clear_memory_cache()
    yield
    emulator.clear_memory_cache()


def test_no_compiler_is_a_clear_error_and_no_other_launch_path(tmp_path, monkeypatch, view_kernel_on_disk,
                                                               fresh_launcher_source):
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    with pytest.raises(emulator.EmulatorError) as ei:
        runtime.launcher()
    msg = str(ei.value)
    assert "could not be compiled" in msg and str(runtime.LAUNCHER_SOURCE) in msg
    assert f"CC={tmp_path / 'no-such-cc'} is not found" in msg
    # and nothing launches without it: a kernel object (which needs the launcher) is refused the same way
    with pytest.raises(emulator.EmulatorError, match="could not be compiled"):
        emulator.compile_msl(VIEW_KERNEL, "view")


def test_missing_python_headers_are_named(tmp_path, monkeypatch, fresh_launcher_source):
    monkeypatch.setenv("CC", _failing_cc(tmp_path))
    monkeypatch.setattr(runtime, "_python_include_dir", lambda: str(tmp_path / "no-include"))
    with pytest.raises(emulator.EmulatorError, match=r"Python's headers are missing .*no-include/Python.h.*"
                       r"python3-dev"):
        runtime.launcher()


def test_a_failing_compiler_is_reported(tmp_path, monkeypatch, fresh_launcher_source):
    monkeypatch.setenv("CC", _failing_cc(tmp_path))
    with pytest.raises(emulator.EmulatorError, match=r"CalledProcessError.*the C compiler failed"):
        runtime.launcher()


def test_bind_runtime_checks_the_abi():
    mod = runtime.launcher()
    import ctypes
    fake_abi = ctypes.CFUNCTYPE(ctypes.c_int)(lambda: 999)
    addr = ctypes.cast(fake_abi, ctypes.c_void_p).value
    with pytest.raises(RuntimeError, match="runtime has ABI 999, the launcher .* was compiled for ABI"):
        mod.bind_runtime(1, 1, 1, addr)
    with pytest.raises(ValueError, match="null function address"):
        mod.bind_runtime(0, 1, 1, addr)


def test_bad_plans_and_calls_are_refused():
    mod = runtime.launcher()
    with pytest.raises(ValueError, match="bad slot 0"):
        mod.make_plan("k", [(0, 0, 9, 0, 4, False, "x")], None, lambda i, v: None)
    with pytest.raises(TypeError, match="hook must be callable"):
        mod.make_plan("k", [], None, 3)
    plan = mod.make_plan("k", [(5, 0, mod.KIND_POINTER, 0, 4, False, "x")], torch.Tensor, lambda i, v: None)
    with pytest.raises(IndexError, match="kernel 'k': parameter 'x' is argument 5, but the launch has 1"):
        mod.launch(plan, 1, (1, 1, 1), (1, 1, 1), None, (torch.zeros(1), ), None, None, None)
    with pytest.raises(TypeError, match="takes 9 arguments"):
        mod.launch(plan)
    with pytest.raises(ValueError, match="grid .* is not 3 integers"):
        mod.launch(plan, 1, (1, -1, 1), (1, 1, 1), None, (), None, None, None)


# ------------------------------------------------------------------------------------------------
# Scalars: the launcher's bytes are the Python packer's


SCALAR_CASES = {
    "bool": [0, 1, True, False],
    "char": [0, 1, -1, 127, -128, 255, 200],
    "short": [0, -1, 32767, -32768, 65535, 40000],
    "int": [0, 7, -1, 2**31 - 1, -2**31, 2**32 - 1, 3_000_000_000, True],
    "long": [0, -1, 2**63 - 1, -2**63, 2**64 - 1, 2**63, 12345678901234],
    "float": [0.0, -0.0, 1.5, 1 / 3, 3.4028234663852886e38, -3.4028234663852886e38, float("inf"), float("-inf"),
              1e-45, 1e-50, 7, 2**40 + 1, True, 16777217.0],
    "half": [0.0, 1 / 3, 65504.0, -65504.0, 1e-8, 6e-8, 2049.0, 2051.0, float("inf"), 0.1, 1.0009765625 + 2**-30, 3],
    "bfloat": [0.0, 1 / 3, 3.3895313892515355e38, -1.0, 1.00390625, 1.01171875, float("-inf"), 1e-40, 3, 257.0],
}


def _bytes_kernel(msl_type: str, nbytes: int):
    src = PRELUDE + f"""
kernel void raw_{msl_type}(device uchar* out [[buffer(0)]], constant {msl_type}& s [[buffer(1)]]) {{
    constant uchar* b = (constant uchar*)&s;
    for (int k = 0; k < {nbytes}; ++k) out[k] = b[k];
}}
"""
    return emulator.compile_msl(src, f"raw_{msl_type}")


@pytest.mark.parametrize("msl_type", list(SCALAR_CASES))
def test_scalars_are_packed_as_the_python_packer_does(msl_type):
    size = emu_signature.type_size(msl_type)
    k = _bytes_kernel(msl_type, size)
    converted = []

    def convert(slot, value):
        converted.append(value)
        return emulator.Scalar(value, msl_type)

    plan = k.plan([(0, "pointer", "device uchar*"), (1, "scalar", msl_type)], convert)
    for v in SCALAR_CASES[msl_type]:
        out = torch.zeros(8, dtype=torch.uint8)
        k.run(plan, (1, 1, 1), (1, 1, 1), (out, v))
        assert bytes(out[:size].tolist()) == emulator.Scalar(v, msl_type).data, (msl_type, v)
    assert converted == []  # every one of these was packed by the launcher itself


def test_float_nan_payload_and_sign_match():
    for t in ("float", "half", "bfloat"):
        k = _bytes_kernel(t, emu_signature.type_size(t))
        plan = k.plan([(0, "pointer", "device uchar*"), (1, "scalar", t)], lambda s, v: emulator.Scalar(v, t))
        for v in (float("nan"), -float("nan")):
            out = torch.zeros(8, dtype=torch.uint8)
            k.run(plan, (1, 1, 1), (1, 1, 1), (out, v))
            assert bytes(out[:emu_signature.type_size(t)].tolist()) == emulator.Scalar(v, t).data, (t, v)


def test_what_the_launcher_does_not_pack_goes_to_the_hook():
    k = _bytes_kernel("int", 4)
    seen = []

    def convert(slot, value):
        seen.append((slot, value))
        return emulator.Scalar(int(value), "int")

    import numpy as np
    plan = k.plan([(0, "pointer", "device uchar*"), (1, "scalar", "int")], convert)
    out = torch.zeros(8, dtype=torch.uint8)
    for v in (np.int32(5), 2**32, -2**31 - 1, 1.0):  # a numpy int, out of range both ways, a float
        try:
            k.run(plan, (1, 1, 1), (1, 1, 1), (out, v))
        except emulator.EmulatorLaunchError:
            pass  # Scalar(2**32, "int") does not fit: _bind says so (checked below for the JIT path)
    assert seen == [(1, np.int32(5)), (1, 2**32), (1, -2**31 - 1), (1, 1.0)]
    assert bytes(out[:4].tolist()) == emulator.Scalar(1, "int").data


# ------------------------------------------------------------------------------------------------
# Tensors: data pointer and the bytes the view spans


VIEW_KERNEL = PRELUDE + """
kernel void view(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                 constant int& n [[buffer(2)]], uint i [[thread_position_in_grid]]) {
    if ((int)i < n) out[i] = x[i];
}
"""


def _views():
    base = torch.arange(64, dtype=torch.float32)
    return {
        "contiguous": base,
        "offset": base[5:20],
        "strided": base[3:40:4],
        "transposed": base[:48].view(6, 8).t(),
        "expanded": base[7:8].expand(10),
        "zero-dim": base[9],
        "columns": base.view(8, 8)[:, 2:5],
    }


@pytest.mark.parametrize("name", list(_views()))
def test_views_bind_their_data_pointer_and_span(name):
    v = _views()[name]
    span = emu_kernel._span_bytes(v.shape, v.stride(), v.element_size()) // 4
    k = emulator.compile_msl(VIEW_KERNEL, "view")
    plan = k.plan([(0, "pointer", ""), (1, "pointer", ""), (2, "scalar", "int")], lambda s, x: 1 / 0)
    out = torch.full((64, ), -1.0)
    k.run(plan, (1, 1, 1), (64, 1, 1), (v, out, span))
    flat = torch.as_strided(v, (span, ), (1, ))  # the memory from the view's first element on
    assert torch.equal(out[:span], flat) and (out[span:] == -1).all()
    far = torch.zeros(1024)
    with pytest.raises(emulator.EmulatorLaunchError) as ei:  # reading far past the span: the bound it reports
        k.run(plan, (1, 1, 1), (1024, 1, 1), (v, far, 1024))
    e = ei.value
    assert e.kind == "out_of_bounds" and e.param == "x" and e.slot == 0 and e.index >= span
    assert f"buffer has {span} elements of 4 bytes" in str(e)
    assert not far.any()  # a failed launch copies nothing back, not even what threads wrote before the fault


def test_empty_tensor_binds_zero_bytes():
    k = emulator.compile_msl(VIEW_KERNEL, "view")
    plan = k.plan([(0, "pointer", ""), (1, "pointer", ""), (2, "scalar", "int")], lambda s, x: 1 / 0)
    out = torch.zeros(4)
    k.run(plan, (1, 1, 1), (4, 1, 1), (torch.zeros(0), out, 0))
    with pytest.raises(emulator.EmulatorLaunchError) as ei:
        k.run(plan, (1, 1, 1), (4, 1, 1), (torch.zeros(3, 0), out, 1))
    assert ei.value.kind == "out_of_bounds" and ei.value.param == "x"


def test_tensor_on_another_device_and_numpy_views_go_through_the_python_checks():
    import numpy as np
    k = emulator.compile_msl(VIEW_KERNEL, "view")
    out = torch.zeros(8)
    with pytest.raises(emulator.EmulatorLaunchError, match=r"kernel 'view': parameter 'x' got a tensor on meta; the "
                       "emulator runs on CPU tensors") as ei:
        k.launch(grid=1, threadgroup=8, buffers=[torch.zeros(8, device="meta"), out, emulator.Scalar(8, "int")])
    assert (ei.value.param, ei.value.slot) == ("x", 0)
    with pytest.raises(emulator.EmulatorLaunchError, match="negative or unaligned strides"):
        k.launch(grid=1, threadgroup=8, buffers=[np.arange(8, dtype=np.float32)[::-1], out, emulator.Scalar(8, "int")])
    arr = np.arange(8, dtype=np.float32) * 3
    k.launch(grid=1, threadgroup=8, buffers=[arr, out, emulator.Scalar(8, "int")])
    assert out.tolist() == arr.tolist()


# ------------------------------------------------------------------------------------------------
# Through Triton: errors of the Python binder, hooks, reinterpret views, debug buffers


@triton.jit
def _scale(x_ptr, y_ptr, n, s, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    m = i < n
    tl.store(y_ptr + i, tl.load(x_ptr + i, mask=m) * s, mask=m)


def _compiled_scale():
    x = torch.arange(16, dtype=torch.float32)
    y = torch.zeros(16)
    ck = _scale[(1, )](x, y, 16, 2.0, BLOCK=16, num_warps=1)
    assert torch.equal(y, 2 * x)
    assert ck.function.is_compiled  # later launches bind in C
    return ck, x, y


BAD_ARGS = [
    ((3, "y", 16, 2.0), KernelArgError, r"kernel '_scale' argument 'x_ptr' \(\*f32\) got the address 0x3, which is not inside any live cpu tensor"),
    (("x", "y", 2**40, 2.0), KernelArgError, r"argument 'n' \(i32\): 1099511627776 does not fit in int"),
    (("x", "y", 1.5, 2.0), KernelArgError, r"argument 'n' \(i32\) expects an integer, got float"),
    (("x", "y", 16, 1e39), KernelArgError, r"argument 's' \(f32\): 1e\+39 does not fit in float"),
    (("x", "y", 16, "2"), KernelArgError, r"argument 's' \(f32\) expects a float, got str"),
    (("x", "y", 16, 10**400), KernelArgError, r"argument 's' \(f32\): an integer of 401 digits is too large for a float"),
    (("x", "meta", 16, 2.0), emulator.EmulatorLaunchError, r"parameter 'y_ptr' got a tensor on meta"),
]


@pytest.mark.parametrize("args,error,match", BAD_ARGS,
                         ids=["x-int", "n-too-big", "n-float", "s-too-big", "s-str", "s-huge-int", "y-meta"])
def test_bad_launch_arguments_are_named_as_before(args, error, match):
    ck, x, y = _compiled_scale()
    values = {"x": x, "y": y, "meta": torch.zeros(16, device="meta")}
    args = tuple(values.get(a, a) if isinstance(a, str) and a in values else a for a in args)
    entered = []
    y_before = y.clone()
    with pytest.raises(error, match=match):
        ck.run(1, 1, 1, 0, ck.function, ck.packed_metadata, "meta", entered.append, None, *args, 16)
    assert entered == [] and torch.equal(y, y_before)  # refused before the hook and the launch


def test_hooks_are_called_around_each_launch_with_the_metadata():
    ck, x, y = _compiled_scale()
    calls = []
    y.zero_()
    ck.run(1, 1, 1, 0, ck.function, ck.packed_metadata, "md", lambda m: calls.append(("enter", m, y.sum().item())),
           lambda m: calls.append(("exit", m, y.sum().item())), x, y, 16, 0.5, 16)
    assert calls == [("enter", "md", 0.0), ("exit", "md", x.sum().item() / 2)]


def test_a_failing_enter_hook_stops_the_launch():
    ck, x, y = _compiled_scale()
    y.zero_()

    def boom(_):
        raise RuntimeError("enter hook failed")

    with pytest.raises(RuntimeError, match="enter hook failed"):
        ck.run(1, 1, 1, 0, ck.function, ck.packed_metadata, None, boom, None, x, y, 16, 3.0, 16)
    assert not y.any()


def test_reinterpret_views_are_bound_through_the_hook():
    ck, x, y = _compiled_scale()
    raw = torch.arange(16, dtype=torch.float32).view(torch.int32)
    for _ in range(2):  # the second launch is the launcher's (the kernel is compiled)
        y.zero_()
        _scale[(1, )](triton.reinterpret(raw, tl.float32), y, 16, 3.0, BLOCK=16, num_warps=1)
        assert torch.equal(y, 3 * raw.view(torch.float32))


def test_grid_out_of_range_names_the_dimension():
    ck, x, y = _compiled_scale()
    # the driver checks the grid against Metal's dispatch limits before the launcher sees it
    from triton.backends.apple.errors import KernelArgError
    with pytest.raises(KernelArgError, match=r"kernel '_scale': grid \(1, 4294967296, 1\) does not fit Metal's "
                       r"dispatch: dimension y has 4294967296 programs"):
        ck.run(1, 2**32, 1, 0, ck.function, ck.packed_metadata, None, None, None, x, y, 16, 1.0, 16)


def test_device_print_still_reads_the_debug_buffer(capfd):

    @triton.jit
    def shout(x_ptr):
        tl.device_print("v", tl.load(x_ptr))

    x = torch.tensor([42], dtype=torch.int32)
    shout[(1, )](x, num_warps=1)  # compiles
    x.fill_(7)
    shout[(1, )](x, num_warps=1)  # the launcher binds the debug buffer (`extra`) in C
    assert capfd.readouterr().out.splitlines() == ["pid (0, 0, 0) v: 42", "pid (0, 0, 0) v: 7"]


def test_out_of_bounds_in_a_triton_kernel_is_mapped_to_its_source_line():

    @triton.jit
    def oob(x_ptr, y_ptr):
        i = tl.arange(0, 32)
        tl.store(y_ptr + i, tl.load(x_ptr + i))

    y = torch.zeros(32)
    oob[(1, )](torch.zeros(32), y, num_warps=1)
    with pytest.raises(emulator.EmulatorLaunchError) as ei:
        oob[(1, )](torch.zeros(8), y, num_warps=1)
    msg = str(ei.value)
    assert ei.value.kind == "out_of_bounds" and ei.value.param == "x_ptr"
    assert "generated from tt.load at" in msg and "test_native_launcher.py" in msg


def test_undefined_behaviour_events_come_back_as_warnings():
    """(Triton's integer division is defined for 0 in our MSL: the event comes from hand-written MSL.)"""
    k = emulator.compile_msl(PRELUDE + """
kernel void udiv(device int* out [[buffer(0)]], constant int& a [[buffer(1)]], constant int& b [[buffer(2)]]) {
    out[0] = a / b;
}
""", "udiv")
    plan = k.plan([(0, "pointer", ""), (1, "scalar", "int"), (2, "scalar", "int")], lambda s, v: 1 / 0)
    out = torch.zeros(1, dtype=torch.int32)
    k.run(plan, (1, 1, 1), (1, 1, 1), (out, 7, 2))
    assert out.item() == 3
    with pytest.warns(emulator.EmulatorWarning, match=r"kernel 'udiv': integer division or remainder by zero"
                      r".* at MSL line 5:16: out\[0\] = a / b; \(1 time\(s\) in this launch, first with operands 7, 0\)"):
        k.run(plan, (1, 1, 1), (1, 1, 1), (out, 7, 0))
    assert out.item() == 0  # a warning, not an error: results copied back (the emulator's x/0 is 0)


# ------------------------------------------------------------------------------------------------
# Waiting: Ctrl-C, other signal handlers, timeouts, knobs changed between launches, several threads


@triton.jit
def _spin(flag_ptr, out_ptr):
    while tl.load(flag_ptr, volatile=True) == 0:
        pass
    tl.store(out_ptr + tl.arange(0, 32), tl.full((32, ), 7, tl.int32))


def _spin_args():
    return torch.zeros(1, dtype=torch.int32), torch.zeros(32, dtype=torch.int32)


def test_ctrl_c_stops_a_spinning_triton_kernel(sigint_raises):
    flag, out = _spin_args()
    _spin[(1, )](torch.ones(1, dtype=torch.int32), out, num_warps=1)  # compiled, and launches through C
    out.zero_()
    timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    t0 = time.perf_counter()
    try:
        with pytest.raises(KeyboardInterrupt):
            _spin[(1, )](flag, out, num_warps=1)
    finally:
        timer.cancel()
    assert time.perf_counter() - t0 < 5 and not out.any()  # nothing copied back
    flag.fill_(1)
    _spin[(1, )](flag, out, num_warps=1)
    assert out.tolist() == [7] * 32


class _Alarm(Exception):
    pass


def test_an_exception_from_another_signal_handler_cancels_the_launch():
    flag, out = _spin_args()

    def handler(signum, frame):
        raise _Alarm("from SIGUSR1")

    old = signal.signal(signal.SIGUSR1, handler)
    timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGUSR1))
    timer.start()
    try:
        with pytest.raises(_Alarm):
            _spin[(1, )](flag, out, num_warps=1)
    finally:
        timer.cancel()
        signal.signal(signal.SIGUSR1, old)
    assert not out.any()
    flag.fill_(1)
    _spin[(1, )](flag, out, num_warps=1)
    assert out.tolist() == [7] * 32


def test_knobs_changed_between_launches_apply(monkeypatch):
    flag, out = _spin_args()
    flag.fill_(1)
    _spin[(1, )](flag, out, num_warps=1)
    flag.zero_()
    monkeypatch.setenv("TRITON_APPLE_EMULATOR_TIMEOUT", "0.2")
    with pytest.raises(emulator.EmulatorLaunchError) as ei:
        _spin[(1, )](flag, out, num_warps=1)
    assert ei.value.kind == "timeout" and "TRITON_APPLE_EMULATOR_TIMEOUT allows 0.20 s" in str(ei.value)
    monkeypatch.setenv("TRITON_APPLE_EMULATOR_TIMEOUT", "soon")
    from triton.backends.apple.knobs import KnobError
    with pytest.raises(KnobError, match="TRITON_APPLE_EMULATOR_TIMEOUT='soon'"):
        _spin[(1, )](flag, out, num_warps=1)
    monkeypatch.delenv("TRITON_APPLE_EMULATOR_TIMEOUT")
    flag.fill_(1)
    out.zero_()
    _spin[(1, )](flag, out, num_warps=1)
    assert out.tolist() == [7] * 32


def test_launch_arguments_override_the_knobs(monkeypatch):
    from triton.backends.apple.knobs import KnobError
    monkeypatch.setenv("TRITON_APPLE_EMULATOR_SCHEDULE", "sideways")
    k = emulator.compile_msl(VIEW_KERNEL, "view")
    out = torch.zeros(4)
    args = [torch.ones(4), out, emulator.Scalar(4, "int")]
    with pytest.raises(KnobError, match="TRITON_APPLE_EMULATOR_SCHEDULE='sideways'"):
        k.launch(grid=1, threadgroup=4, buffers=args)
    k.launch(grid=1, threadgroup=4, buffers=args, schedule="reverse")
    assert out.tolist() == [1.0] * 4
    with pytest.raises(emulator.EmulatorLaunchError, match="kernel 'view': unknown emulator schedule 'sideways'"):
        k.launch(grid=1, threadgroup=4, buffers=args, schedule="sideways")


def test_threads_launching_at_once_all_get_their_results():
    k = emulator.compile_msl(VIEW_KERNEL, "view")
    errors = []

    def work(t):
        try:
            for r in range(20):
                x = torch.full((32, ), float(t * 100 + r))
                out = torch.zeros(32)
                k.launch(grid=1, threadgroup=32, buffers=[x, out, emulator.Scalar(32, "int")])
                assert torch.equal(out, x)
        except BaseException as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t, )) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


# ------------------------------------------------------------------------------------------------
# Memory


def test_kernels_and_plans_are_freed():
    src = PRELUDE + f"kernel void freed(device float* x [[buffer(0)]]) {{ x[0] = {time.time_ns() % 997}; }}\n"
    k = emulator.compile_msl(src, "freed")
    k.launch(grid=1, threadgroup=1, buffers=[torch.zeros(1)])  # makes its plan
    plan = k.plan([(0, "pointer", "")], lambda s, v: v)
    ref = weakref.ref(k)
    del k, plan
    emulator.clear_memory_cache()
    gc.collect()
    assert ref() is None


def test_launches_keep_no_references():
    k = emulator.compile_msl(VIEW_KERNEL, "view")
    x, out = torch.ones(8), torch.zeros(8)
    s = emulator.Scalar(8, "int")
    before = (sys.getrefcount(x), sys.getrefcount(out), sys.getrefcount(s))
    for _ in range(200):
        k.launch(grid=1, threadgroup=8, buffers=[x, out, s])  # x, out in C; the Scalar through the hook
    assert (sys.getrefcount(x), sys.getrefcount(out), sys.getrefcount(s)) == before


def test_launcher_plan_for_a_launcher_made_by_hand():
    """AppleLauncher's plan: slot k takes runtime argument k; constexprs are skipped."""
    params = [
        {"name": "x", "slot": 0, "kind": "pointer", "msl_type": "device float*", "triton_type": "*fp32"},
        {"name": "n", "slot": 1, "kind": "scalar", "msl_type": "int", "triton_type": "i32"},
    ]
    meta = SimpleNamespace(name="fill", num_warps=1, kernel_signature=__import__("json").dumps(params))
    la = drv.AppleLauncher(SimpleNamespace(signature={"x": "*fp32", "BLOCK": "constexpr", "n": "i32"}), meta)
    fn = drv.EmulatorFunction("fill", PRELUDE + """
kernel void fill(device float* x [[buffer(0)]], constant int& n [[buffer(1)]], uint i [[thread_position_in_grid]]) {
    if ((int)i < n) x[i] = float(n);
}
""")
    x = torch.zeros(40)
    for n in (3, 5):  # the first launch checks in Python and compiles, the second binds in C
        la(1, 1, 1, 0, fn, None, None, None, None, x, 64, n)
        assert x[:n].tolist() == [float(n)] * n and not x[n:].any()

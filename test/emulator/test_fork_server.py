"""Kernel builds by loaded compilers (emulator/fork_server.py, native/fork_server.c): the same output files and
diagnostics as a fresh clang or ld.lld process, a subprocess again whenever a server cannot serve, and nothing of a
parent's servers used by a forked child."""
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork server is Linux-only")

SOURCE = "int twice(int x) { return 2 * x; }\nint broken(int x) { return x +; }\n"


@pytest.fixture
def server(monkeypatch, tmp_path):
    from triton.backends.apple.emulator import fork_server
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TRITON_APPLE_EMULATOR_FORK_SERVER", "1")
    monkeypatch.setattr(fork_server, "_failed_tools", set())
    yield fork_server
    fork_server._close_all()


def _compile(cxx, tmp_path, name, good=True):
    src = tmp_path / "k.cpp"
    src.write_text(SOURCE.splitlines()[0] + "\n" if good else SOURCE)
    return [cxx, "-O2", "-g", "-fPIC", "-c", "k.cpp", "-o", str(tmp_path / name)]


def test_a_served_build_writes_what_a_fresh_process_writes(server, tmp_path):
    from triton.backends.apple.emulator import clang
    from triton.backends.apple.emulator.link import link_line
    cxx = clang.find_compiler()
    served = server.run(_compile(cxx, tmp_path, "a.o"), tmp_path)
    assert served is not None and served.returncode == 0, served
    fresh = subprocess.run(_compile(cxx, tmp_path, "b.o"), cwd=tmp_path, capture_output=True, text=True)
    assert fresh.returncode == 0
    assert (tmp_path / "a.o").read_bytes() == (tmp_path / "b.o").read_bytes()  # line tables name the same directory
    line = link_line([cxx, "-fPIC", "-shared"], clang.extra_link_flags())
    if line is not None:
        cpu = server.child_cpu_seconds()
        served = server.run(line.command(str(tmp_path / "a.o"), str(tmp_path / "a.so")), tmp_path)
        subprocess.run(line.command(str(tmp_path / "b.o"), str(tmp_path / "b.so")), cwd=tmp_path, check=True)
        assert served is not None and served.returncode == 0, served
        assert (tmp_path / "a.so").read_bytes() == (tmp_path / "b.so").read_bytes()
        assert server.child_cpu_seconds() > cpu  # the server's builds are counted


def test_a_failing_build_reports_as_a_fresh_process_does(server, tmp_path):
    from triton.backends.apple.emulator import clang
    cmd = _compile(clang.find_compiler(), tmp_path, "c.o", good=False)
    served = server.run(cmd, tmp_path)
    fresh = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True)
    assert served is not None and served.returncode == fresh.returncode != 0
    assert served.stderr == fresh.stderr and "k.cpp:2" in served.stderr


def test_a_server_that_died_is_replaced_by_a_subprocess(server, tmp_path):
    from triton.backends.apple.emulator import clang
    cxx = clang.find_compiler()
    assert server.run(_compile(cxx, tmp_path, "d.o"), tmp_path).returncode == 0
    for s in list(server._all):
        s.proc.kill()
        s.proc.wait()
    assert server.run(_compile(cxx, tmp_path, "e.o"), tmp_path) is None  # the caller runs a subprocess
    assert server.run(_compile(cxx, tmp_path, "e.o"), tmp_path) is None  # and keeps doing so for that tool


def test_the_knob_turns_it_off(server, tmp_path, monkeypatch):
    from triton.backends.apple.emulator import clang
    monkeypatch.setenv("TRITON_APPLE_EMULATOR_FORK_SERVER", "0")
    assert server.run(_compile(clang.find_compiler(), tmp_path, "f.o"), tmp_path) is None


def test_a_forked_child_starts_its_own_servers(server, tmp_path):
    from triton.backends.apple.emulator import clang
    cxx = clang.find_compiler()
    assert server.run(_compile(cxx, tmp_path, "g.o"), tmp_path).returncode == 0
    parents = list(server._all)
    pid = os.fork()
    if pid == 0:  # the child: none of the parent's servers, a build still works
        ok = not server._all and server.run(_compile(cxx, tmp_path, "h.o"), tmp_path).returncode == 0
        server._close_all()
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    assert server._all == parents and all(s.proc.poll() is None for s in parents)  # the parent's still serve


def _program(tmp_path, name, source):
    from triton.backends.apple.emulator import clang
    src = tmp_path / f"{name}.c"
    src.write_text(source)
    subprocess.run([clang.find_compiler(), "-x", "c", str(src), "-o", str(tmp_path / name)], check=True)
    return str(tmp_path / name)


def test_a_crash_reports_as_a_fresh_process_does(server, tmp_path):
    tool = _program(tmp_path, "tool", '#include <stdio.h>\nint main(int c, char **v) {\n'
                    '  if (c > 1) *(volatile int *)0 = 1;\n  fputs("fine", stderr);\n  return 3;\n}\n')
    for cmd in ([tool], [tool, "crash"]):
        served = server.run(cmd, tmp_path)
        fresh = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True)
        assert served is not None and (served.returncode, served.stderr) == (fresh.returncode, fresh.stderr)
    assert served.returncode < 0  # minus the signal, as subprocess reports it


def test_a_wrapper_script_is_not_served(server, tmp_path):
    from triton.backends.apple.emulator import clang
    wrapper = tmp_path / "cxx"
    wrapper.write_text(f'#!/bin/sh\nexec {clang.find_compiler()} "$@"\n')
    wrapper.chmod(0o755)
    assert server.run([str(wrapper), "--version"], tmp_path) is None  # /bin/sh would have served, not clang


def test_a_cache_path_with_a_space_is_not_preloaded(server, tmp_path, monkeypatch):
    from triton.backends.apple.emulator import clang
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "a cache"))
    monkeypatch.setattr(server, "_library", None)
    assert server.run(_compile(clang.find_compiler(), tmp_path, "s.o"), tmp_path) is None


def test_a_missing_directory_is_left_to_a_subprocess_and_the_server_kept(server, tmp_path):
    from triton.backends.apple.emulator import clang
    cxx = clang.find_compiler()
    assert server.run(_compile(cxx, tmp_path, "m.o"), tmp_path).returncode == 0
    assert server.run([cxx, "--version"], tmp_path / "gone") is None  # a subprocess reports the missing directory
    assert server.run(_compile(cxx, tmp_path, "n.o"), tmp_path).returncode == 0  # served again

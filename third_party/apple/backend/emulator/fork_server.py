"""clang and ld.lld kept loaded between kernel builds (Linux): a build forks a loaded compiler instead of starting one.

Starting Debian's clang costs about 20 ms of CPU before it reads its input (the dynamic loader maps and relocates
libclang-cpp and libLLVM) and ld.lld about 12 ms: more than half of a small kernel's build, and more than ptxas
takes for the whole job. `native/fork_server.c`, preloaded into a tool started once, takes over before the tool's
main and serves requests: per request it forks, and the child runs the tool's own main with the request's
arguments, environment (`os.environb`, what `subprocess` passes) and working directory, its output captured as
`subprocess.run` captures it, a crash reported as minus the signal. The outputs are the bytes a fresh process
writes (tested). At start a server says which executable it is, and one that is not the tool asked for (a wrapper
script as `TRITON_APPLE_EMULATOR_CXX`) is not used. Each server runs one request at a time; this module keeps a few
per tool for the build threads. What a server fixes when it starts and a later change would not reach: the umask
and resource limits (kernel builds set their files' modes themselves), and the tool's binary itself.

Any failure to build the preload library, start a server or talk to it runs the command as a subprocess instead
(and a server that failed is not used again); so do macOS (no `LD_PRELOAD` of glibc's start routine) and
`TRITON_APPLE_EMULATOR_FORK_SERVER=0`. A forked Python child starts its own servers. The CPU time of the builds a
server runs is not in this process's `RUSAGE_CHILDREN` until the server exits: :func:`child_cpu_seconds` has it.
"""
from __future__ import annotations

import atexit
import os
import select
import shutil
import struct
import subprocess
import sys
import threading
from pathlib import Path
from typing import Dict, List, Optional

from .. import knobs

_MAX_PER_TOOL = 4
_HELLO_SECONDS = 10.0

_lock = threading.Lock()
_free: Dict[str, List["_Server"]] = {}  # tool path -> idle servers
_all: List["_Server"] = []
_failed_tools: set = set()
_starting: Dict[str, int] = {}  # servers of each tool being started
_library: Optional[Path] = None
_library_failed = False
_cpu_seconds = 0.0


class _Server:
    """One tool process serving requests (native/fork_server.c)."""

    def __init__(self, tool: str, library: Path):
        env = dict(os.environ, TT_FORK_SERVER="1")
        env["LD_PRELOAD"] = str(library) + (" " + env["LD_PRELOAD"] if env.get("LD_PRELOAD") else "")
        # its own session: a Ctrl-C meant for this process does not end the servers (they end with its pipes)
        self.proc = subprocess.Popen([tool], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env, close_fds=True, start_new_session=True,
                                     cwd=str(library.parent))
        self.tool = tool
        self.own_seconds = 0.0  # the server's own CPU time reported so far
        try:
            hello = self._read(8, timeout=_HELLO_SECONDS)
            if hello[:4] != b"TTFS":
                raise OSError("the preload library did not take over the tool")
            exe = self._read(struct.unpack("<I", hello[4:])[0], timeout=_HELLO_SECONDS)
            want = shutil.which(tool) or tool
            if os.path.realpath(os.fsdecode(exe)) != os.path.realpath(want):
                raise OSError(f"{tool} runs {os.fsdecode(exe)} (a wrapper?)")
        except Exception:
            self.close()
            raise

    def _read(self, n: int, timeout: Optional[float] = None) -> bytes:
        data = b""
        while len(data) < n:
            if timeout is not None and not select.select([self.proc.stdout], [], [], timeout)[0]:
                raise OSError("the fork server did not answer")
            chunk = os.read(self.proc.stdout.fileno(), n - len(data))
            if not chunk:
                raise OSError("the fork server ended")
            data += chunk
        return data

    def run(self, cmd: List[str], cwd: Path) -> Optional[subprocess.CompletedProcess]:
        env = [k + b"=" + v for k, v in os.environb.items()]
        strings = [os.fsencode(str(cwd)), *(os.fsencode(c) for c in cmd), *env]
        if any(b"\0" in s for s in strings):
            return None  # what a subprocess would refuse as well: let it say so
        body = b"".join(s + b"\0" for s in strings)
        self.proc.stdin.write(struct.pack("<III", len(body), len(cmd), len(env)) + body)
        self.proc.stdin.flush()
        kind, status, user, system, own_user, own_system, n_out, n_err = struct.unpack("<iiddddII", self._read(48))
        stdout, stderr = self._read(n_out), self._read(n_err)
        global _cpu_seconds
        with _lock:
            _cpu_seconds += user + system + (own_user + own_system - self.own_seconds)
            self.own_seconds = own_user + own_system
        if kind != 0:
            return None  # the tool was not run (its directory is gone, fork failed): a subprocess says why
        return subprocess.CompletedProcess(cmd, status, stdout.decode(errors="replace"),
                                           stderr.decode(errors="replace"))

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=2)
        except Exception:  # noqa: BLE001 (exiting, or a server that is gone)
            try:
                self.proc.kill()
                self.proc.wait(timeout=2)
            except Exception:  # noqa: BLE001
                pass


def enabled() -> bool:
    return sys.platform.startswith("linux") and knobs.emulator_fork_server.get()


def _preload_library() -> Optional[Path]:
    """The preload library, built once per cache from native/fork_server.c (None when it cannot be built)."""
    global _library, _library_failed
    if _library is not None and _library.is_file():
        return _library
    if _library_failed:
        return None
    from .build import build_fork_server
    from .cache import check_trusted
    try:
        _library = build_fork_server()
        check_trusted(_library, "the compiler fork server")  # it runs inside clang: the cache's trust rule
    except Exception:  # noqa: BLE001 (kernels build as subprocesses, as without this)
        _library_failed = True
        return None
    return _library


def run(cmd: List[str], cwd: Path) -> Optional[subprocess.CompletedProcess]:
    """`cmd` run in `cwd` by a loaded server of its tool, as `subprocess.run(cmd, cwd=cwd, capture_output=True,
    text=True)` would; None when no server can run it (the caller runs it as a subprocess)."""
    if not enabled():
        return None
    cwd, tool = Path(cwd), cmd[0]
    with _lock:
        if tool in _failed_tools:
            return None
        idle = _free.setdefault(tool, [])
        server = idle.pop() if idle else None
        if server is None:
            if _starting.get(tool, 0) + sum(1 for s in _all if s.tool == tool) >= _MAX_PER_TOOL:
                return None
            _starting[tool] = _starting.get(tool, 0) + 1
    if server is None:
        try:
            library = _preload_library()
            if library is None or any(c in str(library) for c in " \t\n:"):
                return None  # LD_PRELOAD splits at spaces and colons: such a path would load other files
            server = _Server(tool, library)
        except Exception:  # noqa: BLE001 (it could not start, or is not what it should be: subprocesses then)
            with _lock:
                _failed_tools.add(tool)
            return None
        finally:
            with _lock:
                _starting[tool] -= 1
        with _lock:
            _all.append(server)
    try:
        result = server.run(cmd, cwd)
    except (OSError, ValueError, struct.error):
        server.close()
        with _lock:
            _failed_tools.add(tool)
            if server in _all:
                _all.remove(server)
        return None
    with _lock:
        _free.setdefault(tool, []).append(server)
    return result


def child_cpu_seconds() -> float:
    """User + system seconds of the commands servers ran for this process, and of the servers themselves."""
    return _cpu_seconds


def _close_all() -> None:
    with _lock:
        servers = list(_all)
        _all.clear()
        _free.clear()
    for server in servers:
        server.close()


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()
    _all.clear()  # the parent's servers: their pipes are the parent's to use
    _free.clear()
    _starting.clear()


atexit.register(_close_all)
os.register_at_fork(after_in_child=_after_fork_in_child)

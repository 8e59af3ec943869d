"""clang and ld.lld kept loaded between kernel builds (Linux): a build forks a loaded compiler instead of starting one.

Starting Debian's clang costs about 20 ms of CPU before it reads its input (the dynamic loader maps and relocates
libclang-cpp and libLLVM) and ld.lld about 12 ms: more than half of a small kernel's build, and more than ptxas
takes for the whole job. `native/fork_server.c`, preloaded into a tool started once, takes over before the tool's
main and serves requests: per request it forks, and the child runs the tool's own main with the request's
arguments, environment (this process's, as `subprocess` would pass it) and working directory, writing its output
where `subprocess.run` would capture it. The outputs are the bytes a fresh process writes (tested). Each server runs
one request at a time; this module keeps a few per tool for the build threads.

Any failure to build the preload library, start a server or talk to it runs the command as a subprocess instead
(and a server that failed is not used again); so do macOS (no `LD_PRELOAD` of glibc's start routine) and
`TRITON_APPLE_EMULATOR_FORK_SERVER=0`. A forked Python child starts its own servers. The CPU time of the builds a
server runs is not in this process's `RUSAGE_CHILDREN` until the server exits: :func:`child_cpu_seconds` has it.
"""
from __future__ import annotations

import atexit
import os
import struct
import subprocess
import sys
import threading
from pathlib import Path
from typing import Dict, List, Optional

from .. import knobs

_MAX_PER_TOOL = 4

_lock = threading.Lock()
_free: Dict[str, List["_Server"]] = {}  # tool path -> idle servers
_all: List["_Server"] = []
_failed_tools: set = set()
_library: Optional[Path] = None
_library_failed = False
_cpu_seconds = 0.0


class _Server:
    """One tool process serving requests (native/fork_server.c)."""

    def __init__(self, tool: str, library: Path):
        env = dict(os.environ, TT_FORK_SERVER="1")
        env["LD_PRELOAD"] = str(library) + (" " + env["LD_PRELOAD"] if env.get("LD_PRELOAD") else "")
        self.proc = subprocess.Popen([tool], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env, close_fds=True)
        self.tool = tool
        self.own_seconds = 0.0  # the server's own CPU time reported so far

    def run(self, cmd: List[str], cwd: Path) -> subprocess.CompletedProcess:
        from .cache import tmp_name, unlink_quietly
        out, err = tmp_name(cwd, "stdout"), tmp_name(cwd, "stderr")
        env = [f"{k}={v}" for k, v in os.environ.items()]
        strings = [str(cwd), str(out), str(err), *cmd, *env]
        if any("\0" in s for s in strings):
            raise OSError("a NUL in a command, path or environment entry")
        body = b"".join(s.encode() + b"\0" for s in strings)
        try:
            self.proc.stdin.write(struct.pack("<III", len(body), len(cmd), len(env)) + body)
            self.proc.stdin.flush()
            reply = self.proc.stdout.read(36)
            if len(reply) != 36:
                raise OSError("the fork server ended")
            status, user, system, own_user, own_system = struct.unpack("<idddd", reply)
            stdout = Path(out).read_text(errors="replace") if Path(out).exists() else ""
            stderr = Path(err).read_text(errors="replace") if Path(err).exists() else ""
        finally:
            unlink_quietly(out)
            unlink_quietly(err)
        if status == 127 and not stderr:
            raise OSError("the fork server's child could not start the command")
        global _cpu_seconds
        with _lock:
            _cpu_seconds += user + system + (own_user + own_system - self.own_seconds)
            self.own_seconds = own_user + own_system
        return subprocess.CompletedProcess(cmd, status, stdout, stderr)

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=2)
        except Exception:  # noqa: BLE001 (exiting, or a server that is gone)
            try:
                self.proc.kill()
            except OSError:
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
        count = sum(1 for s in _all if s.tool == tool)
    if server is None:
        if count >= _MAX_PER_TOOL:
            return None
        library = _preload_library()
        if library is None:
            return None
        try:
            server = _Server(tool, library)
        except OSError:
            with _lock:
                _failed_tools.add(tool)
            return None
        with _lock:
            _all.append(server)
    try:
        result = server.run(cmd, cwd)
    except (OSError, ValueError):
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


atexit.register(_close_all)
os.register_at_fork(after_in_child=_after_fork_in_child)

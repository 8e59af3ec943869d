"""CPU seconds spent on behalf of this process: its own, its child processes that have exited (the compilers it
ran), and the builds the emulator's compiler fork servers ran for it (their CPU time is not the process's
children's until a server exits)."""
from __future__ import annotations

import resource


def served_cpu_seconds() -> float:
    """CPU seconds of the builds the emulator's compiler fork servers ran for this process (0 with a backend that has
    none, such as a baseline revision's)."""
    try:
        from triton.backends.apple.emulator import fork_server
    except ImportError:
        return 0.0
    return fork_server.child_cpu_seconds()


def cpu_seconds() -> float:
    """User + system CPU seconds so far, at microsecond resolution."""
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime + served_cpu_seconds()

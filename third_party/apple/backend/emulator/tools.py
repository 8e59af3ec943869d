"""The emulator's tools on the Python side: racecheck and initcheck (the sanitizer) and the profiler.

Kernels run with the tools from a second build of their library (clang.TOOL_FLAGS: every load and store calls the
runtime, atomics report themselves); the runtime keeps the shadow state and fills a report per launch
(native/include/emulator_tools.h, mirrored here with ctypes). This module says which tools a launch runs
(`requested`: the TRITON_APPLE_EMULATOR_SANITIZE / _SANITIZE_REPORT / _PROFILE knobs, read when a kernel is
compiled, or the `sanitize()` / `profile()` scopes), arms the runtime for it (`Armed`), and turns the report into
findings (`Finding`: both accesses, with their MSL lines and the Triton source lines their location comments name)
and into the profile dict of the launch (`profile_dict`).

The banking model of threadgroup memory is the target's (`target.THREADGROUP_BANKS`, here `BANK_MODEL`): Apple
documents no bank count or width, so a Mac measurement can replace it there.
"""
from __future__ import annotations

import contextlib
import ctypes
import sys
import threading
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from .. import knobs
from ..target import THREADGROUP_BANKS
from ..abi.msl_locations import MslLocations
from .symbolizer import symbolize

# tt_emu_tools_arm's tools (TT_TOOL_*)
RACE, INIT, PROFILE, WARN = 1, 2, 4, 8
TOOLS_ABI_VERSION = 3  # TT_EMU_TOOLS_ABI_VERSION
MAX_HAZARDS = 32       # TT_TOOL_MAX_HAZARDS
MAX_CONFLICT_LINES = 16  # TT_TOOL_MAX_CONFLICT_LINES
STATUS_RACE, STATUS_UNINIT = 17, 18  # TT_ERR_RACE, TT_ERR_UNINIT

# Threadgroup memory banking, for the profiler's conflict degree: the target's model (target.THREADGROUP_BANKS, where
# its sources are), which the lowering pads conversion buffers for too.
BANK_MODEL: Dict[str, int] = THREADGROUP_BANKS

_KINDS = {1: "RAW", 2: "WAR", 3: "WAW", 4: "uninitialized"}
_SPACES = {0: "threadgroup", 1: "device", 2: "private"}
_WIDTHS = (1, 2, 4, 8, 16)


class _Access(ctypes.Structure):
    _fields_ = [("pc_offset", ctypes.c_uint64), ("thread", ctypes.c_uint32), ("is_write", ctypes.c_uint32),
                ("atomic", ctypes.c_uint32), ("simd_epoch", ctypes.c_uint32)]


class _Hazard(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_uint32), ("space", ctypes.c_uint32), ("tg", ctypes.c_uint32 * 3),
                ("first_tg", ctypes.c_uint32 * 3), ("slot", ctypes.c_int32), ("offset", ctypes.c_int64),
                ("size", ctypes.c_uint32), ("count", ctypes.c_uint32), ("first", _Access), ("second", _Access),
                ("name", ctypes.c_char * 40)]


_U64 = ctypes.c_uint64


class _Profile(ctypes.Structure):
    _fields_ = [("dev_loads", _U64 * 5), ("dev_stores", _U64 * 5), ("dev_read_distinct", _U64),
                ("dev_written_distinct", _U64), ("dev_moved", _U64), ("ungrouped", _U64), ("tg_loads", _U64),
                ("tg_stores", _U64), ("tg_load_bytes", _U64), ("tg_store_bytes", _U64), ("tg_simd_accesses", _U64),
                ("tg_wavefronts", _U64), ("tg_ideal", _U64), ("tg_max_degree", _U64), ("tg_conflicted", _U64),
                ("simd_instructions", _U64), ("simd_lanes", _U64), ("threadgroups", _U64), ("barriers", _U64),
                ("max_barriers", _U64), ("simd_barriers", _U64), ("sgm_mma", _U64), ("fma", _U64),
                ("dev_tg_distinct", _U64)]


class _Conflict(ctypes.Structure):
    _fields_ = [("pc_offset", _U64), ("accesses", _U64), ("cycles", _U64), ("ideal", _U64)]


class _Report(ctypes.Structure):
    _fields_ = [("abi", ctypes.c_uint32), ("tools", ctypes.c_uint32), ("nhazards", ctypes.c_uint32),
                ("_pad", ctypes.c_uint32), ("total", _U64), ("benign_waw", _U64),
                ("hazards", _Hazard * MAX_HAZARDS), ("profile", _Profile), ("nconflicts", ctypes.c_uint32),
                ("_pad2", ctypes.c_uint32), ("conflicts", _Conflict * MAX_CONFLICT_LINES)]


class _Banks(ctypes.Structure):
    _fields_ = [("banks", ctypes.c_uint32), ("bank_bytes", ctypes.c_uint32)]


# ------------------------------------------------------------------------------------------------ which tools


def knob_tools() -> int:
    """The tools the knobs ask for (0: none): read when a kernel is compiled for the emulator."""
    names = knobs.emulator_sanitize.get()
    bits = (RACE if "race" in names else 0) | (INIT if "init" in names else 0)
    if bits and knobs.emulator_sanitize_report.get() == "warn":
        bits |= WARN
    if knobs.emulator_profile.get():
        bits |= PROFILE | _PRINT
    return bits


_PRINT = 1 << 16  # not the runtime's: print each launch's profile line (TRITON_APPLE_EMULATOR_PROFILE=1)

SCOPED = 0  # scopes open in any thread: launches look at the thread's own only when this is not 0 (a cheap test)
_scope_lock = threading.Lock()
_local = threading.local()


@dataclass
class ProfileScope:
    """What `profile()` collects: one dict per launch (`profile_dict`), in launch order."""
    launches: List[dict] = field(default_factory=list)


def _scopes() -> list:
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


@contextlib.contextmanager
def _scope(bits: int, collector: Optional[ProfileScope]):
    global SCOPED
    stack = _scopes()
    stack.append((bits, collector))
    with _scope_lock:
        SCOPED += 1
    try:
        yield collector
    finally:
        stack.pop()
        with _scope_lock:
            SCOPED -= 1


def sanitize(checks: Sequence[str] = ("race", "init"), report: str = "error"):
    """Launches of this thread inside the ``with`` block run under the sanitizer: ``checks`` from ``race`` and
    ``init``; ``report="error"`` fails a launch with a finding (EmulatorLaunchError, kind ``race`` or
    ``uninitialized``), ``"warn"`` warns (EmulatorSanitizerWarning) and lets it succeed."""
    names = set(checks.split(",") if isinstance(checks, str) else checks)
    bad = names - set(knobs.SANITIZERS)
    if bad or report not in ("error", "warn"):
        raise ValueError(f"sanitize: checks must be among {knobs.SANITIZERS} (got {sorted(names)}), report 'error' or "
                         f"'warn' (got {report!r})")
    bits = (RACE if "race" in names else 0) | (INIT if "init" in names else 0) | (WARN if report == "warn" else 0)
    return _scope(bits, None)


def profile():
    """Launches of this thread inside the ``with`` block are profiled; the value of the ``with`` is a
    `ProfileScope` whose ``launches`` list gets one `profile_dict` per launch."""
    return _scope(PROFILE, ProfileScope())


def scoped() -> Tuple[int, List[ProfileScope]]:
    """The tools and profile collectors of this thread's open scopes."""
    bits, collectors = 0, []
    for b, c in _scopes():
        if b & (RACE | INIT):  # the innermost sanitizer scope says error or warn
            bits = (bits & ~WARN) | b
        else:
            bits |= b
        if c is not None:
            collectors.append(c)
    return bits, collectors


# ------------------------------------------------------------------------------------------------ arming

_bound = set()


def _bind(lib) -> None:
    if id(lib) in _bound:
        return
    lib.tt_emu_tools_arm.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.POINTER(_Report), ctypes.POINTER(_Banks)]
    lib.tt_emu_tools_arm.restype = ctypes.c_int
    lib.tt_emu_tools_disarm.argtypes = [ctypes.c_void_p]
    lib.tt_emu_tools_disarm.restype = None
    lib.tt_emu_tools_abi_version.restype = ctypes.c_int
    if lib.tt_emu_tools_abi_version() != TOOLS_ABI_VERSION:
        raise RuntimeError(f"emulator runtime tools ABI {lib.tt_emu_tools_abi_version()} != {TOOLS_ABI_VERSION}")
    _bound.add(id(lib))


class Armed:
    """The runtime armed for the next launch of `entry` with `tools`: `report` is filled when it ends."""

    def __init__(self, lib, entry: int, tools: int):
        _bind(lib)
        self.lib, self.entry, self.tools = lib, entry, tools & 0xFFFF
        self.report = _Report()
        self._banks = _Banks(BANK_MODEL["banks"], BANK_MODEL["bank_bytes"])
        if lib.tt_emu_tools_arm(entry, self.tools, ctypes.byref(self.report), ctypes.byref(self._banks)) != 0:
            raise RuntimeError("the emulator runtime has too many launches armed for its tools at once")

    def done(self) -> bool:
        """Disarms (a launch that never began leaves its arming behind); True if the report was filled."""
        self.lib.tt_emu_tools_disarm(self.entry)
        return self.report.abi == TOOLS_ABI_VERSION


# ------------------------------------------------------------------------------------------------ findings


@dataclass
class Access:
    """One side of a finding."""
    thread: int
    is_write: bool
    atomic: bool
    msl_line: Optional[int]
    msl_text: str = ""
    origin: str = ""  # "<op> at <file>:<line>" from the MSL's location comments, when known
    threadgroup: Tuple[int, int, int] = (0, 0, 0)

    def describe(self) -> str:
        what = ("atomic " if self.atomic else "") + ("write" if self.is_write else "read")
        lane = f"simdgroup {self.thread // 32} lane {self.thread % 32}"
        where = f"MSL line {self.msl_line}" if self.msl_line else "an instruction with no MSL line (compat header code)"
        text = f": {self.msl_text}" if self.msl_text else ""
        origin = f"  [{self.origin}]" if self.origin else ""
        return f"{what:>12} by thread {self.thread} ({lane}) at {where}{text}{origin}"


@dataclass
class Finding:
    """A sanitizer finding: ``kind`` is RAW, WAR, WAW (racecheck) or uninitialized (initcheck); ``space`` is
    threadgroup, device or private; ``first`` is the earlier access (None for initcheck), ``second`` the one that
    found it. ``count``: times this pair of instructions was found in the launch."""
    kind: str
    space: str
    threadgroup: Tuple[int, int, int]
    offset: int
    size: int
    count: int
    first: Optional[Access]
    second: Access
    param: Optional[str] = None
    slot: Optional[int] = None
    variable: str = ""  # threadgroup memory: the variable's name

    @property
    def key(self) -> tuple:
        """Findings with the same key (kind, space and both sides' MSL lines) are reported once."""
        return (self.kind, self.space, self.first.msl_line if self.first else None, self.second.msl_line)

    @property
    def msl_lines(self) -> List[int]:
        return [a.msl_line for a in (self.first, self.second) if a is not None and a.msl_line]

    def describe(self) -> str:
        if self.space == "device":
            where = f"buffer '{self.param}' [[buffer({self.slot})]] at byte offset {self.offset}"
        elif self.space == "threadgroup":
            where = (f"threadgroup memory '{self.variable}' at byte {self.offset}" if self.variable else
                     f"threadgroup memory at byte {self.offset}")
        else:
            where = "a private array (the thread's own stack)"
        tg = ",".join(map(str, self.threadgroup))
        if self.kind == "uninitialized":
            head = f"uninitialized read of {where} ({self.size}-byte access) in threadgroup ({tg})"
            why = ("no thread of the threadgroup wrote this byte before" if self.space == "threadgroup" else
                   "the thread never wrote any byte of it")
        else:
            head = f"{self.kind} hazard on {where} ({self.size}-byte access) in threadgroup ({tg})"
            if self.space == "device":
                why = "two threads write the same bytes in one launch, without atomics"
                if self.first is not None and self.first.threadgroup != self.threadgroup:
                    why += f"; the first write is in threadgroup ({','.join(map(str, self.first.threadgroup))})"
            elif self.first is not None and self.first.thread // 32 == self.second.thread // 32:
                why = ("lanes of one simdgroup, with no threadgroup_barrier or simdgroup_barrier with "
                       "mem_flags::mem_threadgroup between them")
            else:
                why = "no threadgroup_barrier(mem_flags::mem_threadgroup) between them"
        lines = [head + ":"]
        if self.first is not None:
            lines.append("  " + self.first.describe())
        lines.append("  " + self.second.describe())
        lines.append(f"  ({why}; found {self.count} time(s))")
        return "\n".join(lines)


def findings(report: _Report, so_path: str, kernel_name: str, source_lines: Sequence[str],
             locations: MslLocations, params_by_slot: Dict[int, str]) -> List[Finding]:
    """The report's findings, both sides with their MSL lines (through the kernel library's line tables)."""
    msl_name = f"{kernel_name}.metal"
    out = []

    def access(a: _Access, tg) -> Access:
        loc = symbolize(so_path, int(a.pc_offset), msl_name) if a.pc_offset else None
        line = loc[0] if loc else None
        text = source_lines[line - 1].strip() if line and 0 < line <= len(source_lines) else ""
        origin = locations.origin(line) if line else None
        return Access(int(a.thread), bool(a.is_write), bool(a.atomic), line, text,
                      f"{origin[0]} at {origin[1]}" if origin else "", tuple(tg))

    by_key: Dict[tuple, Finding] = {}
    for i in range(min(report.nhazards, MAX_HAZARDS)):
        h = report.hazards[i]
        kind = _KINDS.get(h.kind, "unknown")
        first = None if kind == "uninitialized" else access(h.first, h.first_tg)
        slot = h.slot if h.slot >= 0 else None
        f = Finding(kind, _SPACES.get(h.space, "unknown"), tuple(h.tg), int(h.offset), int(h.size), int(h.count),
                    first, access(h.second, h.tg), params_by_slot.get(slot), slot, h.name.decode(errors="replace"))
        if f.key in by_key:  # the same pair of MSL lines (an unrolled loop makes many instructions of one line)
            by_key[f.key].count += f.count
        else:
            by_key[f.key] = f
            out.append(f)
    return out


SHOWN = 8  # findings a message describes


def summary(report: _Report, found: List[Finding], kernel_name: str) -> str:
    """The message of a launch with findings: the first `SHOWN` distinct pairs of MSL lines, in the order found."""
    tools = " and ".join(n for b, n in ((RACE, "racecheck"), (INIT, "initcheck")) if report.tools & b)
    shown = "\n".join(f.describe() for f in found[:SHOWN])
    more = report.total - sum(f.count for f in found[:SHOWN])
    tail = f"\n(and {more} more finding(s) at other lines or beyond the first {MAX_HAZARDS} pairs)" if more > 0 else ""
    return f"kernel '{kernel_name}': {tools}: {report.total} finding(s)\n{shown}{tail}"


# ------------------------------------------------------------------------------------------------ profile


def conflict_lines(report: _Report, so_path: str, kernel_name: str, source_lines: Sequence[str],
                   locations: MslLocations) -> List[dict]:
    """The threadgroup-memory instructions with bank conflicts, by MSL line (the instructions of one line summed),
    the most cycles over the ideal first: line, its text, the Triton op and source line, SIMD-wide accesses,
    conflict degree (cycles over the ideal) and the cycles over the ideal."""
    by_line: Dict[object, dict] = {}
    for i in range(min(report.nconflicts, MAX_CONFLICT_LINES)):
        c = report.conflicts[i]
        loc = symbolize(so_path, int(c.pc_offset), f"{kernel_name}.metal") if c.pc_offset else None
        line = loc[0] if loc else None
        e = by_line.setdefault(line, {"msl_line": line, "accesses": 0, "cycles": 0, "ideal": 0})
        e["accesses"] += int(c.accesses)
        e["cycles"] += int(c.cycles)
        e["ideal"] += int(c.ideal)
    out = []
    for e in by_line.values():
        line = e["msl_line"]
        origin = locations.origin(line) if line else None
        out.append({"msl_line": line, "msl_text": source_lines[line - 1].strip() if line and 0 < line <= len(source_lines)
                    else "", "origin": f"{origin[0]} at {origin[1]}" if origin else "", "accesses": e["accesses"],
                    "degree": e["cycles"] / e["ideal"], "excess_cycles": e["cycles"] - e["ideal"]})
    return sorted(out, key=lambda e: -e["excess_cycles"])


def profile_dict(report: _Report, kernel_name: str, grid, threadgroup,
                 conflicts: Sequence[dict] = ()) -> dict:
    """The profile of one launch, as plain numbers (keys documented in the emulator README); `conflicts`:
    `conflict_lines` of the launch."""
    p = report.profile
    loads = {w: int(p.dev_loads[i]) for i, w in enumerate(_WIDTHS)}
    stores = {w: int(p.dev_stores[i]) for i, w in enumerate(_WIDTHS)}
    read = sum(w * n for w, n in loads.items())
    written = sum(w * n for w, n in stores.items())
    minimal = int(p.dev_read_distinct + p.dev_written_distinct)
    tg_distinct = int(p.dev_tg_distinct)
    wide = sum(16 * n for n in (loads[16], stores[16]))
    ideal = int(p.tg_ideal)
    return {
        "kernel": kernel_name, "grid": tuple(grid), "threadgroup": tuple(threadgroup),
        "global_loads_by_width": loads, "global_stores_by_width": stores,
        "global_bytes_read": read, "global_bytes_written": written,
        "global_bytes_moved": int(p.dev_moved),  # per SIMD-wide instruction, the distinct bytes of its lanes
        "global_bytes_minimal": minimal,
        "global_read_distinct": int(p.dev_read_distinct), "global_written_distinct": int(p.dev_written_distinct),
        "moved_over_minimal": (int(p.dev_moved) / minimal) if minimal else None,
        # the two factors of moved/minimal: re-reads inside a threadgroup (the same thread again, or lanes of
        # several simdgroups holding copies of one value), and bytes several threadgroups each move
        "global_bytes_threadgroup_distinct": tg_distinct,
        "moved_over_threadgroup_distinct": (int(p.dev_moved) / tg_distinct) if tg_distinct else None,
        "threadgroup_distinct_over_minimal": (tg_distinct / minimal) if minimal else None,
        "share_16_byte": (wide / (read + written)) if read + written else None,
        "threadgroup_loads": int(p.tg_loads), "threadgroup_stores": int(p.tg_stores),
        "threadgroup_bytes_loaded": int(p.tg_load_bytes), "threadgroup_bytes_stored": int(p.tg_store_bytes),
        "threadgroup_simd_accesses": int(p.tg_simd_accesses),
        "bank_cycles": int(p.tg_wavefronts), "bank_cycles_ideal": ideal,
        "bank_conflict_degree": (int(p.tg_wavefronts) / ideal) if ideal else None,
        "bank_conflict_worst": p.tg_max_degree / 1000 if p.tg_simd_accesses else None,
        "threadgroup_conflicted_accesses": int(p.tg_conflicted),
        "bank_conflict_lines": list(conflicts),
        "bank_model": dict(BANK_MODEL),
        "simd_memory_instructions": int(p.simd_instructions),
        "simd_lane_utilisation": (p.simd_lanes / (32 * p.simd_instructions)) if p.simd_instructions else None,
        "ungrouped_accesses": int(p.ungrouped),
        "threadgroups": int(p.threadgroups), "barriers": int(p.barriers),
        "barriers_per_threadgroup": (p.barriers / p.threadgroups) if p.threadgroups else None,
        "max_barriers_per_threadgroup": int(p.max_barriers), "simdgroup_barriers": int(p.simd_barriers),
        "simdgroup_matrix_ops": int(p.sgm_mma), "simdgroup_matrix_flops": 1024 * int(p.sgm_mma),
        "fma_calls": int(p.fma), "fma_flops": 2 * int(p.fma),
        "simdgroup_matrix_share": ((1024 * p.sgm_mma) / (1024 * p.sgm_mma + 2 * p.fma))
                                  if p.sgm_mma + p.fma else None,
    }


def _ratio(x) -> str:
    return "-" if x is None else f"{x:.2f}"


def print_profile_line(d: dict, file=None) -> None:
    """One line per launch for TRITON_APPLE_EMULATOR_PROFILE=1."""
    print(f"emulator profile: {d['kernel']} grid={d['grid']}: global {d['global_bytes_read']} B read, "
          f"{d['global_bytes_written']} B written, moved/minimal {_ratio(d['moved_over_minimal'])}, 16-byte share "
          f"{_ratio(d['share_16_byte'])}; threadgroup {d['threadgroup_loads']} loads / {d['threadgroup_stores']} "
          f"stores, bank conflict degree {_ratio(d['bank_conflict_degree'])}; barriers/threadgroup "
          f"{_ratio(d['barriers_per_threadgroup'])}; simdgroup_matrix share {_ratio(d['simdgroup_matrix_share'])}; "
          f"SIMD lanes used {_ratio(d['simd_lane_utilisation'])}", file=file or sys.stderr)


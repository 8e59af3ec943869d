"""State shared by every function of one module while it is lowered: options, layouts, the op table, MSL
helpers the kernel needs, names of generated functions, threadgroup-memory scratch, debug-record formats,
and the errors that name the kernel, op and source line."""
from __future__ import annotations

import functools
import re
from typing import Dict, List, Optional, Tuple

from ..abi.slots import ADDED_BUFFERS
from ..analysis.buffer_liveness import buffer_live_ranges, op_positions
from ..analysis.padded_rows import buffer_bytes
from ..errors import InternalCompilerError, ResourceLimitError, UnsupportedFeatureError
from ..ir import Function, Module, Op
from ..ir.core import Location
from ..ir.types import ScalarType
from ..layouts import LayoutService
from ..target import DEFAULT_MSL_VERSION, MAX_THREADGROUP_MEMORY, SIMD_WIDTH, MslVersion, family, msl_version
from . import msl_library
from .wide_atomics import kernel_needs_locks, lock_base
from .msl_helpers import locked_atomic64_helper, locked_atomic64_requires, shuffle_helper, shuffle_requires
from .registry import Lowering
from .target_info import MetalTargetInfo

F64 = ScalarType("f64")

# What every MSL function of a kernel can see: the kernel's builtin inputs (passed on to `noinline` callees,
# which receive them as parameters), the debug buffer of kernels that print or assert and the lock table of
# kernels with locked 64-bit atomics.
BUILTIN_INPUTS = [
    ("uint3", "tt_pid", "threadgroup_position_in_grid"),
    ("uint3", "tt_nprog", "threadgroups_per_grid"),
    ("uint", "tt_tid", "thread_index_in_threadgroup"),
    ("uint", "tt_lane", "thread_index_in_simdgroup"),
    ("uint", "tt_warp", "simdgroup_index_in_threadgroup"),
]
CONTEXT_PARAMS = [("threadgroup uchar*", "tt_smem")] + [(t, n) for t, n, _ in BUILTIN_INPUTS]


class KernelContext:

    def __init__(self, module: Module, options, layouts: LayoutService, lowerings: Dict[str, Lowering]):
        self.module = module
        self.options = options
        self.layouts = layouts
        self.lowerings = lowerings
        self.kernel_name = module.kernel.name
        self.num_threads = module.num_warps * SIMD_WIDTH
        self.demote_f64 = bool(getattr(options, "allow_fp64_demotion", False))
        self.helpers: Dict[str, str] = {}  # MSL function definitions emitted before the kernel, in order
        self.debug_formats: List[dict] = []  # tt.print / tt.assert record formats
        self.uses_smem = False
        self.upstream_shared = int(module.attrs.get("ttg.shared", 0))
        self.used_values = {id(v) for f in module.functions for op in f.walk() for v in op.operands}
        self.has_debug = any(op.name in ("tt.print", "tt.assert") for f in module.functions for op in f.walk())
        # Metal spellings, family gates and the MSL version compiled for
        self.target = MetalTargetInfo(family(options.arch), msl_version(getattr(options, "msl_version",
                                                                                DEFAULT_MSL_VERSION)))
        # the newest MSL version the kernel needs above the oldest one, and what for (the first use)
        self.msl_needed: Optional[Tuple[MslVersion, str]] = None
        self.uses_locks = kernel_needs_locks(module, self.target, self.used_values)
        # the kernel argument every locked atomic points into (their locks are chosen by index), or None (by address)
        self.lock_base = lock_base(module) if self.uses_locks else None
        self._function_names: Dict[str, str] = {}
        self._generated_names: Dict[str, int] = {}
        self._scratch_end = 0  # end of the highest scratch region placed outside upstream's allocation
        self._live: Optional[List[Tuple[int, int, int, int]]] = None
        self._position = op_positions(module)

    @functools.cached_property
    def _users(self) -> Dict[int, List[Op]]:
        users: Dict[int, List[Op]] = {}
        for f in self.module.functions:
            for op in f.walk():
                for v in op.operands:
                    users.setdefault(id(v), []).append(op)
        return users

    def users_of(self, value) -> List[Op]:
        """The ops (at any depth) that take `value` as an operand."""
        return self._users.get(id(value), [])

    def require_msl(self, version: str, what: str, op: Optional[Op] = None, instead: str = "") -> None:
        """Say that the kernel uses `what`, which needs MSL `version`: refused naming the macOS it needs when the
        kernel is compiled for an older version (`instead`: what the user can do other than compile for a newer
        macOS), else remembered, so that the source refuses to compile below it (`MetalTargetInfo.version_guard`)."""
        need = msl_version(version)
        have = self.target.msl
        if have.number < need.number:
            other = f" {instead}, or" if instead else ""
            raise self.unsupported(f"{what} needs {need.needs}, and this kernel is compiled for {have.needs}:"
                                   f"{other} compile for macOS {need.macos} and later (TRITON_APPLE_MSL_VERSION="
                                   f"{need.name})", op)
        if need.number > self.target.oldest_msl().number and (self.msl_needed is None or
                                                              need.number > self.msl_needed[0].number):
            self.msl_needed = (need, what)

    @property
    def msl_std(self) -> str:
        """The oldest `-std=` the kernel's source compiles at (`xcrun metal -std=...`)."""
        return (self.msl_needed[0] if self.msl_needed else self.target.oldest_msl()).std

    def added_buffers(self) -> List[str]:
        """The kinds (`abi.slots.ADDED_BUFFERS`) of the buffers the backend adds after the kernel's arguments, in
        slot order."""
        return (["debug"] if self.has_debug else []) + (["locks"] if self.uses_locks else [])

    def context_params(self) -> List[Tuple[str, str]]:
        """(MSL type, name) of what every MSL function of the kernel receives besides its own arguments."""
        return CONTEXT_PARAMS + [(ADDED_BUFFERS[k].msl_type, ADDED_BUFFERS[k].name) for k in self.added_buffers()]

    # -- generated MSL functions -----------------------------------------------------------------

    def require(self, name: str) -> str:
        """Ask for library helper `name` (lowering/msl/, through msl_library) in the module's MSL, after the
        helpers it requires; returns the name to call."""
        for dep in msl_library.helper(name).requires:
            self.require(dep)
        if name not in self.helpers:
            self.helpers[name] = msl_library.helper(name).text
        return name

    def _require_instance(self, requires: Tuple[str, ...], key: str, text: str) -> None:
        """Emit an instance of a parameterised library helper under `key`, after the helpers it requires."""
        for dep in requires:
            self.require(dep)
        self.helpers.setdefault(key, text)

    def require_shuffle(self, metal_fn: str, ctype: str) -> str:
        """Ask for the `tt_<metal_fn>` overload (see msl_helpers.shuffle_helper) for MSL type `ctype`."""
        key, name, text = shuffle_helper(metal_fn, ctype)
        self._require_instance(shuffle_requires(ctype), key, text)
        return name

    def require_locked_atomic64(self, kind: str) -> str:
        """Ask for `tt_atomic64_<kind>` (see msl_helpers.locked_atomic64_helper) and what it calls."""
        key, name, text = locked_atomic64_helper(kind)
        self._require_instance(locked_atomic64_requires(kind), key, text)
        return name

    def add_function(self, name: str, text: str) -> None:
        """Emit a generated function (e.g. a combine region) before the kernel."""
        self.helpers[name] = text

    def generated_name(self, base: str) -> str:
        """A module-unique name for a generated function, in the backend's `tt_` namespace (user-derived
        names never start with it)."""
        base = "tt_" + re.sub(r"[^A-Za-z0-9_]", "_", base)
        k = self._generated_names.get(base, 0)
        self._generated_names[base] = k + 1
        return base if k == 0 else f"{base}_{k}"

    def function_name(self, fn: Function) -> str:
        """The MSL name of a `noinline` Triton function."""
        if fn.name not in self._function_names:
            # `module.path.name__<signature>`: keep the Python name
            self._function_names[fn.name] = self.generated_name("fn_" + fn.name.rsplit(".", 1)[-1].split("__")[0])
        return self._function_names[fn.name]

    def add_debug_format(self, fmt: dict) -> int:
        self.debug_formats.append(fmt)
        return len(self.debug_formats) - 1

    # -- threadgroup memory ----------------------------------------------------------------------

    def scratch_offset(self, op: Op, nbytes: int) -> int:
        """Offset in `tt_smem` of scratch space for `op`: upstream's allocation when it is big enough, else
        the lowest 16-byte aligned gap that no buffer live at `op` occupies (`analysis/buffer_liveness.py`),
        possibly behind all of them."""
        self.uses_smem = True
        if nbytes <= self._upstream_scratch(op):
            return int(op.attrs["allocation.offset"])
        offset = self._free_gap(op, nbytes)
        self._scratch_end = max(self._scratch_end, offset + nbytes)
        return offset

    def scratch_in_place(self, op: Op, nbytes: int) -> bool:
        """Whether `nbytes` of scratch for `op` fit without the kernel declaring more threadgroup memory than it
        does now (in upstream's allocation for `op`, or in a gap below the end of what the kernel declares)."""
        if nbytes <= self._upstream_scratch(op):
            return True
        return self._free_gap(op, nbytes) + nbytes <= max(self.upstream_shared, self._scratch_end)

    def scratch_room(self, op: Op) -> int:
        """The most scratch bytes `op` can get without the kernel exceeding threadgroup memory."""
        upstream = self._upstream_scratch(op)
        room, cursor = 0, 0
        for b_off, b_size in self._occupied_at(op) + [(MAX_THREADGROUP_MEMORY, 0)]:
            room = max(room, b_off - cursor)
            cursor = max(cursor, (b_off + b_size + 15) // 16 * 16)
        return max(upstream, room)

    @staticmethod
    def _upstream_scratch(op: Op) -> int:
        """The bytes of upstream's scratch allocation for `op`, if it has one inside threadgroup memory (upstream
        sizes scratch for its own GPUs: a layout conversion of a 64 KB tensor gets 64 KB, which the lowering
        moves in rounds through what Apple GPUs have instead)."""
        off, size = op.attrs.get("allocation.offset"), op.attrs.get("allocation.size")
        if off is None or size is None or int(off) + int(size) > MAX_THREADGROUP_MEMORY:
            return 0
        return int(size)

    def _occupied_at(self, op: Op) -> List[Tuple[int, int]]:
        """(offset, bytes) of the explicit buffers live at `op`, by offset; every buffer when `op`'s position
        is unknown."""
        if self._live is None:
            self._live = [(r.start, r.end, int(r.alloc.attrs.get("allocation.offset", 0)), buffer_bytes(r.alloc))
                          for r in buffer_live_ranges(self.module)]
        pos = self._position.get(id(op))
        return sorted((o, n) for start, end, o, n in self._live if pos is None or start <= pos <= end)

    def _free_gap(self, op: Op, nbytes: int) -> int:
        cursor = 0
        for b_off, b_size in self._occupied_at(op):
            if cursor + nbytes <= b_off:
                break
            cursor = max(cursor, (b_off + b_size + 15) // 16 * 16)
        return cursor

    @property
    def shared_bytes(self) -> int:
        """Bytes of threadgroup memory the kernel declares (at least 16 when it uses any)."""
        total = max(self.upstream_shared, self._scratch_end)
        if total or self.uses_smem:
            return max(total, 16)
        return 0

    def check_shared_bytes(self) -> None:
        need = self.shared_bytes
        if need > MAX_THREADGROUP_MEMORY:
            raise ResourceLimitError(
                f"apple backend: kernel '{self.kernel_name}' needs {need} bytes of threadgroup memory; Apple "
                f"GPUs offer {MAX_THREADGROUP_MEMORY}. Use smaller blocks, fewer stages or fewer warps",
                need, MAX_THREADGROUP_MEMORY, "threadgroup memory")

    # -- errors ----------------------------------------------------------------------------------

    def _message(self, msg: str, op: Optional[Op], loc: Optional[Location]) -> str:
        loc = loc or (op.loc if op is not None else None)
        where = f"\n  at {loc}" if loc is not None and loc.file else ""
        what = f" (op {op.name})" if op is not None else ""
        return f"apple backend: kernel '{self.kernel_name}'{what}: {msg}{where}"

    def unsupported(self, msg: str, op: Optional[Op] = None, loc: Optional[Location] = None):
        return UnsupportedFeatureError(self._message(msg, op, loc))

    def internal(self, msg: str, op: Optional[Op] = None):
        return InternalCompilerError(self._message(f"internal error: {msg} (please report this)", op, None))

    def check_f64(self, op: Op) -> None:
        """float64 values are computed in software (`tt_double`, lowering/soft_f64.py) unless the kernel opted
        into demotion to float32: the first op that touches one brings in the software type."""
        if self.demote_f64 or "tt_f64_core" in self.helpers:
            return
        if any(v.type.scalar == F64 for v in list(op.results) + list(op.operands)):
            self.require("tt_f64_core")


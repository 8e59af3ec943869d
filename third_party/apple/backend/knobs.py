"""Every environment setting of the apple backend, read in this one place.

Each knob is read when asked for (not at import), so tests and users can change the environment between
launches. A malformed value raises `KnobError` naming the variable and what it accepts. README's knob table
lists exactly the knobs defined here (a test checks that).

Triton's own settings (`TRITON_CACHE_DIR`, `TRITON_KERNEL_DUMP`, ...) are read through `triton.knobs`, as
upstream does; this module only adds the apple backend's.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Generic, List, TypeVar

T = TypeVar("T")


class KnobError(ValueError):
    """An environment variable of the apple backend holds a value it does not accept."""


@dataclass(frozen=True)
class Knob(Generic[T]):
    env: str
    default: T
    doc: str
    parse: Callable[[str, str], T]

    def get(self) -> T:
        raw = os.environ.get(self.env)
        if raw is None or not raw.strip():
            return self.default
        return self.parse(self.env, raw.strip())


def _choice(*choices: str) -> Callable[[str, str], str]:

    def parse(env: str, raw: str) -> str:
        value = raw.lower()
        if value not in choices:
            raise KnobError(f"{env}={raw!r}: expected one of {', '.join(choices)}")
        return value

    return parse


def _flag(env: str, raw: str) -> bool:
    value = raw.lower()
    if value in ("1", "true", "on", "yes"):
        return True
    if value in ("0", "false", "off", "no"):
        return False
    raise KnobError(f"{env}={raw!r}: expected 0 or 1")


def _non_negative(kind: type, what: str) -> Callable[[str, str], object]:

    def parse(env: str, raw: str):
        try:
            value = kind(raw)
        except ValueError:
            value = -1
        if value < 0:
            raise KnobError(f"{env}={raw!r}: expected {what}")
        return value

    return parse


_count = _non_negative(int, "a non-negative integer")
_seconds = _non_negative(float, "a non-negative number of seconds")


def _text(env: str, raw: str) -> str:
    return raw


def _schedule(env: str, raw: str) -> str:
    kind = raw.split(":", 1)[0].lower()
    if kind not in ("forward", "reverse", "random"):
        raise KnobError(f"{env}={raw!r}: expected forward, reverse or random[:seed]")
    if ":" in raw:
        seed = raw.split(":", 1)[1]
        if kind != "random" or not seed.isdigit():
            raise KnobError(f"{env}={raw!r}: only random takes a seed, an unsigned integer (random:42)")
    return raw.lower()


# -- device and target ---------------------------------------------------------------------------------
device = Knob("TRITON_APPLE_DEVICE", "", "force the device: emulator, metal or off (this backend is never active); "
              "default: Metal on a Mac with MPS, else the emulator unless a CUDA/ROCm driver is active",
              _choice("emulator", "metal", "off"))
family = Knob("TRITON_APPLE_FAMILY", "", "GPU family to compile for: apple7 (M1), apple8 (M2), apple9 (M3/M4); "
              "default: the Mac's own family, apple7 on the emulator", _choice("apple7", "apple8", "apple9"))
dump_ir = Knob("TRITON_APPLE_DUMP_IR", False, "print our IR after the Apple passes to stderr", _flag)
log_compiles = Knob("TRITON_APPLE_LOG_COMPILES", False,
                    "print one line per kernel to stderr when the backend lowers it (target, time of our passes + "
                    "MSL lowering) and when the emulator builds its library (clang's time) or loads it from the "
                    "cache", _flag)
portability_warnings = Knob("TRITON_APPLE_PORTABILITY_WARNINGS", True, "warn once where a kernel uses a "
                            "shape NVIDIA's backend refuses (tl.dot with a small K)", _flag)
msl_version = Knob("TRITON_APPLE_MSL_VERSION", "", "Metal Shading Language version kernels are compiled for: 3.1 "
                   "(macOS 14), 3.2 (macOS 15), 4.0 (macOS 26); what needs a newer one is refused naming it, and the "
                   "emulator compiles at it (__METAL_VERSION__); default: the Mac's own, 3.2 elsewhere",
                   _choice("3.1", "3.2", "4.0"))
collect_msl = Knob("TRITON_APPLE_COLLECT_MSL", "", "directory every kernel the backend lowers writes its MSL to (one "
                   "file per distinct source, with the family and MSL version beside it), for "
                   "tools/compile_with_xcrun.py", _text)

# -- emulator ------------------------------------------------------------------------------------------
emulator_threads = Knob("TRITON_APPLE_EMULATOR_THREADS", 0,
                        "host threads the emulator spreads threadgroups over (0: one per core)", _count)
emulator_stack_kb = Knob("TRITON_APPLE_EMULATOR_STACK_KB", 0,
                         "stack of each emulated thread in KB (0: the runtime's default, 256)", _count)
emulator_schedule = Knob("TRITON_APPLE_EMULATOR_SCHEDULE", "forward",
                         "order emulated threads run in between barriers: forward, reverse or random[:seed]",
                         _schedule)
emulator_ub = Knob("TRITON_APPLE_EMULATOR_UB", "warn",
                   "undefined behaviour the emulator detects (division by zero, shift by >= width): warn, "
                   "error or ignore", _choice("warn", "error", "ignore"))
emulator_cxx = Knob("TRITON_APPLE_EMULATOR_CXX", "", "clang++ (17 or newer) the emulator compiles with; "
                    "default: the newest clang++ found on PATH", _text)
emulator_ucontext = Knob("TRITON_APPLE_EMULATOR_UCONTEXT", False,
                         "portable ucontext fibers instead of the hand-written context switch (read when the "
                         "runtime is first built)", _flag)
emulator_timeout = Knob("TRITON_APPLE_EMULATOR_TIMEOUT", 0.0,
                        "seconds after which a running emulator launch is stopped with an error (0: no limit)",
                        _seconds)

emulator_autotune_ms = Knob("TRITON_APPLE_EMULATOR_AUTOTUNE_MS", 5.0,
                             "milliseconds `@triton.autotune` times each config for on the emulator (launches "
                             "as the launcher times them, the first call's included); "
                             "upstream's 25 + 100 ms per config rank CPU emulation, which says nothing of a GPU",
                             _non_negative(float, "a non-negative number of milliseconds"))

emulator_autotune_quick = Knob("TRITON_APPLE_EMULATOR_AUTOTUNE_QUICK", True,
                                "build the libraries of autotune configs being timed on the emulator at -O0 "
                                "(emulator/tuning.py); the config chosen runs on an optimised library", _flag)

emulator_autotune_lookahead = Knob("TRITON_APPLE_EMULATOR_AUTOTUNE_LOOKAHEAD", True,
                                   "while `@triton.autotune` times a config on the emulator, compile the configs "
                                   "after it in a background thread (emulator/lookahead.py)", _flag)

emulator_optimise_after_ms = Knob("TRITON_APPLE_EMULATOR_OPTIMISE_AFTER_MS", 200.0,
                                  "milliseconds a kernel runs on its quick (-O0) library on the emulator before "
                                  "its optimised one is built, in the background (emulator/tuning.py); 0: every "
                                  "kernel is built optimised for its first launch",
                                  _non_negative(float, "a non-negative number of milliseconds"))

emulator_fork_server = Knob("TRITON_APPLE_EMULATOR_FORK_SERVER", True,
                            "keep clang and ld.lld loaded between kernel builds on Linux: a build forks a loaded "
                            "compiler instead of starting one (emulator/fork_server.py; same output files)", _flag)

emulator_max_loaded = Knob("TRITON_APPLE_EMULATOR_MAX_LOADED", 256,
                           "kernel libraries the emulator keeps loaded at once (least recently launched are "
                           "unloaded first, and loaded again when launched)", _count)
emulator_trust_cache = Knob("TRITON_APPLE_EMULATOR_TRUST_CACHE", False,
                            "load emulator libraries even from a cache directory that other users can write to "
                            "(refused by default: their code would run in this process)", _flag)


SANITIZERS = ("race", "init")


def _sanitizers(env: str, raw: str) -> tuple:
    names = tuple(sorted({part.strip().lower() for part in raw.split(",") if part.strip()}))
    bad = [n for n in names if n not in SANITIZERS]
    if bad:
        raise KnobError(f"{env}={raw!r}: unknown sanitizer {bad[0]!r}; expected a comma list of "
                        f"{', '.join(SANITIZERS)} (e.g. race,init)")
    return names


emulator_sanitize = Knob("TRITON_APPLE_EMULATOR_SANITIZE", (),
                         "emulator sanitizers for every launch: a comma list of race (threadgroup-memory hazards, "
                         "device write-write races) and init (uninitialised reads); kernels are rebuilt for them",
                         _sanitizers)
emulator_sanitize_report = Knob("TRITON_APPLE_EMULATOR_SANITIZE_REPORT", "error",
                                "what a sanitizer finding does: error (the launch fails, nothing is copied back) "
                                "or warn (an EmulatorSanitizerWarning per finding)", _choice("error", "warn"))
emulator_profile = Knob("TRITON_APPLE_EMULATOR_PROFILE", False,
                        "profile every emulator launch (memory traffic, access widths, bank conflicts, barriers, "
                        "FLOPs) and print one line per launch to stderr", _flag)


def all_knobs() -> List[Knob]:
    """Every knob of this module, in definition order."""
    return [v for v in globals().values() if isinstance(v, Knob)]


# -- torch.compile ---------------------------------------------------------------------------------------
inductor_mps = Knob("TRITON_APPLE_INDUCTOR_MPS", False,
                    "let torch.compile generate Triton kernels for mps tensors through this backend instead of "
                    "inductor's own Metal code generator (opt-in: never run on Apple hardware yet)", _flag)

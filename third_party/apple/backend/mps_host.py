"""How the Metal driver times work and counts memory on `mps`, for code written against `torch.cuda`'s
interface: `triton.testing.do_bench` and `@triton.autotune` (through `driver.get_device_interface()` and
`driver.get_benchmarker()`), and libraries that ask for peak memory.

Timing never uses `torch.mps.Event`. Its elapsed time is the difference of two completion timestamps that
PyTorch takes in host callbacks (shared-event listeners in PyTorch 2.13's MPSEvent; command-buffer completion
times in later versions), and it raises "End event N was not recorded after start event M" when the two
callbacks see the same time or the end event's command buffer had nothing in flight, which is exactly the
shape of a benchmark of a short kernel (docs/mps_standin.md). Here an event's timestamp is the host clock
taken after `torch.mps.synchronize()` has waited for all work issued so far: the time between two events is
the time the device took to finish what was issued between them, plus one synchronisation. `do_bench` below
amortises that synchronisation over batches of calls.

Peak memory: `torch.mps` has only the current figures (`current_allocated_memory`, bytes of live tensors, and
`driver_allocated_memory`, what Metal holds for the process, caches included). The interface keeps the largest
value it has seen since `reset_peak_memory_stats()`, sampled at every kernel launch of this backend and at every
call of the interface (records, synchronisations, memory queries): a lower bound of the true peak, exact when
the peak is reached at one of those points (as it is for a tensor alive across a launch).
"""
from __future__ import annotations

import math
import statistics
import time
from typing import Any, Callable, List, Optional, Sequence

# A sample of do_bench is a batch of calls between two synchronisations, at least this long (ms): a
# synchronisation costs tens of microseconds, so a batch of this length hides it below a few percent.
BATCH_MS = 2.0
MIN_SAMPLES = 5  # quantiles need a few samples even when the repetition time allows only a few calls


class _Peak:
    """Largest `current_allocated_memory` / `driver_allocated_memory` seen since tracking was (re)started."""

    tracking = False  # sampled at launches only once someone asked for peaks (no cost otherwise)
    allocated = 0
    reserved = 0


def tracking_memory() -> bool:
    return _Peak.tracking


def sample_memory() -> None:
    """Update the peaks with the current figures (the Metal launcher calls this per launch while tracking)."""
    import torch
    _Peak.allocated = max(_Peak.allocated, int(torch.mps.current_allocated_memory()))
    _Peak.reserved = max(_Peak.reserved, int(torch.mps.driver_allocated_memory()))


class MetalEvent:
    """An event of `torch.cuda.Event`'s interface whose timestamp is the host clock once the MPS stream has
    finished everything issued before `record()`. Every event can time (`enable_timing` is accepted and
    ignored): there is no cheaper untimed form to offer."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        self.t: Optional[float] = None

    def record(self, stream: Any = None) -> None:
        import torch
        torch.mps.synchronize()
        self.t = time.perf_counter()
        if _Peak.tracking:
            sample_memory()

    def synchronize(self) -> None:
        """Nothing left to wait for: `record` waited."""

    def wait(self, stream: Any = None) -> None:
        """Work issued later runs after this event's work anyway: MPS has one stream."""

    def query(self) -> bool:
        return self.t is not None

    def elapsed_time(self, end: "MetalEvent") -> float:
        """Milliseconds from this event's record to `end`'s."""
        if self.t is None or end.t is None:
            raise RuntimeError("elapsed_time needs both events recorded (call record() on each first)")
        return (end.t - self.t) * 1000.0


class MpsDeviceInterface:
    """The part of `torch.cuda`'s interface that Triton's tools and libraries use, for `mps`: `Event`,
    `synchronize`, `current_device`, `device_count` and the memory statistics; anything else is `torch.mps`'s
    own attribute (`empty_cache`, `manual_seed`, ...)."""

    Event = MetalEvent

    @staticmethod
    def synchronize(device: Any = None) -> None:
        import torch
        torch.mps.synchronize()
        if _Peak.tracking:
            sample_memory()

    @staticmethod
    def current_device() -> int:
        return 0

    @staticmethod
    def set_device(device: Any) -> None:
        pass

    @staticmethod
    def device_count() -> int:
        import torch
        return torch.mps.device_count()

    @staticmethod
    def is_available() -> bool:
        import torch
        return torch.backends.mps.is_available()

    @staticmethod
    def memory_allocated(device: Any = None) -> int:
        """Bytes of live MPS tensors now (`torch.mps.current_allocated_memory`)."""
        import torch
        now = int(torch.mps.current_allocated_memory())
        _Peak.allocated = max(_Peak.allocated, now)
        return now

    @staticmethod
    def memory_reserved(device: Any = None) -> int:
        """Bytes Metal holds for the process, the allocator's caches included (`torch.mps.driver_allocated_memory`)."""
        import torch
        now = int(torch.mps.driver_allocated_memory())
        _Peak.reserved = max(_Peak.reserved, now)
        return now

    @classmethod
    def max_memory_allocated(cls, device: Any = None) -> int:
        """The largest `memory_allocated` seen since `reset_peak_memory_stats` (sampled: the module docstring)."""
        _Peak.tracking = True
        cls.memory_allocated()
        return _Peak.allocated

    @classmethod
    def max_memory_reserved(cls, device: Any = None) -> int:
        _Peak.tracking = True
        cls.memory_reserved()
        return _Peak.reserved

    @staticmethod
    def reset_peak_memory_stats(device: Any = None) -> None:
        """Start sampling afresh: the peaks become the current figures."""
        import torch
        _Peak.tracking = True
        _Peak.allocated = int(torch.mps.current_allocated_memory())
        _Peak.reserved = int(torch.mps.driver_allocated_memory())

    def __getattr__(self, name: str) -> Any:
        import torch
        return getattr(torch.mps, name)


def summarize(times: Sequence[float], quantiles: Optional[Sequence[float]], return_mode: str):
    """`do_bench`'s result, as `triton.testing.do_bench` returns it: the quantiles asked for (linear interpolation
    between order statistics; one value when one was asked for), else the statistic `return_mode` names."""
    if quantiles is not None:
        ordered = sorted(times)
        out = []
        for q in quantiles:
            if not 0 <= q <= 1:
                raise ValueError("Quantiles must be in the range [0, 1]")
            pos = q * (len(ordered) - 1)
            lo, hi = math.floor(pos), math.ceil(pos)
            out.append(ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo))
        return out[0] if len(out) == 1 else out
    if return_mode == "all":
        return list(times)
    return {"min": min, "max": max, "mean": statistics.mean, "median": statistics.median}[return_mode](times)


def do_bench(fn: Callable[[], Any], warmup: float = 25, rep: float = 100, grad_to_none: Optional[List] = None,
             quantiles: Optional[Sequence[float]] = None, return_mode: str = "mean"):
    """`triton.testing.do_bench` for `mps` (what `driver.get_benchmarker()` returns there): milliseconds per call
    of `fn`, measured on the host clock between `torch.mps.synchronize()` calls.

    Each sample is one batch of calls, long enough (`BATCH_MS`) that the synchronisation closing it costs little,
    divided by its number of calls; the quantiles and statistics are over samples. Caches are flushed (the
    driver's `clear_cache`) before each batch, not before each call as upstream does between its events: the
    calls of a batch after the first find the caches as the previous call left them."""
    import torch

    from triton import runtime
    if return_mode not in ("min", "max", "mean", "median", "all"):
        raise ValueError(f"return_mode must be min, max, mean, median or all, not {return_mode!r}")
    active = runtime.driver.active
    fn()
    torch.mps.synchronize()
    cache = active.get_empty_cache_for_benchmark()

    def batch(calls: int) -> float:
        active.clear_cache(cache)
        torch.mps.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            if grad_to_none is not None:
                for x in grad_to_none:
                    x.grad = None
            fn()
        torch.mps.synchronize()
        return (time.perf_counter() - start) * 1000.0

    estimate = max(batch(5) / 5, 1e-6)
    for _ in range(max(1, int(warmup / estimate))):
        fn()
    per_batch = max(1, math.ceil(BATCH_MS / estimate))
    samples = max(MIN_SAMPLES, int(rep / (estimate * per_batch)))
    if _Peak.tracking:
        sample_memory()
    times = [batch(per_batch) / per_batch for _ in range(samples)]
    return summarize(times, quantiles, return_mode)

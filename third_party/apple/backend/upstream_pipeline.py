"""The TTGIR pass pipeline this backend runs through libtriton, and which of its passes a kernel can skip.

The pipeline is the one NVIDIA's and AMD's backends run before their own passes, less what only serves their
hardware (MMA selection, pipelining, TMA). A pass is skipped where the kernel has none of the ops it rewrites
(counted once, before the pipeline, by walking the TTIR): it would leave the module as it is, and MLIR would
still verify the whole module after it, re-deriving every tensor's layout. That verification is about half of
what the pipeline costs (47% of it over the kernels of bench/compile_time.py, 72% for its matmul; perf, 5 Dec
2026), and libtriton's Python binding has no switch to run it once instead of after every pass.

Only passes that provably cannot change such a kernel are skipped; every other pass always runs. Some of those
have triggers too, but also run MLIR's generic rewrites (folding, dead code, constant hoisting:
`optimize_thread_locality`, `loop_aware_cse`), which apply to any kernel.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List

from triton._C.libtriton import passes

PassAdder = Callable[[Any], None]

_LOOPS = ("scf.for", "scf.while")  # the LoopLikeOpInterface ops Triton's IR can hold
_DOTS = ("tt.dot", "tt.dot_scaled")  # the only ops whose operands get #ttg.dot_op layouts
_TRANSPOSES = ("tt.trans", )  # TransposeOpInterface in TTIR (ttg.memdesc_trans exists only after a dot's lowering)


@dataclass(frozen=True)
class OpCensus:
    """How many ops of each name a module holds (`scf.for` nested in `scf.for` counted like any other)."""
    counts: Dict[str, int]

    @classmethod
    def of(cls, mod) -> "OpCensus":
        counts: Dict[str, int] = {}

        def count(op) -> None:
            name = op.get_name()
            counts[name] = counts.get(name, 0) + 1

        mod.walk(count)
        return cls(counts)

    def has(self, *names: str) -> bool:
        return any(self.counts.get(n, 0) for n in names)

    def count(self, name: str) -> int:
        return self.counts.get(name, 0)


def ttgir_passes(census: OpCensus, to_ttgpuir: PassAdder) -> List[PassAdder]:
    """Upstream's passes from TTIR to the TTGIR our own passes start from, for a kernel whose TTIR has `census`.

    Each condition is the trigger of the pass it guards, as the pass is written in Triton 3.9:
    * `fuse_nested_loops` fuses a loop nest whose outer loop is marked `tt.flatten` and holds one inner loop
      (and, before trying, hoists invariant code out of that nest): a kernel with fewer than two loops has no nest;
    * `triton_licm` moves code out of loop regions only;
    * `reduce_data_duplication` rewrites layout conversions to `#ttg.dot_op`, which exist only for the operands
      of a dot;
    * `reorder_instructions` moves shared-memory loads and allocations (which only `reduce_data_duplication`
      creates here), conversions to `#ttg.dot_op`, and transposes;
    * `symbol_dce` erases private functions nothing calls: a module whose only function is the kernel has none.
    """
    loops = census.has(*_LOOPS)
    dots = census.has(*_DOTS)
    nests = census.count("scf.for") >= 2
    steps: List[PassAdder] = [
        to_ttgpuir,
        passes.ttgpuir.add_coalesce,
        passes.ttgpuir.add_remove_layout_conversions,
        passes.ttgpuir.add_optimize_thread_locality,
        passes.ttgpuir.add_remove_layout_conversions,
        passes.ttir.add_loop_aware_cse,
    ]
    if nests:
        steps.append(passes.ttgpuir.add_fuse_nested_loops)
    steps.append(passes.common.add_canonicalizer)
    if loops:
        steps.append(passes.ttir.add_triton_licm)
    steps += [passes.common.add_canonicalizer, passes.ttir.add_loop_aware_cse,
              passes.ttgpuir.add_remove_layout_conversions]
    if dots:
        steps.append(passes.ttgpuir.add_reduce_data_duplication)
    if dots or census.has(*_TRANSPOSES):
        steps.append(passes.ttgpuir.add_reorder_instructions)
    steps.append(passes.ttir.add_loop_aware_cse)
    if census.count("tt.func") > 1:
        steps.append(passes.common.add_symbol_dce)
    steps += [passes.common.add_sccp, passes.common.add_cse, passes.common.add_canonicalizer,
              passes.ttgpuir.add_allocate_shared_memory]
    return steps

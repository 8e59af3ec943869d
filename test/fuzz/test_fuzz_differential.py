"""Differential fuzzing, fast profile: generated Triton kernels run on the apple backend and under
Triton's own interpreter (``TRITON_INTERPRET=1``, in a worker subprocess), outputs compared with the
bounds documented in ``support/fuzz_grammar.py``.

40 derandomised examples (the same kernels on every run, so CI is stable and compiled kernels are
reused from ``$TRITON_CACHE_DIR``). The long profile, which keeps going after failures and writes
them to a directory, is ``PYTHONPATH=test python test/fuzz/run_long.py --examples 2000``.

Comparison bounds are those of the emulator (a host CPU): on a Mac's GPU the transcendental bounds
may need widening.
"""
import pytest
from hypothesis import HealthCheck, given, settings

from support.fuzz_grammar import FLOAT_TYPES, INT_TYPES, kernel_specs
from support.fuzz_harness import report, run_case, worker

FAST = dict(derandomize=True, database=None, deadline=None, print_blob=False,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
                                   HealthCheck.large_base_example, HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module", autouse=True)
def _interpreter_worker():
    yield
    worker().close()


def _check(spec, device):
    res = run_case(spec, device=device)
    assert res.ok, report(spec, res)


@settings(max_examples=12, **FAST)
@given(spec=kernel_specs(layouts=("1d", ), bool_outputs=True))
def test_fuzz_1d(spec, device):
    _check(spec, device)


@settings(max_examples=12, **FAST)
@given(spec=kernel_specs(layouts=("2d", )))
def test_fuzz_2d_broadcast_and_axis_reductions(spec, device):
    _check(spec, device)


@settings(max_examples=8, **FAST)
@given(spec=kernel_specs(dtypes=INT_TYPES, max_depth=4, transcendentals=False))
def test_fuzz_integer_semantics(spec, device):
    _check(spec, device)


@settings(max_examples=8, **FAST)
@given(spec=kernel_specs(dtypes=FLOAT_TYPES + ("bfloat16", ), max_depth=2))
def test_fuzz_float_semantics(spec, device):
    _check(spec, device)


def test_harness_detects_wrong_results(device):
    """The comparison must catch a one-ULP / one-unit error in every kind of output; a fuzzer whose
    comparison silently passes would be worse than none."""
    import torch
    from hypothesis import find
    from support.fuzz_grammar import build_args
    from support.fuzz_harness import compare, load_module, write_module

    spec = find(kernel_specs(layouts=("1d", ), dtypes=("float32", ), transcendentals=False, max_values=1),
                lambda s: {(o.kind, o.dtype) for o in s.outputs} >= {("value", "float32"), ("sum", "float32")}
                and s.extent[0] > 1,
                settings=settings(database=None, derandomize=True, max_examples=2000))
    path = write_module(spec.source)
    args, out_idx = build_args(spec)
    args = [a.to(device) if isinstance(a, torch.Tensor) else a for a in args]
    load_module(path).fuzz_kernel[spec.grid](*args, **spec.constexprs, num_warps=spec.num_warps)
    got = [args[i].cpu() for i in out_idx]
    assert compare(spec, got, [g.clone() for g in got]) == ([], 0)
    for k, out in enumerate(spec.outputs):
        bad = [g.clone() for g in got]
        flat = bad[k].view(-1)
        if out.kind == "sum":  # beyond the summation bound (or finite where a NaN/inf is expected)
            flat[0] = flat[0] + 1e-3 * (1 + flat[0].abs()) if flat[0].isfinite() else 0.0
        elif flat.is_floating_point():  # one ULP
            i = int(torch.isfinite(flat).nonzero()[-1])
            flat[i] = torch.nextafter(flat[i], torch.tensor(float("inf")))
        else:  # one unit
            flat[-1] += 1
        mism, _ = compare(spec, bad, got)
        assert [m.output for m in mism] == [out.name], (out, mism)

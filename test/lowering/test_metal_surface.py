"""docs/mac.md's Metal surface table (tools/metal_surface.py, rules in tools/metal_spec.py) is current: it holds every
use of Metal the MSL library and the lowering's spellings make, each row's verdict is what the specification's rules
give now, no row is outside the specification, and tools/metal_probe.metal is the probe of its unverified rows."""
import importlib.util
import sys
from pathlib import Path

import pytest

_TOOL = Path(__file__).resolve().parents[2] / "tools" / "metal_surface.py"
_spec = importlib.util.spec_from_file_location("metal_surface", _TOOL)
metal_surface = sys.modules["metal_surface"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(metal_surface)  # a script of tools/, not a package: loaded from its file
metal_spec = metal_surface.metal_spec


@pytest.fixture(scope="module")
def table():
    return metal_surface.uses_of_table(metal_surface.table_of_doc(metal_surface.DOC.read_text()))


@pytest.fixture(scope="module")
def own_surface():
    return metal_surface.collect()  # the library and the lowering's spellings (no collection)


@pytest.mark.slow  # about 10 s: the library's and the spellings' syntax trees
def test_the_table_has_every_use_of_the_library_and_the_spellings(table, own_surface):
    missing = [u for u in own_surface.uses if u not in table]
    assert not missing, f"docs/mac.md's table lacks {missing[:5]}: run python tools/metal_surface.py --collection <dir> --write"
    for use, origins in own_surface.uses.items():
        assert set(origins) <= set(table[use][0].split(", ")), use


def test_every_verdict_is_the_rules_and_nothing_is_outside_the_specification(table):
    assert len(table) > 200
    for use, (_, status) in table.items():
        assert status == metal_spec.verdict(use.kind, use.name, use.signature).status, use
        assert not status.startswith("NOT IN SPEC"), (use, status)


def test_the_probe_is_the_tables(table):
    assert metal_surface.PROBE.read_text() == metal_surface.probe(table), "run python tools/metal_surface.py --probe"
    unverified = [u for u, (_, s) in table.items() if s.startswith("unverified") and u.kind != "pragma"]
    text = metal_surface.PROBE.read_text()
    for u in unverified:
        assert f": {u.kind} {u.name} {u.signature}".rstrip() in text, u


@pytest.mark.parametrize("kind,name,signature,problem", [
    ("function", "simd_shuffle", "(bool, ushort) -> bool", "not bool"),
    ("function", "simd_sum", "(long) -> long", "not long"),
    ("function", "simd_and", "(float) -> float", "integers"),
    ("function", "as_type<ulong>", "(device float*) -> ulong", "never pointers"),
    ("function", "as_type<uint>", "(half) -> uint", "of one size"),
    ("function", "atomic_fetch_add_explicit", "(volatile threadgroup atomic_float*, float, memory_order) -> float",
     "atomic_float is not allowed in threadgroup memory"),
    ("function", "atomic_fetch_and_explicit", "(volatile device atomic_float*, float, memory_order) -> float",
     "pointer to atomic_int / atomic_uint"),
    ("function", "atomic_max_explicit", "(volatile device atomic_uint*, uint, memory_order) -> void", "atomic_ulong"),
    ("function", "precise::exp", "(bfloat) -> bfloat", "half or float"),
    ("function", "precise::clz", "(uint) -> uint", "holds the math functions"),
    ("attribute", "[[thread_index_in_simdgroup]]", "float", "takes ushort, uint"),
    ("attribute", "[[buffer(n)]]", "threadgroup float*", "device/constant"),
])
def test_the_rules_refuse_what_the_specification_does_not_allow(kind, name, signature, problem):
    status = metal_spec.verdict(kind, name, signature).status
    assert status.startswith("NOT IN SPEC") and problem in status, status

"""Every cell of the conformance matrix (support/conformance_cases.py): runs and matches torch, or is refused
with a clear message. The same cells generate docs/coverage.md (tools/coverage_table.py)."""
import re

import pytest

from support.conformance_cases import all_cells
from support.device import device_name

CELLS = all_cells(device_name())


@pytest.mark.parametrize("cell", CELLS, ids=[f"{c.category}-{c.op}-{c.dtype}" for c in CELLS])
def test_cell(cell):
    if cell.refused is None:
        cell.run(cell.dtype)
        return
    # A refusal is the backend (UnsupportedFeatureError) or Triton's frontend saying no before the kernel
    # runs, never a kernel the backend accepted and then failed in the MSL compiler or at launch.
    with pytest.raises(cell.refusal_type()) as info:
        cell.run(cell.dtype)
    assert re.search(cell.refused, str(info.value)), str(info.value)

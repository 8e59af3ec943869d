"""Every cell of the conformance matrix (cases.py): runs and matches torch, or is refused with a clear
message. The same cells generate docs/coverage.md (tools/coverage_table.py)."""
import os
import re
import sys

import pytest

from conftest import device_name

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cases import all_cells  # noqa: E402

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

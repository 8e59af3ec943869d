"""The Metal device probe's kernels (tools/metal_device_probe.metal) on the emulator: each is valid MSL that gives
the known answers of tools/metal_device_probe.json, the table the probe tool (tools/metal_device_probe.m) checks the
GPU against, read here the way the tool reads it (same grid, same output buffer starting as 0xFF bytes). So a
wrong answer on a Mac is the device's, not the probe's."""
import json
import re
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.emulator_only

TOOLS = Path(__file__).resolve().parents[2] / "tools"
TABLE = json.loads((TOOLS / "metal_device_probe.json").read_text())
SOURCE = (TOOLS / TABLE["source"]).read_text()
TYPES = {"int32": torch.int32, "float32": torch.float32}


def test_every_kernel_of_the_source_is_in_the_table_once():
    in_source = re.findall(r"^kernel void (\w+)\(", SOURCE, re.M)
    in_table = [k["name"] for k in TABLE["kernels"]]
    assert sorted(in_source) == sorted(in_table) and len(set(in_table)) == len(in_table)
    for k in TABLE["kernels"]:
        assert k["type"] in TYPES and k["threadgroups"] >= 1 and 1 <= k["threads_per_threadgroup"] <= 1024
        assert all(o["what"] and o["expected"] for o in k["outputs"]), k["name"]


@pytest.mark.parametrize("kernel", TABLE["kernels"], ids=lambda k: k["name"])
def test_probe_kernel_gives_the_known_answers(emu, kernel):
    k = emu.compile_msl(SOURCE, kernel["name"])
    expected = [v for o in kernel["outputs"] for v in o["expected"]]
    out = torch.full((len(expected), ), -1, dtype=torch.int32).view(TYPES[kernel["type"]])  # 0xFF bytes
    k.launch(grid=kernel["threadgroups"], threadgroup=kernel["threads_per_threadgroup"], buffers=[out])
    got = out.tolist()
    start = 0
    for o in kernel["outputs"]:
        n = len(o["expected"])
        assert got[start:start + n] == o["expected"], (kernel["name"], o["what"])
        start += n


def test_an_output_the_kernel_does_not_write_fails(emu):
    """The 0xFF start is what catches a kernel that writes nothing: one output more than probe_dispatch writes stays
    -1, which no expected value is."""
    kernel = next(k for k in TABLE["kernels"] if k["name"] == "probe_dispatch")
    out = torch.full((kernel["threadgroups"] + 1, ), -1, dtype=torch.int32)
    emu.compile_msl(SOURCE, "probe_dispatch").launch(grid=kernel["threadgroups"],
                                                      threadgroup=kernel["threads_per_threadgroup"], buffers=[out])
    assert out.tolist()[-1] == -1
    assert all(v != -1 for k in TABLE["kernels"] for o in k["outputs"] for v in o["expected"])

"""Settings: every knob is read through knobs.py, validated with a message naming the variable, and listed
in the README."""
import os
import re

import pytest

from triton.backends.apple import knobs

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def test_readme_lists_exactly_the_knobs():
    readme = open(os.path.join(ROOT, "README.md")).read()
    table = readme[readme.index("## Knobs"):readme.index("## How it is built")]
    listed = set(re.findall(r"`(TRITON_APPLE_[A-Z_]+)", table))
    assert listed == {k.env for k in knobs.all_knobs()}


def test_no_module_reads_a_backend_variable_outside_knobs():
    backend = os.path.join(ROOT, "third_party", "apple", "backend")
    offenders = []
    for dirpath, _, files in os.walk(backend):
        for f in files:
            if f.endswith(".py") and f != "knobs.py":
                text = open(os.path.join(dirpath, f)).read()
                if re.search(r"environ(\.get)?[\[(]\s*[\"']TRITON_APPLE_", text):
                    offenders.append(f)
    assert offenders == []


@pytest.mark.parametrize("env,value,message", [
    ("TRITON_APPLE_DEVICE", "gpu", "expected one of emulator, metal, off"),
    ("TRITON_APPLE_EMULATOR_THREADS", "-2", "expected a non-negative integer"),
    ("TRITON_APPLE_EMULATOR_TIMEOUT", "soon", "expected a non-negative number of seconds"),
    ("TRITON_APPLE_DUMP_IR", "maybe", "expected 0 or 1"),
    ("TRITON_APPLE_EMULATOR_SCHEDULE", "forward:3", "only random takes a seed"),
])
def test_bad_values_name_the_variable(monkeypatch, env, value, message):
    monkeypatch.setenv(env, value)
    knob = next(k for k in knobs.all_knobs() if k.env == env)
    with pytest.raises(knobs.KnobError, match=f"{env}={value!r}: {message}".replace("(", r"\(").replace(")", r"\)")):
        knob.get()


def test_defaults_and_parsing(monkeypatch):
    for k in knobs.all_knobs():
        monkeypatch.delenv(k.env, raising=False)
    assert knobs.emulator_timeout.get() == 0.0 and knobs.dump_ir.get() is False
    monkeypatch.setenv("TRITON_APPLE_EMULATOR_TIMEOUT", "2.5")
    monkeypatch.setenv("TRITON_APPLE_DUMP_IR", "1")
    monkeypatch.setenv("TRITON_APPLE_EMULATOR_SCHEDULE", "random:7")
    assert knobs.emulator_timeout.get() == 2.5 and knobs.dump_ir.get() is True
    assert knobs.emulator_schedule.get() == "random:7"

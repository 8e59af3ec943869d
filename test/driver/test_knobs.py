"""Settings: every knob is read through knobs.py, validated with a message naming the variable, and listed
in the README."""
import ast
import os
import re
from typing import List

import pytest

from triton.backends.apple import knobs

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def test_readme_lists_exactly_the_knobs():
    readme = open(os.path.join(ROOT, "README.md")).read()
    table = readme[readme.index("## Knobs"):readme.index("## How it is built")]
    listed = set(re.findall(r"`(TRITON_APPLE_[A-Z_]+)", table))
    assert listed == {k.env for k in knobs.all_knobs()}


# Names through which Python code reads the environment, and the methods of os.environ that read a variable.
_ENV_NAMES = {"environ", "environb", "getenv", "getenvb"}
_ENV_METHODS = {"get", "setdefault", "pop", "__getitem__", "__contains__"}
# A variable's name as code spells it: "TRITON_APPLE_DEVICE", or the prefix that f"TRITON_APPLE_{k}" and
# "TRITON_APPLE_" + k start from. Messages that mention a variable ("set TRITON_APPLE_DEVICE=...") do not match.
_BACKEND_VARIABLE = re.compile(r"TRITON_APPLE_[A-Z0-9_]*\Z")


def _names_backend_variable(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Constant) and isinstance(n.value, str) and _BACKEND_VARIABLE.match(n.value)
               for n in ast.walk(node))


def _environment_reads(tree: ast.AST) -> List[int]:
    """Lines of `tree` that read a TRITON_APPLE_ variable from the environment in any spelling: os.getenv(...),
    os.environ.get/setdefault/pop(...), os.environ[...], `... in os.environ`, and the same through an alias
    (`from os import environ as env`, `env = os.environ`, `get = os.getenv`, `dict(os.environ)`)."""
    aliases = set(_ENV_NAMES)

    def is_env(node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            return node.id in aliases
        if isinstance(node, ast.Attribute):
            return node.attr in _ENV_NAMES
        if isinstance(node, ast.Call):  # dict(os.environ), os.environ.copy()
            f = node.func
            return ((isinstance(f, ast.Name) and f.id == "dict" and any(is_env(a) for a in node.args))
                    or (isinstance(f, ast.Attribute) and f.attr == "copy" and is_env(f.value)))
        return False

    for _ in range(3):  # aliases of aliases
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "os":
                aliases |= {a.asname for a in node.names if a.name in _ENV_NAMES and a.asname}
            elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None and is_env(node.value):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                aliases |= {t.id for t in targets if isinstance(t, ast.Name)}
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and _names_backend_variable(node.args[0]):
            f = node.func
            if is_env(f) or (isinstance(f, ast.Attribute) and f.attr in _ENV_METHODS and is_env(f.value)):
                lines.append(node.lineno)
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and is_env(node.value):
            if _names_backend_variable(node.slice):
                lines.append(node.lineno)
        elif isinstance(node, ast.Compare) and _names_backend_variable(node.left):
            if any(isinstance(op, (ast.In, ast.NotIn)) and is_env(c) for op, c in zip(node.ops, node.comparators)):
                lines.append(node.lineno)
    return sorted(lines)


def backend_environment_reads(backend: str) -> List[str]:
    """`file:line` of every read of a TRITON_APPLE_ variable in the backend's Python outside knobs.py. C sources
    are not checked: the emulator's native launcher calls getenv on the TRITON_APPLE_EMULATOR_* settings at each
    launch by design, only to notice a change, and then asks the knobs for their values."""
    offenders = []
    for dirpath, _, files in os.walk(backend):
        for f in sorted(files):
            if f.endswith(".py") and f != "knobs.py":
                path = os.path.join(dirpath, f)
                with open(path) as fh:
                    tree = ast.parse(fh.read(), path)
                offenders += [f"{os.path.relpath(path, backend)}:{line}" for line in _environment_reads(tree)]
    return offenders


def test_no_module_reads_a_backend_variable_outside_knobs():
    assert backend_environment_reads(os.path.join(ROOT, "third_party", "apple", "backend")) == []


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

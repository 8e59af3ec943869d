"""The backend runs from what each way of installing it ships, and from nothing else: a wheel built from this
repository (`pip wheel .`), and upstream's in-tree plugin install, which copies only `backend/` and `language/`
(`TRITON_PLUGIN_DIRS`; its setup.py runs `cmake --build`, never `cmake --install`). Each case loads
`triton.backends.apple` and `triton.language.extra.apple` from the installed files alone, in a subprocess, and
runs a kernel on the emulator (runtime, launcher, MSL library and compat header all read from there)."""
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
APPLE = REPO / "third_party" / "apple"

# Runs in a subprocess: imports the two packages from ROOT/triton/{backends,language/extra}/apple, ahead of the
# development install, then runs a kernel and says where each file came from.
RUN = textwrap.dedent('''
    import importlib.abc, importlib.util, os, sys
    ROOT = sys.argv[1]
    HOMES = {"triton.backends.apple": os.path.join(ROOT, "triton", "backends", "apple"),
             "triton.language.extra.apple": os.path.join(ROOT, "triton", "language", "extra", "apple")}

    class InstalledOnly(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            for prefix, home in HOMES.items():
                if name == prefix or name.startswith(prefix + "."):
                    base = os.path.join(home, *name[len(prefix):].split(".")[1:])
                    if os.path.isfile(os.path.join(base, "__init__.py")):
                        return importlib.util.spec_from_file_location(
                            name, os.path.join(base, "__init__.py"), submodule_search_locations=[base])
                    if os.path.isfile(base + ".py"):
                        return importlib.util.spec_from_file_location(name, base + ".py")
                    raise ModuleNotFoundError(f"{name} is not in the installed files under {home}")
            return None

    sys.meta_path.insert(0, InstalledOnly())
    import torch, triton, triton.language as tl
    from triton.language.extra import libdevice

    @triton.jit
    def k(x_ptr, y_ptr, n, s: tl.float64, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        x = tl.load(x_ptr + offs, mask=m)
        tl.store(y_ptr + offs, libdevice.erf(x) + s.to(tl.float32) + tl.floor(x), mask=m)

    x = torch.randn(300) * 4
    y = torch.empty_like(x)
    k[(3, )](x, y, 300, 0.5, BLOCK=128)
    torch.testing.assert_close(y, torch.erf(x) + 0.5 + torch.floor(x))
    import triton.backends.apple as backend, triton.language.extra.apple as language
    from triton.backends.apple.emulator import build, launcher
    from triton.backends.apple.lowering import msl_library
    print("backend", backend.__file__)
    print("language", language.__file__)
    print("native", build.native_dirs()[1])
    print("launcher", launcher.LAUNCHER_SOURCE)
    print("library", msl_library.LIBRARY_DIR)
''')


def _run_from(root: Path) -> dict:
    script = root / "run_installed.py"  # @triton.jit reads its source from a file
    script.write_text(RUN)
    res = subprocess.run([sys.executable, str(script), str(root)], capture_output=True, text=True, timeout=600,
                         cwd=str(root))
    assert res.returncode == 0, res.stdout + res.stderr
    where = dict(line.split(" ", 1) for line in res.stdout.splitlines() if " " in line)
    for what in ("backend", "language", "native", "launcher", "library"):
        assert where[what].startswith(str(root)), (what, where[what])
    return where


def test_a_wheel_of_this_repository_runs_the_emulator(tmp_path):
    out = tmp_path / "wheel"
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(out)], check=True, capture_output=True, timeout=300)
    shutil.rmtree(REPO / "build", ignore_errors=True)  # setuptools' build dir, not part of the checkout
    (wheel, ) = out.glob("triton_apple-*.whl")
    root = tmp_path / "site"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(root)
    _run_from(root)


def test_upstreams_plugin_install_runs_the_emulator(tmp_path):
    """What upstream's setup.py installs of a plugin: backend/ as triton/backends/<name.conf>, each folder of
    language/ as triton/language/extra/<folder>; nothing else of third_party/apple."""
    name = (APPLE / "backend" / "name.conf").read_text().strip()
    root = tmp_path / "site"
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(APPLE / "backend", root / "triton" / "backends" / name, ignore=ignore)
    for sub in (APPLE / "language").iterdir():
        shutil.copytree(sub, root / "triton" / "language" / "extra" / sub.name, ignore=ignore)
    _run_from(root)

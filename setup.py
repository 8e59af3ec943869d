"""Standalone build: installs the `apple` backend into the `triton` namespace of a stock Triton wheel.

`third_party/apple/backend` becomes `triton.backends.apple` and `third_party/apple/language/apple`
becomes `triton.language.extra.apple`, the same import paths upstream's in-tree plugin build gives. Files
the backend reads at run time live inside `backend/` and ship as package data, exactly what upstream's
plugin install (which copies `backend/` and `language/` only) ships too: the emulator's native sources
(`emulator/native`, compiled on first use, like upstream's launcher sources) and the MSL library
(`lowering/msl`).
"""
import os

from setuptools import setup

APPLE = os.path.join("third_party", "apple")


def _subpackages(root: str, prefix: str) -> dict:
    found = {}
    for dirpath, _, files in os.walk(root):
        if "__init__.py" in files and "__pycache__" not in dirpath:
            rel = os.path.relpath(dirpath, root)
            name = prefix if rel == "." else prefix + "." + rel.replace(os.sep, ".")
            found[name] = dirpath
    return found


package_dir = {}
package_dir.update(_subpackages(os.path.join(APPLE, "backend"), "triton.backends.apple"))
package_dir.update(_subpackages(os.path.join(APPLE, "language", "apple"), "triton.language.extra.apple"))

setup(
    packages=sorted(package_dir),
    package_dir=package_dir,
    package_data={
        "triton.backends.apple": ["name.conf"],
        "triton.backends.apple.emulator": ["README.md", "native/*.c", "native/*.cpp", "native/include/*"],
        "triton.backends.apple.lowering": ["msl/*.metal", "msl/*.h", "msl/README.md"],
    },
    zip_safe=False,
)

"""Standalone build: installs the `apple` backend into the `triton` namespace of a stock Triton wheel.

`third_party/apple/backend` becomes `triton.backends.apple` and `third_party/apple/language/apple`
becomes `triton.language.extra.apple`, the same import paths upstream's in-tree plugin build gives.
The emulator's C++ sources (`include/`, `lib/`) ship as package data under `triton/backends/apple/native`;
they are compiled on first use, like upstream's launcher sources.
"""
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
APPLE = os.path.join("third_party", "apple")


def _subpackages(root: str, prefix: str) -> dict:
    found = {}
    for dirpath, _, files in os.walk(root):
        if "__init__.py" in files and "__pycache__" not in dirpath:
            rel = os.path.relpath(dirpath, root)
            name = prefix if rel == "." else prefix + "." + rel.replace(os.sep, ".")
            found[name] = dirpath
    return found


class BuildPyWithNative(build_py):
    """Copies the emulator's native sources into the built package."""

    def run(self):
        super().run()
        dest = os.path.join(self.build_lib, "triton", "backends", "apple", "native")
        for sub in ("include", "lib"):
            src = os.path.join(HERE, APPLE, sub)
            shutil.copytree(src, os.path.join(dest, sub), dirs_exist_ok=True)


package_dir = {}
package_dir.update(_subpackages(os.path.join(APPLE, "backend"), "triton.backends.apple"))
package_dir.update(_subpackages(os.path.join(APPLE, "language", "apple"), "triton.language.extra.apple"))

setup(
    packages=sorted(package_dir),
    package_dir=package_dir,
    package_data={"triton.backends.apple": ["name.conf", "*.c", "*.cpp", "*.mm"]},
    cmdclass={"build_py": BuildPyWithNative},
    zip_safe=False,
)

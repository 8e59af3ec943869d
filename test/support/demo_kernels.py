"""The demo's kernels (examples/kernels.py), loaded for test/e2e/test_demo_kernels.py.

examples/ is not a package and its module names (`kernels`, `demo`) are too generic to put on every test's
import path, so this loads the one file under a name of its own."""
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

PATH = Path(__file__).resolve().parents[2] / "examples" / "kernels.py"
_NAME = "triton_apple_examples_kernels"


def load() -> ModuleType:
    """examples/kernels.py as a module (loaded once; @triton.jit reads its source from the file)."""
    if _NAME not in sys.modules:
        spec = importlib.util.spec_from_file_location(_NAME, PATH)
        module = importlib.util.module_from_spec(spec)
        sys.modules[_NAME] = module  # registered first, as an import would, for anything that looks it up
        spec.loader.exec_module(module)
    return sys.modules[_NAME]

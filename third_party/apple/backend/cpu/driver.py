"""The driver of Triton's `cpu` target: the apple driver in emulator mode, on torch CPU tensors.

It never claims to be the active driver on its own (`is_active()` is False): the `apple` driver already is on
a machine without a GPU, and inductor makes this one active explicitly (`set_driver_to_cpu`). Exactly one
concrete `DriverBase` subclass lives here: ours, or the installed foreign `cpu` backend's (see `__init__.py`).
"""
from triton.backends.driver import DriverBase as _DriverBase

from . import foreign_class as _foreign_class, foreign_cpu_backend as _foreign_cpu_backend
from .. import driver as _apple

if _foreign_cpu_backend():
    CpuDriver = _foreign_class("driver", _DriverBase)
else:

    class AppleCpuDriver(_apple.AppleDriver):
        """Launches on the emulator whatever the machine (on a Mac too: CPU tensors never go to the GPU)."""

        def __init__(self):
            super().__init__(mode="emulator")

        @staticmethod
        def is_active() -> bool:
            return False

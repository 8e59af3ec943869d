"""AppleDriver: placeholder during bring-up."""
from triton.backends.driver import DriverBase
from triton.backends.compiler import GPUTarget


class AppleDriver(DriverBase):

    @classmethod
    def is_active(cls):
        return True

    def map_python_to_cpp_type(self, ty):
        return ty

    def get_current_target(self):
        return GPUTarget("metal", "apple7", 32)

    def get_active_torch_device(self):
        import torch
        return torch.device("cpu")

    def get_benchmarker(self):
        raise NotImplementedError

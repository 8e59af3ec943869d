"""The tiny models of the whole-model tests and of `bench/models.py`, in one place: each family's transformers
config, the names of transformers' library-free functions (its torch-only path), and the host-side shims
mamba-ssm needs off CUDA (docs/integration.md, "Library host code that assumes CUDA")."""
import sys
import types
from typing import Callable

# transformers' functions that fla / mamba-ssm replace when they import; the originals stay as `__wrapped__`
FLA_PATH = ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule")
MAMBA_PATH = ("mamba2_chunk_scan", "mamba2_selective_state_update")


def hybrid_config():
    """Qwen3.5-style: one gated-delta-rule linear-attention layer (fla's kernels), one full-attention layer."""
    from transformers import Qwen3_5TextConfig
    return Qwen3_5TextConfig(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, head_dim=32, linear_conv_kernel_dim=4, linear_key_head_dim=16,
        linear_value_head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
        layer_types=["linear_attention", "full_attention"], max_position_embeddings=128)


def mamba2_config():
    """Two Mamba-2 layers with chunks of 16 (inputs of 32 tokens span two chunks)."""
    from transformers import Mamba2Config
    return Mamba2Config(vocab_size=128, hidden_size=64, state_size=16, num_heads=4, head_dim=32, expand=2,
                        n_groups=1, num_hidden_layers=2, chunk_size=16, conv_kernel=4)


def llama_config():
    from transformers import LlamaConfig
    return LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)


def tokens(length: int):
    """The seeded input of every model: 2 sequences of `length` tokens."""
    import torch
    return torch.randint(0, 128, (2, length), generator=torch.Generator().manual_seed(1))


class NoCudaDevice:
    """`torch.cuda.device(None)` as a no-op. mamba-ssm wraps every kernel launch in
    `with torch.cuda.device(x.device.index)`; a CPU tensor's index is None, which torch's CPU build turns into a
    TypeError on entry. Only None is accepted: any real index would mean a CUDA tensor reached a CPU-only run."""

    def __init__(self, index):
        assert index is None, f"a CUDA device index ({index!r}) on a CPU-only run"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def cpu_device_properties(original: Callable) -> Callable:
    """`torch.cuda.get_device_properties` that answers `multi_processor_count` for a CPU device from the apple
    driver's device properties (what mamba-ssm's backward sizes its grids by), and defers to `original` else."""
    import torch
    import triton

    def properties(device=None):
        if device is not None and torch.device(device).type == "cpu":
            props = triton.runtime.driver.active.utils.get_device_properties(0)
            return types.SimpleNamespace(multi_processor_count=props["multiprocessor_count"])
        return original(device)

    return properties


def stub_selective_scan_cuda() -> None:
    """mamba-ssm built with MAMBA_SKIP_CUDA_BUILD=TRUE has no `selective_scan_cuda` extension, and its package root
    imports it unconditionally (for Mamba 1's selective scan, which these models never call): an empty module
    stands in for it so that the pure-Python Triton ops import. Must run before transformers' Mamba2 module is
    imported, which picks mamba-ssm's functions at import time."""
    sys.modules.setdefault("selective_scan_cuda", types.ModuleType("selective_scan_cuda"))

"""Triton backend for Apple GPUs: compiles Triton kernels to Metal Shading Language.

On a Mac the MSL runs on the GPU through PyTorch's MPS runtime; elsewhere it runs on the
Metal-on-CPU emulator in :mod:`triton.backends.apple.emulator`.
"""

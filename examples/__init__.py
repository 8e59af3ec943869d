"""The user-facing demo (demo.py) and its kernels (kernels.py); the benchmarks import the same kernels from here."""

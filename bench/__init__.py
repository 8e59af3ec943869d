"""Benchmarks and reports of the apple backend, each printed next to a baseline measured in the same run.

Run them from the repository root as modules, e.g. ``python -m bench.codegen_report`` (see README.md here).
"""

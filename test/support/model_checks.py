"""Checks the whole-model tests (test/models) share."""
import contextlib
from typing import Iterator, Sequence

import torch


@contextlib.contextmanager
def torch_only_path(modeling, names: Sequence[str]) -> Iterator[None]:
    """Inside, the functions `names` of the transformers module `modeling` are the library-free PyTorch ones
    transformers keeps as `__wrapped__` (its path without fla / mamba-ssm): the reference of the model tests."""
    saved = {name: getattr(modeling, name) for name in names}
    for name, fn in saved.items():
        setattr(modeling, name, fn.__wrapped__)
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(modeling, name, fn)


def assert_close_tree(got: dict, want: dict, rtol: float, atol: float) -> None:
    """Every tensor of `got` close to the one of the same name in `want` (and the same names), with the name in
    the failure."""
    assert got.keys() == want.keys()
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=rtol, atol=atol, msg=lambda m: f"{name}: {m}")

"""Checks the whole-model tests (test/models) share."""
import torch


def assert_close_tree(got: dict, want: dict, rtol: float, atol: float) -> None:
    """Every tensor of `got` close to the one of the same name in `want` (and the same names), with the name in
    the failure."""
    assert got.keys() == want.keys()
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=rtol, atol=atol, msg=lambda m: f"{name}: {m}")

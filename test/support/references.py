"""Reference checks shared by the end-to-end and conformance tests."""
import collections


def updates_in_one_order(start, olds: list, vals: list, final, f) -> bool:
    """The reference check of an atomic read-modify-write whose updates ran in an order nobody knows: if they
    happened one at a time, the values read ("old") and the values written (f(old, v)) are the same sequence
    shifted by one, so {start} + {f(old, v)} and {old} + {final} are equal multisets."""
    return collections.Counter([start] + [f(o, v) for o, v in zip(olds, vals)]) == collections.Counter(olds + [final])

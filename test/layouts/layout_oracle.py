"""Compares our blocked/slice linear layouts with libtriton's over random parameters.

Run as a script (the test runs it in a subprocess, because libtriton's `to_linear_layout` binding
leaks objects that nanobind reports at interpreter exit). Prints one line per mismatch and a summary.
"""
import random
import sys

from triton.backends.apple.ir.types import BlockedEncoding, SliceEncoding
from triton.backends.apple.layouts import blocked_layout, from_libtriton, layout_of


def random_blocked(rng, rank):
    def split(total):
        parts = [1] * rank
        for _ in range(total):
            parts[rng.randrange(rank)] *= 2
        return tuple(parts)

    spt = tuple(1 << rng.randrange(3) for _ in range(rank))
    tpw = split(5)
    wpc = split(rng.randrange(4))
    order = list(range(rank))
    rng.shuffle(order)
    return BlockedEncoding(spt, tpw, wpc, tuple(order))


def main(n_cases: int, seed: int) -> int:
    rng = random.Random(seed)
    bad = 0
    for _ in range(n_cases):
        rank = rng.choice([1, 2, 2, 3])
        enc = random_blocked(rng, rank)
        shape = tuple(1 << rng.randrange(0, 8) for _ in range(rank))
        cases = [(enc, shape)]
        if rank > 1:
            dim = rng.randrange(rank)
            cases.append((SliceEncoding(dim, enc), shape[:dim] + shape[dim + 1:]))
        for e, s in cases:
            ours = layout_of(e, s, 4)
            ref = from_libtriton(e, s)
            if ours != ref:
                bad += 1
                print(f"MISMATCH {e} {s}\n ours={ours}\n  ref={ref}")
    print(f"checked {n_cases} encodings, {bad} mismatches")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 300, int(sys.argv[2]) if len(sys.argv) > 2 else 0))

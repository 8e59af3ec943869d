"""The Markdown tables the benchmark scripts print: one column width per column, left-aligned cells."""
from typing import Sequence


def table(head: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    widths = [max(len(str(r[i])) for r in list(rows) + [head]) for i in range(len(head))]
    fmt = "| " + " | ".join(f"{{:<{w}}}" for w in widths) + " |"
    return "\n".join([fmt.format(*map(str, head)), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] +
                     [fmt.format(*map(str, r)) for r in rows])

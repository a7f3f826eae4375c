"""The one way a benchmark writes a table: GitHub-flavoured markdown, a header, its rule, a row per line.

    lines += table(["method", "speedup"], [[r["method"], f"{r['speedup']:.2f}x"] for r in rows])

Each cell is formatted by the caller (a ratio as 1.84x, a rate as 12.3%); a row with fewer or more cells than the
header is a bug in the caller, refused here rather than drawn as a table whose columns slide.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    """The lines of a markdown table: `| a | b |`, then `|---|---|`, then one line per row."""
    lines = [row(header), "|" + "---|" * len(header)]
    for i, cells in enumerate(rows):
        if len(cells) != len(header):
            raise ValueError(f"row {i} has {len(cells)} cells and the header {len(header)}: {list(cells)}")
        lines.append(row(cells))
    return lines


def row(cells: Sequence[object]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"

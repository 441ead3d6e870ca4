"""One table writer and one number formatter for every summary: markdown tables (``summary.md``) and padded
console tables, and the cells in them (``-``/``n/a`` for a missing or non-finite value)."""

from __future__ import annotations

import math
from typing import Any, Iterable, Sequence

__all__ = ["markdown_table", "console_table", "row", "fmt", "pct"]

_RULES = {"l": ":---", "r": "---:", "c": ":---:", "": "---"}


def row(cells: Iterable[Any]) -> str:
    """One markdown table row: ``| a | b |`` (each cell through ``str``)."""
    return "| " + " | ".join(str(c) for c in cells) + " |"


def markdown_table(header: Sequence[Any], rows: Iterable[Iterable[Any]] = (), align: str | Sequence[str] = "") \
        -> list[str]:
    """The lines of a markdown table: header, rule, one line per row.  ``align``: one of ``l``/``r``/``c``/``""``
    for every column, or one per column (``""``: the renderer's default)."""
    aligns = [align] * len(header) if isinstance(align, str) else list(align)
    if len(aligns) != len(header) or any(a not in _RULES for a in aligns):
        raise ValueError(f"align must be one of l, r, c, '' or one per column ({len(header)}); got {align!r}")
    out = [row(header), "|" + "|".join(_RULES[a] for a in aligns) + "|"]
    for r in rows:
        cells = list(r)
        if len(cells) != len(header):
            raise ValueError(f"a table row has {len(cells)} cells for {len(header)} columns: {cells!r}")
        out.append(row(cells))
    return out


def console_table(header: Sequence[Any], rows: Iterable[Iterable[Any]], align: str | Sequence[str] = "l",
                  gap: int = 2, rule: bool = True) -> list[str]:
    """A plain-text table padded to each column's widest cell (any width), ``align`` ``l``/``r`` as above, with
    a dashed line under the header unless ``rule`` is False."""
    body = [[str(c) for c in r] for r in rows]
    head = [str(h) for h in header]
    aligns = [align] * len(head) if isinstance(align, str) else list(align)
    if len(aligns) != len(head) or any(a not in ("l", "r") for a in aligns):
        raise ValueError(f"align must be l or r, or one per column ({len(head)}); got {align!r}")
    widths = [max([len(h)] + [len(r[i]) for r in body]) for i, h in enumerate(head)]
    sep = " " * gap

    def line(cells: Sequence[str]) -> str:
        return sep.join(c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in zip(cells, widths, aligns)).rstrip()

    return [line(head)] + ([sep.join("-" * w for w in widths)] if rule else []) + [line(r) for r in body]


def fmt(x: float | None, digits: int = 2, scale: float = 1.0, *, none: str = "-", unit: str = "",
        sign: bool = False) -> str:
    """A table cell: ``x * scale`` with ``digits`` decimals (``sign``: always a sign) and ``unit`` after it;
    ``none`` for None or a non-finite value."""
    if x is None or not math.isfinite(x):
        return none
    return f"{x * scale:{'+' if sign else ''}.{digits}f}{unit}"


def pct(x: float | None, digits: int = 1, *, none: str = "n/a", sign: bool = False, unit: str = " %") -> str:
    """A fraction as a percentage cell: ``0.123`` -> ``12.3 %``; ``none`` for None or a non-finite value."""
    return fmt(x, digits, 100.0, none=none, unit=unit, sign=sign)

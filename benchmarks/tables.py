"""Formatting shared by the results page's sections: figures, spreads and Markdown tables."""

from __future__ import annotations


def _r(x: float | None, digits: int = 2) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _ms(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 1e3:.0f}"


def _spread(s: dict, scale: float = 1.0, digits: int = 2) -> str:
    return f"{s['median'] * scale:.{digits}f} [{s['min'] * scale:.{digits}f}–{s['max'] * scale:.{digits}f}]"


def _table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)

"""Markdown cells and pipe tables shared by the report's sections (``markdown``, ``analysis``)."""

from __future__ import annotations

import math

import numpy as np

from simmoe.validation.published.rows import Row


def num(x, digits: int | None = None) -> str:
    """A cell: ``–`` for none, strings as they are, integers with separators, floats to 0–4 digits by size."""
    if x is None:
        return "–"
    if isinstance(x, str):
        return x
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        return f"{x:,}"
    if not math.isfinite(x):
        return "n/a"
    if digits is None:
        a = abs(x)
        digits = 0 if a >= 1000 else 1 if a >= 100 else 2
        if 0 < a < 0.1:
            digits = 4
    return f"{x:,.{digits}f}"


def error_text(row: Row) -> str:
    """A row's error: ``+1.2%`` (relative), ``+1.2 pp`` (percentage points) or ``–``."""
    e = row.error
    if e is None:
        return "–"
    return f"{e:+.1f} pp" if row.error_kind == "pp" else f"{e:+.1f}%"


def md_table(header: list[str], body: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in body]
    return "\n".join(lines)

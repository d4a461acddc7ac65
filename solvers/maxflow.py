"""OR-Tools' max-flow solver, imported when a cut is first solved.

The import takes about 40 ms; most selections (every SpecFit-sized pool, the
uniform and branch-and-bound paths) never solve a cut, so a replay or a
command that only reads a trace need not pay it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ortools.graph.python.max_flow import SimpleMaxFlow


def simple_max_flow() -> SimpleMaxFlow:
    """A new, empty ``SimpleMaxFlow`` network."""
    from ortools.graph.python import max_flow

    return max_flow.SimpleMaxFlow()

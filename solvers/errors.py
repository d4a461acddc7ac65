"""The one exception type of ``solvers``: bad input (a malformed pool or parameter)."""

from __future__ import annotations


class InvalidInput(ValueError):
    """A pool, cost model or parameter is malformed; the message names what is wrong."""

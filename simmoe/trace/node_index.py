"""Flat node ids of a trace's pool arrays, and where a node sits for error messages.

The pool nodes of all positions are stored flat (``node_*`` columns); position
row r owns the nodes ``node_ptr[r] .. node_ptr[r + 1] - 1``
(``docs/trace-format.md``).  Validation errors name the position row of the
file and the node's index inside its pool; both validators (schema and
sampling) use these two maps, so they live below both.
"""

from __future__ import annotations

import numpy as np


def row_of_node(m: int, node_ptr: np.ndarray) -> int:
    """The position row whose pool holds flat node ``m``."""
    return int(np.searchsorted(node_ptr, m, side="right") - 1)


def node_in_pool(m: int, node_ptr: np.ndarray) -> int:
    """The index of flat node ``m`` inside its own pool."""
    return int(m - node_ptr[row_of_node(m, node_ptr)])

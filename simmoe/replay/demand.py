"""Expert demand: the per-layer union of the experts a step's forward executes (SpecFit Eq. 1).

The forward runs the true routes of every request's root and of every
selected node, whatever the selectors predicted; each layer's demand is the
union over all of them, across the batch: an expert two requests share is
loaded once.
"""

from __future__ import annotations

import numpy as np


class DemandUnion:
    """The demand stage: accumulates a step's union as flat ``layer·N + expert`` marks."""

    def __init__(self, trace):
        g = trace.geometry
        self.L, self.N = int(g.num_layers), int(g.num_experts)
        self.offset = (np.arange(self.L, dtype=np.int64) * self.N)[:, None]     # [L, 1]
        self.root_routes, self.node_routes, self.node_ptr = trace.root_routes, trace.node_routes, trace.node_ptr
        self.mask = np.zeros(self.L * self.N, dtype=bool)

    def start(self, fresh: bool = True) -> None:
        """A new step: a new union (``fresh``: a new array the step keeps; else the last one, cleared)."""
        if fresh:
            self.mask = np.zeros(self.L * self.N, dtype=bool)
        else:
            self.mask[:] = False

    def add(self, row: int, nodes: np.ndarray) -> None:
        """The root at ``row`` and its selected ``nodes`` (pool-local ids) join the forward."""
        self.mask[(self.root_routes[row] + self.offset).ravel()] = True
        if len(nodes):
            lo = int(self.node_ptr[row])
            self.mask[(self.node_routes[lo + nodes] + self.offset[None]).ravel()] = True

    def packed(self) -> np.ndarray:
        return np.packbits(self.mask)

    def matrix(self) -> np.ndarray:
        return self.mask.reshape(self.L, self.N)

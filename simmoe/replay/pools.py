"""Pools: each request's candidate pool at its output position, as the selectors may see it.

The trace records, per output position, the pool the drafter builds there
with every node's routes (the trace contract, :mod:`simmoe.trace.schema`).
A selector sees them through the route predictor of ``--route-accuracy``
(SpecFit §4.6: exact, or each routed expert replaced with probability 1 − a);
verification always executes the true routes.
"""

from __future__ import annotations

import numpy as np

from simmoe.api import PoolView
from simmoe.replay.route_prediction import RoutePredictor


class TracePools:
    """The pool stage over a recorded trace: :meth:`view` of the pool at a position row."""

    def __init__(self, trace, predictor: RoutePredictor, verdicts: np.ndarray, cost=None):
        self.trace = trace
        self.predictor = predictor
        self.verdicts = verdicts          # the target's verdicts: only the oracle looks
        self.cost = cost                  # the cost model a selection is priced with (batch 1)
        self.num_experts = int(trace.geometry.num_experts)

    def view(self, row: int) -> PoolView:
        t = self.trace
        s = t.pool_slice(row)
        root_routes, node_routes = self.predictor.predict(row, t.root_routes[row], t.node_routes[s])
        return PoolView(row=row, parents=t.node_parent[s], levels=t.node_level[s], p=t.node_p[s],
                        q=t.node_q[s], agree=self.verdicts[s], root_routes=root_routes,
                        node_routes=node_routes, num_experts=self.num_experts, cost=self.cost)

    def predictions(self, row: int) -> tuple[np.ndarray, np.ndarray]:
        """Predicted ``(root [L, k], nodes [n, L, k])`` at ``row`` (what prefetch policies see)."""
        t = self.trace
        return self.predictor.predict(row, t.root_routes[row], t.node_routes[t.pool_slice(row)])

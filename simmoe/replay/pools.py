"""Pools: each request's candidate pool at its output position, as the selectors may see it.

The trace records, per output position, the pool the drafter builds there
with every node's routes (the trace contract, :mod:`simmoe.trace.schema`).
A selector sees them through the route predictor of ``--route-accuracy``
(SpecFit §4.6: exact, or each routed expert replaced with probability 1 − a);
verification always executes the true routes.

Every array of a view is read-only: the pools read the trace's columns through
read-only views made once per replay (a slice of one is read-only, at no cost
per step), so a selector cannot write to the routes and verdicts that
verification and the demand read.  The verdicts go only to a selector that
declares ``reads_verdicts``, the cost model only to one that declares
``uses_cost``; any other sees an :class:`simmoe.api.Undeclared` there.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np

from simmoe.api import PoolView, Undeclared
from simmoe.replay.route_prediction import RoutePredictor

NO_VERDICTS = Undeclared("view.agree", "reads_verdicts")
NO_COST = Undeclared("view.cost", "uses_cost")


def read_only(a: np.ndarray) -> np.ndarray:
    """A read-only view of ``a`` (``a`` itself keeps its flags)."""
    v = a.view()
    v.flags.writeable = False
    return v


class TracePools:
    """The pool stage over a recorded trace: :meth:`view` of the pool at a position row.

    ``verdicts`` reach the views only when ``reads_verdicts`` (an oracle);
    ``cost`` None (a selector without ``uses_cost``) becomes :data:`NO_COST`.
    """

    def __init__(self, trace, predictor: RoutePredictor, verdicts: np.ndarray, cost=None,
                 reads_verdicts: bool = False):
        self.trace = trace
        self.predictor = predictor
        self.verdicts = read_only(np.asarray(verdicts)) if reads_verdicts else None
        # the cost model a selection is priced with (batch 1); the context's placeholder names context.cost
        self.cost = NO_COST if cost is None or isinstance(cost, Undeclared) else cost
        self.num_experts = int(trace.geometry.num_experts)
        self.node_ptr = trace.node_ptr.tolist()
        self.parents, self.levels = read_only(trace.node_parent), read_only(trace.node_level)
        self.p, self.q = read_only(trace.node_p), read_only(trace.node_q)
        self.root_routes, self.node_routes = read_only(trace.root_routes), read_only(trace.node_routes)

    def view(self, row: int) -> PoolView:
        s = slice(self.node_ptr[row], self.node_ptr[row + 1])
        root_routes, node_routes = self.predictions(row)
        agree = self.verdicts[s] if self.verdicts is not None else cast(Any, NO_VERDICTS)
        return PoolView(row=row, parents=self.parents[s], levels=self.levels[s], p=self.p[s],
                        q=self.q[s], agree=agree, root_routes=root_routes,
                        node_routes=node_routes, num_experts=self.num_experts, cost=self.cost)

    def predictions(self, row: int) -> tuple[np.ndarray, np.ndarray]:
        """Predicted ``(root [L, k], nodes [n, L, k])`` at ``row``, read-only (what prefetch policies see)."""
        s = slice(self.node_ptr[row], self.node_ptr[row + 1])
        root, nodes = self.predictor.predict(row, self.root_routes[row], self.node_routes[s])
        if root.flags.writeable:        # a predictor's own arrays (accuracy < 1)
            root.flags.writeable = False
        if nodes.flags.writeable:
            nodes.flags.writeable = False
        return root, nodes

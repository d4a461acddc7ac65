"""A selector: verify every draft node whose path probability reaches a floor, at most K of them."""

from __future__ import annotations

import numpy as np

from simmoe.api import Choice, PoolView, SelectorContext


class ProbabilityFloor:
    """The nodes with path probability p >= floor (option ``prob_floor``, default 0.2), the K likeliest.

    A path probability never grows from a node to its child, so the nodes above
    a floor form an ancestor-closed set, as simmoe requires; keeping the K
    likeliest of them (ties to the shallower node) keeps it so.
    """

    name = "prob-floor"
    summary = "every node with path probability >= a floor (default 0.2), at most K"

    def __init__(self, context: SelectorContext):
        self.K = context.K
        self.floor = float(context.options.get("prob_floor", 0.2))

    def select(self, view: PoolView) -> Choice:
        order = np.lexsort((np.arange(view.size), view.levels, -view.p))   # likeliest first, parents first
        keep = order[view.p[order] >= self.floor][: self.K]
        drafted = int(view.levels[keep].max()) if len(keep) else min(view.depth, 1)
        return Choice(np.sort(keep).astype(np.int64), drafted)

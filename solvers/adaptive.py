"""Adaptive drafting depth (SpecFit §3.3, Lemma 2 in App. A.2).

After drafting level d, select over V≤d; if the selection holds a level-d
node and d is below the pool's depth, draft the next level, otherwise stop
and verify it.  Lemma 2: the stopped selection equals the full-pool selection
unless the latter holds a node deeper than d.  Cost: at most ``depth`` exact
selections on growing prefixes of the pool.
"""

from __future__ import annotations

from solvers.cost import CostModel, Selection, check_K
from solvers.exact import _branch_and_bound, select_exact
from solvers.pool import Pool

__all__ = ["select_adaptive_depth"]


def select_adaptive_depth(pool: Pool, K: int, cost: CostModel) -> tuple[Selection, int]:
    """Lemma 2's loop; returns the selection (ids of the full pool) and the drafted levels d.

    An empty pool drafts 0 levels and selects the root only.  K applies to
    every V≤d as given (the paper's K = min(7, |V≤d|) is the same limit, since
    a subtree of V≤d has at most |V≤d| nodes).
    """
    K = check_K(pool, K, cost)
    if pool.n == 0:
        return select_exact(pool, K, cost), 0
    prev: Selection | None = None
    prev_ids: tuple[int, ...] = ()
    for d in range(1, pool.depth + 1):
        sub, ids = pool.upto_level(d)
        # Ŝ_{d−1} lies in the family of V≤d: a strong first incumbent (same numbers,
        # since ids keep their order)
        start = None
        if prev is not None and prev.nodes:
            where = {v: i for i, v in enumerate(ids)}
            start = Selection(tuple(where[prev_ids[v]] for v in prev.nodes), prev.reward,
                              prev.union, prev.time, prev.ratio)
        sel = _branch_and_bound(sub, min(K, sub.n), cost, None, start)
        if d == pool.depth or not any(sub.levels[v] == d for v in sel.nodes):
            if sub is pool:
                return sel, d
            return Selection(tuple(ids[v] for v in sel.nodes), sel.reward, sel.union,
                             sel.time, sel.ratio), d
        prev, prev_ids = sel, ids
    raise AssertionError("unreachable: the loop returns at d = depth")

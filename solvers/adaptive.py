"""Adaptive drafting depth (SpecFit §3.3, Lemma 2 in App. A.2).

After drafting level d, select over V≤d; if the selection Ŝ_d holds a level-d
node and d is below the pool's depth, draft the next level, otherwise stop
and verify it.  Lemma 2: the stopped selection equals the full-pool selection
unless the latter holds a node deeper than d.

Computation (same answer as running the loop literally):

* First the full-pool selection S*, with deepest level m.  For every d >= m,
  S* lies in the family of V≤d and beats every set there (the tie rule is a
  total order, and renumbering V≤d keeps the order of ids), so Ŝ_d = S*: the
  loop goes on at d = m (S* holds a level-m node) and stops at d = m + 1, or
  at the pool's depth.
* For d < m, Ŝ_d holds no level-d node exactly when Ŝ_d = Ŝ_{d−1}, i.e. when no
  set with a level-d node beats Ŝ_{d−1}.  S* ∩ V≤d is such a set (S* is
  ancestor-closed and reaches level m > d); when it beats Ŝ_{d−1} the loop
  goes on without selecting over V≤d.  Otherwise Ŝ_d is selected, starting
  from the better of Ŝ_{d−1} and S* ∩ V≤d.  Ŝ_{d−1} itself is selected only
  when that comparison needs it (Ŝ_0 is the root alone).

Cost: one exact selection on the full pool, and usually selections on
V≤1 … V≤m−2 only (all smaller than the pool).
"""

from __future__ import annotations

from solvers.canonical import beats, canonical, prefix_view
from solvers.cost import CostModel, Selection, check_K
from solvers.exact import _exact
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
        return _exact(pool, K, cost, None, None, None), 0
    levels = pool.levels
    full = _exact(pool, K, cost, None, None, None)
    m = max((levels[v] for v in full.nodes), default=0)
    t0 = cost.b[0] + cost.beta * pool.root_count
    known: list | None = [1.0 / t0, 1.0, pool.root_count, ()]   # Ŝ_{d−1} (full ids), or None
    prev_cut: list | None = None
    for d in range(1, m):
        cut = tuple(v for v in full.nodes if levels[v] <= d)    # S* ∩ V≤d
        union = 0
        for v in cut:
            union |= pool.masks[v]
        cut_sel = canonical(pool, cut, union, cost, None)
        if known is None:
            known = _level_selection(pool, K, cost, d - 1, None, prev_cut)
        prev_cut = cut_sel
        if beats(cut_sel[0], cut_sel[1], cut_sel[2], cut, known):
            known = None       # Ŝ_d holds a level-d node: draft the next level
            continue
        sel = _level_selection(pool, K, cost, d, known, cut_sel)
        if not any(levels[v] == d for v in sel[3]):
            r, f, nodes = sel[1], sel[2], sel[3]
            t = cost.b[len(nodes)] + cost.beta * f
            return Selection(nodes, r, f, t, r / t), d
        known = sel
    # d >= m: Ŝ_d = S*; it holds a level-m node, so the loop stops at m + 1
    return full, min(max(m + 1, 1), pool.depth)


def _level_selection(pool: Pool, K: int, cost: CostModel, d: int, prev: list | None,
                     cut: list | None) -> list:
    """Ŝ_d as [ratio, R̂, F, nodes] with ids of ``pool``; the search starts from the better
    of ``prev`` (Ŝ_{d−1}) and ``cut`` (S* ∩ V≤d, cut to V≤d), both canonical and legal."""
    levels = pool.levels
    sub, ids = pool.upto_level(d)
    if ids[-1] == sub.n - 1:
        local = None                 # a prefix: the ids are the same
        if "search" not in sub._cache:
            prefix_view(pool, sub, d)
    else:
        local = {v: i for i, v in enumerate(ids)}
    best = None
    for cand in (prev, cut):
        if cand is None or not cand[3]:
            continue
        nodes = tuple(v for v in cand[3] if levels[v] <= d)
        if len(nodes) != len(cand[3]):
            continue
        if best is None or beats(cand[0], cand[1], cand[2], cand[3], best):
            best = cand
    start = None
    if best is not None:
        nodes = best[3] if local is None else tuple(local[v] for v in best[3])
        t = cost.b[len(nodes)] + cost.beta * best[2]
        start = Selection(nodes, best[1], best[2], t, best[1] / t)
    sel = _exact(sub, min(K, sub.n), cost, None, start, None)
    nodes = sel.nodes if local is None else tuple(ids[v] for v in sel.nodes)
    return [sel.ratio, sel.reward, sel.union, nodes]

"""SpecFit's cycles on a trace: the pools it drafted with adaptive depth (SpecFit §3.3, App. A.4).

Selection never looks at the expert cache, so the sequence of cycles that
SpecFit runs on a trace depends only on the trace and the cost model.  This
module walks that sequence directly, without the event simulator:

    cursor t → pool(t) → adaptive depth (Lemma 2) stops at level d with Ŝ
    → accepted path = longest root-to-node path inside Ŝ whose nodes all agree
    → commit 1 + its length (clipped to the positions left in the request).

Each cycle keeps the pool it actually drafted, V≤d at the stop level, which
is the cycle state of App. A.1: its legal family is A_K over V≤d.
Cost: one adaptive-depth search per cycle (at most ``depth`` exact searches).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simmoe.errors import CheckFailed
from simmoe.trace.schema import Trace
from solvers import CostModel, Pool, Selection, evaluate, select_adaptive_depth


@dataclass(frozen=True)
class Cycle:
    """One SpecFit cycle; node ids below index the drafted pool ``pool`` (V≤d)."""

    row: int                 # position row of the trace where the cycle starts
    request: int             # request index
    pool: Pool               # the drafted pool V≤d
    parents: np.ndarray      # int64 [n]: parent within ``pool``, -1 = root
    levels: np.ndarray       # int64 [n]
    agree: np.ndarray        # bool [n]: the target's greedy prediction equals the token
    selection: Selection     # Ŝ of Eq. 5 over A_K of ``pool``
    drafted_levels: int      # d: levels drafted before the stop (0 for an empty pool)
    pool_depth: int          # deepest level of the full recorded pool(t)
    remaining: int           # output positions left in the request, this one included
    committed: int           # tokens this cycle commits: 1 + accepted path, clipped

    @property
    def stopped_early(self) -> bool:
        """Adaptive depth stopped before the last level the drafter could build."""
        return self.drafted_levels < self.pool_depth


def pool_at(trace: Trace, row: int) -> Pool:
    """The recorded candidate pool at position ``row``, as a solvers pool (exact routes)."""
    sl = trace.pool_slice(row)
    return Pool.from_routes(
        trace.node_parent[sl].astype(np.int64),
        trace.node_p[sl].astype(np.float64),
        trace.root_routes[row],
        trace.node_routes[sl],
        trace.geometry.num_experts,
    )


def accepted_length(parents: np.ndarray, levels: np.ndarray, agree: np.ndarray,
                    nodes) -> int:
    """Length of the longest root-to-node path inside ``nodes`` whose nodes all agree.

    ``nodes`` must be ancestor-closed; parents precede children, so one pass in
    ascending id order suffices.  O(|nodes|).
    """
    good: set[int] = set()
    best = 0
    for v in sorted(int(x) for x in nodes):
        a = int(parents[v])
        if agree[v] and (a < 0 or a in good):
            good.add(v)
            best = max(best, int(levels[v]))
    return best


def committed_tokens(cycle: Cycle, nodes) -> int:
    """Tokens a cycle would commit had it verified ``nodes`` (ids of ``cycle.pool``).

    The recorded acceptances (node agreement) replace R̂ of Eq. 3; clipped to
    the positions left in the request like the replay's last cycle.
    """
    return min(1 + accepted_length(cycle.parents, cycle.levels, cycle.agree, nodes),
               cycle.remaining)


def specfit_cycles(trace: Trace, cost: CostModel, K: int | None = None,
                   num_requests: int | None = None) -> list[Cycle]:
    """Every cycle SpecFit runs on ``trace`` with cost model ``cost`` (Eq. 5 + Lemma 2).

    ``K`` defaults to the trace's pool shape.  Requests are walked in trace
    order; each starts at its position 0.  ``num_requests``: the first N
    requests only (a request's cycles depend on its own rows alone).
    """
    if K is None:
        K = trace.pool_shape.K
    R = len(trace.requests) if num_requests is None else min(int(num_requests), len(trace.requests))
    cycles: list[Cycle] = []
    for r in range(R):
        lo, hi = trace.request_positions(r)
        row = lo
        while row < hi:
            cycles.append(_cycle_at(trace, r, row, hi, K, cost))
            row += cycles[-1].committed
    return cycles


def _cycle_at(trace: Trace, request: int, row: int, hi: int, K: int, cost: CostModel) -> Cycle:
    full = pool_at(trace, row)
    if full.n == 0:  # nothing drafted: the cycle verifies the root alone
        chosen, drafted = evaluate(full, (), cost), 0
    else:
        chosen, drafted = select_adaptive_depth(full, K, cost)
        drafted = int(drafted)
    pool, ids = full.upto_level(drafted) if drafted < full.depth else (full, range(full.n))
    local = {int(o): j for j, o in enumerate(ids)}
    try:
        nodes = tuple(sorted(local[int(v)] for v in chosen.nodes))
    except KeyError as exc:  # a selected node outside V≤d contradicts Lemma 2
        raise CheckFailed(f"row {row}: adaptive depth selected node {exc} deeper than "
                          f"its stop level {drafted}") from None
    parents = np.asarray(pool.parents, dtype=np.int64)
    levels = np.asarray(pool.levels, dtype=np.int64)
    agree = trace.node_agree[trace.pool_slice(row)][np.asarray(list(ids), dtype=np.int64)]
    committed = min(1 + accepted_length(parents, levels, agree, nodes), hi - row)
    return Cycle(row=row, request=request, pool=pool, parents=parents, levels=levels,
                 agree=agree.astype(bool), selection=evaluate(pool, nodes, cost),
                 drafted_levels=drafted, pool_depth=full.depth, remaining=hi - row,
                 committed=committed)

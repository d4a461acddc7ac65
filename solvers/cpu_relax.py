"""Eq. 4 as a relaxation of the CPU-expert cost (:mod:`solvers.cpu_cost`), for :mod:`solvers.cpu_exact`.

Every expert e counted in F (on the CPU, and not used by the rest of a batched
forward) costs at least its first step c_e(1) = max(r_e, g_e) once it is in the
union, and any other at least 0.  So with integer weights w_e and a unit u such
that u·w_e <= c_e(1),

    T(S) >= T̂(S) = b_{|S|} + u·F_w(S),   F_w(S) = Σ of w_e over the union's counted experts,

and T̂ is Eq. 4 on a pool whose expert e of layer ℓ appears in w_e copies of
layer ℓ (copies j = 0..w_max − 1; in copy j an expert with w_e <= j is replaced
by an extra expert N that is free): :func:`solvers.select_exact`'s whole
portfolio — closure bounds, min cuts, MILP — bounds the CPU problem.  With one
c(1) on every counted expert the weights are all 1 (no copies), and T̂ is exact
wherever no expert is compute-bound.  Otherwise u = min c(1) / Q (Q = 4), w_e =
⌊c_e(1)/u⌋, at most 8: exact for first steps in ratios of quarters up to 2,
within u of c_e(1) for any others (looser past twice the smallest).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from solvers.canonical import search_view
from solvers.cost import CostModel
from solvers.cpu_cost import CpuCostModel, CpuView, RoutedPool, cpu_view
from solvers.exact import select_exact
from solvers.pool import Pool

__all__ = ["Relaxation", "specfit_relaxation", "BranchBound"]

_QUARTERS = 4       # u = min c(1) / 4 where the counted experts' first steps differ
_MAX_COPIES = 8     # copies of a layer at most (a larger weight is cut: a looser bound)


@dataclass(frozen=True)
class Relaxation:
    """T̂ = b + u·F_w (module docstring) on ``pool`` (node ids the CPU pool's) with ``cost`` =
    CostModel(b, u).  ``equivalent``: T̂ = T on all of A_K, F_w = F (one c(1) for every
    counted expert, none ever compute-bound, the paid ones never dearer).  ``weighted``:
    the experts have copies (weights > 1)."""

    pool: Pool
    cost: CostModel
    equivalent: bool
    weighted: bool


def _weights(c1: np.ndarray) -> tuple[np.ndarray, float]:
    """Integer weights 1 <= w <= _MAX_COPIES and a unit u with u·w <= c1 (module docstring)."""
    low = float(c1.min())
    unit = low / _QUARTERS
    if np.all(c1 == low) or not unit > 0.0:
        return np.ones(c1.size, dtype=np.int64), low
    return _floor_weights(c1, unit), unit


def _floor_weights(c1: np.ndarray, unit: float) -> np.ndarray:
    """⌊c1/u⌋ within [1, _MAX_COPIES], lowered where rounding put u·w above c1."""
    with np.errstate(over="ignore"):        # a tiny unit: the ratio is cut at the cap
        w = np.floor(np.minimum(c1 / unit, _MAX_COPIES)).astype(np.int64)
    w = np.where(unit * w > c1, w - 1, w)
    return np.maximum(w, 1)


def specfit_relaxation(rpool: RoutedPool, K: int, cost: CpuCostModel,
                       tokens: np.ndarray | None = None) -> Relaxation | None:
    """Eq. 4's relaxation of this cost over A_K (module docstring), or None where it says
    nothing (an expert counted in F that costs nothing).  ``tokens``: the rest of a batched
    forward's tokens per flat pair (:func:`solvers.cpu_cost.forward_tokens`)."""
    view = cpu_view(rpool, cost, tokens)
    pool = rpool.pool
    L, N = pool.num_layers, pool.num_experts
    if view.r.size == 0:        # nothing priced: T = b, Eq. 4 with β = 0
        return Relaxation(view.cpu_pool, CostModel(cost.b, 0.0), True, False)
    counted = view.on_cpu & (view.base == 0)
    c1 = np.maximum(view.r, view.g)
    if view.free_cpu or not counted.any():
        return None
    w_dense, unit = _weights(c1[counted])
    reach = view.start + np.minimum(view.holders, min(K, rpool.n))
    flat = view.g * reach <= view.r
    if np.all(w_dense == 1):
        equivalent = bool(np.all(flat & (view.base > 0) | flat & counted & (view.r == unit)))
        return Relaxation(view.cpu_pool, CostModel(cost.b, unit), equivalent, False)
    # the weight of every flat pair: 0 where paid or unpriced (then free in every copy)
    weight = np.zeros(L * N, dtype=np.int64)
    r_all, g_all, _ = cost.rates(L, N)
    keep = np.flatnonzero(((r_all > 0) | (g_all > 0)) & ~view.paid)
    weight[keep] = _floor_weights(np.maximum(r_all[keep], g_all[keep]), unit)
    weight = weight.reshape(L, N)
    copies = int(weight.max())
    root, nodes = rpool.routes
    root_w = _copies(root[None], weight, copies, N)[0]
    nodes_w = _copies(nodes, weight, copies, N)
    free = np.zeros((L * copies, N + 1), dtype=bool)
    free[:, N] = True
    wpool = Pool.from_routes(pool.parents, pool.probs, root_w, nodes_w, N + 1)
    return Relaxation(wpool.with_free(free), CostModel(cost.b, unit), False, True)


def _copies(routes: np.ndarray, weight: np.ndarray, copies: int, N: int) -> np.ndarray:
    """Routes [n, L, k] -> [n, copies·L, k]: copy j of layer ℓ keeps the experts of weight
    > j, the others replaced by the free expert N."""
    L = weight.shape[0]
    w = weight[np.arange(L)[None, :, None], routes]                  # [n, L, k]
    j = np.arange(copies)[None, :, None, None]
    out = np.where(w[:, None] > j, routes[:, None], N)               # [n, copies, L, k]
    return out.reshape(routes.shape[0], copies * L, routes.shape[2])


class BranchBound:
    """T̂'s bound on one branch of the search: its sets are S ∪ X with X among the subtrees
    still reachable, and R̂(S ∪ X)/T(S ∪ X) <= R̂(S ∪ X)/T̂(S ∪ X), whose maximum over X is
    Eq. 5 on the pool of the reachable nodes (their bitmaps in T̂'s pool, less the root's
    and S's pairs), R̂ and T̂ scaled by 1/R̂(S) (so that R̂ starts at 1), the intercepts
    shifted by |S| and by u·F_w(S): one call of :func:`select_exact` (its closure bounds
    are strong where the search's credit bound is weak)."""

    #: branches with fewer reachable nodes are left to the credit bounds (each bound costs
    #: one selection: on the benchmark's 200-node pools, bounding every branch of at least
    #: 16 nodes took the slowest of 40 from over 2 s to 0.64 s; bounding only those of
    #: |S| <= 3 left 3 of 12 over 2 s)
    MIN_NODES = 16

    def __init__(self, rpool: RoutedPool, view: CpuView, relax: Relaxation,
                 witness: tuple[int, ...] = (), value: float = -math.inf):
        pool = rpool.pool
        self.pool, self.view, self.relax = pool, view, relax
        #: the optimum of T̂ on the last branch bounded (original ids, S included) and its
        #: ratio under T̂: a branch that holds it cannot be pruned below that ratio
        self.witness, self.value = witness, value
        kids = search_view(pool).children
        size = [1] * pool.n
        for v in range(pool.n - 1, -1, -1):
            size[v] += sum([size[u] for u in kids[v]])
        self.size = size

    def holds_witness(self, chosen: list[int], rest: list[int]) -> bool:
        """Whether the branch (S = ``chosen``, X within the subtrees of ``rest``) holds the
        witness: its bound is then at least the witness's ratio under T̂."""
        w = self.witness
        if len(w) < len(chosen) or not set(chosen).issubset(w):
            return False
        reach = 0
        for v in rest:
            reach |= 1 << v
        anc = self.pool.ancestors
        inside = set(chosen)
        return all(v in inside or anc[v] & reach for v in w)

    def bound(self, chosen: list[int], rest: list[int], rs: float, room: int,
              deadline: float | None) -> float:
        """An upper bound on the ratio of every S ∪ X, X within the subtrees of ``rest``."""
        pool, full = self.pool, self.relax.pool
        kids = search_view(pool).children
        ids, stack = [], list(rest)
        while stack:
            v = stack.pop()
            ids.append(v)
            stack.extend(kids[v])
        ids.sort()
        union = 0
        for v in chosen:
            union |= full.masks[v]
        keep = ~union
        local = {v: i for i, v in enumerate(ids)}
        parents = tuple(local.get(pool.parents[v], -1) for v in ids)
        levels: list[int] = []
        for a in parents:
            levels.append(1 if a < 0 else levels[a] + 1)
        sub = Pool(parents, tuple(pool.probs[v] / rs for v in ids), tuple(levels),
                   full.num_layers, full.num_experts, 0, tuple(full.masks[v] & keep for v in ids))
        f = full.root_count + union.bit_count()
        s, b, u = len(chosen), self.view.b, self.relax.cost.beta
        spec = CostModel([(b[s + j] + u * f) / rs for j in range(room + 1)], u / rs)
        left = None if deadline is None else deadline - time.perf_counter()
        if left is not None and left <= 0:
            return math.inf
        sel = select_exact(sub, room, spec, time_limit=left)
        if sel.exact:
            self.witness = tuple(chosen) + tuple(ids[i] for i in sel.nodes)
            self.value = sel.ratio
        return math.inf if sel.upper_bound is None else sel.upper_bound

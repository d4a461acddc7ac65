"""SpecFit's selector with a prefetch-aware cost model (``specfit-prefetch``).

SpecFit predicts a subtree's cycle time as T̂(S) = b_|S| + βF(S) (Eq. 4), with
F the per-layer union of the experts the subtree activates: every expert of the
union costs β, whether it still has to cross the link or is already on the
device.  When experts are prefetched while the drafter runs
(:mod:`simmoe.replay.prefetch`), some of the union is resident or on its way
when the selector runs, and costs less: its compute, not its copy.  This
variant counts such experts at a discount ρ:

    F_ρ(S) = Σ_ℓ |U_ℓ(S) \\ A_ℓ| + ρ·|U_ℓ(S) ∩ A_ℓ|,    T̂_ρ(S) = b_|S| + βF_ρ(S),

where U_ℓ(S) is the layer's union over the root and S (predicted routes, as
SpecFit's), A_ℓ the layer's experts that are resident, staged, or prefetched
and in flight when the selection runs, b and β the profile's coefficients for
the active cache mode (App. B).  ρ is the event model's ratio of an expert's
compute time to the time a copied expert holds the link,
ρ = e / max(e, x/c) (0.53 on the A100 profile), rounded to a fraction p/q with
1 ≤ p ≤ q ≤ 4 so that F_ρ stays an integer count: each pair outside A counts q
virtual experts and each pair in A counts p, and β is divided by q.  The exact
search is SpecFit's (``solvers.select_exact``, the tie rule of §3.3); the
drafting depth is Lemma 2's loop run literally — after drafting level d,
select over V≤d with the experts available at that moment; stop when the
selection holds no level-d node — because A grows while the drafter drafts.

With nothing available (A ∩ the pool's experts empty at every level) this is
exactly ``specfit`` (Lemma 2: the literal loop and ``solvers.select_adaptive_depth``
select the same subtree and depth; tests/replay/test_prefetch_selector.py).
Selections depend on the cache, so the replay runs this selector's stages
live, inside the simulation (``uses_residency``; :mod:`simmoe.replay.engine`);
a view without ``available`` sees nothing available and selects as ``specfit``.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

from simmoe.api import Choice, PoolView
from simmoe.errors import SimmoeError
from simmoe.replay.selectors import Selector, _cost
from simmoe.replay.timing import profile_discount  # noqa: F401  (the discount's definition)

_EMPTY = np.zeros(0, dtype=np.int64)


def residency_weights(rho: float) -> tuple[int, int]:
    """ρ as (p, q): the nearest fraction with 1 ≤ p ≤ q ≤ 4 (ρ is clamped to [1/4, 1])."""
    rho = float(rho)
    if not np.isfinite(rho) or rho < 0:
        raise SimmoeError(f"residency discount must be a number in [0, 1], got {rho!r}")
    best = min(((p, q) for q in range(1, 5) for p in range(1, q + 1)),
               key=lambda pq: (abs(pq[0] / pq[1] - min(max(rho, 0.25), 1.0)), pq[1]))
    f = Fraction(best[0], best[1])
    return f.numerator, f.denominator


def weighted_pool(view: PoolView, available: np.ndarray | None, p: int, q: int, cost):
    """The view's pool and cost model with F_ρ (module docstring), ρ = p/q.

    Each (layer, expert) pair outside ``available`` becomes q virtual experts,
    each pair inside becomes p (the others of its q are duplicates, which a
    route counts once), so popcounts give F_ρ·q; β is divided by q.  When no
    pair of the root or the pool is available (or p = q), the plain pool and
    cost are returned, so the result is SpecFit's exactly.
    """
    from solvers import CostModel, Pool

    if available is None or p == q:
        return view.pool(), cost
    avail = np.asarray(available, dtype=bool)
    root = np.asarray(view.root_routes, dtype=np.int64)
    nodes = np.asarray(view.node_routes, dtype=np.int64)
    layer = np.arange(root.shape[0])[:, None]
    if not (avail[layer, root].any() or (len(nodes) and avail[layer[None], nodes].any())):
        return view.pool(), cost
    j = np.arange(q, dtype=np.int64)

    def virtual(routes, lay):
        w = np.where(avail[lay, routes], p, q)[..., None]                 # [..., L, k, 1]
        v = routes[..., None] * q + np.where(j < w, j, 0)                 # extra copies: duplicates
        return v.reshape(*routes.shape[:-1], routes.shape[-1] * q)

    vroot = virtual(root, layer)
    vnodes = virtual(nodes, layer[None]) if len(nodes) else np.zeros((0, root.shape[0], root.shape[1] * q), np.int64)
    pool = Pool.from_routes(view.parents.astype(np.int64), view.p.astype(np.float64), vroot, vnodes,
                            view.num_experts * q)
    return pool, CostModel(cost.b, cost.beta / q)


def _nothing(d: int) -> None:
    return None


class SpecFitPrefetch(Selector):
    """Eq. 5 with experts resident or in flight at selection time discounted (module docstring)."""

    name = "specfit-prefetch"
    summary = "specfit; experts resident or prefetched at selection cost rho*beta (rho = e/max(e, x/c))"
    uses_cost = True
    uses_residency = True   # selections depend on the cache: selected inside the simulation

    def __init__(self, context):
        super().__init__(context)
        from solvers import select_exact

        self._search = select_exact
        self.rho = float(context.options.get("residency_discount", 0.5))
        self.p, self.q = residency_weights(self.rho)

    def select(self, view: PoolView) -> Choice:
        available: Any = getattr(view, "available", None)
        if available is None:       # a selection pass that knows no cache state: nothing is available
            available = _nothing
        if view.size == 0:
            return Choice(_EMPTY, 0)
        levels = view.levels
        depth = view.depth
        for d in range(1, depth + 1):
            pool, cost = weighted_pool(view, available(d), self.p, self.q, _cost(self, view))
            sub, ids = pool.upto_level(d)
            sel = self._search(sub, self.K, cost)
            nodes = np.array([ids[v] for v in sel.nodes], dtype=np.int64)
            if d == depth or not np.any(levels[nodes] == d):
                return Choice(nodes, d)
        raise AssertionError("unreachable")  # pragma: no cover

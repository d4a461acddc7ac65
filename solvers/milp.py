"""Eq. 5 and max R̂ − λT̂ over A_K as a mixed-integer program: HiGHS (``scipy.optimize.milp``)
inside Dinkelbach's loop (App. A.1), made exact under §3.3's tie rule by a canonical finish.

Model for a fixed λ (no limit on its size):

* x_v ∈ {0, 1} per node, x_v <= x_parent(v);
* y_c ∈ [0, 1] per class c of (layer, expert) pairs that at least two nodes hold
  *freshly* (no ancestor holds them) and that have the same fresh holders,
  y_c >= x_v for each fresh holder v (a holder's descendants are covered
  through x_u <= x_v); a pair with one fresh holder is folded into that node's
  weight;
* the size: Σ x_v <= K and, where b_0..b_K is not affine, a one-hot z_j with
  Σ_j z_j = 1 and Σ_j j·z_j = Σ_v x_v;
* exchange cuts (:mod:`solvers.dominance`): x_j <= x_u for a leaf j and the
  nearest sibling u < j that dominates it anywhere;
* objective: 1 − λβF_0 + Σ_v (p_v − λβ·alone_v) x_v − λβ Σ_c |c| y_c − λ(b_0 + a·Σx)
  (affine b) or − λ Σ_j b_j z_j.

That is R̂(S) − λT̂(S) for every subtree S with at most K nodes.

Exactness (:func:`finish`).  HiGHS solves in floating point with tolerances of
about 10⁻⁷, and the tie rule compares canonical floating-point numbers, so the
MILP is used to *enumerate*, never to decide: from the incumbent I (canonical)
at λ = its ratio (or the fixed λ), it is asked, with the row
value >= value(I) − δ (value(I) = 0 for the ratio; δ = 10⁻⁶·(1 + R̂(I)), far
above HiGHS's tolerances) and a
no-good cut for every set already compared, for another subtree.  Each answer
is compared canonically with the incumbent (and re-linearises λ when it wins
by more than the margin); when the program becomes infeasible, every subtree
that could tie with or beat the incumbent in the canonical arithmetic (its
value at λ is >= −10⁻¹² R̂) has been compared, so the incumbent is the
tie-rule winner.  A stale λ below the incumbent's ratio only widens the
window.  On EVICT-shaped pools it runs on the nodes that can still matter
(:func:`solvers.lagrangian.useful_pool`; ids kept in order, so the canonical
sums keep their order).

:func:`select_exact_milp` is the plain Dinkelbach loop (no tie rule, optimal
up to HiGHS's tolerances): an independent reference for the tests.
"""

from __future__ import annotations

import math
import time

import numpy as np

from solvers.canonical import SearchState
from solvers.cost import CostModel, Selection, check_K, evaluate
from solvers.dominance import dominance
from solvers.flowbound import cover
from solvers.pool import Pool

__all__ = ["Model", "finish", "select_exact_milp"]

_WINDOW = 1e-6          # δ of the module docstring, per unit of (1 + R̂)
_MAX_SOLVES = 24        # sets one finish may compare before it gives up


class Model:
    """The program of the module docstring for (pool, K, cost); the objective per λ.
    ``exchange`` False leaves the exchange cuts out (the plain formulation)."""

    def __init__(self, pool: Pool, K: int, cost: CostModel, exchange: bool = True):
        self.pool, self.K, self.cost = pool, K, cost
        n = pool.n
        self.n = n
        cov = cover(pool)
        self.alone = cov.alone
        holders, weights = _classes(cov, n)
        C = len(weights)
        self.weights = weights
        b = np.asarray(cost.b[:K + 1], dtype=np.float64)
        slope = b[1] - b[0] if K else 0.0
        self.affine = bool(np.all(np.abs(b - (b[0] + slope * np.arange(K + 1)))
                                  <= 1e-12 * np.abs(b).max()))
        self.slope = float(slope)
        self.Z = 0 if self.affine else K + 1
        self.nvars = n + C + self.Z
        rows: list[tuple[list[int], list[float], float, float]] = []
        for v, a in enumerate(pool.parents):
            if a >= 0:
                rows.append(([v, a], [1.0, -1.0], -np.inf, 0.0))
        for c, hs in enumerate(holders):
            for v in hs:
                rows.append(([v, n + c], [1.0, -1.0], -np.inf, 0.0))
        rows.append((list(range(n)), [1.0] * n, -np.inf, float(K)))
        if not self.affine:
            z0 = n + C
            rows.append((list(range(z0, z0 + K + 1)), [1.0] * (K + 1), 1.0, 1.0))
            rows.append((list(range(n)) + list(range(z0, z0 + K + 1)),
                         [1.0] * n + [-float(j) for j in range(K + 1)], 0.0, 0.0))
        if exchange:
            rows += _exchange_rows(pool)
        self.rows = rows
        nnz = float(sum(len(r[0]) for r in rows))
        # a solve's work for pacing: HiGHS's presolve and root LP (not interrupted by its
        # time limit) grow faster than the nonzeros: 1.5 s at 60,000 on a wide star's
        # model, 20 ms at 4,000
        self.size = nnz * nnz / 4000.0
        self.integrality = np.concatenate([np.ones(n), np.zeros(C), np.ones(self.Z)])

    def objective(self, lam: float) -> tuple[np.ndarray, float]:
        """(coefficients, constant) of R̂ − λT̂ in the variables (x, y, z)."""
        cost, pool, n = self.cost, self.pool, self.n
        c = lam * cost.beta
        coef = np.empty(self.nvars)
        coef[:n] = np.asarray(pool.probs) - c * self.alone
        coef[n:n + len(self.weights)] = -c * self.weights
        const = 1.0 - c * pool.root_count
        if self.affine:
            coef[:n] -= lam * self.slope
            const -= lam * cost.b[0]
        else:
            coef[n + len(self.weights):] = -lam * np.asarray(cost.b[:self.K + 1])
        return coef, const

    def solve(self, lam: float, floor: float | None, exclude: list[tuple[int, ...]],
              seconds: float | None, gap: float = 1e-9, presolve: bool = True):
        """Maximise R̂ − λT̂ over the subtrees not in ``exclude`` whose value is >= ``floor``.

        Returns (status, nodes, bound): status "infeasible", "optimal" or "stopped" (the
        time limit), nodes the best subtree found (or None), bound HiGHS's upper bound on
        the value (None if it has none).  ``presolve`` False skips HiGHS's presolve (which
        its time limit does not interrupt)."""
        coef, const = self.objective(lam)
        rows = list(self.rows)
        if floor is not None:
            nz = np.flatnonzero(coef)
            rows.append((nz.tolist(), coef[nz].tolist(), floor - const, np.inf))
        for done in exclude:      # no-good cuts: Σ_{v∈S} x_v − Σ_{v∉S} x_v <= |S| − 1
            inside = set(done)
            rows.append((list(range(self.n)), [1.0 if v in inside else -1.0
                                               for v in range(self.n)],
                         -np.inf, len(done) - 1.0))
        from scipy.optimize import Bounds, milp  # scipy.optimize takes ~0.4 s to import: only when a MILP runs

        options = {"disp": False, "mip_rel_gap": gap, "presolve": presolve}
        if seconds is not None:
            options["time_limit"] = max(seconds, 1e-3)
        res = milp(-coef, constraints=_constraint(rows, self.nvars),
                   integrality=self.integrality, bounds=Bounds(0.0, 1.0), options=options)
        bound = getattr(res, "mip_dual_bound", None)
        bound = None if bound is None or not math.isfinite(bound) else const - bound
        if res.status == 2:
            return "infeasible", None, None
        nodes: tuple[int, ...] | None = None
        if res.x is not None:
            nodes = tuple(int(v) for v in np.flatnonzero(res.x[:self.n] > 0.5))
        return ("optimal" if res.status == 0 and nodes is not None else "stopped"), nodes, bound


def _classes(cov, n: int) -> tuple[list[list[int]], np.ndarray]:
    """The fresh holders and the sizes of the classes of pairs with at least two fresh
    holders (the same holders: one class)."""
    e_node, e_pair = cov.entry_node, cov.entry_pair
    shared = cov.holders[e_pair] >= 2
    e_node, e_pair = e_node[shared], e_pair[shared]
    if not e_node.size:
        return [], np.zeros(0)
    pairs, row = np.unique(e_pair, return_inverse=True)
    member = np.zeros((pairs.size, n), dtype=bool)
    member[row, e_node] = True
    packed = np.ascontiguousarray(np.packbits(member, axis=1))
    keys = packed.view(np.dtype((np.void, packed.shape[1]))).ravel()
    _, first, counts = np.unique(keys, return_index=True, return_counts=True)
    holders = [np.flatnonzero(member[i]).tolist() for i in first.tolist()]
    return holders, counts.astype(np.float64)


def _exchange_rows(pool: Pool) -> list[tuple[list[int], list[float], float, float]]:
    """x_j <= x_u for each leaf j and its nearest dominating sibling u < j
    (:mod:`solvers.dominance`, valid wherever S − j + u is legal, i.e. u's parent in S)."""
    dom = dominance(pool)
    if not dom.any:
        return []
    rows = []
    parents = pool.parents
    for j in range(pool.n):
        bits = dom.anywhere[j]
        if not (bits and dom.leaf[j]):
            continue
        u = j - 1
        while u >= 0 and not (bits >> u & 1 and parents[u] == parents[j]):
            u -= 1
        if u >= 0:
            rows.append(([j, u], [1.0, -1.0], -np.inf, 0.0))
    return rows


def _constraint(rows, nvars: int):
    from scipy.optimize import LinearConstraint
    from scipy.sparse import csr_array

    data, cols, ptr, lo, hi = [], [], [0], [], []
    for idx, vals, low, high in rows:
        cols += idx
        data += vals
        ptr.append(len(cols))
        lo.append(low)
        hi.append(high)
    A = csr_array((np.asarray(data, dtype=np.float64), np.asarray(cols, dtype=np.int64),
                   np.asarray(ptr, dtype=np.int64)), shape=(len(rows), nvars))
    return LinearConstraint(A, np.asarray(lo), np.asarray(hi))


def finish(st: SearchState, sub: Pool, ids: list[int],
           seconds: float | None) -> tuple[str, float | None]:
    """Complete the selection of ``st`` exactly (module docstring) on ``sub``, the pool cut
    to the nodes ``ids`` that can still matter (every subtree that may tie with or beat
    the incumbent lies in it).

    Returns ("exact", None) when every such subtree was compared; ("stopped", bound)
    when ``seconds`` (or ``st.deadline``) ran out first, bound a proven upper bound on
    the objective (the ratio, or R̂ − λT̂) or None; ("gave up", None) after
    ``_MAX_SOLVES`` sets (too many near-ties for this method).
    """
    if not sub.n:
        return "exact", None            # nothing can beat the incumbent
    t_end = None if seconds is None else time.perf_counter() + seconds
    if st.deadline is not None:
        t_end = st.deadline if t_end is None else min(t_end, st.deadline)
    model = _model(st, sub, ids, t_end)
    if model is None:
        return "stopped", None              # building the program would end too late
    local = {v: i for i, v in enumerate(ids)}
    exclude: list[tuple[int, ...]] = []
    if all(v in local for v in st.inc[3]):
        exclude.append(tuple(local[v] for v in st.inc[3]))
    for _ in range(_MAX_SOLVES):
        lam = st.score()
        if t_end is not None and t_end <= time.perf_counter():
            return "stopped", None
        if not st.affords("milp", model.size, t_end):
            return "stopped", None          # HiGHS's presolve and root LP would end too late
        st.ready("milp")                    # scipy.optimize: a first import, not the solve's
        # HiGHS looks at its clock between steps: it gets what is left less its late overrun
        give = st.give("milp", t_end)
        if give is not None and give < 1e-3:
            return "stopped", None
        t0 = time.perf_counter()
        # the incumbent's value at λ: 0 for the ratio (λ = its ratio), itself for R̂ − λT̂
        target = 0.0 if st.lam is None else st.inc[0]
        status, nodes, bound = model.solve(lam, target - _WINDOW * (1.0 + st.inc[1]), exclude,
                                           give)
        took = time.perf_counter() - t0
        if status == "stopped" and give is not None:
            st.overran("milp", give, took)
        if status != "stopped" or give is None or took > 1.5 * give:
            # a finished solve, or one that overran its limit (the presolve and root LP):
            # not one that HiGHS's branch and bound stopped on time
            st.learn("milp", model.size, took)
        if status == "infeasible":
            return "exact", None
        if nodes is not None:
            st.offer(tuple(ids[v] for v in nodes))
        if status == "stopped" or nodes is None:
            return "stopped", _as_bound(st, lam, bound)
        exclude.append(nodes)
    return "gave up", None


def _model(st: SearchState, sub: Pool, ids: list[int], t_end: float | None) -> Model | None:
    """The program on ``sub``, kept in the pool's cache for the next round while ``ids`` are
    the same; built at the deadline's pace (O(entries) Python work: 2-18 ms on 30-70
    useful nodes of 200-node pools), None when it would end past ``t_end``."""
    key = (tuple(ids), min(st.K, sub.n), st.cost.b, st.cost.beta)
    kept = st.pool._cache.get("milp")
    if kept is not None and kept[0] == key:
        return kept[1]
    units = float(cover(sub).entry_node.size + sub.n)
    if not st.affords("model", units, t_end):
        return None
    t0 = time.perf_counter()
    model = Model(sub, key[1], st.cost)
    st.learn("model", units, time.perf_counter() - t0)
    st.pool._cache["milp"] = (key, model)
    return model


def _as_bound(st: SearchState, lam: float, value: float | None) -> float | None:
    """A bound on the value at λ (over the subtrees not yet compared) as a bound on the
    objective: R̂ − λT̂ itself, or for the ratio λ + max(U, 0)/T_floor (the compared
    subtrees are at most the incumbent)."""
    if value is None:
        return None
    if st.lam is not None:
        return max(value, st.inc[0])
    t_floor = min(st.cost.b[:st.K + 1]) + st.cost.beta * st.pool.root_count
    return max(lam + max(value, 0.0) / t_floor, st.inc[0])


def select_exact_milp(pool: Pool, K: int, cost: CostModel, *, time_limit: float = 60.0,
                      max_iter: int = 50) -> Selection:
    """Eq. 5 over A_K by HiGHS inside Dinkelbach's loop: λ_0 = the root-only ratio,
    λ_{i+1} = the ratio of the program's optimum at λ_i, until it stops rising.  No tie
    rule; optimal up to HiGHS's tolerances (an independent reference for the tests)."""
    K = check_K(pool, K, cost)
    best = evaluate(pool, (), cost)
    if K == 0 or pool.n == 0:
        return best
    model = Model(pool, K, cost, exchange=False)
    for _ in range(max_iter):
        status, nodes, _bound = model.solve(best.ratio, None, [], time_limit, gap=0.0)
        if status != "optimal" or nodes is None:
            raise RuntimeError(f"HiGHS did not prove optimality ({status})")
        cand = evaluate(pool, nodes, cost)
        if cand.ratio <= best.ratio:
            break
        best = cand
    return best

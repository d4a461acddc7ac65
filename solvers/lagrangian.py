"""Exact selection over A_K on large pools: closure bounds inside the branch and bound.

SpecFit's Eq. 5 (and argmax R̂ − λT̂) over A_K, exact under §3.3's tie rule, for
pools of a few hundred nodes and K up to 64 (EVICT's EAGLE-3 pools: 200
candidates, up to 32 verified).  The bound is the flow bound of
:mod:`solvers.flowbound` (a modular upper bound from App. A.3's closure
network with a Lagrangian penalty μ per node); the search that it prunes is
:mod:`solvers.closure_search`.  This module holds the outer loop that chooses
(λ, μ) and the pieces that :mod:`solvers.exact`'s portfolio combines.

Outer loop (:func:`prepare`).  Dinkelbach (App. A.1) over the closures:
λ = ratio of the incumbent; the cut at (λ, μ) is a candidate when it has at
most K nodes; μ starts at λ × (least-squares slope of b_0..b_K).  When the
size limit binds (the cut is larger than K), μ is raised along the lines of
the Lagrangian dual (a secant search on the nested cuts, the next λ starting
from the last bracket) until the cut has at most K nodes; larger cuts are cut
back to K nodes greedily.  The incumbent ratio only rises; a rise below
``_DINKELBACH_REL`` keeps μ.  The final flow, centred on the incumbent, gives
the ŵ of the search and the root's bound.

Bounds for a stopped selection.  The root's bound 1 − λβF_0 + max_t (the t
largest ŵ) − b̃_t bounds max R̂ − λT̂; for the ratio, λ + max(U, 0)/T_floor with
T_floor = min_j b_j + βF_0.  Before any flow (a deadline in the first
milliseconds), :func:`credit_upper` bounds the same way from the credits of
:mod:`solvers.exact` (F(S) >= F_0 + Σ_S c_v): O(n log n).

The nodes that can still matter (:func:`useful_pool`): a subtree holding v and
t − 1 other nodes is bounded by 1 − λβF_0 + ŵ_v + (the t − 1 largest other ŵ) −
b̃_t; v is dropped when that is below the incumbent's value (less the margin)
for every t, and so is every node below a dropped one.  The MILP of
:mod:`solvers.milp` runs on the rest.

Cost: per flow, one OR-Tools maximum flow; a selection takes two or three
flows, a few more where the size limit binds, then a search that visits about
|S*| × (frontier) states on EVICT-shaped pools.  Worst case exponential
(Prop. 2).
"""

from __future__ import annotations

import math
import time
from functools import lru_cache

import numpy as np

from solvers.canonical import (
    CLOSURE_SEARCH,
    REL_TOL,
    Late,
    SearchState,
    check_lam,
    first_incumbent,
    search_view,
    selection,
)
from solvers.closure_search import search
from solvers.cost import CostModel, Selection, check_K, check_time_limit, evaluate
from solvers.dominance import bound_pool
from solvers.errors import InvalidInput
from solvers.flowbound import Flow, cover, network_size
from solvers.pool import Pool

__all__ = ["lagrangian_ratio", "lagrangian_linear", "run_from", "Prepared", "prepare",
           "credit_upper", "useful_pool"]

_MAX_OUTER = 30              # secant steps on μ (each narrows the bracket)
_DINKELBACH_REL = 1e-3       # a smaller rise of the ratio keeps μ (one more flow, centred)
_SIZE_STEPS = 4              # flows of the search for μ over the sizes (convex b)


class Prepared:
    """What :func:`prepare` leaves for the search: ŵ (``what``) of the flow at
    (``lam``, ``mu``), centred on the incumbent, and ``upper``, the root's bound on the
    objective (the ratio, or R̂ − λT̂)."""

    __slots__ = ("what", "lam", "mu", "upper")

    def __init__(self, what: list[float], lam: float, mu: float, upper: float):
        self.what, self.lam, self.mu, self.upper = what, lam, mu, upper


def prepare(st: SearchState) -> Prepared | None:
    """The outer loop of the module docstring; None when the deadline came first (or a
    step would end past it: :meth:`SearchState.paced`)."""
    try:
        return _prepare(st)
    except Late:
        return None


def _prepare(st: SearchState) -> Prepared | None:
    cost = st.cost
    ratio_mode = st.lam is None
    if st.expired():
        return None
    bp, cov = _bounds_tree(st)
    convex = _convex(cost.b[:st.K + 1])
    # μ = λ·slope: for a convex b, its slope at the incumbent's size (_size_search)
    slope = _size_slope(cost.b, len(st.inc[3]), st.K) if convex else _affine_slope(cost.b, st.K)
    lam_now = st.score()
    fl, bracket = _lagrange(st, lam_now, slope)
    while ratio_mode and st.inc[0] > lam_now * (1.0 + _DINKELBACH_REL) and not st.expired():
        lam_now = st.inc[0]           # Dinkelbach: the ratio rose, linearise again
        fl, bracket = _lagrange(st, lam_now, slope, bracket)
    if st.expired():
        return None
    if fl.center != st.inc[3] or (ratio_mode and st.inc[0] != lam_now):
        # centre the flow on the incumbent (after a rise of the ratio below _DINKELBACH_REL:
        # at the new λ, μ scaled with it)
        mu = fl.mu * (st.inc[0] / lam_now) if ratio_mode else fl.mu
        lam_now = st.score()
        fl = st.paced("flow", network_size(cov, lam_now, cost.beta, mu), Flow, cov, bp, lam_now,
                      cost.beta, mu, st.inc[3])
    if convex:
        try:
            fl = _size_search(st, cov, bp, lam_now, fl)
        except Late:
            st.stopped = False      # optional flows: the first one's bound serves
    upper, what = _weighed(st, fl, lam_now)
    if ratio_mode:
        upper = lam_now + max(upper, 0.0) / _t_floor(st)      # a bound on the ratio
    return Prepared(what, lam_now, fl.mu, upper)


def _weighed(st: SearchState, fl: Flow, lam: float) -> tuple[float, list[float]]:
    """The flow's penalty rounds, its ŵ and the root's bound on R̂ − λT̂ from them."""
    st.paced("flow", fl.size, fl.penalize)
    what = fl.weights()
    return _root_bound(st, what, lam, fl.mu), what


def _size_slope(b: tuple[float, ...], s: int, K: int) -> float:
    """(b_{s+1} − b_{s−1})/2 with s within 1..K−1: the middle of b's slopes at size s."""
    s = min(max(s, 1), K - 1)
    return max(0.0, (b[s + 1] - b[s - 1]) / 2.0)


def _size_search(st: SearchState, cov, bp: Pool, lam: float, first: Flow) -> Flow:
    """For a convex, non-affine b: the penalty μ of the Lagrangian dual, searched over the
    sizes.  The size term max_k μk − λb_k is largest at k = t(μ), and at μ_t =
    λ(b_{t+1} − b_{t−1})/2 exactly at t; the dual L(μ) = closure(μ) + max_k (μk − λb_k) is
    least where the closure's cut has size t(μ).  From ``first`` (μ at the incumbent's
    size), each flow moves t to its cut's size, within a bracket that shrinks (at most
    ``_SIZE_STEPS`` more flows, each only if it ends before the deadline); cuts of at
    most K nodes are offered.  Returns the flow of the least L(μ).

    Why: the least-squares slope of b (the μ of an affine or irregular b) is b's slope in
    the middle of 0..K, where a convex b is flatter than at the optimum's size when K
    does not bind (b_k = 100 + 0.4k + 0.006k², K = 32: 0.59λ, where 0.70λ suits 25
    nodes); on the held-out family's hardest pools the root's bound fell from 0.4 %
    above the optimum to under 0.05 %, and their selections from 0.1-0.5 s of CPU to
    3-80 ms (docs/solvers.md)."""
    K, b, beta = st.K, st.cost.b, st.cost.beta
    sizes = range(1, K)

    def dual(fl: Flow) -> float:
        return fl.value + max(fl.mu * k - lam * b[k] for k in range(K + 1))

    best, best_dual, fl = first, dual(first), first
    lo, hi = 1, K - 1
    for _ in range(_SIZE_STEPS):
        t = max(sizes, key=lambda k: fl.mu * k - lam * b[k])       # t(μ), within 1..K−1
        cut = len(fl.cut)
        if cut > t:
            lo = t + 1
        elif cut < t:
            hi = t - 1
        if cut == t or lo > hi:
            break
        mu = lam * _size_slope(b, min(max(cut, lo), hi), K)
        size = network_size(cov, lam, beta, mu)
        if mu == fl.mu or not st.affords("flow", 2.5 * size):
            break
        fl = st.paced("flow", size, Flow, cov, bp, lam, beta, mu, st.inc[3])
        if 0 < len(fl.cut) <= K:
            st.offer(fl.cut)
        if dual(fl) < best_dual:
            best, best_dual = fl, dual(fl)
    return best


@lru_cache(maxsize=64)
def _convex(b: tuple[float, ...]) -> bool:
    """b_{j+1} − b_j non-decreasing, and not constant (affine: one slope serves every size)."""
    d = np.diff(np.asarray(b, dtype=np.float64))
    if d.size < 2:
        return False
    tol = 1e-12 * float(np.abs(b).max())
    return bool(np.all(np.diff(d) >= -tol) and d[-1] - d[0] > tol)


def _bounds_tree(st: SearchState):
    """The bounds' pool (:func:`solvers.dominance.bound_pool`) and its cover, built at the
    deadline's pace."""
    pool = st.pool
    nb = 0 if pool.packed is None else pool.packed.shape[1]
    if "bound" not in pool._cache:
        if "cover" not in pool._cache:
            st.paced("cover", pool.n * max(nb, 8), cover, pool)
        st.paced("dominance", pool.n * pool.n, bound_pool, pool)
    bp = bound_pool(pool)
    if "cover" not in bp._cache:
        st.paced("cover", pool.n * max(nb, 8), cover, bp)
    return bp, cover(bp)


def _t_floor(st: SearchState) -> float:
    return min(st.cost.b[:st.K + 1]) + st.cost.beta * st.pool.root_count


def _affine_slope(b: tuple[float, ...], K: int) -> float:
    """Least-squares slope of b[0..K], clipped at 0: μ = λ·slope makes b̃ nearly flat."""
    if K <= 0:
        return 0.0
    j = np.arange(K + 1, dtype=np.float64)
    y = np.asarray(b[:K + 1], dtype=np.float64)
    jc = j - j.mean()
    return max(0.0, float((jc * (y - y.mean())).sum() / (jc * jc).sum()))


def _cut_back(pool: Pool, nodes: tuple[int, ...], K: int, c: float) -> tuple[int, ...]:
    """``nodes`` (closed) cut to K nodes by dropping the leaves that lose the least
    R̂ − λβF: p_v − c·(pairs no other node of the set holds); up to three quarters of the
    excess a round, each round re-scoring the leaves.  A leaf's own pairs are its fresh pairs
    (``Cover``) that no other node of the set holds freshly.  O(entries) numpy work a
    round, O(log(|S| − K)) rounds."""
    cov = cover(pool)
    keep = np.zeros(pool.n, dtype=bool)
    keep[list(nodes)] = True
    par = cov.parents
    while True:
        m = int(keep.sum())
        if m <= K:
            return tuple(np.flatnonzero(keep).tolist())
        inner = np.zeros(pool.n, dtype=bool)
        inner[par[keep & (par >= 0)]] = True
        on = keep[cov.entry_node]
        counts = np.bincount(cov.entry_pair[on], minlength=cov.width)
        own = np.bincount(cov.entry_node[on], weights=counts[cov.entry_pair[on]] == 1,
                          minlength=pool.n)
        loss = np.where(keep & ~inner, cov.probs - c * own, np.inf)
        drop = np.argsort(loss, kind="stable")[:max(1, 3 * (m - K) // 4)]
        keep[drop[np.isfinite(loss[drop])]] = False


def _trim(st: SearchState, nodes: tuple[int, ...], c: float) -> tuple[int, ...]:
    units = cover(st.pool).entry_node.size * max(1.0, math.log2(len(nodes) - st.K + 1))
    return st.paced("trim", units, _cut_back, st.pool, nodes, st.K, c)


def _lagrange(st: SearchState, lam: float, slope: float,
              hint: tuple[float, float] | None = None) -> tuple[Flow, tuple[float, float]]:
    """One linear step at λ: the flow at μ = λ·slope, raised (secant on the nested cuts)
    while the cut has more than K nodes; offers the cuts of at most K nodes and the
    larger cut cut back to K.  ``hint``: the (μ_lo, μ_hi) bracket where the last step
    ended (the first probes).  Returns the flow whose ŵ the search will use and the
    bracket."""
    pool, K, cost = st.pool, st.K, st.cost
    bp = bound_pool(pool)           # the bounds' tree (exchange precedences added)
    cov = cover(bp)
    beta = cost.beta
    mu = lam * slope

    def flow(mu: float) -> Flow:
        return st.paced("flow", network_size(cov, lam, beta, mu), Flow, cov, bp, lam, beta, mu,
                        st.inc[3])

    if hint is not None and hint[1] > mu:
        # the size limit bound at the last λ: where it ended, the cut had K nodes or fewer
        fl = flow(hint[1])
        if fl.cut:
            st.offer(fl.cut)
        if len(fl.cut) == K:
            return fl, hint            # a dual optimum (|S(μ)| = K): nothing to narrow
    fl = flow(mu)
    if len(fl.cut) <= K:
        if fl.cut:
            st.offer(fl.cut)
        return fl, (mu, mu)
    c = lam * beta
    lo = fl
    st.offer(_trim(st, lo.cut, c))
    # hi: μ above every weight, where the cut is empty (value 0)
    hi_cut: tuple[int, ...] = ()
    hi_mu, hi_value = float(cov.probs.max()) + 1.0, 0.0
    # first probes: the last step's bracket, else the μ at which about K nodes keep a
    # positive weight
    if hint is not None:
        probes = [hint[0]]
    else:
        q = np.sort(cov.probs - c * cov.alone)[::-1]
        probes = [float(q[K])] if q.size > K else []
    last = lo
    for _ in range(_MAX_OUTER):
        if st.expired():
            break
        x = probes.pop(0) if probes else math.nan
        secant = not lo.mu < x < hi_mu
        if secant:
            # the μ where the lines value − (μ' − μ)·size of the two cuts cross
            x = ((lo.value - hi_value + lo.mu * len(lo.cut) - hi_mu * len(hi_cut))
                 / (len(lo.cut) - len(hi_cut)))
            if not lo.mu < x < hi_mu:
                break
        mid = last = flow(x)
        if len(mid.cut) > K:
            if secant and mid.cut == lo.cut:
                break           # the breakpoint between lo's and hi's cuts
            lo = mid
            st.offer(_trim(st, mid.cut, c))
        else:
            if mid.cut:
                st.offer(mid.cut)
            if len(mid.cut) == K or (secant and mid.cut == hi_cut):
                return mid, (lo.mu, mid.mu)
            hi_mu, hi_value, hi_cut = mid.mu, mid.value, mid.cut
    return last, (lo.mu, hi_mu)


def _root_bound(st: SearchState, what: list[float], lam: float, mu: float) -> float:
    """Upper bound on max R̂ − λT̂ over A_K from ŵ: the empty set, or the t largest ŵ."""
    pool, K, cost = st.pool, st.K, st.cost
    b, beta, F0 = cost.b, cost.beta, pool.root_count
    best = 1.0 - lam * (b[0] + beta * F0)
    acc = 0.0
    for t, x in enumerate(sorted(what, reverse=True)[:K], start=1):
        acc += x
        best = max(best, 1.0 - lam * beta * F0 + acc - (lam * b[t] - mu * t))
    return best


def _useful(st: SearchState, what: list[float], lam: float, mu: float) -> np.ndarray:
    """The nodes that some subtree tying with or beating the incumbent may contain.

    A subtree holding v and t − 1 other nodes is bounded by
    1 − λβF_0 + ŵ_v + (the t − 1 largest other ŵ) − b̃_t ((*)); v is dropped when that
    is below the incumbent's value (less the margin) for every t, and so is every
    node below a dropped one.  O(n log n + K).
    """
    pool, K, cost = st.pool, st.K, st.cost
    w = np.asarray(what)
    order = np.argsort(-w, kind="stable")
    rank = np.empty(pool.n, dtype=np.int64)
    rank[order] = np.arange(pool.n)
    top = w[order[:K]]
    pref = np.concatenate([[0.0], np.cumsum(top), np.full(K + 1 - top.size, np.sum(top))])
    t = np.arange(1, K + 1)
    btil = lam * np.asarray(cost.b[1:K + 1]) - mu * t
    with_v = pref[t - 1] - btil          # v outside the t − 1 largest others
    among = pref[t] - btil               # v among them: the t largest include v
    best_with = np.maximum.accumulate(with_v)                 # over t <= r + 1
    best_among = np.maximum.accumulate(among[::-1])[::-1]     # over t >= r + 2
    r = rank
    u = w + best_with[np.minimum(r, K - 1)]
    later = r + 1 < K
    u[later] = np.maximum(u[later], best_among[r[later] + 1])
    u += 1.0 - lam * cost.beta * pool.root_count
    inc = st.inc
    target = 0.0 if st.lam is None else inc[0]
    keep = u >= target - REL_TOL * (2.0 + inc[1] + abs(target))
    for v, a in enumerate(bound_pool(pool).parents):
        if a >= 0 and not keep[a]:
            keep[v] = False
    return keep


def credit_upper(st: SearchState) -> float:
    """A bound on the objective (the ratio, or R̂ − λT̂) of every subtree from the credits
    alone (module docstring): O(n log n), for a selection stopped before any flow."""
    pool, K, cost = st.pool, st.K, st.cost
    lam = st.score()
    beta, F0 = cost.beta, pool.root_count
    a = sorted((p - lam * beta * c for p, c in zip(pool.probs, pool.credits, strict=True)),
               reverse=True)
    best = 1.0 - lam * (cost.b[0] + beta * F0)
    acc = 0.0
    for t in range(1, K + 1):
        acc += a[t - 1]
        best = max(best, 1.0 - lam * beta * F0 + acc - lam * cost.b[t])
    if st.lam is not None:
        return best
    return lam + max(best, 0.0) / _t_floor(st)


def useful_pool(st: SearchState, prep: Prepared) -> tuple[Pool, list[int]]:
    """The pool cut to the nodes of :func:`_useful` (every subtree that may tie with or
    beat the incumbent lies in it; ids in order, so canonical sums keep their order),
    and the pool's ids of its nodes."""
    pool = bound_pool(st.pool)
    ids = np.flatnonzero(_useful(st, prep.what, prep.lam, prep.mu)).tolist()
    if len(ids) == pool.n:
        return pool, ids
    new = {v: i for i, v in enumerate(ids)}
    sub = Pool(tuple(-1 if pool.parents[v] < 0 else new[pool.parents[v]] for v in ids),
               tuple(pool.probs[v] for v in ids), tuple(pool.levels[v] for v in ids),
               pool.num_layers, pool.num_experts, pool.root_count,
               tuple(pool.masks[v] for v in ids))
    return sub, ids


def run_from(pool: Pool, K: int, cost: CostModel, lam: float | None, inc: list,
             deadline: float | None) -> Selection:
    """The closure-bounded search alone, to the end or the deadline, from the incumbent
    ``inc`` ([score, R̂, F, nodes], canonical, at most K nodes): Eq. 5 when ``lam`` is
    None, else R̂ − λT̂.  ``K`` is the effective limit (at most n); ``deadline``: a
    ``time.perf_counter()`` instant or None."""
    st = SearchState(pool, K, cost, lam, list(inc), deadline)
    if K == 0 or pool.n == 0:
        return selection(cost, st.inc, CLOSURE_SEARCH)
    prep = prepare(st)
    if prep is None:
        return selection(cost, st.inc, CLOSURE_SEARCH, False, max(credit_upper(st), st.inc[0]))
    search(st, prep.what, prep.lam, prep.mu)
    if not st.stopped:
        return selection(cost, st.inc, CLOSURE_SEARCH)
    return selection(cost, st.inc, CLOSURE_SEARCH, False, max(prep.upper, st.inc[0]))


def lagrangian_ratio(pool: Pool, K: int, cost: CostModel, *, start=None,
                     time_limit: float | None = None) -> Selection:
    """Eq. 5 over A_K with the closure bounds alone (module docstring); the tie-rule winner.

    ``start``: optional node ids of a legal subtree with at most K nodes (a first
    incumbent).  ``time_limit`` (seconds, from the call): stop the search there; the
    result then has ``exact=False`` and ``upper_bound`` >= the optimal ratio.
    """
    t0 = time.perf_counter()
    K = check_K(pool, K, cost)
    limit = check_time_limit(time_limit)
    deadline = None if limit is None else t0 + limit
    first = None
    if start is not None:
        first = evaluate(pool, start, cost)
        if len(first.nodes) > K:
            raise InvalidInput(f"start has {len(first.nodes)} nodes, more than K = {K}")
    inc = first_incumbent(pool, K, cost, None, first, search_view(pool))
    return run_from(pool, K, cost, None, inc, deadline)


def lagrangian_linear(pool: Pool, K: int, cost: CostModel, lam: float, *,
                      time_limit: float | None = None) -> Selection:
    """argmax R̂ − λT̂ over A_K with the closure bounds alone; tie rule as in
    :func:`solvers.exact.select_max_linear`.  ``upper_bound`` bounds the value."""
    t0 = time.perf_counter()
    K = check_K(pool, K, cost)
    lam_f = check_lam(lam)
    limit = check_time_limit(time_limit)
    deadline = None if limit is None else t0 + limit
    inc = first_incumbent(pool, K, cost, lam_f, None, search_view(pool))
    return run_from(pool, K, cost, lam_f, inc, deadline)

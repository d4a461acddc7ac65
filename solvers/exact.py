"""Exact subtree selection over A_K (SpecFit Eq. 2, 5; Algorithm 1) and its linear variant.

Exact methods, all returning the unique winner of §3.3's tie rule:

* :func:`enumerate_ratio` — Algorithm 1: depth-first over every ancestor-closed
  subtree with at most K nodes, nodes added in increasing id order, each only
  when its parent is present, union bitmaps carried from the parent state.
  Visits |A_K| states, O(|A_K|·w) for w-word bitmaps.
* :func:`branch_and_bound_ratio` — the same traversal with pruning (beyond the
  paper).  It starts from the best of the root-only set and the K top-p
  prefixes (EAGLE-3's rule), or from a given start set.  Each node v has a
  *credit* c_v (``Pool.credits``): the pairs whose first holder in id order
  is v.  In the traversal every node of S has a smaller id than every node an
  extension X adds, so a pair credited to a node of X has no holder in S and
  is new, and each pair is credited once: ``F(S ∪ X) >= F(S) + Σ_{v∈X} c_v``.
  With λ the incumbent ratio ρ* and a_v = p_v − λβc_v, an extension X can beat
  ρ* only if ``R̂(S) − λβF(S) + Σ_{v∈X} a_v − λ·b_{|S|+|X|} >= 0``.  X lies in
  the subtrees of the children still to try at this state (the *reachable*
  nodes), so the left side is at most
  ``R̂(S) − λβF(S) + P − λ·min_{t=1..K−|S|} b_{|S|+t}`` with P the sum of the
  positive a_v over the reachable nodes (b may be non-monotone).  P is kept
  per state in O(1): each node stores the sum and count of the positive a_v
  in its subtree, and trying child j removes j, skipping it removes j's
  subtree.  When more than K − |S| reachable a_v are positive, the sorted
  bound over ids >= j is tried too: the t largest a_v, every t <= K − |S|.
  Both bounds shrink as the loop moves to later children, so the first child
  that fails ends the loop.  The values are rebuilt whenever ρ* rises (an
  old P still bounds, since the a_v only fall).  Worst case still
  O(|A_K|·w); on SpecFit-shaped pools it evaluates about 7.5 subtrees per
  selection where enumeration evaluates about 290
  (``benchmarks/bench_solvers.py``).
* :func:`select_exact` — a portfolio (``_exact``): that branch and bound for
  a small work budget (``_FAST_WORK``: it finishes within it on SpecFit's
  pools); then a uniform pool (every subtree of a size ties:
  :mod:`solvers.uniform`) by its best id prefix in O(n + K), any other by the
  closure-bounded search of :mod:`solvers.lagrangian` (with
  the exchange dominance of :mod:`solvers.dominance`) for ``_SEARCH_STATES``
  states; then, on the nodes that can still matter, the MILP of
  :mod:`solvers.milp` or, on small models, CP-SAT (:mod:`solvers.cpsat`), for
  as long as the search has run (CP-SAT on a small model: until it finishes,
  since a run cut off restarts from nothing); then the search again with four times the
  states, and so on until one finishes.  All are exact and return the same
  tie-rule winner; ``Selection.method`` names the one that answered.
  ``time_limit`` counts from the call (``Selection.exact`` False and
  ``upper_bound`` certified when it stops the selection); a step that would end
  past it, its first import included, is not started (:mod:`solvers.canonical`;
  :func:`solvers.preload` does the imports before the clock matters).

:func:`branch_and_bound_linear` / :func:`select_max_linear` run the same
methods for max R̂ − λT̂ with λ fixed and the incumbent's value as the target.
:func:`select_marginal` selects with some experts already paid for
(batched decoding; :meth:`solvers.pool.Pool.with_free`).

Floating point: the traversal adds nodes in increasing id order and sums R̂
from 1.0 along the path, so each candidate's R̂, F and T̂ are exactly the
canonical numbers of ``solvers.cost``: candidates are compared exactly under
the full tie rule (:mod:`solvers.canonical`), and one Selection is built, for
the winner.  The pruning keeps a 1e-9 relative margin, so rounding in the
bounds never loses a tie.
"""

from __future__ import annotations

import math
import sys
import time
from functools import lru_cache

from solvers.canonical import (
    BRANCH_AND_BOUND,
    CLOSURE_SEARCH,
    CPSAT,
    MILP,
    REL_TOL,
    UNIFORM,
    Late,
    SearchState,
    SearchView,
    beats,
    check_lam,
    first_incumbent,
    prefix_start,
    search_view,
    selection,
)
from solvers.closure_search import search
from solvers.cost import (
    CostModel,
    Selection,
    better_linear,
    better_ratio,
    check_K,
    check_time_limit,
    evaluate,
    linear_value,
    make_selection,
)
from solvers.errors import InvalidInput
from solvers.lagrangian import credit_upper, prepare, useful_pool
from solvers.milp import finish as milp_finish
from solvers.pool import Pool, holder_classes
from solvers.uniform import is_uniform, uniform_best

__all__ = ["select_exact", "select_max_linear", "select_marginal", "enumerate_ratio",
           "enumerate_linear", "branch_and_bound_ratio", "branch_and_bound_linear"]

_REL_TOL = REL_TOL
_FAST_WORK = 64           # work units of today's branch and bound before the closure bounds
_SEARCH_STATES = 4_000    # closure-search states before the MILP is tried (then ×4 a round)
_MILP_SECONDS = 0.02      # the solvers' least time a round (else: the search's time so far)
_CPSAT_CLASSES = 400      # CP-SAT enumerates near-ties on models of at most this many classes
_CPSAT_SMALL = 50         # ... and runs before the MILP on models of at most this many
_SOLVERS = (MILP, CPSAT)  # tried in turn after each round of the search
_UNIFORM = True           # uniform pools (solvers.uniform) answered in O(n + K)


def _branch_and_bound(pool: Pool, K: int, cost: CostModel, lam: float | None,
                      start: Selection | None = None) -> Selection:
    """Today's search alone.  ``lam`` None: Eq. 5; else max R̂ − λT̂ (the incumbent's value
    as the target)."""
    view = search_view(pool)
    inc = first_incumbent(pool, K, cost, lam, start, view)
    if K > 0 and pool.n > 0:
        _search(pool, K, cost, lam, view, inc)
    return selection(cost, inc, BRANCH_AND_BOUND)


def _exact(pool: Pool, K: int, cost: CostModel, lam: float | None, start: Selection | None,
           deadline: float | None) -> Selection:
    """What :func:`select_exact` (``lam`` None) and :func:`select_max_linear` run.

    Today's branch and bound for at most ``_FAST_WORK`` work units (one per
    search state, and (ids sorted)/8 per sorted bound; it finishes within them
    on SpecFit-sized pools: at most 35 states on the benchmark's 18-node pools,
    8.5 on average), then a uniform pool (:mod:`solvers.uniform`: every subtree of a
    size ties) by its best prefix, any other from the incumbent by the portfolio of the
    module docstring.  ``deadline``: a ``time.perf_counter()`` instant or None.
    """
    view = search_view(pool)
    if start is None:
        inc = prefix_start(pool, K, cost, lam, view)
    else:
        inc = first_incumbent(pool, K, cost, lam, start, view)
    if K > 0 and pool.n > 0:
        try:
            _search(pool, K, cost, lam, view, inc, _FAST_WORK, deadline)
        except _OutOfBudget:
            if _UNIFORM and is_uniform(pool):
                return selection(cost, uniform_best(pool, K, cost, lam), UNIFORM)
            return _portfolio(SearchState(pool, K, cost, lam, inc, deadline))
    return selection(cost, inc, BRANCH_AND_BOUND)


def _portfolio(st: SearchState) -> Selection:
    """The closure-bounded search and the MILP (then CP-SAT) in turn: each round the search
    gets four times the states of the last, and the solvers as much time as the search has
    had so far (at least ``_MILP_SECONDS``), until one of them finishes (or the deadline)."""
    cost = st.cost
    prep = prepare(st)
    if prep is None:
        # the deadline came, or comes before a flow (or the import it needs) could end:
        # today's search, which needs neither, until then
        if not st.expired():
            try:
                _search(st.pool, st.K, cost, st.lam, search_view(st.pool), st.inc,
                        deadline=st.deadline)
                return selection(cost, st.inc, BRANCH_AND_BOUND)
            except _OutOfBudget:
                pass
        return _stopped(st, credit_upper(st), BRANCH_AND_BOUND)
    budget, searched, use_milp = _SEARCH_STATES, 0.0, True
    while True:
        st.resume(budget if use_milp else None)
        t0 = time.perf_counter()
        search(st, prep.what, prep.lam, prep.mu)
        searched += time.perf_counter() - t0
        if not st.stopped:
            return selection(cost, st.inc, CLOSURE_SEARCH)
        if not st.by_budget:
            return _stopped(st, prep.upper, CLOSURE_SEARCH)
        sub, ids = useful_pool(st, prep)
        try:        # O(n·U) numpy work: 3 ms on a whole 200-node pool
            units = float(sub.n * max(1, max(m.bit_length() for m in sub.masks) >> 3)) \
                if sub.n else 0.0
            classes = st.paced("classes", units, holder_classes, sub)[1].size if sub.n else 0
        except Late:
            use_milp = False    # no time for the solvers: the search alone until the deadline
            continue
        # a small model: CP-SAT first (it enumerates symmetric near-ties at once) and
        # without a round's cap (a cut-off run restarts from nothing: racing it cost 2-5x on
        # Prop. 2's CLIQUE pools, where it needs 0.1-0.8 s); the other solver only where
        # the first gives up on too many near-ties
        small = classes <= _CPSAT_SMALL
        order = _SOLVERS[::-1] if small else _SOLVERS
        seconds = max(_MILP_SECONDS, searched)
        outcome, bound, method = "gave up", None, order[0]
        for method in order:
            if method == MILP:
                outcome, bound = milp_finish(st, sub, ids, seconds)
            elif classes <= _CPSAT_CLASSES:
                outcome, bound = _cpsat(st, sub, ids, classes, math.inf if small else seconds)
            if outcome != "gave up" or st.expired():
                break
        if outcome == "exact":
            return selection(cost, st.inc, method)
        if st.expired():
            return _stopped(st, min(prep.upper, math.inf if bound is None else bound), method)
        use_milp = outcome != "gave up"      # too many near-ties: the search goes to the end
        budget = 4 * budget + 64


def _cpsat(st: SearchState, sub: Pool, ids: list[int], classes: int,
           seconds: float) -> tuple[str, float | None]:
    """:func:`solvers.cpsat.finish_exact` on ``sub`` (ids: the pool's ids of its nodes) for at
    most ``seconds``; ("gave up", None) when ``sub`` does not hold the incumbent."""
    local = {v: i for i, v in enumerate(ids)}
    if not all(v in local for v in st.inc[3]):
        return "gave up", None
    if not st.affords("cpsat", classes + sub.n):
        return "stopped", None      # its first import or model would end past the deadline
    st.ready("cpsat")
    from solvers.cpsat import finish_exact  # OR-Tools' CP-SAT: a slow first import

    def offer(nodes: tuple[int, ...]) -> bool:
        return st.offer(tuple(ids[v] for v in nodes))

    def incumbent() -> list:
        score, r, f, nodes = st.inc
        return [score, r, f, tuple(local[v] for v in nodes)]

    t0 = time.perf_counter()
    # CP-SAT keeps its own limit: it gets what is left less its recent overrun
    give = st.give("cpsat", None if math.isinf(seconds) else t0 + seconds)
    if give is not None and give < 1e-3:
        return "stopped", None
    outcome, bound = finish_exact(sub, min(st.K, sub.n), st.cost, st.lam, offer, incumbent,
                                  None if give is None else t0 + give)
    if outcome == "stopped" and give is not None:
        st.overran("cpsat", give, time.perf_counter() - t0)
    return outcome, None if bound is None else max(bound, st.inc[0])


def _stopped(st: SearchState, upper: float, method: str) -> Selection:
    return selection(st.cost, st.inc, method, False, max(upper, st.inc[0]))


@lru_cache(maxsize=64)
def _smallest_intercepts(b: tuple[float, ...], K: int) -> tuple[float, ...]:
    """bmin[s] = min of b[s + t] over t = 1..K − s, for s < K (b may be non-monotone)."""
    return tuple(min(b[s + 1:K + 1]) for s in range(K))


class _OutOfBudget(Exception):
    """The search did more work than its budget (``_search``)."""


def _credit_values(pool: Pool, credit, lam_beta: float) -> tuple[list, list, list]:
    """a_v = p_v − λβc_v and, per node, the sum and count of the positive a_v in its
    subtree (today's search at λ)."""
    a = [p - lam_beta * c for p, c in zip(pool.probs, credit, strict=False)]
    subpos = [x if x > 0.0 else 0.0 for x in a]
    subcnt = [1 if x > 0.0 else 0 for x in a]
    parents = pool.parents
    for v in range(len(a) - 1, -1, -1):     # children after parents: one backward pass
        u = parents[v]
        if u >= 0 and subcnt[v]:
            subpos[u] += subpos[v]
            subcnt[u] += subcnt[v]
    return a, subpos, subcnt


def _sorted_gain(a: list[float], j: int, s: int, room: int, lam: float, b) -> float:
    """max over t = 1..room of (Σ of the t largest a_v over ids >= j) − λ·b[s+t]."""
    ranked = sorted(a[j:], reverse=True)
    acc, g = 0.0, -math.inf
    for t in range(1, min(len(ranked), room) + 1):
        acc += ranked[t - 1]
        x = acc - lam * b[s + t]
        if x > g:
            g = x
    return g


def _search(pool: Pool, K: int, cost: CostModel, lam: float | None, view: SearchView,
            inc: list, budget: int = sys.maxsize, deadline: float | None = None) -> None:
    """Depth-first branch and bound from the incumbent ``inc`` (updated in place).

    ``budget``: raise :class:`_OutOfBudget` once the work (one unit per search state,
    plus (ids sorted)/8 per sorted bound) exceeds it, or (every 16 units) the clock
    ``deadline`` (a ``time.perf_counter()`` instant); ``inc`` then holds the best
    set found so far.  Both modes test extensions against R̂ − λT̂ >= target: for the
    ratio, λ is the incumbent ratio ρ* and the target 0; for the linear objective, λ
    is fixed and the target is the incumbent's value.
    """
    visit, (subpos, subcnt) = _make_visit(pool, K, cost, lam, view, inc, budget, deadline)
    roots = view.roots
    visit(list(roots), 0, 1.0, 0, pool.root_count, sum([subpos[v] for v in roots]),
          sum([subcnt[v] for v in roots]))


def _make_visit(pool: Pool, K: int, cost: CostModel, lam: float | None, view: SearchView,
                inc: list, budget: int, deadline: float | None = None):
    n, probs, masks, children, credit = pool.n, pool.probs, pool.masks, view.children, view.credit
    b, beta, F0, ratio_mode = cost.b, cost.beta, pool.root_count, lam is None
    bmin = _smallest_intercepts(b, K)
    chosen: list[int] = []
    # the bound's data for the current λ (module docstring)
    lam_now: float = inc[0] if lam is None else lam
    lam_beta, target, work = lam_now * beta, 0.0 if ratio_mode else inc[0], 0
    check = budget if deadline is None else min(budget, 16)     # the next look
    a, subpos, subcnt = _credit_values(pool, credit, lam_beta)
    gains: dict = {}

    def visit(frontier: list[int], union: int, r: float, s: int, F: int, ps: float, pc: int):
        # frontier: ids whose parent is in S ∪ {root}, ascending, all above S's ids.
        # ps, pc: sum and count of the positive a_v over the frontier's subtrees (every
        # node an extension can use), updated as the loop drops a child's subtree.
        # An extension X of S reaches the target only if
        #   R̂(S) − λβF(S) + Σ_{v∈X} a_v − λ·b[|S|+|X|] >= target,
        # bounded by ps − λ·bmin[|S|] (and by the sorted suffix when pc > K − |S|).
        nonlocal lam_now, lam_beta, target, work, check, a, subpos, subcnt, gains
        work += 1
        if work > check:
            # one comparison per state, for the budget and the clock alike
            if work > budget or time.perf_counter() > deadline:   # type: ignore[operator]
                raise _OutOfBudget
            check = min(budget, work + 16)
        s1, b1, room, last = s + 1, b[s + 1], K - s, len(frontier) - 1
        # floor: the target less the rounding margin; base: what S contributes
        floor = target - _REL_TOL * (1.0 + r + abs(target))
        base = r - lam_beta * F - lam_now * bmin[s]
        for idx, j in enumerate(frontier):
            if base + ps < floor:
                return  # the reachable sets shrink with j: later children cannot either
            if pc > room:
                g = gains.get(j * (K + 1) + s)
                if g is None:
                    work += (n - j) >> 3
                    g = gains[j * (K + 1) + s] = _sorted_gain(a, j, s, room, lam_now, b)
                if r - lam_beta * F + g < floor:
                    return
            u2 = union | masks[j]
            f2 = F0 + u2.bit_count()
            r2 = r + probs[j]
            t2 = b1 + beta * f2
            chosen.append(j)
            q = r2 / t2 if ratio_mode else r2 - lam_now * t2
            if q >= inc[0] and beats(q, r2, f2, tuple(chosen), inc):
                inc[0], inc[1], inc[2], inc[3] = q, r2, f2, tuple(chosen)
                if not ratio_mode:
                    target = q
                elif q > lam_now:
                    lam_now, lam_beta, gains = q, q * beta, {}
                    a, subpos, subcnt = _credit_values(pool, credit, lam_beta)
                    # a changed: recount what the rest of this frontier reaches
                    ps = sum([subpos[v] for v in frontier[idx:]])
                    pc = sum([subcnt[v] for v in frontier[idx:]])
                floor = target - _REL_TOL * (1.0 + r + abs(target))
                base = r - lam_beta * F - lam_now * bmin[s]
            aj = a[j]
            if aj > 0.0:
                ps2, pc2 = ps - aj, pc - 1
            else:
                ps2, pc2 = ps, pc
            if s1 < K:
                kids = children[j]
                if kids:
                    nxt = kids + frontier[idx + 1:]
                    if idx < last:
                        nxt.sort()
                    visit(nxt, u2, r2, s1, f2, ps2, pc2)
                elif idx < last:
                    visit(frontier[idx + 1:], u2, r2, s1, f2, ps2, pc2)
            chosen.pop()
            # drop j's subtree (a may have been rebuilt below: the old sums still bound)
            ps, pc = ps2 - subpos[j] + (aj if aj > 0.0 else 0.0), pc2 - subcnt[j] + (aj > 0.0)

    return visit, (subpos, subcnt)


def branch_and_bound_ratio(pool: Pool, K: int, cost: CostModel) -> Selection:
    """Eq. 5 over A_K by branch and bound (module docstring); the exact tie-rule winner."""
    return _branch_and_bound(pool, check_K(pool, K, cost), cost, None)


def enumerate_ratio(pool: Pool, K: int, cost: CostModel) -> Selection:
    """Algorithm 1: plain depth-first enumeration of A_K in increasing id order.  O(|A_K|·w)."""
    K = check_K(pool, K, cost)
    n, probs, masks, parents = pool.n, pool.probs, pool.masks, pool.parents
    b, beta, F0 = cost.b, cost.beta, pool.root_count
    best = [make_selection(pool, (), 0, cost)]
    chosen: list[int] = []

    def visit(i: int, present: int, union: int, r: float, s: int):
        # present: bit a+1 set when node a is in S; bit 0 is the root
        for j in range(i + 1, n):
            if (present >> (parents[j] + 1)) & 1:
                u2 = union | masks[j]
                r2 = r + probs[j]
                q = r2 / (b[s + 1] + beta * (F0 + u2.bit_count()))
                chosen.append(j)
                if q >= best[0].ratio * (1.0 - _REL_TOL):
                    cand = make_selection(pool, tuple(chosen), u2, cost)
                    if better_ratio(cand, best[0]):
                        best[0] = cand
                if s + 1 < K:
                    visit(j, present | (1 << (j + 1)), u2, r2, s + 1)
                chosen.pop()

    if K:
        visit(-1, 1, 0, 1.0, 0)
    return best[0]


def enumerate_linear(pool: Pool, K: int, cost: CostModel, lam: float) -> Selection:
    """argmax R̂ − λT̂ over A_K by plain enumeration (reference for the branch and bound)."""
    K = check_K(pool, K, cost)
    lam = check_lam(lam)
    n, probs, masks, parents = pool.n, pool.probs, pool.masks, pool.parents
    b, beta, F0 = cost.b, cost.beta, pool.root_count
    best = [make_selection(pool, (), 0, cost)]
    chosen: list[int] = []

    def visit(i, present, union, r, s):
        for j in range(i + 1, n):
            if (present >> (parents[j] + 1)) & 1:
                u2 = union | masks[j]
                r2 = r + probs[j]
                val = r2 - lam * (b[s + 1] + beta * (F0 + u2.bit_count()))
                chosen.append(j)
                bv = linear_value(best[0], lam)
                if val >= bv - _REL_TOL * (1.0 + abs(bv)):
                    cand = make_selection(pool, tuple(chosen), u2, cost)
                    if better_linear(cand, best[0], lam):
                        best[0] = cand
                if s + 1 < K:
                    visit(j, present | (1 << (j + 1)), u2, r2, s + 1)
                chosen.pop()

    if K:
        visit(-1, 1, 0, 1.0, 0)
    return best[0]


def branch_and_bound_linear(pool: Pool, K: int, cost: CostModel, lam: float) -> Selection:
    """argmax R̂ − λT̂ over A_K by the branch and bound with λ fixed.

    Tie rule: value, larger R̂, smaller F, fewer nodes, smaller ids.
    """
    K = check_K(pool, K, cost)
    return _branch_and_bound(pool, K, cost, check_lam(lam))


def select_exact(pool: Pool, K: int, cost: CostModel, *, start=None,
                 time_limit: float | None = None) -> Selection:
    """Eq. 5: the subtree of A_K with the largest R̂/T̂, unique under §3.3's tie rule.

    ``start``: optional node ids of a legal subtree of this pool with at most K
    nodes, used as the first incumbent; it only speeds the search up.
    ``time_limit`` (seconds, optional, counted from this call): where it stops the
    selection, the result is the best subtree found with ``exact=False`` and
    ``upper_bound`` a proven upper bound on the optimal ratio; otherwise
    ``exact=True`` and ``upper_bound`` is the ratio.  ``method``: the search that
    answered (module docstring, ``_exact``).  A limit shorter than a method's first
    import skips that method: call :func:`solvers.preload` once before the clock matters.
    """
    t0 = 0.0 if time_limit is None else time.perf_counter()
    K = check_K(pool, K, cost)
    limit = None if time_limit is None else check_time_limit(time_limit)
    first = None
    if start is not None:
        first = _start(pool, K, cost, start)
    return _exact(pool, K, cost, None, first, None if limit is None else t0 + limit)


def _start(pool: Pool, K: int, cost: CostModel, start) -> Selection:
    first = evaluate(pool, start, cost)
    if len(first.nodes) > K:
        raise InvalidInput(f"start has {len(first.nodes)} nodes, more than K = {K}")
    return first


def _select_exact(pool: Pool, K: int, cost: CostModel, start, time_limit, t0: float) -> Selection:
    K = check_K(pool, K, cost)
    limit = check_time_limit(time_limit)
    first = None if start is None else _start(pool, K, cost, start)
    return _exact(pool, K, cost, None, first, None if limit is None else t0 + limit)


def select_max_linear(pool: Pool, K: int, cost: CostModel, lam: float, *,
                      time_limit: float | None = None) -> Selection:
    """argmax_{S∈A_K} R̂(S) − λT̂(S) (the throughput-optimal rule S* of §3.3 at λ = λ*).

    Tie rule: value, larger R̂, smaller F, fewer nodes, smaller ids.
    ``time_limit``: as in :func:`select_exact`; ``upper_bound`` bounds the value
    R̂ − λT̂.
    """
    return _select_max_linear(pool, K, cost, lam, time_limit,
                              0.0 if time_limit is None else time.perf_counter())


def _select_max_linear(pool: Pool, K: int, cost: CostModel, lam, time_limit,
                       t0: float) -> Selection:
    K = check_K(pool, K, cost)
    lam_f = check_lam(lam)
    limit = check_time_limit(time_limit)
    return _exact(pool, K, cost, lam_f, None, None if limit is None else t0 + limit)


def select_marginal(pool: Pool, K: int, cost: CostModel, free, *, lam: float | None = None,
                    start=None, time_limit: float | None = None) -> Selection:
    """Eq. 5 (or, with ``lam``, argmax R̂ − λT̂) for one request of a batched forward.

    ``free``: the (layer, expert) pairs the forward executes anyway — the other
    requests' roots and selections — as a boolean array [L, N] or L per-layer
    collections of expert ids (:meth:`Pool.with_free`).  They do not count in F:
    T̂(S) = b_{|S|} + β·|(E(s) ∪ ⋃_{v∈S} E(v)) \\ free| summed over layers, and the
    returned ``union`` is that marginal F.  The rule is otherwise the same: A_K,
    §3.3's tie rule, ``start`` and ``time_limit`` (from this call) as in
    :func:`select_exact`.  Node ids are the pool's.  Cost: :meth:`Pool.with_free`
    (O(L·N + n)) plus one exact selection.
    """
    t0 = time.perf_counter()
    marginal = pool.with_free(free) if isinstance(pool, Pool) else pool
    if lam is None:
        return _select_exact(marginal, K, cost, start, time_limit, t0)
    if start is not None:
        raise InvalidInput("start is only used by the ratio selection (lam=None)")
    return _select_max_linear(marginal, K, cost, lam, time_limit, t0)

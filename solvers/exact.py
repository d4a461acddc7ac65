"""Exact subtree selection over A_K (SpecFit Eq. 2, 5; Algorithm 1) and its linear variant.

Three exact methods, all returning the unique winner of §3.3's tie rule:

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
* :func:`select_exact` runs that branch and bound for a small work budget
  (``_FAST_WORK``: it finishes within it on SpecFit's pools) and otherwise
  continues from its incumbent with the closure-bounded search of
  :mod:`solvers.lagrangian`, which scales to pools of a few hundred nodes;
  both are exact and return the same tie-rule winner.  ``time_limit`` stops the
  second one (``Selection.exact`` False, ``upper_bound`` certified).

:func:`branch_and_bound_linear` / :func:`select_max_linear` run the same
searches for max R̂ − λT̂ with λ fixed and the incumbent's value as the target.
:func:`select_marginal` selects with some experts already paid for
(batched decoding; :meth:`solvers.pool.Pool.with_free`).

Floating point: the traversal adds nodes in increasing id order and sums R̂
from 1.0 along the path, so each candidate's R̂, F and T̂ are exactly the
canonical numbers of ``solvers.cost``: candidates are compared exactly under
the full tie rule, and one Selection is built, for the winner.  The pruning
keeps a 1e-9 relative margin, so rounding in the bounds never loses a tie.
"""

from __future__ import annotations

import sys
import time
from functools import lru_cache

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
from solvers.pool import Pool

__all__ = ["select_exact", "select_max_linear", "select_marginal", "enumerate_ratio",
           "enumerate_linear",
           "branch_and_bound_ratio", "branch_and_bound_linear", "search_view"]

_REL_TOL = 1e-9
_FAST_WORK = 64         # work units of today's branch and bound before the closure bounds


class _SearchView:
    """Per-pool data of the branch and bound (cached on the pool; independent of the cost):
    children[v] (ascending), the root's children, the credits c_v (``Pool.credits``), and
    the node ids by decreasing p (ties by id) for the starting incumbent.
    """

    __slots__ = ("children", "roots", "credit", "by_p")

    def __init__(self, pool: Pool):
        kids: list[list[int]] = [[] for _ in range(pool.n)]
        roots: list[int] = []
        for v, a in enumerate(pool.parents):
            (roots if a < 0 else kids[a]).append(v)
        self.children = kids
        self.roots = roots
        self.credit = pool.credits
        self.by_p = sorted(range(pool.n), key=pool.probs.__getitem__, reverse=True)


def search_view(pool: Pool) -> _SearchView:
    view = pool._cache.get("search")
    if view is None:
        view = pool._cache["search"] = _SearchView(pool)
    return view


def prefix_view(pool: Pool, sub: Pool, d: int) -> None:
    """Cache on ``sub`` = V≤d of ``pool`` (its ids a prefix 0..m−1) the search view of
    ``sub``, cut from ``pool``'s instead of rebuilt.  O(m).

    In V≤d a node of level d has no child, and a node of level < d keeps all its
    children (their ids are < m when V≤d is a prefix); the lists are shared, never
    mutated.
    """
    full = search_view(pool)
    m, levels = sub.n, pool.levels
    view = _SearchView.__new__(_SearchView)
    view.children = [kids if levels[v] < d else [] for v, kids in enumerate(full.children[:m])]
    view.roots = [v for v in full.roots if v < m]
    view.credit = sub.credits
    view.by_p = [v for v in full.by_p if v < m]
    sub._cache["search"] = view


def _canonical(pool: Pool, nodes: tuple[int, ...], union_bits: int, cost: CostModel,
               lam: float | None) -> list:
    """[score, R̂, F, nodes] of an ascending legal set, in the canonical arithmetic of
    :mod:`solvers.cost` (score: R̂/T̂, or R̂ − λT̂ when ``lam`` is given)."""
    r = 1.0
    probs = pool.probs
    for v in nodes:
        r += probs[v]
    f = pool.root_count + union_bits.bit_count()
    t = cost.b[len(nodes)] + cost.beta * f
    return [r / t if lam is None else r - lam * t, r, f, nodes]


def _beats(q: float, r: float, f: int, nodes: tuple, inc: list) -> bool:
    """§3.3's tie rule on canonical numbers: score, larger R̂, smaller F, fewer nodes,
    lexicographically smaller ids.  ``inc`` = [score, R̂, F, nodes] of the incumbent."""
    if q != inc[0]:
        return q > inc[0]
    if r != inc[1]:
        return r > inc[1]
    if f != inc[2]:
        return f < inc[2]
    if len(nodes) != len(inc[3]):
        return len(nodes) < len(inc[3])
    return nodes < inc[3]


def _prefix_start(pool: Pool, K: int, cost: CostModel, lam: float | None,
                  view: _SearchView) -> list:
    """Best of the root-only set and the K top-p prefixes (EAGLE-3's rule): a cheap start.

    ``lam`` None: best ratio; otherwise best R̂ − λT̂.  Returns [score, R̂, F, nodes].
    O(K) bitmap ORs.
    """
    probs, parents, masks = pool.probs, pool.parents, pool.masks
    b, beta, F0 = cost.b, cost.beta, pool.root_count
    t = b[0] + beta * F0
    root_only = [1.0 / t if lam is None else 1.0 - lam * t, 1.0, F0, ()]
    if K == 0:
        return root_only
    present = 1                     # bit a+1: node a chosen; bit 0: the root
    union, r, s = 0, 1.0, 0
    best_score, best_s, best_union = root_only[0], 0, 0
    picked: list[int] = []
    for v in view.by_p:
        if not (present >> (parents[v] + 1)) & 1:
            continue
        present |= 1 << (v + 1)
        union |= masks[v]
        r += probs[v]
        s += 1
        picked.append(v)
        t = b[s] + beta * (F0 + union.bit_count())
        score = r / t if lam is None else r - lam * t
        if score > best_score:
            best_score, best_s, best_union = score, s, union
        if s == K:
            break
    if best_s == 0:
        return root_only
    # the sums above run in p order: recompute the winner's numbers canonically
    nodes = tuple(sorted(picked[:best_s]))
    cand = _canonical(pool, nodes, best_union, cost, lam)
    return cand if _beats(cand[0], cand[1], cand[2], nodes, root_only) else root_only


def _prefix_incumbent(pool: Pool, K: int, cost: CostModel, lam: float | None) -> Selection:
    """:func:`_prefix_start` as a Selection (the closure's starting point)."""
    _, r, f, nodes = _prefix_start(pool, K, cost, lam, search_view(pool))
    t = cost.b[len(nodes)] + cost.beta * f
    return Selection(nodes, r, f, t, r / t)


def _first_incumbent(pool: Pool, K: int, cost: CostModel, lam: float | None,
                     start: Selection | None, view: _SearchView) -> list:
    """[score, R̂, F, nodes] to start from: the prefix start, or the better of the root-only
    set and ``start`` (a legal set of at most K nodes with canonical numbers)."""
    if start is None or not start.nodes:
        return _prefix_start(pool, K, cost, lam, view)
    # the search evaluates only non-empty sets: the root-only choice competes here
    inc = _canonical(pool, (), 0, cost, lam)
    score = start.ratio if lam is None else start.reward - lam * start.time
    if _beats(score, start.reward, start.union, start.nodes, inc):
        inc = [score, start.reward, start.union, start.nodes]
    return inc


def _selection(cost: CostModel, inc: list, exact: bool = True,
               upper: float | None = None) -> Selection:
    """The Selection of an incumbent [score, R̂, F, nodes]; ``upper`` defaults to its score."""
    nodes, r, f = inc[3], inc[1], inc[2]
    t = cost.b[len(nodes)] + cost.beta * f
    sel = Selection(nodes, r, f, t, r / t)
    object.__setattr__(sel, "upper_bound", inc[0] if upper is None else upper)
    if not exact:
        object.__setattr__(sel, "exact", False)
    return sel


def _branch_and_bound(pool: Pool, K: int, cost: CostModel, lam: float | None,
                      start: Selection | None = None) -> Selection:
    """The search of the module docstring.  ``lam`` None: Eq. 5; else max R̂ − λT̂.

    Both modes test extensions against R̂ − λT̂ >= target: for the ratio, λ is
    the incumbent ratio ρ* and the target 0; for the linear objective, λ is
    fixed and the target is the incumbent's value.  The traversal adds nodes in
    increasing id order and sums R̂ from 1.0 along the path, so every candidate's
    R̂, F and T̂ are already the canonical numbers of :mod:`solvers.cost`: candidates
    are compared exactly, and a Selection is built once, for the winner.
    """
    view = search_view(pool)
    inc = _first_incumbent(pool, K, cost, lam, start, view)
    if K > 0 and pool.n > 0:
        _search(pool, K, cost, lam, view, inc)
    return _selection(cost, inc)


def _exact(pool: Pool, K: int, cost: CostModel, lam: float | None, start: Selection | None,
           time_limit: float | None) -> Selection:
    """What :func:`select_exact` (``lam`` None) and :func:`select_max_linear` run.

    Today's branch and bound for at most ``_FAST_WORK`` work units (one per
    search state, and (ids sorted)/8 per sorted bound; it finishes within them
    on SpecFit-sized pools: at most 35 states on the benchmark's 18-node pools,
    8.5 on average), then, from its incumbent, the closure-bounded search of
    :mod:`solvers.lagrangian`.  Both are exact; the second scales.
    """
    deadline = None if time_limit is None else time.perf_counter() + time_limit
    view = search_view(pool)
    if start is None:
        inc = _prefix_start(pool, K, cost, lam, view)
    else:
        inc = _first_incumbent(pool, K, cost, lam, start, view)
    if K > 0 and pool.n > 0:
        try:
            _search(pool, K, cost, lam, view, inc, _FAST_WORK)
        except _OutOfBudget:
            from solvers.lagrangian import run_from
            return run_from(pool, K, cost, lam, inc, deadline)
    return _selection(cost, inc)


@lru_cache(maxsize=64)
def _smallest_intercepts(b: tuple[float, ...], K: int) -> tuple[float, ...]:
    """bmin[s] = min of b[s + t] over t = 1..K − s, for s < K (b may be non-monotone)."""
    return tuple(min(b[s + 1:K + 1]) for s in range(K))


class _OutOfBudget(Exception):
    """The search did more work than its budget (``_search``)."""


def _search(pool: Pool, K: int, cost: CostModel, lam: float | None, view: _SearchView,
            inc: list, budget: int = sys.maxsize) -> None:
    """Depth-first branch and bound from the incumbent ``inc`` (updated in place).

    ``budget``: raise :class:`_OutOfBudget` once the work (one unit per search state,
    plus (ids sorted)/8 per sorted bound) exceeds it; ``inc`` then holds the best
    set found so far.
    """
    ratio_mode = lam is None
    n = pool.n
    probs, masks, parents = pool.probs, pool.masks, pool.parents
    children, credit = view.children, view.credit
    b, beta, F0 = cost.b, cost.beta, pool.root_count
    bmin = _smallest_intercepts(b, K)
    chosen: list[int] = []
    # the bound's data for the current λ (module docstring): a_v = p_v − λβc_v and, per
    # node, the sum and count of the positive a_v in its subtree
    lam_now: float = inc[0] if lam is None else lam
    lam_beta = lam_now * beta
    target = 0.0 if ratio_mode else inc[0]
    work = 0
    a: list = []
    subpos: list = []
    subcnt: list = []
    exact_gains: dict = {}

    def rebuild():
        nonlocal a, subpos, subcnt, exact_gains
        a = [p - lam_beta * c for p, c in zip(probs, credit, strict=False)]
        subpos = [x if x > 0.0 else 0.0 for x in a]
        subcnt = [1 if x > 0.0 else 0 for x in a]
        for v in range(n - 1, -1, -1):     # children after parents: one backward pass
            u = parents[v]
            if u >= 0 and subcnt[v]:
                subpos[u] += subpos[v]
                subcnt[u] += subcnt[v]
        exact_gains = {}

    def gain(j: int, s: int) -> float:
        # max over t = 1..K−s of (Σ of the t largest a_v over ids >= j) − λ·b[s+t]
        nonlocal work
        key = j * (K + 1) + s
        g = exact_gains.get(key)
        if g is None:
            work += (n - j) >> 3
            ranked = sorted(a[j:], reverse=True)
            acc, g = 0.0, -float("inf")
            for t in range(1, min(len(ranked), K - s) + 1):
                acc += ranked[t - 1]
                x = acc - lam_now * b[s + t]
                if x > g:
                    g = x
            exact_gains[key] = g
        return g

    rebuild()

    def visit(frontier: list[int], union: int, r: float, s: int, F: int, ps: float, pc: int):
        # frontier: ids whose parent is in S ∪ {root}, ascending, all above S's ids.
        # ps, pc: sum and count of the positive a_v over the frontier's subtrees (every
        # node an extension can use), updated as the loop drops a child's subtree.
        # An extension X of S reaches the target only if
        #   R̂(S) − λβF(S) + Σ_{v∈X} a_v − λ·b[|S|+|X|] >= target,
        # bounded by ps − λ·bmin[|S|] (and by the sorted suffix when pc > K − |S|).
        nonlocal lam_now, lam_beta, target, work
        work += 1
        if work > budget:
            raise _OutOfBudget
        s1 = s + 1
        b1 = b[s1]
        room = K - s
        last = len(frontier) - 1
        # floor: the target less the rounding margin; base: what S contributes
        floor = target - _REL_TOL * (1.0 + r + abs(target))
        base = r - lam_beta * F - lam_now * bmin[s]
        for idx, j in enumerate(frontier):
            if base + ps < floor:
                return  # the reachable sets shrink with j: later children cannot either
            if pc > room and r - lam_beta * F + gain(j, s) < floor:
                return
            u2 = union | masks[j]
            f2 = F0 + u2.bit_count()
            r2 = r + probs[j]
            t2 = b1 + beta * f2
            chosen.append(j)
            q = r2 / t2 if ratio_mode else r2 - lam_now * t2
            if q >= inc[0]:
                nodes = tuple(chosen)
                if _beats(q, r2, f2, nodes, inc):
                    inc[0], inc[1], inc[2], inc[3] = q, r2, f2, nodes
                    if ratio_mode:
                        if q > lam_now:
                            lam_now, lam_beta = q, q * beta
                            rebuild()
                            # a changed: recount what the rest of this frontier reaches
                            ps = sum(subpos[v] for v in frontier[idx:])
                            pc = sum(subcnt[v] for v in frontier[idx:])
                    else:
                        target = q
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

    roots = view.roots
    visit(list(roots), 0, 1.0, 0, F0, sum(subpos[v] for v in roots),
          sum(subcnt[v] for v in roots))


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


def _check_lam(lam) -> float:
    try:
        lam_f = float(lam)
    except (TypeError, ValueError):
        raise InvalidInput(f"lam must be a number, got {lam!r}") from None
    if lam_f != lam_f or lam_f in (float("inf"), float("-inf")) or lam_f < 0:
        raise InvalidInput(f"lam = {lam!r}: must be finite and >= 0")
    return lam_f


def enumerate_linear(pool: Pool, K: int, cost: CostModel, lam: float) -> Selection:
    """argmax R̂ − λT̂ over A_K by plain enumeration (reference for the branch and bound)."""
    K = check_K(pool, K, cost)
    lam = _check_lam(lam)
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
    return _branch_and_bound(pool, K, cost, _check_lam(lam))


def select_exact(pool: Pool, K: int, cost: CostModel, *, start=None,
                 time_limit: float | None = None) -> Selection:
    """Eq. 5: the subtree of A_K with the largest R̂/T̂, unique under §3.3's tie rule.

    ``start``: optional node ids of a legal subtree of this pool with at most K
    nodes, used as the first incumbent; it only speeds the search up.
    ``time_limit`` (seconds, optional): where the search is stopped by it, the
    result is its best subtree with ``exact=False`` and ``upper_bound`` a proven
    upper bound on the optimal ratio; otherwise ``exact=True`` and
    ``upper_bound`` is the ratio.  Small pools: today's branch and bound; large
    ones: :mod:`solvers.lagrangian` (``_exact``).
    """
    K = check_K(pool, K, cost)
    limit = None if time_limit is None else check_time_limit(time_limit)
    first = None
    if start is not None:
        first = evaluate(pool, start, cost)
        if len(first.nodes) > K:
            raise InvalidInput(f"start has {len(first.nodes)} nodes, more than K = {K}")
    return _exact(pool, K, cost, None, first, limit)


def select_max_linear(pool: Pool, K: int, cost: CostModel, lam: float, *,
                      time_limit: float | None = None) -> Selection:
    """argmax_{S∈A_K} R̂(S) − λT̂(S) (the throughput-optimal rule S* of §3.3 at λ = λ*).

    Tie rule: value, larger R̂, smaller F, fewer nodes, smaller ids.
    ``time_limit``: as in :func:`select_exact`; ``upper_bound`` bounds the value
    R̂ − λT̂.
    """
    K = check_K(pool, K, cost)
    lam_f = _check_lam(lam)
    return _exact(pool, K, cost, lam_f, None, check_time_limit(time_limit))


def select_marginal(pool: Pool, K: int, cost: CostModel, free, *, lam: float | None = None,
                    start=None, time_limit: float | None = None) -> Selection:
    """Eq. 5 (or, with ``lam``, argmax R̂ − λT̂) for one request of a batched forward.

    ``free``: the (layer, expert) pairs the forward executes anyway — the other
    requests' roots and selections — as a boolean array [L, N] or L per-layer
    collections of expert ids (:meth:`Pool.with_free`).  They do not count in F:
    T̂(S) = b_{|S|} + β·|(E(s) ∪ ⋃_{v∈S} E(v)) \\ free| summed over layers, and the
    returned ``union`` is that marginal F.  The rule is otherwise the same: A_K,
    §3.3's tie rule, ``start`` and ``time_limit`` as in :func:`select_exact`.  Node
    ids are the pool's.  Cost: :meth:`Pool.with_free` (O(L·N + n)) plus one exact
    selection.
    """
    marginal = pool.with_free(free) if isinstance(pool, Pool) else pool
    if lam is None:
        return select_exact(marginal, K, cost, start=start, time_limit=time_limit)
    if start is not None:
        raise InvalidInput("start is only used by the ratio selection (lam=None)")
    return select_max_linear(marginal, K, cost, lam, time_limit=time_limit)

"""Exact subtree selection over A_K (SpecFit Eq. 2, 5; Algorithm 1) and its linear variant.

Three exact methods, all returning the unique winner of §3.3's tie rule:

* :func:`enumerate_ratio` — Algorithm 1: depth-first over every ancestor-closed
  subtree with at most K nodes, nodes added in increasing id order, each only
  when its parent is present, union bitmaps carried from the parent state.
  Visits |A_K| states, O(|A_K|·w) for w-word bitmaps.
* :func:`branch_and_bound_ratio` — the same traversal with pruning (beyond the
  paper).  It starts from the best of the root-only set and the K top-p
  prefixes (EAGLE-3's rule).  Each node v has a *credit* c_v
  (``Pool.credits``): the pairs whose first holder in id order is v.  In the
  traversal every node of S has a smaller id than every node an extension X
  adds, so a pair credited to a node of X has no holder in S and is new, and
  each pair is credited once: ``F(S ∪ X) >= F(S) + Σ_{v∈X} c_v``.  With the
  incumbent ratio ρ*, an extension of j nodes with ids >= i can beat ρ* only
  if ``R̂(S) − ρ*βF(S) + Σ_{j largest} a_v − ρ*b_{|S|+j} >= 0`` with
  a_v = p_v − ρ*β c_v over ids >= i, for some j <= K − |S| (b may be
  non-monotone).  The suffixes shrink as i grows, so the first child that
  fails ends the loop over the rest.  The values are rebuilt whenever ρ*
  rises.  Worst case still O(|A_K|·w); on SpecFit-shaped pools it evaluates
  about 16 subtrees where enumeration evaluates about 290
  (``benchmarks/bench_solvers.py``).
* :func:`select_exact` always uses the branch and bound: it was faster than
  plain enumeration on every pool shape in the benchmark.

:func:`branch_and_bound_linear` / :func:`select_max_linear` run the same
search for max R̂ − λT̂ with λ fixed and the incumbent's value as the target.

Floating point: the search compares fast sums; a candidate within 1e-9
(relative) of the incumbent, or better, is evaluated canonically
(``solvers.cost``) and compared under the full tie rule, and the pruning keeps
a 1e-9 margin, so ties are never lost to rounding.
"""

from __future__ import annotations

from solvers.cost import (CostModel, Selection, better_linear, better_ratio, check_K, evaluate,
                          linear_value, make_selection)
from solvers.errors import InvalidInput
from solvers.pool import Pool


__all__ = ["select_exact", "select_max_linear", "enumerate_ratio", "enumerate_linear",
           "branch_and_bound_ratio", "branch_and_bound_linear", "search_view"]

_REL_TOL = 1e-9


class _SearchView:
    """Per-pool data of the branch and bound (cached on the pool; independent of the cost):
    children[v] (ascending), the root's children, the credits c_v (``Pool.credits``).
    """

    __slots__ = ("children", "roots", "credit")

    def __init__(self, pool: Pool):
        n = pool.n
        kids: list[list[int]] = [[] for _ in range(n)]
        roots: list[int] = []
        for v, a in enumerate(pool.parents):
            (roots if a < 0 else kids[a]).append(v)
        self.children = kids
        self.roots = roots
        self.credit = pool.credits


def search_view(pool: Pool) -> _SearchView:
    view = pool._cache.get("search")
    if view is None:
        view = pool._cache["search"] = _SearchView(pool)
    return view


def _prefix_incumbent(pool: Pool, K: int, cost: CostModel, lam: float | None) -> Selection:
    """Best of the root-only set and the K top-p prefixes (EAGLE-3's rule): a cheap start.

    ``lam`` None: best ratio; otherwise best R̂ − λT̂.  O(K) bitmap ORs.
    """
    best = make_selection(pool, (), 0, cost)
    if K == 0 or pool.n == 0:
        return best
    probs, parents, masks = pool.probs, pool.parents, pool.masks
    b, beta, F0 = cost.b, cost.beta, pool.root_count
    by_p = sorted(range(pool.n), key=probs.__getitem__, reverse=True)  # stable: ties by id
    present = 1                     # bit a+1: node a chosen; bit 0: the root
    union, r, s = 0, 1.0, 0
    best_score = best.ratio if lam is None else best.reward - lam * best.time
    best_present, best_union = 1, 0
    for v in by_p:
        if not (present >> (parents[v] + 1)) & 1:
            continue
        present |= 1 << (v + 1)
        union |= masks[v]
        r += probs[v]
        s += 1
        t = b[s] + beta * (F0 + union.bit_count())
        score = r / t if lam is None else r - lam * t
        if score > best_score:
            best_score, best_present, best_union = score, present, union
        if s == K:
            break
    if best_present == 1:
        return best
    nodes = tuple(v for v in range(pool.n) if (best_present >> (v + 1)) & 1)
    return make_selection(pool, nodes, best_union, cost)


def _branch_and_bound(pool: Pool, K: int, cost: CostModel, lam: float | None,
                      start: Selection | None = None) -> Selection:
    """The search of the module docstring.  ``lam`` None: Eq. 5; else max R̂ − λT̂.

    Both modes test extensions against R̂ − λT̂ >= target: for the ratio, λ is
    the incumbent ratio ρ* and the target 0; for the linear objective, λ is
    fixed and the target is the incumbent's value.
    """
    if start is None or not start.nodes:
        best = _prefix_incumbent(pool, K, cost, lam)
    else:
        # the search evaluates only non-empty sets: the root-only choice competes here
        root_only = make_selection(pool, (), 0, cost)
        wins = better_ratio(start, root_only) if lam is None else better_linear(start, root_only, lam)
        best = start if wins else root_only
    n = pool.n
    if K == 0 or n == 0:
        return best
    ratio_mode = lam is None
    view = search_view(pool)
    probs, masks, children, credit = pool.probs, pool.masks, view.children, view.credit
    b, beta, F0 = cost.b, cost.beta, pool.root_count
    lam0 = best.ratio if ratio_mode else lam
    # st: [incumbent, λ, target, a_v, gain per (j, |S|), sorted a_v per suffix j]
    st = [best, lam0, 0.0 if ratio_mode else best.reward - lam0 * best.time,
          [probs[v] - lam0 * beta * credit[v] for v in range(n)], {}, {}]
    chosen: list[int] = []

    def gain(j: int, s: int) -> float:
        # max over t = 1..K−s of (sum of the t largest a_v over ids >= j) − λ·b[s+t]
        tabs = st[5]
        top = tabs.get(j)
        if top is None:
            top = tabs[j] = sorted(st[3][j:], reverse=True)[:K]
        lam_now = st[1]
        acc, best_gain = 0.0, -float("inf")
        for t in range(1, min(len(top), K - s) + 1):
            acc += top[t - 1]
            g = acc - lam_now * b[s + t]
            if g > best_gain:
                best_gain = g
        st[4][j * (K + 1) + s] = best_gain
        return best_gain

    def visit(frontier: list[int], union: int, r: float, s: int, F: int):
        # frontier: ids whose parent is in S ∪ {root}, ascending, all above S's ids
        room = K - s
        for idx, j in enumerate(frontier):
            lam_now, target = st[1], st[2]
            # can an extension whose smallest new node is j reach the target?
            g = st[4].get(j * (K + 1) + s)
            if g is None:
                g = gain(j, s)
            floor = target - _REL_TOL * (1.0 + r + abs(target))
            if r - lam_now * beta * F + g < floor:
                return  # the suffixes shrink with j: later children cannot either
            u2 = union | masks[j]
            f2 = F0 + u2.bit_count()
            r2 = r + probs[j]
            chosen.append(j)
            if r2 - lam_now * (b[s + 1] + beta * f2) >= floor:
                cand = make_selection(pool, tuple(chosen), u2, cost)
                if (better_ratio(cand, st[0]) if ratio_mode
                        else better_linear(cand, st[0], lam_now)):
                    st[0] = cand
                    if ratio_mode:
                        if cand.ratio > st[1]:
                            st[1] = cand.ratio
                            st[3] = [probs[v] - cand.ratio * beta * credit[v] for v in range(n)]
                            st[4], st[5] = {}, {}
                    else:
                        st[2] = cand.reward - lam_now * cand.time
            if room > 1:
                nxt = children[j] + frontier[idx + 1:]
                if children[j] and idx + 1 < len(frontier):
                    nxt.sort()
                visit(nxt, u2, r2, s + 1, f2)
            chosen.pop()

    visit(list(view.roots), 0, 1.0, 0, F0)
    return st[0]


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


def select_exact(pool: Pool, K: int, cost: CostModel, *, start=None) -> Selection:
    """Eq. 5: the subtree of A_K with the largest R̂/T̂, unique under §3.3's tie rule.

    ``start``: optional node ids of a legal subtree of this pool with at most K
    nodes, used as the first incumbent; it only speeds the search up.
    """
    K = check_K(pool, K, cost)
    first = None
    if start is not None:
        first = evaluate(pool, start, cost)
        if len(first.nodes) > K:
            raise InvalidInput(f"start has {len(first.nodes)} nodes, more than K = {K}")
    return _branch_and_bound(pool, K, cost, None, first)


def select_max_linear(pool: Pool, K: int, cost: CostModel, lam: float) -> Selection:
    """argmax_{S∈A_K} R̂(S) − λT̂(S) (the throughput-optimal rule S* of §3.3 at λ = λ*)."""
    return branch_and_bound_linear(pool, K, cost, lam)

"""The depth-first search of :mod:`solvers.lagrangian`: closure and credit bounds, exchange
dominance, §3.3's tie rule on canonical numbers.

Traversal: that of :mod:`solvers.exact` (nodes added in increasing id order,
each only when its parent is present; every subtree of A_K reached once, in
lexicographic order of its ascending ids).  At a search state S (|S| = s),
the extensions X use the nodes reachable from the children still to try.
With ŵ the flow's modular weights (:mod:`solvers.flowbound`, (*)), A(S) = Σ_S ŵ,
P the sum of the positive ŵ over the reachable nodes and G_j(t) the sum of the
t largest ŵ over the ids >= j (the next child):

    value(S ∪ X) <= 1 − λβF_0 + A(S) + min(P − min_t b̃_{s+t}, max_t G_j(t) − b̃_{s+t}),

b̃_k = λb_k − μk, t = 1..K − s.  Beside it, the credit bound of
:mod:`solvers.exact` from the state's exact value.  A sorted variant is
dropped once it prunes too rarely (less than once in 256 calls for the flow
bound, once in 64 after 16 calls for the credit bound): skipping a bound never
changes the answer.  In the ratio problem λ is the incumbent ratio, and when
it rises the stale ŵ still bound (a larger λ only adds
(λ − λ_0)β|P(S ∪ X)| >= (λ − λ_0)β|P(S)| to the pair costs, which the bound
subtracts).

Exchange dominance (:mod:`solvers.dominance`): a child whose every completion
is beaten by exchanging it for a node skipped earlier is not searched.

Floating point: candidates' R̂, F and T̂ are the canonical numbers of
:mod:`solvers.cost` (R̂ summed from 1.0 along the path), compared exactly under
the full tie rule; the bounds prune with a 10⁻⁹ relative margin.
"""

from __future__ import annotations

import math

import numpy as np

from solvers.canonical import REL_TOL, SearchState, beats, search_view
from solvers.dominance import dominance

__all__ = ["search", "subtree_sums"]

_CLOCK_EVERY = 16            # search states between two looks at the clock and the budget
_FLOW_TRIAL = 256            # the sorted flow bound stays while it prunes 1 call in 256
_CREDIT_TRIAL = 16           # the sorted credit bound: 1 in 64 after 16


def subtree_sums(a: list[float], parents) -> tuple[list[float], list[int]]:
    """Per node, the sum and the count of the positive a_v in its subtree (one backward
    pass: children come after their parents)."""
    pos = [x if x > 0.0 else 0.0 for x in a]
    cnt = [1 if x > 0.0 else 0 for x in a]
    for v in range(len(a) - 1, -1, -1):
        u = parents[v]
        if u >= 0 and cnt[v]:
            pos[u] += pos[v]
            cnt[u] += cnt[v]
    return pos, cnt


class _Bounds:
    """The bounds' data: ŵ (``a``) and the credit values at λ_0 (``ac``) with their
    subtree sums and orders; per λ (rebuilt in place when the incumbent ratio rises):
    b̃ = λb − μk, λb, their suffix minima, and the sorted bounds' caches."""

    def __init__(self, st: SearchState, what: list[float], lam0: float, mu0: float):
        pool, K, cost = st.pool, st.K, st.cost
        self.K, self.mu0, self.b, self.beta, self.F0 = K, mu0, cost.b, cost.beta, pool.root_count
        self.a = what
        self.subpos, self.subcnt = subtree_sums(what, pool.parents)
        self.order = np.argsort(-np.asarray(what), kind="stable").tolist()   # by ŵ, then id
        # the credit bound of solvers.exact (marginal, from the state's own value), at λ_0
        self.ac = [p - lam0 * cost.beta * cv for p, cv in zip(pool.probs, pool.credits,
                                                               strict=True)]
        self.cpos, self.ccnt = subtree_sums(self.ac, pool.parents)
        self.corder = np.argsort(-np.asarray(self.ac), kind="stable").tolist()
        self.gtrial = [0, 0]     # calls, prunes
        self.ctrial = [0, 0]
        self.btil = [0.0] * (K + 1)
        self.blam = [0.0] * (K + 1)
        self.bmin = [0.0] * (K + 1)
        self.blmin = [0.0] * (K + 1)
        self.flat = [False] * max(K, 1)
        self.const = [0.0]
        self.gains: dict[int, float] = {}
        self.cgains: dict[int, float] = {}
        self.rebuild(st.score())

    def rebuild(self, lam: float) -> None:
        K, b, mu0 = self.K, self.b, self.mu0
        btil, blam, bmin, blmin, flat = self.btil, self.blam, self.bmin, self.blmin, self.flat
        for k in range(K + 1):
            btil[k] = lam * b[k] - mu0 * k
            blam[k] = lam * b[k]
        run = runl = top = math.inf
        top = -math.inf
        for k in range(K, 0, -1):
            run = min(run, btil[k])
            bmin[k - 1] = run          # min over sizes k..K, i.e. t >= 1 from s = k − 1
            runl = min(runl, blam[k])
            blmin[k - 1] = runl
            # flat[s]: b̃ constant over sizes s+1..K (the sorted bound then helps only when
            # more positive ŵ are reachable than there is room)
            top = max(top, btil[k])
            flat[k - 1] = top - run <= 1e-12 * (1.0 + abs(top))
        self.const[0] = 1.0 - lam * self.beta * self.F0
        self.gains.clear()
        self.cgains.clear()

    def _sorted(self, j: int, s: int, values: list[float], order: list[int],
                sizes: list[float], floors: list[float]) -> float:
        # max over t = 1..K−s of (the t largest values over ids >= j) − sizes[s + t]
        acc, g, t, room = 0.0, -math.inf, 0, self.K - s
        for v in order:
            if v >= j:
                x = values[v]
                if x <= 0.0 and acc - floors[s + t] <= g:
                    break       # acc only falls from here: no larger size can win
                t += 1
                acc += x
                x = acc - sizes[s + t]
                if x > g:
                    g = x
                if t == room:
                    break
        return g

    def prunes(self, j: int, s: int, room: int, pc: int, qc: int, base: float, own: float,
               floor: float) -> bool:
        """The sorted flow and credit bounds (dropped once they prune too rarely)."""
        gtrial, ctrial, key = self.gtrial, self.ctrial, j * (self.K + 1) + s
        if (not self.flat[s] or pc > room) and gtrial[0] < _FLOW_TRIAL * (1 + gtrial[1]):
            gtrial[0] += 1
            g = self.gains.get(key)
            if g is None:
                g = self.gains[key] = self._sorted(j, s, self.a, self.order, self.btil, self.bmin)
            if base + g < floor:
                gtrial[1] += 1
                return True
        if qc > room and ctrial[0] < _CREDIT_TRIAL * (1 + 4 * ctrial[1]):
            ctrial[0] += 1
            g = self.cgains.get(key)
            if g is None:
                g = self.cgains[key] = self._sorted(j, s, self.ac, self.corder, self.blam,
                                                    self.blmin)
            if own + g < floor:
                ctrial[1] += 1
                return True
        return False


def search(st: SearchState, what: list[float], lam0: float, mu0: float) -> None:
    """Search from ``st.inc`` (updated in place) with the ŵ of a flow at (λ_0, μ_0); returns
    at the end, or with ``st.stopped`` set by the deadline or the budget."""
    bd = _Bounds(st, what, lam0, mu0)
    visit = _make_visit(st, bd, lam0)
    roots = search_view(st.pool).roots
    st.chosen.clear()
    visit(list(roots), 0, 1.0, 0, st.pool.root_count, 0.0, sum(bd.subpos[v] for v in roots),
          sum(bd.subcnt[v] for v in roots), sum(bd.cpos[v] for v in roots),
          sum(bd.ccnt[v] for v in roots), 0, ())


def _improver(st: SearchState, bd: _Bounds, lam: list[float]):
    """improve(q, R̂, F): whether the current set beats the incumbent (then it becomes the
    incumbent, and λ or the target follows it; ``lam`` = [λ, target])."""
    inc, chosen, ratio_mode = st.inc, st.chosen, st.lam is None

    def improve(q: float, r2: float, f2: int) -> bool:
        nodes = tuple(chosen)
        if not beats(q, r2, f2, nodes, inc):
            return False
        inc[0], inc[1], inc[2], inc[3] = q, r2, f2, nodes
        if not ratio_mode:
            lam[1] = q
        elif q > lam[0]:
            lam[0] = q
            bd.rebuild(q)
        return True

    return improve


def _make_visit(st: SearchState, bd: _Bounds, lam0: float):
    pool, K, cost, inc, chosen = st.pool, st.K, st.cost, st.inc, st.chosen
    ratio_mode, parents = st.lam is None, pool.parents
    probs, masks, children = pool.probs, pool.masks, search_view(pool).children
    b, beta, F0 = cost.b, cost.beta, pool.root_count
    a, ac, subpos, subcnt, cpos, ccnt = bd.a, bd.ac, bd.subpos, bd.subcnt, bd.cpos, bd.ccnt
    bmin, blmin, flat, const = bd.bmin, bd.blmin, bd.flat, bd.const
    dom = dominance(pool)
    local, anywhere, leaf, use_dom = dom.local, dom.anywhere, dom.leaf, dom.any
    below, sweep, last_inner = dom.below, dom.sweep, dom.last_inner
    last_kid = [kids[-1] if kids else -1 for kids in children]
    lam = [st.score(), 0.0 if ratio_mode else inc[0]]        # λ now, target
    improve = _improver(st, bd, lam)

    def visit(frontier: list[int], union: int, r: float, s: int, F: int, A: float,
              ps: float, pc: int, qs: float, qc: int, skipped: int, need: tuple) -> None:
        # ps, pc / qs, qc: sum and count of the positive ŵ / credit values reachable;
        # skipped: nodes passed over at earlier states (their parents are in S); need:
        # dominated inner nodes of S that must still get a child (else S loses an exchange)
        st.states += 1
        if not st.states % _CLOCK_EVERY:
            st.look()
        if st.stopped:
            return
        s1, room, last, here = s + 1, K - s, len(frontier) - 1, 0
        b1, try_sorted, lam_now, target = b[s1], not flat[s], lam[0], lam[1]
        floor = target - REL_TOL * (1.0 + r + abs(target))
        # what S contributes, with the stale-λ correction (λ − λ_0)β|P(S)|
        base = const[0] + A - (lam_now - lam0) * beta * (F - F0)
        own = r - lam_now * beta * F           # the credit bound starts from S's value
        due = K + pool.n
        if need:
            if any(below[v] & skipped for v in need):
                return      # a node that needs a child has only dominated descendants
            due = min([last_kid[v] for v in need])
        for idx, j in enumerate(frontier):
            if base + ps - bmin[s] < floor or own + qs - blmin[s] < floor or j > due:
                return      # the reachable sets only shrink with j (past `due`: a need fails)
            nxt_need = tuple([v for v in need if v != parents[j]]) if need else need
            if use_dom:
                if j > last_inner and here & sweep:
                    return          # every later child is a leaf that a skipped node dominates
                if local[j] & here or anywhere[j] & skipped:
                    if leaf[j] or below[j] & (skipped | here):
                        here |= 1 << j      # dominated in every set of this branch (ps, qs,
                        continue            # ... keep j's subtree: they still bound)
                    nxt_need += (j,)        # dominated unless it gets a child
            if (try_sorted or pc > room or qc > room) and \
                    bd.prunes(j, s, room, pc, qc, base, own, floor):
                return
            u2 = union | masks[j]
            f2, r2 = F0 + u2.bit_count(), r + probs[j]
            t2 = b1 + beta * f2
            chosen.append(j)
            q = r2 / t2 if ratio_mode else r2 - lam_now * t2
            if q >= inc[0] and not nxt_need and improve(q, r2, f2):
                lam_now, target = lam
                floor = target - REL_TOL * (1.0 + r + abs(target))
                base = const[0] + A - (lam_now - lam0) * beta * (F - F0)
                own = r - lam_now * beta * F
            aj, cj = a[j], ac[j]
            ps2, pc2 = (ps - aj, pc - 1) if aj > 0.0 else (ps, pc)
            qs2, qc2 = (qs - cj, qc - 1) if cj > 0.0 else (qs, qc)
            kids = children[j]
            if s1 < K and (kids or idx < last):
                nxt = kids + frontier[idx + 1:] if kids else frontier[idx + 1:]
                if kids and idx < last:
                    nxt.sort()
                visit(nxt, u2, r2, s1, f2, A + aj, ps2, pc2, qs2, qc2, skipped | here, nxt_need)
                if st.stopped:
                    chosen.pop()
                    return
            chosen.pop()
            ps, pc = ps2 - subpos[j] + (aj if aj > 0.0 else 0.0), pc2 - subcnt[j] + (aj > 0.0)
            qs, qc = qs2 - cpos[j] + (cj if cj > 0.0 else 0.0), qc2 - ccnt[j] + (cj > 0.0)
            here |= 1 << j

    return visit

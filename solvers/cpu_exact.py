"""Exact selection (Eq. 5 over A_K) when experts are computed on the CPU (:mod:`solvers.cpu_cost`).

    maximise R̂(S) / T(S),  T(S) = b_{|S|} + Σ_{pairs e of the union} max(r_e, g_e·n_e(S))

over ancestor-closed S with |S| <= K, the unique winner of §3.3's tie rule (ratio,
larger R̂, smaller F — the union's CPU pairs —, fewer nodes, smaller ids).

Two paths, one answer:

* *Eq. 4 as a relaxation* (:mod:`solvers.cpu_relax`): T >= T̂ = b + u·F_w on every
  set, each counted expert weighted by its first step.  Where T̂ = T on all of
  A_K (one read time, no expert ever compute-bound)
  :func:`solvers.exact.select_exact`'s whole portfolio (closure bounds, min cuts,
  MILP) answers.  Where two tokens still cost an expert's read time, T̂'s optimum
  is tried first: with one read time, if T = T̂ on it, it is the answer; otherwise
  it starts the search below, whose large branches T̂ bounds
  (:class:`solvers.cpu_relax.BranchBound`).
* The depth-first branch and bound over A_K (ids added in increasing
  order, as Algorithm 1), with the per-pair token counts kept in an array and
  two lower bounds on what an extension X of S adds to T (every a_v below is
  p_v − λ·w_v, and X can reach the target only if R̂(S) − λ·base(S) +
  Σ_X a_v − λ·b_{|S|+|X|} >= target; bounded per state in O(1) by the sum of the
  positive a_v over the reachable subtrees, and by the t largest when more
  than K − |S| are positive — the scheme of :mod:`solvers.exact`):

  - *credits*: base = C(S) (the CPU part of T), w_v = Σ over v's pairs of c(1) =
    max(r, g) where v is the pair's first holder in id order and the root does
    not route to it (no token of S does either, and v is X's first holder),
    else c(2) − c(1), the smallest step of c after the first.  Valid because
    c(n) − c(n − 1) >= c(2) − c(1) for every n >= 2 (c is convex from n = 1 on).
  - *compute*: base = G(S) = Σ_e g_e·n_e(S), w_v = Σ over v's pairs of g_e:
    c(n) >= g·n, and G is additive over tokens.

  The credits bound is SpecFit's credit bound (β·c_v) where experts are
  read-bound; the compute one is the tighter where they are compute-bound.

A time limit counts from the call: where it stops the search, the result is the
best subtree found, ``exact`` False and ``upper_bound`` the smallest λ at which
the root's bound (both bounds, any t <= K nodes, no tree) reaches 0, found by
bisection and raised by a rounding margin — a certified bound on the optimum.

Why not the min-cut closure: c(n) = max(r, g·n) has steps c(1) − c(0) = max(r, g),
then 0 while g·n <= r, then g: they fall, then rise.  Where they rise (an
expert computing two or more tokens past its read time) C(S) is not
submodular (docs/solvers.md gives the three-node counterexample), so
R̂ − λT is not supermodular and max R̂ − λT over closures is no longer one
minimum cut.  Dinkelbach's outer loop needs only a maximiser of R̂ − λT per
state, which this module's linear search is: :func:`cpu_dinkelbach`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

import numpy as np

from solvers.canonical import BRANCH_AND_BOUND, REL_TOL, beats, check_lam, search_view
from solvers.cost import Selection, check_time_limit
from solvers.cpu_cost import (
    CpuCostModel,
    CpuView,
    RoutedPool,
    cpu_evaluate,
    cpu_view,
    forward_tokens,
)
from solvers.cpu_relax import BranchBound, Relaxation, specfit_relaxation
from solvers.dinkelbach import DinkelbachResult, check_iteration, iterate
from solvers.errors import InvalidInput
from solvers.exact import select_exact, select_max_linear

__all__ = ["select_exact_cpu", "select_max_linear_cpu", "select_marginal_cpu", "cpu_dinkelbach"]

_SPECFIT_PATH = True      # SpecFit-equivalent costs answered by select_exact's portfolio
_CHECK_EVERY = 16         # states between two looks at the clock
_RELAX_BRANCHES = True    # Eq. 4's bound on the large branches (cpu_relax.BranchBound)
# pools up to this size whose cost is flat at K (cpu_cost.FlatCost) skip the relaxation: on
# 18- and 32-node EAGLE-shaped pools the search alone was as fast or faster (up to 9x with
# per-layer read times), on 64 nodes it was not (benchmarks/bench_solvers_cpu.py)
_FLAT_SEARCH_NODES = 32


class _Stop(Exception):
    """The deadline passed during the search."""


def _check_K(rpool: RoutedPool, K, cost: CpuCostModel) -> int:
    if isinstance(K, bool) or not isinstance(K, (int, np.integer)):
        raise InvalidInput(f"K must be an integer, got {K!r}")
    K = int(K)
    if K < 0:
        raise InvalidInput(f"K = {K}: the size limit must be >= 0")
    if not isinstance(rpool, RoutedPool):
        raise InvalidInput(f"pool must be a RoutedPool, got {type(rpool).__name__}")
    if not isinstance(cost, CpuCostModel):
        raise InvalidInput(f"cost must be a CpuCostModel, got {type(cost).__name__}")
    cost.rates(rpool.pool.num_layers, rpool.pool.num_experts)     # checks the rates' shapes
    if len(cost.b) < K + 1:
        raise InvalidInput(f"b has {len(cost.b)} intercepts but K = {K} needs {K + 1} "
                           f"(b[0]..b[{K}])")
    return min(K, rpool.n)


def _mostly_read_bound(view: CpuView) -> bool:
    """Whether two tokens on one expert still cost its read time (2g <= r on every pair): the
    relaxation's optimum is then often exact, and its bounds strong; otherwise shared
    experts are compute-bound and trying it first cost more than it saved
    (benchmarks/bench_solvers_cpu.py)."""
    return bool(np.all(2.0 * view.g <= view.r))


def _finish(inc: list, method: str, exact: bool = True, upper: float | None = None) -> Selection:
    score, r, f, nodes, t = inc
    sel = Selection(nodes, r, f, t, r / t)
    attrs = sel.__dict__        # not dataclass fields: set past the frozen __setattr__
    attrs["upper_bound"] = score if upper is None else upper
    attrs["method"] = method
    if not exact:
        attrs["exact"] = False
    return sel


def _canonical(view: CpuView, nodes: tuple[int, ...], lam: float | None) -> list:
    r, f, t = view.terms(nodes)
    return [r / t if lam is None else r - lam * t, r, f, nodes, t]


def _first(view: CpuView, K: int, lam: float | None, start: tuple[int, ...] | None) -> list:
    """The best of the root-only set, the K top-p prefixes (EAGLE-3's rule) and ``start``."""
    inc = _canonical(view, (), lam)
    pool = view.pool
    if K == 0:
        return inc
    flat = _flat(view, K)
    if flat is None:
        counts, r, g = view.start.copy(), view.r, view.g
    present, c, rs, picked, cover = 1, view.c0, 1.0, [], 0
    best_q, best_s = inc[0], 0
    for v in search_view(pool).by_p:
        if not (present >> (pool.parents[v] + 1)) & 1:
            continue
        present |= 1 << (v + 1)
        if flat is None:
            c += view.alone[v] + _push(counts, view.idx[v], r, g)
        else:
            c += flat.gain(cover, flat.masks[v])
            cover |= flat.masks[v]
        rs += pool.probs[v]
        picked.append(v)
        t = view.b[len(picked)] + c
        q = rs / t if lam is None else rs - lam * t
        if q > best_q:
            best_q, best_s = q, len(picked)
        if len(picked) == K:
            break
    for cand_nodes in ((tuple(sorted(picked[:best_s])) if best_s else None), start):
        if cand_nodes:
            cand = _canonical(view, cand_nodes, lam)
            if beats(cand[0], cand[1], cand[2], cand_nodes, inc):
                inc = cand
    return inc


def _push(counts: np.ndarray, idx: np.ndarray, r: np.ndarray, g: np.ndarray) -> float:
    """Add one token to the pairs ``idx``; return the increase of Σ max(r, g·n)."""
    if idx.size == 0:
        return 0.0
    c = counts[idx]
    rr, gg = r[idx], g[idx]
    new = np.maximum(rr, gg * (c + 1))
    old = np.where(c > 0, np.maximum(rr, gg * c), 0.0)
    counts[idx] = c + 1
    return float(new.sum() - old.sum())


def _flat(view: CpuView, K: int):
    """The view's :class:`solvers.cpu_cost.FlatCost` where it holds for sets of up to K nodes, else None."""
    flat = view.flat
    return flat if flat is not None and K <= flat.k_max else None


def _values(view: CpuView, lam: float) -> tuple:
    """Per bound (credits, compute): a_v = p_v − λw_v and the sum and count of the positive
    a_v in each node's subtree."""
    out = []
    parents = view.pool.parents
    for w in (view.credit, view.gamma):
        a = [p - lam * x for p, x in zip(view.pool.probs, w, strict=True)]
        subpos = [x if x > 0.0 else 0.0 for x in a]
        subcnt = [1 if x > 0.0 else 0 for x in a]
        for v in range(len(a) - 1, -1, -1):
            u = parents[v]
            if u >= 0 and subcnt[v]:
                subpos[u] += subpos[v]
                subcnt[u] += subcnt[v]
        out.append((a, subpos, subcnt))
    return tuple(out)


def _sorted_gain(a: list[float], j: int, s: int, room: int, lam: float, b) -> float:
    """max over t = 1..room of (Σ of the t largest a_v over ids >= j) − λ·b[s+t]."""
    ranked = sorted(a[j:], reverse=True)
    acc, best = 0.0, -math.inf
    for t in range(1, min(len(ranked), room) + 1):
        acc += ranked[t - 1]
        best = max(best, acc - lam * b[s + t])
    return best


class _Search:
    """Depth-first branch and bound from the incumbent ``inc`` = [score, R̂, F, nodes, T]
    (updated in place); :meth:`run` raises :class:`_Stop` at the deadline (``inc`` then
    holds the best set found).  ``lam`` None: Eq. 5 (λ the incumbent ratio, target 0);
    else R̂ − λT at that λ (target: the incumbent's value).  ``relaxed``: Eq. 4's bound,
    tried on every branch of at least ``BranchBound.MIN_NODES`` nodes (ratio only)."""

    def __init__(self, view: CpuView, K: int, lam: float | None, inc: list,
                 deadline: float | None, relaxed: BranchBound | None):
        self.view, self.K, self.inc, self.deadline = view, K, inc, deadline
        self.ratio_mode, self.fixed_lam = lam is None, lam
        self.relaxed = relaxed if lam is None else None
        self.sv = search_view(view.pool)
        self.bmin = [min(view.b[s + 1:K + 1]) for s in range(K)]
        self.flat = _flat(view, K)
        # where the cost is flat every expert costs its read time, so G(S) = Σ g·n stays under C(S)
        # and the compute bound seldom prunes (on the GSM8K trace's pools under cpu-layers:36 it
        # pruned no state and took 7% of the time): the credits bound alone there
        self.compute_bound = self.flat is None
        # tokens per priced pair (FlatCost keeps bitmaps instead)
        self.counts = view.start.copy() if self.flat is None else np.zeros(0, dtype=np.int64)
        self.lam = inc[0] if lam is None else lam
        self.target = 0.0 if lam is None else inc[0]
        self.vals = _values(view, self.lam)
        self.gains: dict = {}
        self.chosen: list[int] = []
        self.work, self.check = 0, _CHECK_EVERY

    def run(self) -> None:
        roots = self.sv.roots
        self.visit(list(roots), 0, 1.0, 0, self.view.c0, self.view.gamma0, *self.sums(roots))

    def sums(self, ids) -> tuple[float, int, float, int]:
        """Sum and count of the positive a_v (each bound) over the subtrees of ``ids``."""
        (_, spA, scA), (_, spB, scB) = self.vals
        return (sum([spA[v] for v in ids]), sum([scA[v] for v in ids]),
                sum([spB[v] for v in ids]), sum([scB[v] for v in ids]))

    def levels(self, rs: float, C: float, G: float, s: int) -> tuple[float, float, float]:
        """(floor, baseA, baseB) of a state: the target less the rounding margin, and what S
        contributes to each bound at the current λ."""
        lam, b1 = self.lam, self.view.b[s + 1]
        floor = self.target - REL_TOL * (1.0 + rs + abs(self.target) + lam * (C + b1))
        return floor, rs - lam * (C + self.bmin[s]), rs - lam * (G + self.bmin[s])

    def sorted_cut(self, rs: float, C: float, G: float, s: int, j: int, pcA: int, pcB: int,
                   floor: float) -> bool:
        """The sorted bounds (the t largest a_v over ids >= j) where more than K − |S| are
        positive: True when they prune the rest of the state."""
        room = self.K - s
        for bound, count, base in ((0, pcA, C), (1, pcB, G)):
            if bound == 1 and not self.compute_bound:
                continue
            if count > room:
                key = (bound, j, s)
                g = self.gains.get(key)
                if g is None:
                    g = self.gains[key] = _sorted_gain(self.vals[bound][0], j, s, room,
                                                       self.lam, self.view.b)
                if rs - self.lam * base + g < floor:
                    return True
        return False

    def relaxed_cut(self, rest: list[int], rs: float, s: int) -> bool:
        """Eq. 4's bound on the branch of ``rest``: True when it prunes the rest."""
        rel = self.relaxed
        if rel is None or sum([rel.size[v] for v in rest]) < rel.MIN_NODES:
            return False
        if rel.value * (1.0 + 1e-9) >= self.inc[0] and rel.holds_witness(self.chosen, rest):
            return False        # its bound is at least the witness's: no need to compute it
        cap = rel.bound(self.chosen, rest, rs, self.K - s, self.deadline)
        return cap * (1.0 + 1e-9) < self.inc[0]

    def offer(self, r2: float, t2: float) -> bool:
        """Compare the current set (priced r2, t2 on the way) with the incumbent, canonically
        when it comes near; True when the incumbent rose and moved λ or the target."""
        inc = self.inc
        q = r2 / t2 if self.ratio_mode else r2 - self.lam * t2
        if q < inc[0] - REL_TOL * (abs(inc[0]) + (0.0 if self.ratio_mode else 1.0 + r2)):
            return False
        nodes = tuple(self.chosen)
        cand = _canonical(self.view, nodes, self.fixed_lam)
        if not beats(cand[0], cand[1], cand[2], nodes, inc):
            return False
        inc[:] = cand
        if not self.ratio_mode:
            self.target = cand[0]
        elif cand[0] > self.lam:
            self.lam = cand[0]
            self.vals = _values(self.view, self.lam)
            self.gains.clear()
        return True

    def visit(self, frontier: list[int], cover: int, rs: float, s: int, C: float, G: float,
              psA: float, pcA: int, psB: float, pcB: int) -> None:
        # frontier: ids whose parent is in S ∪ {root}, ascending, all above S's ids; psX,
        # pcX: sum and count of the positive a_v (bound X) over the frontier's subtrees;
        # cover: S's unpaid pairs where the view is flat (its counts are not kept then)
        self.work += 1
        if self.deadline is not None and self.work > self.check:
            if time.perf_counter() > self.deadline:
                raise _Stop
            self.check = self.work + _CHECK_EVERY
        view, counts, chosen, flat, compute = self.view, self.counts, self.chosen, self.flat, self.compute_bound
        s1, b1, last = s + 1, view.b[s + 1], len(frontier) - 1
        floor, baseA, baseB = self.levels(rs, C, G, s)
        (aA, spA, scA), (aB, spB, scB) = self.vals
        for pos, j in enumerate(frontier):
            if baseA + psA < floor or (compute and baseB + psB < floor):
                return      # the reachable sets shrink with j: later children cannot either
            if (pcA > self.K - s or (compute and pcB > self.K - s)) and \
                    self.sorted_cut(rs, C, G, s, j, pcA, pcB, floor):
                return
            if self.relaxed is not None and self.relaxed_cut(frontier[pos:], rs, s):
                return
            r2 = rs + view.pool.probs[j]
            if flat is None:
                C2, cover2 = C + view.alone[j] + _push(counts, view.idx[j], view.r, view.g), cover
            else:
                mask = flat.masks[j]        # FlatCost.gain, inlined: the search's innermost step
                new = mask & ~cover
                C2 = C + sum([r * (new & m).bit_count() for r, m in flat.classes]) if new else C
                cover2 = cover | mask
            G2 = G + view.gamma[j]
            chosen.append(j)
            if self.offer(r2, b1 + C2):
                (aA, spA, scA), (aB, spB, scB) = self.vals
                psA, pcA, psB, pcB = self.sums(frontier[pos:])
                floor, baseA, baseB = self.levels(rs, C, G, s)
            xA, xB = aA[j], aB[j]
            psA2, pcA2 = (psA - xA, pcA - 1) if xA > 0.0 else (psA, pcA)
            psB2, pcB2 = (psB - xB, pcB - 1) if xB > 0.0 else (psB, pcB)
            lam, target = self.lam, self.target
            if s1 < self.K:
                kids = self.sv.children[j]
                if kids:
                    nxt = kids + frontier[pos + 1:]
                    if pos < last:
                        nxt.sort()
                    self.visit(nxt, cover2, r2, s1, C2, G2, psA2, pcA2, psB2, pcB2)
                elif pos < last:
                    self.visit(frontier[pos + 1:], cover2, r2, s1, C2, G2, psA2, pcA2, psB2, pcB2)
            chosen.pop()
            if flat is None:
                counts[view.idx[j]] -= 1
            if self.lam != lam or self.target != target:
                # a deeper state raised the incumbent: bound the rest with its values
                (aA, spA, scA), (aB, spB, scB) = self.vals
                psA, pcA, psB, pcB = self.sums(frontier[pos + 1:])
                floor, baseA, baseB = self.levels(rs, C, G, s)
                continue
            # drop j's subtree
            psA = psA2 - spA[j] + (xA if xA > 0.0 else 0.0)
            pcA = pcA2 - scA[j] + (xA > 0.0)
            psB = psB2 - spB[j] + (xB if xB > 0.0 else 0.0)
            pcB = pcB2 - scB[j] + (xB > 0.0)


def _root_bound(view: CpuView, K: int, lam: float) -> float:
    """An upper bound on max over A_K of R̂ − λT, ignoring the tree: per bound, the best
    t <= K nodes by a_v = p_v − λw_v; the smaller of the two."""
    p = np.asarray(view.pool.probs, dtype=np.float64)
    b = np.asarray(view.b[:K + 1])
    out = math.inf
    for base, w in ((view.c0, view.credit), (view.gamma0, view.gamma)):
        a = np.sort(p - lam * np.asarray(w, dtype=np.float64))[::-1][:K]
        tops = np.concatenate([[0.0], np.cumsum(a)])
        out = min(out, 1.0 - lam * base + float(np.max(tops - lam * b[:tops.size])))
    return out


def _upper(view: CpuView, K: int, lam: float | None, inc: list) -> float:
    """A certified upper bound on the optimum (ratio, or R̂ − λT at ``lam``)."""
    margin = 1e-9
    if lam is not None:
        x = _root_bound(view, K, lam)
        return max(inc[0], x + margin * (1.0 + abs(x) + lam * max(view.b)))
    lo = inc[0]
    if _root_bound(view, K, lo) <= 0.0:
        return lo
    # no ratio exceeds (1 + Σp) / min b: the bound is <= 0 there
    hi = (1.0 + sum(view.pool.probs)) / min(view.b[:K + 1])
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if _root_bound(view, K, mid) <= 0.0:
            hi = mid
        else:
            lo = mid
    return max(inc[0], hi * (1.0 + margin))


def _solve(rpool: RoutedPool, view: CpuView, K: int, lam: float | None,
           start: tuple[int, ...] | None, deadline: float | None,
           relax: Relaxation | None = None, value: float = -math.inf) -> Selection:
    """The branch and bound from the best first incumbent; ``relax``: Eq. 4's relaxation,
    where it exists (the large branches are then bounded by it), ``start`` its optimum and
    ``value`` that optimum's ratio under T̂."""
    inc = _first(view, K, lam, start)
    if K > 0 and rpool.n > 0:
        relaxed = None
        if relax is not None and _RELAX_BRANCHES:
            relaxed = BranchBound(rpool, view, relax, start or (), value)
        try:
            _Search(view, K, lam, inc, deadline, relaxed).run()
        except _Stop:
            return _finish(inc, BRANCH_AND_BOUND, False, _upper(view, K, lam, inc))
    return _finish(inc, BRANCH_AND_BOUND)


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else max(deadline - time.perf_counter(), 1e-9)


def select_exact_cpu(rpool: RoutedPool, K: int, cost: CpuCostModel, *, start=None,
                     time_limit: float | None = None) -> Selection:
    """Eq. 5 under the CPU-expert cost: the subtree of A_K with the largest R̂/T, unique under
    §3.3's tie rule (F: the union's CPU pairs).  ``start`` (a legal set of at most K nodes)
    only speeds the search; ``time_limit`` (seconds from this call) as
    :func:`solvers.select_exact`'s: where it stops the search, ``exact`` is False and
    ``upper_bound`` a certified bound on the optimal ratio."""
    t0 = time.perf_counter()
    K = _check_K(rpool, K, cost)
    return _ratio(rpool, K, cost, None, start, _deadline(t0, time_limit))


def select_max_linear_cpu(rpool: RoutedPool, K: int, cost: CpuCostModel, lam: float, *,
                          time_limit: float | None = None) -> Selection:
    """argmax over A_K of R̂ − λT under the CPU-expert cost (tie rule: value, larger R̂,
    smaller F, fewer nodes, smaller ids); ``upper_bound`` bounds the value."""
    t0 = time.perf_counter()
    K = _check_K(rpool, K, cost)
    return _linear(rpool, K, cost, None, check_lam(lam), _deadline(t0, time_limit))


def select_marginal_cpu(rpool: RoutedPool, K: int, cost: CpuCostModel, tokens, *,
                        lam: float | None = None, start=None,
                        time_limit: float | None = None) -> Selection:
    """Eq. 5 (or, with ``lam``, argmax R̂ − λT) for one request of a batched forward.

    ``tokens``: the tokens the rest of the forward (the other requests' roots and
    selections) routes to each expert, ints >= 0 [L, N].  An expert e they route m_e
    tokens to costs this request c(m_e + n_e) − c(m_e) (each difference rounded once,
    summed by ``math.fsum``), and counts in F only when m_e = 0 (as the free pairs of
    :func:`solvers.select_marginal`).  Pass intercepts for the batch's forward.  Otherwise
    as :func:`select_exact_cpu` / :func:`select_max_linear_cpu`; all zeros is the same.
    """
    t0 = time.perf_counter()
    K = _check_K(rpool, K, cost)
    base = forward_tokens(rpool, tokens)
    if lam is None:
        return _ratio(rpool, K, cost, base, start, _deadline(t0, time_limit))
    if start is not None:
        raise InvalidInput("start is only used by the ratio selection (lam=None)")
    return _linear(rpool, K, cost, base, check_lam(lam), _deadline(t0, time_limit))


def _deadline(t0: float, time_limit) -> float | None:
    limit = check_time_limit(time_limit)
    return None if limit is None else t0 + limit


def _ratio(rpool: RoutedPool, K: int, cost: CpuCostModel, tokens: np.ndarray | None, start,
           deadline: float | None) -> Selection:
    first = None
    if start is not None:
        first = cpu_evaluate(rpool, start, cost).nodes
        if len(first) > K:
            raise InvalidInput(f"start has {len(first)} nodes, more than K = {K}")
    view = cpu_view(rpool, cost, tokens)
    if rpool.n <= _FLAT_SEARCH_NODES and _flat(view, K) is not None:
        return _solve(rpool, view, K, None, first, deadline)
    relax = specfit_relaxation(rpool, K, cost, tokens) if _SPECFIT_PATH else None
    if relax is None or not (relax.equivalent or _mostly_read_bound(view)):
        return _solve(rpool, view, K, None, first, deadline)
    sel = select_exact(relax.pool, K, relax.cost, start=first or None,
                       time_limit=_left(deadline))
    if relax.equivalent:
        return sel
    if not relax.weighted and sel.exact and view.terms(sel.nodes)[2] == sel.time:
        # T >= T̂ on every set and equal on this one: its ratio is the relaxation's optimum,
        # and every set that ties with it ties under Eq. 4 too (the same F), where it wins
        # the tie rule
        return sel
    # the relaxation's optimum starts the search, and its bound caps a stopped one's
    cap = sel.upper_bound if sel.upper_bound is not None else math.inf
    out = _solve(rpool, view, K, None, sel.nodes, deadline, relax,
                 sel.ratio if sel.exact else -math.inf)
    if not out.exact and out.upper_bound is not None and cap < out.upper_bound:
        out.__dict__["upper_bound"] = max(cap, out.ratio)
    return out


def _linear(rpool: RoutedPool, K: int, cost: CpuCostModel, tokens: np.ndarray | None,
            lam: float, deadline: float | None) -> Selection:
    relax = specfit_relaxation(rpool, K, cost, tokens) if _SPECFIT_PATH else None
    if relax is not None and relax.equivalent:
        return select_max_linear(relax.pool, K, relax.cost, lam, time_limit=_left(deadline))
    return _solve(rpool, cpu_view(rpool, cost, tokens), K, lam, None, deadline)


def cpu_dinkelbach(states: Sequence, *, tol: float = 1e-12,
                   max_iter: int = 100) -> DinkelbachResult:
    """λ* = max over rules of E[R̂]/E[T] across ``states`` (``(RoutedPool, K, CpuCostModel)``
    tuples) under the CPU-expert cost: :func:`solvers.dinkelbach`'s iteration (App. A.1)
    with :func:`select_max_linear_cpu` as the per-state oracle; ``error_bound`` =
    h(λ_k) / T_floor, T_floor the mean of min b + the root's CPU time."""
    check_iteration(tol, max_iter)
    states = list(states)
    if not states:
        raise InvalidInput("cpu_dinkelbach needs at least one state")
    for i, stt in enumerate(states):
        if not (isinstance(stt, tuple) and len(stt) == 3 and isinstance(stt[0], RoutedPool)
                and isinstance(stt[2], CpuCostModel)):
            raise InvalidInput(f"state {i} must be a (RoutedPool, K, CpuCostModel) tuple")
    t_floor = sum(min(c.b) + cpu_view(p, c).c0 for p, _K, c in states) / len(states)
    start = [cpu_evaluate(p, (), c) for p, _K, c in states]
    return iterate(start, lambda lam: [select_max_linear_cpu(p, K, c, lam) for p, K, c in states], t_floor,
                   tol=tol, max_iter=max_iter)


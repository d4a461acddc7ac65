"""Selection without the size limit by minimum cut (SpecFit Prop. 2, App. A.3).

For λ >= 0, max over ancestor-closed S of R̂(S) − λT̂(S) is a maximum-weight
closure problem (Picard 1976).  Network: source, sink, one vertex per pool
node, one per (layer, expert) pair that some node routes to and none of its
ancestors (nor the root) does; a node with an ancestor routing to a pair
reaches it through the parent arc already, so only these pairs need arcs.
Node v has weight w_v = p_v − λa (arc source→v of w_v if positive, v→sink of
−w_v if negative), every pair costs λβ (pair→sink), and infinite arcs go
v→parent(v) and v→its pairs.  The source side of a minimum cut is an optimal
subtree.

Intercepts must be affine in |S|, b_j = b_0 + a·j with a >= 0 (Prop. 2 needs
it): :func:`affine_parts` checks ``cost.b`` against the line through b[0] and
b[1] (a = 0 when only b[0] is given) and the line extends b to any size.  Use
:func:`affine_approximation` to replace fitted, non-affine intercepts by their
least-squares line first.

Max flow: OR-Tools ``SimpleMaxFlow`` takes int64 capacities only, so
capacities are scaled so that their total is 2^52 and rounded explicitly; the
objective of the returned set is then evaluated in floating point.  The
returned set is optimal for the rounded network, hence within
(number of arcs)·total/2^52 of the true optimum.  Among optimal closures
:func:`max_closure` returns the minimal one (the source side reachable in the
residual graph); :func:`largest_ratio` returns the better, under §3.3's tie
rule, of the minimal and the maximal optimal closure at λ = ρ.

Complexity: one max flow on n + P vertices and n + P + Σ_v |new pairs of v|
arcs per λ; :func:`largest_ratio` needs a few (Dinkelbach), the breakpoints
at most 2n + 1.
"""

from __future__ import annotations

import math

import numpy as np

from solvers.canonical import prefix_incumbent
from solvers.cost import CostModel, Selection, better_ratio
from solvers.errors import InvalidInput
from solvers.maxflow import simple_max_flow
from solvers.pool import Pool

__all__ = ["max_closure", "largest_ratio", "affine_parts", "affine_approximation",
           "ClosureNetwork", "closure_network"]

_TOTAL_SCALE = float(2 ** 52)
_INF = 2 ** 60
_LAM_CAP = 1e250      # breakpoints beyond it are not reported


def affine_parts(cost: CostModel) -> tuple[float, float]:
    """(b_0, a) with b_j = b_0 + a·j, or InvalidInput when ``cost.b`` is not affine."""
    if not isinstance(cost, CostModel):
        raise InvalidInput(f"cost must be a CostModel, got {type(cost).__name__}")
    b = cost.b
    b0 = b[0]
    a = b[1] - b[0] if len(b) > 1 else 0.0
    for j, bj in enumerate(b):
        if abs(bj - (b0 + a * j)) > 1e-9 * max(1.0, abs(bj)):
            raise InvalidInput(f"the closure needs intercepts affine in |S| (Prop. 2): "
                               f"b[{j}] = {bj} "
                               f"is off the line b[0] + j·(b[1] − b[0]); see affine_approximation")
    if a < 0:
        raise InvalidInput(f"the closure needs nondecreasing intercepts: "
                           f"slope b[1] − b[0] = {a} < 0")
    return b0, a


def affine_approximation(cost: CostModel, size: int) -> CostModel:
    """The least-squares line through ``cost.b`` (slope clipped at 0), extended to b[0..size]."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise InvalidInput(f"size must be a non-negative integer, got {size!r}")
    b = np.asarray(cost.b)
    j = np.arange(len(b), dtype=float)
    if len(b) > 1:
        slope, b0 = np.polyfit(j, b, 1)
    else:
        slope, b0 = 0.0, float(b[0])
    if slope < 0:
        slope, b0 = 0.0, float(b.mean())
    if b0 <= 0:
        raise InvalidInput("the fitted line has a non-positive intercept b[0]")
    return CostModel([b0 + slope * k for k in range(size + 1)], cost.beta)


class ClosureNetwork:
    """The min-cut network of one pool and cost, reusable across λ (capacities are reset)."""

    def __init__(self, pool: Pool, cost: CostModel):
        if not isinstance(pool, Pool):
            raise InvalidInput(f"pool must be a Pool, got {type(pool).__name__}")
        self.pool, self.cost = pool, cost
        self.b0, self.slope = affine_parts(cost)
        n = pool.n
        self.n = n
        # pairs each node adds beyond its ancestors' (the root's are not in the masks)
        masks = pool.masks
        nb = max(1, (max(masks, default=0).bit_length() + 7) >> 3)
        above = [0] * n
        fresh = []
        for v, a in enumerate(pool.parents):
            if a >= 0:
                above[v] = above[a] | masks[a]
            fresh.append(masks[v] & ~above[v])
        raw = np.frombuffer(b"".join(m.to_bytes(nb, "little") for m in fresh), dtype=np.uint8)
        # expand only the non-zero bytes into bits: the fresh pairs are sparse
        nz = np.flatnonzero(raw != 0)
        bits = np.unpackbits(raw[nz], bitorder="little")           # 0/1 per bit
        hit = np.flatnonzero(bits.view(bool))    # 1-D: far faster than a 2-D nonzero
        flat_bit = nz[hit >> 3] * 8 + (hit & 7)                    # = node * 8nb + pair bit
        node_idx = flat_bit // (8 * nb)
        pair_bit = flat_bit % (8 * nb)
        seen = np.zeros(8 * nb + 1, dtype=bool)
        seen[pair_bit] = True
        pairs = np.flatnonzero(seen)
        renumber = np.cumsum(seen) - 1
        pair_idx = renumber[pair_bit]
        P = pairs.size
        self.P = P
        src, snk = 0, 1
        node_vertex = 2 + np.arange(n, dtype=np.int32)
        pair_vertex = 2 + n + np.arange(P, dtype=np.int32)
        par = np.asarray(pool.parents, dtype=np.int32)
        has_parent = par >= 0
        tails = np.concatenate([np.full(n, src, np.int32), node_vertex, pair_vertex,
                                node_vertex[has_parent], node_vertex[node_idx]])
        heads = np.concatenate([node_vertex, np.full(n + P, snk, np.int32),
                                2 + par[has_parent], pair_vertex[pair_idx]])
        caps = np.zeros(tails.size, dtype=np.int64)
        caps[2 * n + P:] = _INF
        self.flow = simple_max_flow()
        self.flow.add_arcs_with_capacity(tails.astype(np.int32), heads.astype(np.int32), caps)
        self.variable_arcs = np.arange(2 * n + P, dtype=np.int32)
        self.arc_node, self.arc_pair = node_idx, pair_idx      # node -> fresh pair arcs
        self.parent_array = par
        self.probs = np.asarray(pool.probs, dtype=np.float64)
        self._trivial = True        # no cut solved yet

    def solve(self, lam: float) -> tuple[int, ...]:
        """Node ids of the minimal maximizer of R̂ − λT̂ (no size limit)."""
        n, P = self.n, self.P
        self._trivial = True
        if n == 0:
            return ()
        w = self.probs - lam * self.slope
        pair_cost = lam * self.cost.beta
        total = float(np.abs(w).sum()) + pair_cost * P
        if not math.isfinite(total):
            raise InvalidInput(f"lam = {lam!r} is too large for this cost model")
        if total < 1e-290:       # every weight is (numerically) zero: the empty set is optimal
            self._trivial = True
            return ()
        scale = _TOTAL_SCALE / total
        caps = np.empty(2 * n + P, dtype=np.int64)
        caps[:n] = np.rint(np.maximum(w, 0.0) * scale)
        caps[n:2 * n] = np.rint(np.maximum(-w, 0.0) * scale)
        if P:
            caps[2 * n:] = int(round(pair_cost * scale))
        self.flow.set_arcs_capacity(self.variable_arcs, caps)
        status = self.flow.solve(0, 1)
        if status != self.flow.OPTIMAL:
            raise RuntimeError(f"max flow failed with status {status}")
        self._trivial = False
        side = np.asarray(self.flow.get_source_side_min_cut(), dtype=np.int64)
        side = side[(side >= 2) & (side < 2 + n)] - 2
        return tuple(sorted(int(v) for v in side))

    def maximal_side(self) -> tuple[int, ...]:
        """The largest optimal closure of the last :meth:`solve` (complement of the sink side)."""
        if self.n == 0:
            return ()
        if self._trivial:
            return ()
        sink = np.asarray(self.flow.get_sink_side_min_cut(), dtype=np.int64)
        inside = np.ones(self.n, dtype=bool)
        inside[sink[(sink >= 2) & (sink < 2 + self.n)] - 2] = False
        return tuple(int(v) for v in np.flatnonzero(inside))

    def selection(self, nodes: tuple[int, ...]) -> Selection:
        """R̂, F, T̂ (affine intercepts) of ``nodes`` in floating point."""
        pool = self.pool
        r = 1.0
        union = 0
        for v in nodes:
            r += pool.probs[v]
            union |= pool.masks[v]
        f = pool.root_count + union.bit_count()
        k = len(nodes)
        bk = self.cost.b[k] if k < len(self.cost.b) else self.b0 + self.slope * k
        t = bk + self.cost.beta * f
        return Selection(tuple(nodes), r, f, t, r / t)


def _check_lam(lam) -> float:
    try:
        x = float(lam)
    except (TypeError, ValueError):
        raise InvalidInput(f"lam must be a number, got {lam!r}") from None
    if not math.isfinite(x) or x < 0:
        raise InvalidInput(f"lam = {lam!r}: must be finite and >= 0")
    return x


def max_closure(pool: Pool, lam: float, cost: CostModel) -> Selection:
    """max R̂(S) − λT̂(S) over ancestor-closed S of any size, by one minimum cut (App. A.3)."""
    lam = _check_lam(lam)
    net = closure_network(pool, cost)
    return net.selection(net.solve(lam))


def closure_network(pool: Pool, cost: CostModel) -> ClosureNetwork:
    """The network of ``pool`` and ``cost``, cached on the pool (Dinkelbach calls it per λ)."""
    if not isinstance(pool, Pool):
        raise InvalidInput(f"pool must be a Pool, got {type(pool).__name__}")
    key = ("closure", cost.b, cost.beta) if isinstance(cost, CostModel) else None
    net = pool._cache.get(key) if key else None
    if net is None:
        net = ClosureNetwork(pool, cost)
        pool._cache[key] = net
    return net


def largest_ratio(pool: Pool, cost: CostModel, *,
                  breakpoints: bool = True) -> tuple[Selection, list[float]]:
    """Unconstrained largest R̂/T̂ and all breakpoints in λ of max_S R̂ − λT̂.

    The ratio by Dinkelbach's iteration on min cuts (each step raises the
    ratio; finite).  Breakpoints by the Eisner–Severance recursion: between
    the optimal sets at two λ, cut at the λ where their lines cross; a new set
    splits the interval, none marks a breakpoint.  The optimal sets are nested
    (Gallo et al. 1989), so there are at most n breakpoints and 2n + 1 cuts.
    Returns the selection and the breakpoints, ascending (``breakpoints=False``:
    skip them and return an empty list; the ratio alone needs a few cuts).
    """
    net = closure_network(pool, cost)
    best = net.selection(())
    # start from the best top-p prefix: usually close to the optimum, so few cuts follow
    k = min(pool.n, len(cost.b) - 1)
    if k:
        start = prefix_incumbent(pool, k, cost, None)
        if better_ratio(start, best):
            best = start
    lam = best.ratio
    for _ in range(4 * pool.n + 8):
        cand = net.selection(net.solve(lam))
        if cand.ratio <= lam * (1.0 + 1e-15):
            break
        best, lam = cand, cand.ratio
    # the maximal optimal closure at λ = ρ has the largest R̂ among sets of ratio ρ
    widest = net.selection(net.maximal_side())
    if better_ratio(widest, best):
        best = widest
    return best, (_breakpoints(net) if breakpoints else [])


def _cut(net: ClosureNetwork, lam: float, free: np.ndarray, arc_node: np.ndarray,
         arc_pair: np.ndarray) -> np.ndarray:
    """Minimal maximizer of R̂ − λT̂ restricted to the ``free`` nodes (sorted ids).

    Nodes outside ``free`` are fixed: the ones of the smaller set S_hi are in
    (their pairs are paid for and absent from ``arc_pair``), the others out.
    Returns a boolean mask over ``free``.
    """
    f = free.size
    local_pairs, pair_local = np.unique(arc_pair, return_inverse=True)
    P = local_pairs.size
    par = net.parent_array[free]
    par_local = np.searchsorted(free, par)
    inside = (par >= 0) & (par_local < f)
    inside[inside] = free[par_local[inside]] == par[inside]
    node_local = np.searchsorted(free, arc_node)
    w = net.probs[free] - lam * net.slope
    pair_cost = lam * net.cost.beta
    total = float(np.abs(w).sum()) + pair_cost * P
    if not total >= 1e-290:
        return np.zeros(f, dtype=bool)
    scale = _TOTAL_SCALE / total
    nodes_v = 2 + np.arange(f, dtype=np.int32)
    pairs_v = 2 + f + np.arange(P, dtype=np.int32)
    tails = np.concatenate([np.zeros(f, np.int32), nodes_v, pairs_v, nodes_v[inside],
                            nodes_v[node_local]])
    heads = np.concatenate([nodes_v, np.ones(f + P, np.int32),
                            2 + par_local[inside].astype(np.int32),
                            pairs_v[pair_local]])
    caps = np.full(tails.size, _INF, dtype=np.int64)
    caps[:f] = np.rint(np.maximum(w, 0.0) * scale)
    caps[f:2 * f] = np.rint(np.maximum(-w, 0.0) * scale)
    caps[2 * f:2 * f + P] = int(round(pair_cost * scale)) if P else 0
    flow = simple_max_flow()
    flow.add_arcs_with_capacity(tails, heads, caps)
    if flow.solve(0, 1) != flow.OPTIMAL:
        raise RuntimeError("max flow failed")
    side = np.asarray(flow.get_source_side_min_cut(), dtype=np.int64)
    chosen = np.zeros(f, dtype=bool)
    side = side[(side >= 2) & (side < 2 + f)] - 2
    chosen[side] = True
    return chosen


def _breakpoints(net: ClosureNetwork) -> list[float]:
    """All breakpoints of λ ↦ max_S R̂ − λT̂, by Eisner–Severance with contraction.

    Between λ_a < λ_b with minimal optimal sets S_a ⊇ S_b, every minimal optimal
    set lies between them (they are nested), so each cut only decides the
    nodes of S_a \\ S_b, with S_b's pairs already paid: the networks shrink as
    the recursion deepens.  Lines R̂ − λT̂ are evaluated in floating point.
    """
    n = net.n
    unit = min([x for x in (net.slope, net.cost.beta) if x > 0], default=0.0)
    if n == 0 or unit == 0.0:
        return []
    # above every breakpoint (capped where β or a is so small that it would overflow)
    lam_hi = min((1.0 + float(net.probs.sum())) / unit + 1.0, _LAM_CAP)
    lo_nodes, hi_nodes = net.solve(0.0), net.solve(lam_hi)
    lo, hi = net.selection(lo_nodes), net.selection(hi_nodes)
    in_lo = np.zeros(n, dtype=bool)
    in_lo[np.asarray(lo_nodes, dtype=np.intp)] = True
    in_hi = np.zeros(n, dtype=bool)
    in_hi[np.asarray(hi_nodes, dtype=np.intp)] = True
    covered = np.zeros(max(net.P, 1), dtype=bool)
    covered[net.arc_pair[in_hi[net.arc_node]]] = True
    keep = in_lo[net.arc_node] & ~in_hi[net.arc_node] & ~covered[net.arc_pair]
    beta, b0, slope = net.cost.beta, net.b0, net.slope
    # a line: (R̂, F, size); T̂ = b0 + slope·size + β·F (affine intercepts)
    line_lo = (lo.reward, lo.union, len(lo_nodes))
    line_hi = (hi.reward, hi.union, len(hi_nodes))
    out: list[float] = []
    stack = [(line_lo, line_hi, np.flatnonzero(in_lo & ~in_hi), net.arc_node[keep],
              net.arc_pair[keep])]
    while stack:
        (ra, fa, sa), (rb, fb, sb), free, arc_node, arc_pair = stack.pop()
        ta, tb = b0 + slope * sa + beta * fa, b0 + slope * sb + beta * fb
        if free.size == 0 or ta == tb:
            continue
        x = (ra - rb) / (ta - tb)
        chosen = _cut(net, x, free, arc_node, arc_pair)
        k = int(chosen.sum())
        if k == 0 or k == free.size:
            out.append(x)
            continue
        picked = free[chosen]
        on_picked = np.isin(arc_node, picked)
        new_pairs = np.unique(arc_pair[on_picked])
        rx = rb + float(net.probs[picked].sum())
        fx = fb + int(new_pairs.size)
        sx = sb + k
        tx = b0 + slope * sx + beta * fx
        if rx - x * tx <= ra - x * ta + 1e-12 * (1.0 + abs(ra - x * ta)):
            out.append(x)
            continue
        line_x = (rx, fx, sx)
        # [λ_a, x]: decide S_a \\ S_x with S_x's pairs paid
        rest = ~on_picked & ~np.isin(arc_pair, new_pairs)
        stack.append(((ra, fa, sa), line_x, free[~chosen], arc_node[rest], arc_pair[rest]))
        # [x, λ_b]: decide S_x \\ S_b
        stack.append((line_x, (rb, fb, sb), picked, arc_node[on_picked], arc_pair[on_picked]))
    return sorted(out)

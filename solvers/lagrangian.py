"""Exact selection over A_K on large pools: closure bounds inside the branch and bound.

SpecFit's Eq. 5 (and argmax R̂ − λT̂) over A_K, exact under §3.3's tie rule, for
pools of a few hundred nodes and K up to 64 (EVICT's EAGLE-3 pools: 200
candidates, up to 32 verified).  The search is the depth-first traversal of
:mod:`solvers.exact` (nodes added in increasing id order, every subtree of A_K
reached once); what changes is the bound that prunes it.

Linear problem at λ.  For an ancestor-closed S with pairs P(S) (the (layer,
expert) pairs its nodes route to beyond the root's, F(S) = F_0 + |P(S)|):

    R̂(S) − λT̂(S) = 1 − λβF_0 + Σ_{v∈S} p_v − λβ|P(S)| − λ b_{|S|}.

Without the size limit and with b affine this is a maximum-weight closure
(App. A.3); the size limit enters through a Lagrangian penalty μ per node:
max_{S closed} Σ (p_v − μ) − c|P(S)| (c = λβ) is a closure for every μ >= 0.

Modular bound from a flow (the closure's LP dual).  In the closure network
(source → node v with weight w_v = p_v − μ − c·(pairs only v holds freshly),
node → parent and node → its pairs with infinite capacity, pair → sink with
capacity c), take any flow f with at most c entering each pair and any g >= 0
on the parent arcs, and set

    ŵ_v = w_v − Σ_e f_{v,e} − g_v + Σ_{u child of v} g_u.

For every closed S the pairs cost c|P(S)| >= Σ_{v∈S} Σ_e f_{v,e}, and the
parent terms sum to Σ_{u∉S, parent(u)∈S} g_u >= 0, so

    Σ_{v∈S} p_v − c|P(S)| − μ|S| <= Σ_{v∈S} ŵ_v                         (*)

and hence R̂(S) − λT̂(S) <= 1 − λβF_0 + Σ_{v∈S} ŵ_v − (λ b_{|S|} − μ|S|):
a modular bound that keeps b_k per size (b may be non-affine, App. B's is
not).  From a maximum flow, Σ_v max(ŵ_v, 0) is the closure optimum itself
(LP duality), so the bound is tight at the closure's optimal set.  Three
refinements make it useful inside a search, each a valid (f, g) above:

* Strict complementarity.  The flow is computed with the nodes of the
  current best set ("centre") made ε less attractive; its nodes then keep
  ŵ_v >= ε − (rounding) > 0 and dropping any of them costs at least ε.
* Penalties off the optimum.  A maximum flow charges a node outside the
  cut only up to its weight (ŵ_v = 0), while leaving it costs far more.  A
  second flow in the residual network, from the nodes outside the cut to
  the sink (through pairs with spare capacity, re-routing the first flow
  where needed), charges them up to 4c each (the cap keeps one node from
  starving the others).
* Spare capacity.  What is then still spare on each pair (c less the flow
  into it) goes in equal shares to its holders outside the cut, in or out of
  the network.

The network holds only the nodes of positive weight and their ancestors;
the others are charged through the spare shares alone, which keeps (*)
valid.

Search bound.  At a search state S (ids ascending, |S| = s) the extensions
X use nodes reachable from the children still to try.  With A(S) = Σ_S ŵ,
P the sum of the positive ŵ over those nodes and G_j(t) the sum of the t
largest ŵ over the ids >= j (the next child):

    value(S ∪ X) <= 1 − λβF_0 + A(S) + min(P − min_t b̃_{s+t}, max_t G_j(t) − b̃_{s+t}),

b̃_k = λb_k − μk, t = 1..K − s.  Beside it, the credit bound of
:mod:`solvers.exact` from the state's exact value.  A sorted variant is
dropped once it prunes too rarely (less than once in 256 calls for the flow
bound, once in 64 after 16 calls for the credit bound): skipping a bound never
changes the answer.  In the ratio
problem λ is the incumbent ratio, and when it rises the stale ŵ still bound
(a larger λ only adds (λ − λ_0)β|P(S ∪ X)| >= (λ − λ_0)β|P(S)| to the pair
costs, which the bound subtracts).

Outer loop.  Dinkelbach (App. A.1) over the closures: λ = ratio of the
incumbent; the cut at (λ, μ) is a candidate when it has at most K nodes;
μ starts at λ × (least-squares slope of b_0..b_K).  When the size limit binds
(the cut is larger than K), μ is raised along the lines of the Lagrangian
dual (a secant search on the nested cuts, the next λ starting from the last
bracket) until the cut has at most K nodes; larger cuts are cut back to K
nodes greedily.  The incumbent ratio only rises; a rise below
``_DINKELBACH_REL`` keeps μ.  The final flow, centred on the incumbent, gives
the ŵ of the search.

Where the gap stays open (more than ``_SEARCH_STATES`` search states), the
nodes that no subtree tying with the incumbent can contain are dropped, and
when the model of the rest has at most ``_CPSAT_CLASSES`` pair classes,
CP-SAT finishes the selection exactly (:func:`solvers.cpsat.finish_exact`);
otherwise the search goes on to the end.

Floating point and ties: the traversal and comparisons are those of
:mod:`solvers.exact` (canonical R̂, F, T̂ of every candidate, exact comparison
under the full tie rule, 10⁻⁹ relative pruning margin), so the answer is the
set that :func:`solvers.exact.branch_and_bound_ratio` returns.  The flows use
int64 capacities (scaled to 2⁵⁰, pair capacities rounded down), and the
flows are scaled back and capped at c per pair in floating point, so (*)
holds up to rounding far below the margin.

Cost: per flow, one OR-Tools maximum flow on the network (about 50 nodes and
2,000 pairs on EVICT-shaped pools at the resident coefficients) plus
O(n·U/8) numpy work; a selection takes two or three flows, a few more where
the size limit binds, then a search that visits about |S*| × (frontier)
states on such pools.  Worst case still exponential (Prop. 2): where a time
limit is given the search stops there and returns its incumbent, flagged
``exact=False`` with a certified upper bound (the root's bound, or CP-SAT's).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np
from ortools.graph.python import max_flow

from solvers.cost import CostModel, Selection, check_K, check_time_limit, evaluate
from solvers.errors import InvalidInput
from solvers.exact import (
    _REL_TOL,
    _beats,
    _canonical,
    _check_lam,
    _first_incumbent,
    _selection,
    search_view,
)
from solvers.pool import Pool, holder_classes

__all__ = ["lagrangian_ratio", "lagrangian_linear", "run_from"]

_INF = 2 ** 60
_SCALE = float(2 ** 50)
_EPS = 2.0 ** -20            # strict complementarity shift (value units; R̂ >= 1)
_ROUNDS = (4.0,)             # caps of the penalty rounds, in units of c (None: no cap)
_MAX_OUTER = 30              # secant steps on μ (each narrows the bracket)
_DINKELBACH_REL = 1e-3       # a smaller rise of the ratio keeps μ (one more flow, centred)
_CLOCK_EVERY = 64            # search states between two looks at the clock
_FLOW_TRIAL = 256            # the sorted flow bound stays while it prunes 1 call in 256
_CREDIT_TRIAL = 16           # the sorted credit bound: 1 in 64 after 16
_SEARCH_STATES = 10_000      # search states before CP-SAT may take over (solvers.cpsat)
_CPSAT_CLASSES = 400         # ... when its model has at most this many pair classes


class _Cover:
    """Per-pool data of the closure bounds (cached on the pool; independent of the cost).

    ``entry_node``, ``entry_pair``: the (node, pair bit) entries of the pairs that a
    node routes to and none of its ancestors does (its *fresh* pairs), ordered by
    node; ``alone[v]``: fresh pairs of v that no other node holds freshly (every
    closed set covering them contains v).  O(n·U/8) numpy work.
    """

    __slots__ = ("n", "entry_node", "entry_pair", "starts", "width", "holders", "alone",
                 "probs", "parents")

    def __init__(self, pool: Pool):
        n = pool.n
        packed = pool.packed
        if packed is None:
            nb = max(1, (max((m.bit_length() for m in pool.masks), default=0) + 7) >> 3)
            raw = b"".join(m.to_bytes(nb, "little") for m in pool.masks)
            packed = np.frombuffer(raw, dtype=np.uint8).reshape(n, nb)
        nb = packed.shape[1]
        par = np.asarray(pool.parents, dtype=np.int64)
        levels = np.asarray(pool.levels, dtype=np.int64)
        above = np.zeros_like(packed)
        for d in range(2, pool.depth + 1):           # parents precede: level by level
            at = np.flatnonzero(levels == d)
            up = par[at]
            above[at] = above[up] | packed[up]
        fresh = np.asarray(packed & ~above, dtype=np.uint8).reshape(-1)
        nz = np.flatnonzero(fresh != 0)                  # the bits are sparse: expand only these
        hit = np.flatnonzero(np.unpackbits(fresh[nz], bitorder="little").view(bool))
        byte = nz[hit >> 3]
        self.n = n
        self.width = width = 8 * nb
        self.entry_node = byte // nb
        self.entry_pair = (byte - self.entry_node * nb) * 8 + (hit & 7)
        #: starts[v]: the first entry of node v (entries are ordered by node)
        self.starts = np.concatenate([[0], np.cumsum(np.bincount(self.entry_node, minlength=n))])
        self.holders = holders = np.bincount(self.entry_pair, minlength=width)
        self.alone = np.bincount(self.entry_node[holders[self.entry_pair] == 1],
                                 minlength=n).astype(np.float64)
        self.probs = np.asarray(pool.probs, dtype=np.float64)
        self.parents = par


def _cover(pool: Pool) -> _Cover:
    cov = pool._cache.get("cover")
    if cov is None:
        cov = pool._cache["cover"] = _Cover(pool)
    return cov


class _Flow:
    """The closure network at (λ, μ) restricted to the nodes that can matter, its maximum
    flow with a centre made ε less attractive, and (on demand) the penalty rounds.

    Attributes after construction: ``cut`` (the source side's nodes, pool ids,
    ascending) and ``value`` (Σ_{cut} (p − μ) − c|P(cut)|, unperturbed).
    :meth:`weights` returns ŵ for every node (module docstring, (*)).
    """

    def __init__(self, cov: _Cover, pool: Pool, lam: float, beta: float, mu: float,
                 center: tuple[int, ...]):
        n = cov.n
        c = lam * beta
        self.cov, self.c, self.mu, self.center = cov, c, mu, center
        self.penalized = False
        probs, par = cov.probs, cov.parents
        keep = probs - mu - c * cov.alone > 0.0
        # ancestor closure: parents precede children, so one backward pass suffices
        for v in np.flatnonzero(keep)[::-1].tolist():
            a = int(par[v])
            while a >= 0 and not keep[a]:
                keep[a] = True
                a = int(par[a])
        self.keep = keep
        ids = np.flatnonzero(keep)
        self.ids = ids
        m = ids.size
        self.m = m
        if m == 0:
            self.cut: tuple[int, ...] = ()
            self.value = 0.0
            self.P = 0
            return
        on = keep[cov.entry_node]
        e_node, e_pair = cov.entry_node[on], cov.entry_pair[on]
        holders = np.bincount(e_pair, minlength=cov.width)
        self.holders = holders
        many = holders[e_pair] >= 2
        folded = np.bincount(e_node[~many], minlength=n)[ids]
        local = np.full(n, -1, dtype=np.int64)
        local[ids] = np.arange(m)
        if c > 0.0 and many.any():
            shared = holders >= 2
            self.shared = np.flatnonzero(shared)
            renumber = np.cumsum(shared) - 1
            node_idx, pair_idx = local[e_node[many]], renumber[e_pair[many]]
            P = int(renumber[-1]) + 1
        else:
            P = 0
            node_idx = pair_idx = np.zeros(0, dtype=np.int64)
        self.P = P
        self.node_idx, self.pair_idx = node_idx, pair_idx
        w = probs[ids] - mu - c * folded
        self.w = w
        lpar = local[par[ids]]
        has_par = par[ids] >= 0
        self.lpar, self.has_par = lpar, has_par
        in_center = np.zeros(n, dtype=bool)
        if center:
            in_center[list(center)] = True
        wp = w - _EPS * in_center[ids]
        nv = 2 + np.arange(m, dtype=np.int32)
        pv = 2 + m + np.arange(P, dtype=np.int32)
        self.nv, self.pv = nv, pv
        npar = int(has_par.sum())
        tails = np.concatenate([np.zeros(m, np.int32), nv, pv, nv[has_par], nv[node_idx]])
        heads = np.concatenate([nv, np.ones(m + P, np.int32), (2 + lpar[has_par]).astype(np.int32),
                                pv[pair_idx]])
        # int64 capacities: every finite one <= 2^50 (any flow keeps (*) valid, so the
        # rounding only costs tightness)
        total = float(np.abs(wp).sum()) + c * P
        scale = _SCALE / max(total, 1e-280)
        self.scale = scale
        caps = np.full(tails.size, _INF, dtype=np.int64)
        caps[:m] = np.rint(np.maximum(wp, 0.0) * scale)
        caps[m:2 * m] = np.rint(np.maximum(-wp, 0.0) * scale)
        self.cint = cint = int(math.floor(c * scale)) if P else 0
        caps[2 * m:2 * m + P] = cint
        flow = _solve(tails, heads, caps)
        fl = flow.flows(np.arange(tails.size, dtype=np.int32))
        base = 2 * m + P
        self.g = np.zeros(m, dtype=np.int64)
        self.g[has_par] = fl[base:base + npar]
        self.fe = fl[base + npar:].copy()
        side = np.asarray(flow.get_source_side_min_cut(), dtype=np.int64)
        side = np.sort(side[(side >= 2) & (side < 2 + m)] - 2)
        self.in_cut = np.zeros(m, dtype=bool)
        self.in_cut[side] = True
        self.cut = tuple(ids[side].tolist())
        union = 0
        for v in self.cut:
            union |= pool.masks[v]
        self.value = float(probs[list(self.cut)].sum()) - mu * len(self.cut) - c * union.bit_count()

    def penalize(self) -> None:
        """The penalty rounds: flows from the nodes outside the cut to the sink in the
        residual network (node → pair, pair → node up to the flow it carries, pair →
        sink up to its spare capacity, child → parent, parent → child up to g)."""
        if self.penalized or not self.P:
            self.penalized = True
            return
        self.penalized = True
        out = ~self.in_cut
        if not out.any():
            return
        node_idx, pair_idx, nv, pv = self.node_idx, self.pair_idx, self.nv, self.pv
        lpar, P = self.lpar, self.P
        arc = out[node_idx]
        pair_out = np.zeros(P, dtype=bool)
        pair_out[pair_idx[arc]] = True
        hp = self.has_par & out
        hp[hp] = out[lpar[hp]]
        n_out, na, npo, nh = int(out.sum()), int(arc.sum()), int(pair_out.sum()), int(hp.sum())
        up = (2 + lpar[hp]).astype(np.int32)
        tails = np.concatenate([np.zeros(n_out, np.int32), nv[node_idx[arc]], pv[pair_idx[arc]],
                                pv[pair_out], nv[hp], up])
        heads = np.concatenate([nv[out], pv[pair_idx[arc]], nv[node_idx[arc]],
                                np.ones(npo, np.int32), up, nv[hp]])
        for cap in _ROUNDS:
            load = np.bincount(pair_idx, weights=self.fe, minlength=P).astype(np.int64)
            spare = np.maximum(self.cint - load, 0)
            sigma = _INF if cap is None else max(1, int(cap * self.c * self.scale))
            caps = np.concatenate([np.full(n_out, sigma, np.int64), np.full(na, _INF, np.int64),
                                   self.fe[arc], spare[pair_out], np.full(nh, _INF, np.int64),
                                   self.g[hp]])
            fl = _solve(tails, heads, caps).flows(np.arange(tails.size, dtype=np.int32))
            if not fl[:n_out].any():
                break
            k = n_out
            self.fe[arc] += fl[k:k + na] - fl[k + na:k + 2 * na]
            k += 2 * na + npo
            self.g[hp] += fl[k:k + nh] - fl[k + nh:k + 2 * nh]

    def weights(self) -> list[float]:
        """ŵ of every node of the pool (module docstring, (*))."""
        cov, c, mu = self.cov, self.c, self.mu
        what = cov.probs - mu
        m = self.m
        if m:
            scale = self.scale
            fe = self.fe.astype(np.float64) / scale
            g = self.g.astype(np.float64) / scale
            load: np.ndarray = np.zeros(0)
            out_pairs: np.ndarray = np.zeros(m)
            if self.P:
                first = np.bincount(self.pair_idx, weights=fe, minlength=self.P)
                over = first > c
                if over.any():      # rounding: keep at most c per pair in floating point
                    fe = fe * np.where(over, c / np.maximum(first, 1e-300), 1.0)[self.pair_idx]
                out_pairs = np.bincount(self.node_idx, weights=fe, minlength=m)
                load = np.bincount(self.pair_idx, weights=fe, minlength=self.P)
            child_in = np.bincount(self.lpar[self.has_par], weights=g[self.has_par], minlength=m)
            what[self.ids] = self.w - out_pairs - g + child_in
        if c > 0.0:
            # the spare capacity of every pair (c less what the flows put in; pairs that
            # only one network node holds are spent on it) goes in equal shares to its
            # holders outside the cut
            spare = np.full(cov.width, c)
            if m:
                spare[self.holders == 1] = 0.0
                if self.P:
                    spare[self.shared] = np.maximum(c - load, 0.0)
            holders = cov.holders
            cut = self.ids[self.in_cut] if m else np.zeros(0, dtype=np.int64)
            if cut.size:
                starts, e_pair = cov.starts, cov.entry_pair
                held = np.concatenate([e_pair[starts[v]:starts[v + 1]] for v in cut.tolist()])
                holders = holders - np.bincount(held, minlength=cov.width)
            rate = spare / np.maximum(holders, 1)
            charge = np.bincount(cov.entry_node, weights=rate[cov.entry_pair], minlength=cov.n)
            charge[cut] = 0.0           # the shares go to the holders outside the cut only
            what -= charge
        return what.tolist()


def _solve(tails, heads, caps) -> max_flow.SimpleMaxFlow:
    flow = max_flow.SimpleMaxFlow()
    flow.add_arcs_with_capacity(tails, heads, caps)
    status = flow.solve(0, 1)
    if status != flow.OPTIMAL:
        raise RuntimeError(f"max flow failed with status {status}")
    return flow


def _affine_slope(b: tuple[float, ...], K: int) -> float:
    """Least-squares slope of b[0..K], clipped at 0: μ = λ·slope makes b̃ nearly flat."""
    if K <= 0:
        return 0.0
    j = np.arange(K + 1, dtype=np.float64)
    y = np.asarray(b[:K + 1], dtype=np.float64)
    jc = j - j.mean()
    return max(0.0, float((jc * (y - y.mean())).sum() / (jc * jc).sum()))


def _cut_back(pool: Pool, nodes: tuple[int, ...], K: int, c: float) -> tuple[int, ...]:
    """``nodes`` (closed) cut to K nodes by dropping, one at a time, the leaf that loses the
    least R̂ − λβF: p_v − c·(pairs no other node of the set holds).  O((|S| − K)·|S|)
    bitmap operations."""
    keep = sorted(nodes)
    masks, parents = pool.masks, pool.parents
    while len(keep) > K:
        inner = {parents[v] for v in keep}
        m = len(keep)
        before = [0] * (m + 1)
        after = [0] * (m + 1)
        for i in range(m):
            before[i + 1] = before[i] | masks[keep[i]]
            after[m - 1 - i] = after[m - i] | masks[keep[m - 1 - i]]
        best, drop = math.inf, -1
        for i, v in enumerate(keep):
            if v in inner:
                continue            # not a leaf of the set
            own = (masks[v] & ~(before[i] | after[i + 1])).bit_count()
            loss = pool.probs[v] - c * own
            if loss < best:
                best, drop = loss, i
        del keep[drop]
    return tuple(keep)


class _State:
    """Incumbent and bookkeeping of one selection."""

    def __init__(self, pool: Pool, K: int, cost: CostModel, lam: float | None,
                 inc: list, deadline: float | None):
        self.pool, self.K, self.cost, self.lam = pool, K, cost, lam
        self.inc = inc          # [score, R̂, F, nodes]
        self.deadline = deadline
        self.states = 0
        self.budget: int | None = None
        self.hand_over: Callable[[], bool] = lambda: False
        self.stopped = False            # by the deadline or the budget
        self.out_of_budget = False

    def offer(self, nodes: tuple[int, ...]) -> bool:
        """Compare a legal set with at most K nodes with the incumbent; True if it won."""
        union = 0
        masks = self.pool.masks
        for v in nodes:
            union |= masks[v]
        cand = _canonical(self.pool, nodes, union, self.cost, self.lam)
        if _beats(cand[0], cand[1], cand[2], nodes, self.inc):
            self.inc = cand
            return True
        return False


def _lagrange(st: _State, lam: float, slope: float,
              hint: tuple[float, float] | None = None) -> tuple[_Flow, tuple[float, float]]:
    """One linear step at λ: the flow at μ = λ·slope, raised (secant on the nested cuts)
    while the cut has more than K nodes; offers the cuts of at most K nodes and the
    larger cut cut back to K.  ``hint``: the (μ_lo, μ_hi) bracket where the last step
    ended (the first probes).  Returns the flow whose ŵ the search will use and the
    bracket."""
    pool, K, cost = st.pool, st.K, st.cost
    cov = _cover(pool)
    beta = cost.beta
    mu = lam * slope
    if hint is not None and hint[1] > mu:
        # the size limit bound at the last λ: where it ended, the cut had K nodes or fewer
        fl = _Flow(cov, pool, lam, beta, hint[1], st.inc[3])
        if fl.cut:
            st.offer(fl.cut)
        if len(fl.cut) == K:
            return fl, hint            # a dual optimum (|S(μ)| = K): nothing to narrow
    fl = _Flow(cov, pool, lam, beta, mu, st.inc[3])
    if len(fl.cut) <= K:
        if fl.cut:
            st.offer(fl.cut)
        return fl, (mu, mu)
    c = lam * beta
    lo = fl
    st.offer(_cut_back(pool, lo.cut, K, c))
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
        x = probes.pop(0) if probes else math.nan
        secant = not lo.mu < x < hi_mu
        if secant:
            # the μ where the lines value − (μ' − μ)·size of the two cuts cross
            x = ((lo.value - hi_value + lo.mu * len(lo.cut) - hi_mu * len(hi_cut))
                 / (len(lo.cut) - len(hi_cut)))
            if not lo.mu < x < hi_mu:
                break
        mid = last = _Flow(cov, pool, lam, beta, x, st.inc[3])
        if len(mid.cut) > K:
            if secant and mid.cut == lo.cut:
                break           # the breakpoint between lo's and hi's cuts
            lo = mid
            st.offer(_cut_back(pool, mid.cut, K, c))
        else:
            if mid.cut:
                st.offer(mid.cut)
            if len(mid.cut) == K or (secant and mid.cut == hi_cut):
                return mid, (lo.mu, mid.mu)
            hi_mu, hi_value, hi_cut = mid.mu, mid.value, mid.cut
    return last, (lo.mu, hi_mu)


def _search(st: _State, what: list[float], lam0: float, mu0: float) -> None:
    """The traversal of :mod:`solvers.exact` with the bound of the module docstring."""
    pool, K, cost = st.pool, st.K, st.cost
    ratio_mode = st.lam is None
    inc = st.inc
    n = pool.n
    probs, masks, parents = pool.probs, pool.masks, pool.parents
    view = search_view(pool)
    children = view.children
    b, beta, F0 = cost.b, cost.beta, pool.root_count
    chosen: list[int] = []
    a = what
    subpos = [x if x > 0.0 else 0.0 for x in a]
    subcnt = [1 if x > 0.0 else 0 for x in a]
    for v in range(n - 1, -1, -1):
        u = parents[v]
        if u >= 0 and subcnt[v]:
            subpos[u] += subpos[v]
            subcnt[u] += subcnt[v]
    order = np.argsort(-np.asarray(a), kind="stable").tolist()     # by decreasing ŵ, then id
    lam_now = inc[0] if ratio_mode else float(st.lam)   # type: ignore[arg-type]
    # the credit bound of solvers.exact (marginal, from the state's own value), at λ_0
    ac = [p - lam0 * beta * cv for p, cv in zip(probs, pool.credits, strict=True)]
    cpos = [x if x > 0.0 else 0.0 for x in ac]
    ccnt = [1 if x > 0.0 else 0 for x in ac]
    for v in range(n - 1, -1, -1):
        u = parents[v]
        if u >= 0 and ccnt[v]:
            cpos[u] += cpos[v]
            ccnt[u] += ccnt[v]
    corder = np.argsort(-np.asarray(ac), kind="stable").tolist()
    # a sorted bound is dropped once it prunes too rarely (_FLOW_TRIAL, _CREDIT_TRIAL):
    # skipping a bound never changes the answer
    gtrial = [0, 0]     # calls, prunes
    ctrial = [0, 0]
    target = 0.0 if ratio_mode else inc[0]
    btil: list[float] = []
    bmin: list[float] = []
    blam: list[float] = []
    blmin: list[float] = []
    const = 0.0
    gains: dict[int, float] = {}
    cgains: dict[int, float] = {}
    flat: list[bool] = []

    def rebuild() -> None:
        nonlocal btil, bmin, blam, blmin, const
        btil = [lam_now * b[k] - mu0 * k for k in range(K + 1)]
        blam = [lam_now * b[k] for k in range(K + 1)]
        bmin = [0.0] * (K + 1)
        blmin = [0.0] * (K + 1)
        run = runl = math.inf
        for k in range(K, 0, -1):
            run = min(run, btil[k])
            bmin[k - 1] = run          # min over sizes k..K, i.e. t >= 1 from s = k − 1
            runl = min(runl, blam[k])
            blmin[k - 1] = runl
        const = 1.0 - lam_now * beta * F0
        # flat[s]: b̃ constant over sizes s+1..K (then the sorted bound helps only when
        # more positive ŵ are reachable than there is room)
        flat.clear()
        top = -math.inf
        for k in range(K, 0, -1):
            top = max(top, btil[k])
            flat.append(top - bmin[k - 1] <= 1e-12 * (1.0 + abs(top)))
        flat.reverse()
        gains.clear()
        cgains.clear()

    def gain(j: int, s: int) -> float:
        # max over t = 1..K−s of (the t largest ŵ over ids >= j) − b̃_{s+t}
        key = j * (K + 1) + s
        g = gains.get(key)
        if g is None:
            acc, g, t, room = 0.0, -math.inf, 0, K - s
            for v in order:
                if v >= j:
                    x = a[v]
                    if x <= 0.0 and acc - bmin[s + t] <= g:
                        break       # acc only falls from here: no larger size can win
                    t += 1
                    acc += x
                    x = acc - btil[s + t]
                    if x > g:
                        g = x
                    if t == room:
                        break
            gains[key] = g
        return g

    def cgain(j: int, s: int) -> float:
        # the same with the credit values and plain λb (the marginal bound)
        key = j * (K + 1) + s
        g = cgains.get(key)
        if g is None:
            acc, g, t, room = 0.0, -math.inf, 0, K - s
            for v in corder:
                if v >= j:
                    x = ac[v]
                    if x <= 0.0 and acc - blmin[s + t] <= g:
                        break
                    t += 1
                    acc += x
                    x = acc - blam[s + t]
                    if x > g:
                        g = x
                    if t == room:
                        break
            cgains[key] = g
        return g

    rebuild()
    deadline = st.deadline

    def visit(frontier: list[int], union: int, r: float, s: int, F: int, A: float,
              ps: float, pc: int, qs: float, qc: int) -> None:
        nonlocal lam_now, target
        st.states += 1
        if not st.states % _CLOCK_EVERY:
            if deadline is not None and time.perf_counter() > deadline:
                st.stopped = True
            elif st.budget is not None and st.states > st.budget:
                st.budget = None
                if st.hand_over():       # CP-SAT takes over; otherwise the search goes on
                    st.stopped = st.out_of_budget = True
        if st.stopped:
            return
        s1 = s + 1
        b1 = b[s1]
        last = len(frontier) - 1
        room = K - s
        sorted_helps = not flat[s]
        floor = target - _REL_TOL * (1.0 + r + abs(target))
        # what S contributes, with the stale-λ correction (λ − λ_0)β|P(S)|
        base = const + A - (lam_now - lam0) * beta * (F - F0)
        own = r - lam_now * beta * F           # the credit bound starts from S's value
        for idx, j in enumerate(frontier):
            if base + ps - bmin[s] < floor or own + qs - blmin[s] < floor:
                return      # the reachable sets only shrink with j
            if (sorted_helps or pc > room) and gtrial[0] < _FLOW_TRIAL * (1 + gtrial[1]):
                gtrial[0] += 1
                if base + gain(j, s) < floor:
                    gtrial[1] += 1
                    return
            if qc > room and ctrial[0] < _CREDIT_TRIAL * (1 + 4 * ctrial[1]):
                ctrial[0] += 1
                if own + cgain(j, s) < floor:
                    ctrial[1] += 1
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
                            lam_now = q
                            rebuild()
                    else:
                        target = q
                    floor = target - _REL_TOL * (1.0 + r + abs(target))
                    base = const + A - (lam_now - lam0) * beta * (F - F0)
                    own = r - lam_now * beta * F
            aj = a[j]
            if aj > 0.0:
                ps2, pc2 = ps - aj, pc - 1
            else:
                ps2, pc2 = ps, pc
            cj = ac[j]
            if cj > 0.0:
                qs2, qc2 = qs - cj, qc - 1
            else:
                qs2, qc2 = qs, qc
            if s1 < K:
                kids = children[j]
                if kids:
                    nxt = kids + frontier[idx + 1:]
                    if idx < last:
                        nxt.sort()
                    visit(nxt, u2, r2, s1, f2, A + aj, ps2, pc2, qs2, qc2)
                elif idx < last:
                    visit(frontier[idx + 1:], u2, r2, s1, f2, A + aj, ps2, pc2, qs2, qc2)
                if st.stopped:
                    chosen.pop()
                    return
            chosen.pop()
            ps = ps2 - subpos[j] + (aj if aj > 0.0 else 0.0)
            pc = pc2 - subcnt[j] + (aj > 0.0)
            qs = qs2 - cpos[j] + (cj if cj > 0.0 else 0.0)
            qc = qc2 - ccnt[j] + (cj > 0.0)

    roots = view.roots
    visit(list(roots), 0, 1.0, 0, F0, 0.0, sum(subpos[v] for v in roots),
          sum(subcnt[v] for v in roots), sum(cpos[v] for v in roots),
          sum(ccnt[v] for v in roots))


def _root_bound(st: _State, what: list[float], lam: float, mu: float) -> float:
    """Upper bound on max R̂ − λT̂ over A_K from ŵ: the empty set, or the t largest ŵ."""
    pool, K, cost = st.pool, st.K, st.cost
    b, beta, F0 = cost.b, cost.beta, pool.root_count
    best = 1.0 - lam * (b[0] + beta * F0)
    acc = 0.0
    for t, x in enumerate(sorted(what, reverse=True)[:K], start=1):
        acc += x
        best = max(best, 1.0 - lam * beta * F0 + acc - (lam * b[t] - mu * t))
    return best


def run_from(pool: Pool, K: int, cost: CostModel, lam: float | None, inc: list,
             deadline: float | None) -> Selection:
    """The selection of the module docstring from the incumbent ``inc`` ([score, R̂, F,
    nodes], canonical, at most K nodes): Eq. 5 when ``lam`` is None, else R̂ − λT̂.
    ``K`` is the effective limit (at most n); ``deadline``: a ``time.perf_counter()``
    instant or None."""
    ratio_mode = lam is None
    st = _State(pool, K, cost, lam, list(inc), deadline)
    if K == 0 or pool.n == 0:
        return _selection(cost, st.inc)
    slope = _affine_slope(cost.b, K)
    lam_now = st.inc[0] if ratio_mode else float(lam)  # type: ignore[arg-type]
    fl, bracket = _lagrange(st, lam_now, slope)
    while ratio_mode and st.inc[0] > lam_now * (1.0 + _DINKELBACH_REL):
        lam_now = st.inc[0]           # Dinkelbach: the ratio rose, linearise again
        fl, bracket = _lagrange(st, lam_now, slope, bracket)
    if fl.center != st.inc[3] or (ratio_mode and st.inc[0] != lam_now):
        # centre the flow on the incumbent (after a rise of the ratio below _DINKELBACH_REL:
        # at the new λ, μ scaled with it)
        mu = fl.mu * (st.inc[0] / lam_now) if ratio_mode else fl.mu
        lam_now = st.inc[0] if ratio_mode else lam_now
        fl = _Flow(_cover(pool), pool, lam_now, cost.beta, mu, st.inc[3])
    fl.penalize()
    what = fl.weights()
    upper = _root_bound(st, what, lam_now, fl.mu)
    if ratio_mode:
        t_floor = min(cost.b[:K + 1]) + cost.beta * pool.root_count
        upper = lam_now + max(upper, 0.0) / t_floor      # a bound on the ratio
    # the gap stays open after _SEARCH_STATES states: CP-SAT on the nodes that can still
    # matter takes over where that model is small (it is exact under the tie rule)
    sub: list[tuple[Pool, list[int]]] = []

    def hand_over() -> bool:
        model = _cpsat_pool(st, what, lam_now, fl.mu)
        if model is not None:
            sub.append(model)
        return model is not None

    st.budget, st.hand_over = _SEARCH_STATES, hand_over
    _search(st, what, lam_now, fl.mu)
    if st.out_of_budget:
        outcome, bound = _cpsat(st, *sub[0])
        if outcome == "exact":
            return _selection(cost, st.inc)
        if outcome == "stopped" and bound is not None:
            return _selection(cost, st.inc, False, max(min(upper, bound), st.inc[0]))
        st.stopped = st.out_of_budget = False   # too many near-ties: search to the end
        st.states = 0
        _search(st, what, lam_now, fl.mu)
    if not st.stopped:
        return _selection(cost, st.inc)
    # stopped by the time limit: the root's bound certifies the gap
    return _selection(cost, st.inc, False, max(upper, st.inc[0]))


def _useful(st: _State, what: list[float], lam: float, mu: float) -> np.ndarray:
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
    keep = u >= target - _REL_TOL * (2.0 + inc[1] + abs(target))
    for v, a in enumerate(pool.parents):
        if a >= 0 and not keep[a]:
            keep[v] = False
    return keep


def _cpsat_pool(st: _State, what: list[float], lam: float,
                mu: float) -> tuple[Pool, list[int]] | None:
    """The pool cut to the :func:`_useful` nodes and their ids, when its CP-SAT model has at
    most ``_CPSAT_CLASSES`` pair classes; None otherwise."""
    pool = st.pool
    ids = np.flatnonzero(_useful(st, what, lam, mu)).tolist()
    if len(ids) == pool.n:
        sub = pool
    else:
        new = {v: i for i, v in enumerate(ids)}
        sub = Pool(tuple(-1 if pool.parents[v] < 0 else new[pool.parents[v]] for v in ids),
                   tuple(pool.probs[v] for v in ids), tuple(pool.levels[v] for v in ids),
                   pool.num_layers, pool.num_experts, pool.root_count,
                   tuple(pool.masks[v] for v in ids))
    if sub.n and holder_classes(sub)[1].size > _CPSAT_CLASSES:
        return None
    return sub, ids


def _cpsat(st: _State, sub: Pool, ids: list[int]) -> tuple[str, float | None]:
    """:func:`solvers.cpsat.finish_exact` on ``sub`` (ids: the pool's ids of its nodes)."""
    from solvers.cpsat import finish_exact  # OR-Tools' CP-SAT: a slow first import

    if not sub.n:
        return "exact", None        # nothing can beat the incumbent
    local = {v: i for i, v in enumerate(ids)}

    def offer(nodes: tuple[int, ...]) -> bool:
        return st.offer(tuple(ids[v] for v in nodes))

    def incumbent() -> list:
        score, r, f, nodes = st.inc
        return [score, r, f, tuple(local[v] for v in nodes)]

    return finish_exact(sub, min(st.K, sub.n), st.cost, st.lam, offer, incumbent, st.deadline)


def lagrangian_ratio(pool: Pool, K: int, cost: CostModel, *, start=None,
                     time_limit: float | None = None) -> Selection:
    """Eq. 5 over A_K with the closure bounds (module docstring); the tie-rule winner.

    ``start``: optional node ids of a legal subtree with at most K nodes (a first
    incumbent).  ``time_limit`` (seconds): stop the search there; the result then
    has ``exact=False`` and ``upper_bound`` >= the optimal ratio.
    """
    K = check_K(pool, K, cost)
    limit = check_time_limit(time_limit)
    deadline = None if limit is None else time.perf_counter() + limit
    first = None
    if start is not None:
        first = evaluate(pool, start, cost)
        if len(first.nodes) > K:
            raise InvalidInput(f"start has {len(first.nodes)} nodes, more than K = {K}")
    inc = _first_incumbent(pool, K, cost, None, first, search_view(pool))
    return run_from(pool, K, cost, None, inc, deadline)


def lagrangian_linear(pool: Pool, K: int, cost: CostModel, lam: float, *,
                      time_limit: float | None = None) -> Selection:
    """argmax R̂ − λT̂ over A_K with the closure bounds; tie rule as in
    :func:`solvers.exact.select_max_linear`.  ``upper_bound`` bounds the value."""
    K = check_K(pool, K, cost)
    lam_f = _check_lam(lam)
    limit = check_time_limit(time_limit)
    deadline = None if limit is None else time.perf_counter() + limit
    inc = _first_incumbent(pool, K, cost, lam_f, None, search_view(pool))
    return run_from(pool, K, cost, lam_f, inc, deadline)

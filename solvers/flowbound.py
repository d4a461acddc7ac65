"""The closure bound of the exact search at scale (:mod:`solvers.lagrangian`): a maximum flow
in App. A.3's closure network gives a modular upper bound on R̂ − λT̂ over A_K.

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
  into it) goes in equal shares to its holders outside the cut.

The network holds only the nodes of positive weight and their ancestors;
the others are charged through the spare shares alone, which keeps (*)
valid.  The flows use int64 capacities (scaled to 2⁵⁰, pair capacities
rounded down), scaled back and capped at c per pair in floating point, so (*)
holds up to rounding far below the searches' 10⁻⁹ margin.

Cost: one OR-Tools maximum flow on the network (about 50 nodes and 2,000
pairs on EVICT-shaped pools at the resident coefficients) plus O(n·U/8) numpy
work.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from ortools.graph.python.max_flow import SimpleMaxFlow

from solvers.maxflow import simple_max_flow
from solvers.pool import Pool

__all__ = ["Cover", "cover", "Flow", "network_size"]

_INF = 2 ** 60
_SCALE = float(2 ** 50)
_EPS = 2.0 ** -20            # strict complementarity shift (value units; R̂ >= 1)
_ROUNDS = (4.0,)             # caps of the penalty rounds, in units of c (None: no cap)


class Cover:
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

    def rehung(self, pool: Pool, moved: Pool) -> Cover:
        """The cover of ``moved``, a pool with ``pool``'s nodes and bitmaps whose tree differs
        only in where some leaves hang (below siblings, :func:`solvers.dominance.bound_pool`):
        those leaves lose the fresh pairs that their new ancestors hold.  O(entries) numpy
        work, without the O(n·U/8) of a new cover."""
        packed = pool.packed
        if packed is None or packed.shape[0] != self.n:
            return Cover(moved)
        keep = np.ones(self.entry_node.size, dtype=bool)
        masks, nb = pool.masks, packed.shape[1]
        extra = [0] * self.n        # bitmaps of the new ancestors below the old parent
        for j in range(self.n):
            u = moved.parents[j]
            if u == pool.parents[j]:
                continue
            extra[j] = masks[u] | extra[u]
            held = masks[j] & extra[j]
            if held:
                lo, hi = int(self.starts[j]), int(self.starts[j + 1])
                e = self.entry_pair[lo:hi]
                row = np.frombuffer(held.to_bytes(nb, "little"), dtype=np.uint8)
                keep[lo:hi] = (row[e >> 3] >> (e & 7)) & 1 == 0
        new = Cover.__new__(Cover)
        new.n, new.width, new.probs = self.n, self.width, self.probs
        new.parents = np.asarray(moved.parents, dtype=np.int64)
        new.entry_node, new.entry_pair = self.entry_node[keep], self.entry_pair[keep]
        new.starts = np.concatenate([[0], np.cumsum(np.bincount(new.entry_node,
                                                                minlength=self.n))])
        new.holders = holders = np.bincount(new.entry_pair, minlength=self.width)
        new.alone = np.bincount(new.entry_node[holders[new.entry_pair] == 1],
                                minlength=self.n).astype(np.float64)
        return new


def cover(pool: Pool) -> Cover:
    cov = pool._cache.get("cover")
    if cov is None:
        cov = pool._cache["cover"] = Cover(pool)
    return cov


class Flow:
    """The closure network at (λ, μ) restricted to the nodes that can matter, its maximum
    flow with a centre made ε less attractive, and (on demand) the penalty rounds.

    Attributes after construction: ``cut`` (the source side's nodes, pool ids,
    ascending) and ``value`` (Σ_{cut} (p − μ) − c|P(cut)|, unperturbed).
    :meth:`weights` returns ŵ for every node (module docstring, (*)).
    """

    def __init__(self, cov: Cover, pool: Pool, lam: float, beta: float, mu: float,
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
            self.size = 0.0
            return
        on = keep[cov.entry_node]
        e_node, e_pair = cov.entry_node[on], cov.entry_pair[on]
        self.size = float(e_node.size + m)
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
        self._solve_network(n, center, probs, pool)

    def _solve_network(self, n: int, center: tuple[int, ...], probs: np.ndarray,
                       pool: Pool) -> None:
        """Build the network (centre ε less attractive), solve it, keep the flow and the cut."""
        m, P, w, c = self.m, self.P, self.w, self.c
        node_idx, pair_idx, lpar, has_par = self.node_idx, self.pair_idx, self.lpar, self.has_par
        ids = self.ids
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
        mu = self.mu
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


def network_size(cov: Cover, lam: float, beta: float, mu: float) -> float:
    """About the arcs of :class:`Flow`'s network at (λ, μ): the fresh entries of the nodes of
    positive weight, plus the nodes (a step's size for pacing it; O(entries) numpy)."""
    keep = cov.probs - mu - lam * beta * cov.alone > 0.0
    return float(np.count_nonzero(keep[cov.entry_node]) + cov.n)


def _solve(tails, heads, caps) -> SimpleMaxFlow:
    flow = simple_max_flow()
    flow.add_arcs_with_capacity(tails, heads, caps)
    status = flow.solve(0, 1)
    if status != flow.OPTIMAL:
        raise RuntimeError(f"max flow failed with status {status}")
    return flow

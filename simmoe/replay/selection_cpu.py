"""SpecFit's cost when host-resident experts run on the CPU: a placement's forward as ``solvers.CpuCostModel``.

With a static placement (``cpu-layers:N``, ``cpu-all``) which experts run on
the CPU is known before the forward, so a subtree's time is the solver's

    T(S) = b_|S| + Σ over the union's (layer, expert) pairs of max(r_ℓ, g·n_e(S))

with, from :class:`simmoe.hardware.cpu_forward.CpuForward` (docs/cpu-experts.md):

* b_k: the profile's intercepts (drafting, the served iteration, the step and
  the GPU part's forward over 1 + k tokens without routed experts, plus every
  CPU layer's synchronisation and activations' round trip);
* on a CPU layer r_ℓ = B_ℓ / (η_mem · BW_socket), g = 2 · P_E / (η_cpu · PEAK_socket);
* on a GPU layer r_ℓ = B_ℓ / (η_gpu · BW_gpu), g = 2 · P_E / (η_c · PEAK_gpu).

Where the forward has terms this sum cannot express, T is their closest upper
bound: two sockets' max of per-socket sums becomes the sum over both; a GPU
layer's roofline max(R + Σ r, C + Σ g·n) becomes max(R, C) + Σ max(r, g·n);
KTransformers' overlap max(F, S_0 + C_ℓ) becomes max(F, S_0) + C_ℓ.  All three
are exact where one socket computes, every GPU layer and GPU expert is bound
by its reads, and the GPU's FFN part of a CPU layer is shorter than its
synchronisation and round trip.

The cache placements (``cpu-misses``, ``fiddler``) are not priced here: what
the GPU holds there is the cache's state, which a plan shared across cache
settings does not see; SpecFit keeps Eq. 4 there (β a cold cache's CPU expert).
"""

from __future__ import annotations

import numpy as np

from simmoe.hardware.profile_cost import ProfileCostModel
from simmoe.replay.residency_cpu import cpu_forward_of


def static_cpu_forward(profile):
    """The profile's :class:`CpuForward` when its placement is static (``cpu-layers:N``, ``cpu-all``), else None."""
    fwd = cpu_forward_of(profile)
    return None if fwd is None or fwd.placement.uses_cache else fwd


def cpu_rates(fwd) -> dict[str, np.ndarray | float]:
    """The per-expert rates of ``fwd``'s forward in ms, plain arrays (module docstring):
    ``read`` [L] and ``compute`` (per token) of a CPU expert, ``gpu_read`` [L] and
    ``gpu_compute`` of a GPU expert, ``on_cpu`` bool [L]."""
    g = fwd.gpu
    return {"read": np.asarray(fwd.read_ms, dtype=np.float64), "compute": float(fwd.token_ms),
            "gpu_read": np.asarray(fwd.E / g.bw * 1e3, dtype=np.float64),
            "gpu_compute": float(fwd.pair_flops / g.peak * 1e3), "on_cpu": np.asarray(fwd.cpu_layer, dtype=bool)}


def cpu_cost_model(fwd, b):
    """``solvers.CpuCostModel`` of ``fwd`` with intercepts ``b``."""
    from solvers import CpuCostModel

    r = cpu_rates(fwd)
    return CpuCostModel(b, r["read"], r["compute"], on_cpu=r["on_cpu"], gpu_read=r["gpu_read"],
                        gpu_compute=r["gpu_compute"])


def pairs_ms(fwd, tokens: np.ndarray) -> float:
    """Σ over the (layer, expert) pairs with m > 0 tokens of max(r, g·m): the experts' part of T for
    ``tokens`` [L, N]."""
    r = cpu_rates(fwd)
    on = np.asarray(r["on_cpu"])[:, None]
    read = np.where(on, np.asarray(r["read"])[:, None], np.asarray(r["gpu_read"])[:, None])
    per = np.where(on, r["compute"], r["gpu_compute"])
    m = np.asarray(tokens, dtype=np.float64)
    return float(np.where(m > 0, np.maximum(read, per * m), 0.0).sum())


class CpuPricedCost(ProfileCostModel):
    """A profile's Eq. 4 cost (``b``, ``beta``: what every other selector prices with, unchanged) that also
    carries the placement's exact cost ``cpu`` (a ``solvers.CpuCostModel``) and, for one request of a
    batched forward, ``tokens``: the others' tokens per (layer, expert), int [L, N] (None at batch 1)."""

    __slots__ = ("cpu", "tokens")

    def __init__(self, b, beta, profile: str = "", counterpart="", *, cpu=None, tokens=None):
        super().__init__(b, beta, profile, counterpart)
        self.cpu, self.tokens = cpu, tokens

    def __reduce__(self):
        return (_rebuild, (self.b, self.beta, self.profile, self._counterpart, self.cpu, self.tokens))

    __eq__ = ProfileCostModel.__eq__
    __hash__ = ProfileCostModel.__hash__


def _rebuild(b, beta, profile, counterpart, cpu, tokens):
    return CpuPricedCost(b, beta, profile, counterpart, cpu=cpu, tokens=tokens)


def priced_cost(profile, cost):
    """``cost`` (the profile's Eq. 4 model) with the static placement's exact cost attached; ``cost`` itself in
    every other regime."""
    fwd = static_cpu_forward(profile)
    if fwd is None or cost is None:
        return cost
    return CpuPricedCost(cost.b, cost.beta, getattr(cost, "profile", ""), getattr(cost, "_counterpart", ""),
                         cpu=cpu_cost_model(fwd, cost.b))


def batch_cpu_cost(fwd, shifted, K: int, levels: int, other_tokens: int, tokens: np.ndarray, context: float,
                   requests: int):
    """One request's cost in a batched forward: ``shifted`` (Eq. 4's batch-aware model, for every other
    selector) carrying a ``CpuCostModel`` whose intercepts are the whole step's time without this request's
    experts: the forward over the others' tokens + 1 + j (no routed experts), drafting for ``requests``, and
    the others' experts (``tokens`` [L, N], priced as the adapter prices them)."""
    j = np.arange(K + 1, dtype=np.float64)
    n = float(other_tokens) + 1.0 + j
    ctx = float(context)
    fwd_ms = fwd.forward_ms(n, 0.0, ctx, n * ctx / max(requests, 1), requests)
    b = fwd_ms + fwd.draft_ms(levels, requests) + fwd.o.spec_token_ms * n + fwd.o.step_ms + pairs_ms(fwd, tokens)
    cpu = cpu_cost_model(fwd, [float(x) for x in b])
    return CpuPricedCost(shifted.b, shifted.beta, cpu=cpu, tokens=np.asarray(tokens, dtype=np.int64))


def select_cpu(view, K: int, cost, *, adaptive: bool):
    """SpecFit's selection under ``cost`` (a :class:`CpuPricedCost`): Eq. 5 over A_K by
    ``solvers.select_exact_cpu`` (``select_marginal_cpu`` at batch > 1), with Lemma 2's adaptive
    depth when ``adaptive``.  Returns (the selection's node ids, the drafted levels)."""
    levels = np.asarray(view.levels, dtype=np.int64)
    full = _Sub.of(view, cost, levels)
    best = full.select(K)
    depth = int(levels.max())
    if not adaptive:
        return best.ids, depth
    # Lemma 2 as solvers.select_adaptive_depth computes it: Ŝ_d = S* for every d at or past S*'s deepest level m
    # (V≤d keeps the ids' order, so the tie rule ranks its sets as the full pool does); below m, Ŝ_d holds a
    # level-d node when S* ∩ V≤d beats Ŝ_{d−1}, and is selected otherwise
    m = int(levels[best.ids].max()) if len(best.ids) else 0
    known: _Picked | None = full.evaluate(())                  # Ŝ_0: the root alone
    for d in range(1, m):
        cut = full.evaluate(tuple(int(v) for v in best.ids if levels[v] <= d))
        if known is None:
            known = full.upto(d - 1).select(K, _better(cut, None, levels, d - 1))
        if _beats(cut, known):
            known = None
            continue
        sel = full.upto(d).select(K, _better(known, cut, levels, d))
        if not np.any(levels[sel.ids] == d):
            return sel.ids, d
        known = sel
    return best.ids, min(max(m + 1, 1), depth)


class _Picked:
    """A set as the tie rule ranks it: ratio, R̂, F, node ids (of the full pool)."""

    __slots__ = ("ratio", "reward", "union", "ids")

    def __init__(self, sel, ids: np.ndarray):
        self.ratio, self.reward, self.union, self.ids = sel.ratio, sel.reward, sel.union, ids


def _beats(a: _Picked, b: _Picked) -> bool:
    """§3.3's tie rule: larger ratio, larger R̂, smaller F, fewer nodes, smaller ids."""
    ka = (-a.ratio, -a.reward, a.union, len(a.ids), tuple(a.ids.tolist()))
    kb = (-b.ratio, -b.reward, b.union, len(b.ids), tuple(b.ids.tolist()))
    return ka < kb


def _better(a: _Picked | None, b: _Picked | None, levels: np.ndarray, d: int) -> tuple[int, ...] | None:
    """The better of ``a`` and ``b`` among those inside V≤d (a start for the search), as ids of the full pool."""
    inside = [x for x in (a, b) if x is not None and len(x.ids) and np.all(levels[x.ids] <= d)]
    if not inside:
        return None
    best = inside[0] if len(inside) == 1 or not _beats(inside[1], inside[0]) else inside[1]
    return tuple(int(v) for v in best.ids)


class _Sub:
    """V≤d (the whole pool when ``ids`` covers it) as a ``solvers.RoutedPool``, selected and evaluated in
    ids of the full pool."""

    def __init__(self, rpool, ids: np.ndarray, cost, levels: np.ndarray):
        self.rpool, self.ids, self.cost, self.levels = rpool, ids, cost, levels
        self.local = np.full(len(levels), -1, dtype=np.int64)
        self.local[ids] = np.arange(len(ids))
        self.tokens = None if cost.tokens is None else cost.tokens.reshape(rpool.pool.num_layers, -1)

    @classmethod
    def of(cls, view, cost, levels: np.ndarray) -> _Sub:
        """The view's whole pool."""
        from solvers import RoutedPool

        rpool = RoutedPool.from_routes(np.asarray(view.parents, dtype=np.int64), np.asarray(view.p, dtype=np.float64),
                                       view.root_routes, np.asarray(view.node_routes), view.num_experts)
        return cls(rpool, np.arange(len(levels)), cost, levels)

    def upto(self, d: int) -> _Sub:
        """V≤d of this (whole) pool: sliced where its ids are a prefix (``RoutedPool.upto_level``)."""
        rpool, keep = self.rpool.upto_level(d)
        return _Sub(rpool, np.asarray(keep, dtype=np.int64), self.cost, self.levels)

    def select(self, K: int, start: tuple[int, ...] | None = None) -> _Picked:
        from solvers import select_exact_cpu, select_marginal_cpu

        k = min(K, len(self.ids))
        first = None if start is None else tuple(int(self.local[v]) for v in start)
        if self.tokens is None:
            sel = select_exact_cpu(self.rpool, k, self.cost.cpu, start=first)
        else:
            sel = select_marginal_cpu(self.rpool, k, self.cost.cpu, self.tokens, start=first)
        return _Picked(sel, self.ids[np.asarray(sel.nodes, dtype=np.int64)])

    def evaluate(self, nodes: tuple[int, ...]) -> _Picked:
        """A legal set of V≤d (ids of the full pool) under the canonical numbers of the search."""
        from solvers.cpu_cost import cpu_view

        local = tuple(sorted(int(self.local[v]) for v in nodes))
        view = cpu_view(self.rpool, self.cost.cpu, None if self.tokens is None else self.tokens.reshape(-1))
        r, f, t = view.terms(local)
        return _Picked(_Terms(r / t, r, f), self.ids[np.asarray(local, dtype=np.int64)])


class _Terms:
    __slots__ = ("ratio", "reward", "union")

    def __init__(self, ratio: float, reward: float, union: int):
        self.ratio, self.reward, self.union = ratio, reward, union

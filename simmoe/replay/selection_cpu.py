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
    full = _select_upto(view, levels, None, K, cost)
    depth = int(levels.max())
    if not adaptive:
        return full, depth
    # Lemma 2: Ŝ_d = S* for every d at or past S*'s deepest level m (ids of V≤d keep their order, so the tie rule
    # ranks the sets of V≤d as in the full pool); below m the loop stops at the first Ŝ_d without a level-d node
    m = int(levels[full].max()) if len(full) else 0
    for d in range(1, m):
        sel = _select_upto(view, levels, d, K, cost)
        if not np.any(levels[sel] == d):
            return sel, d
    return full, min(max(m + 1, 1), depth)


def _select_upto(view, levels: np.ndarray, d: int | None, K: int, cost) -> np.ndarray:
    """The selection over V≤d (the whole pool when ``d`` is None), as ids of the full pool."""
    from solvers import RoutedPool, select_exact_cpu, select_marginal_cpu

    parents = np.asarray(view.parents, dtype=np.int64)
    ids = np.arange(len(parents)) if d is None else np.flatnonzero(levels <= d)
    local = np.full(len(parents), -1, dtype=np.int64)
    local[ids] = np.arange(len(ids))
    sub_parents = np.where(parents[ids] >= 0, local[np.maximum(parents[ids], 0)], -1)
    rpool = RoutedPool.from_routes(sub_parents, np.asarray(view.p, dtype=np.float64)[ids], view.root_routes,
                                   np.asarray(view.node_routes)[ids], view.num_experts)
    k = min(K, len(ids))
    if cost.tokens is None:
        sel = select_exact_cpu(rpool, k, cost.cpu)
    else:
        sel = select_marginal_cpu(rpool, k, cost.cpu, cost.tokens.reshape(rpool.pool.num_layers, -1))
    return ids[np.asarray(sel.nodes, dtype=np.int64)]

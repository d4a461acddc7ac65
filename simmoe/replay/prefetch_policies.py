"""simmoe's own prefetch policies, each a :class:`simmoe.api.PrefetchPolicy` (registered in ``pyproject.toml``).

The idea is that of the offloading systems SpecFit cites in §1 and §5
(MoE-Infinity, ProMoE, Pre-gated MoE) and of SP-MoE's prefetch during drafting.
Predictions are the selectors' own (``--route-accuracy a``, SpecFit §4.6; a = 1
is the trace's recorded routes, i.e. the atlas that SpecFit's measurements and
``hwprobe record`` use).

``draft``
    when a step starts, the predicted experts of every root (slot order, every
    layer in layer order) are queued; when level d of the pools has been
    drafted, those of the level's nodes, most probable first (path
    probability, ties by slot, then id), each node's layer after layer.
    Copies may start until the verification forward starts (during drafting
    and selection: the copy engine's idle time); queued copies that have not
    started by then are dropped.
``next-layer``
    when layer ℓ's router has run, the predicted experts of layer ℓ + 1 of the
    verified tokens (the roots first, then the selected nodes, most probable
    first) are queued; they may start until layer ℓ + 1's router runs.
``oracle``
    as ``draft``, but queued at the step's start with perfect knowledge: the
    experts the forward will demand (the true routes of the roots and of the
    selected nodes), in layer order.  A bound on prefetching during drafting
    (it knows the verified subtree and the routes before they exist), not on
    every prefetch scheme.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from simmoe.api import CacheShape, PrefetchJobs, PrefetchStep


def _flat(routes: np.ndarray, num_experts: int) -> np.ndarray:
    """Tokens' routes [t, L, k] as flat ``layer·N + expert`` pairs, token after token, layer after layer."""
    routes = np.asarray(routes, dtype=np.int64)
    L = routes.shape[1]
    return (routes + (np.arange(L, dtype=np.int64) * num_experts)[:, None][None]).reshape(-1)


def draft_order(levels: np.ndarray, p: np.ndarray, slots: np.ndarray | None = None) -> np.ndarray:
    """Node indices level by level, most probable first; ties by slot, then index."""
    ids = np.arange(len(levels))
    keys: list[np.ndarray] = [ids, -np.asarray(p, dtype=np.float64), np.asarray(levels, dtype=np.int64)]
    if slots is not None:
        keys.insert(1, np.asarray(slots))
    return ids[np.lexsort(keys)]


class Draft:
    """Prefetch the predicted experts while the drafter drafts (module docstring)."""

    name: ClassVar[str] = "draft"

    def reset(self, shape: CacheShape) -> None:
        self.N = shape.num_experts

    def drafting(self, step: PrefetchStep) -> PrefetchJobs | None:
        roots = _flat(step.roots, self.N)
        k = step.roots.shape[1] * step.roots.shape[2]
        pools = [pl for pl in step.pools if len(pl["levels"])]
        if not pools:
            return PrefetchJobs(roots, np.zeros(len(roots), dtype=np.int64))
        levels = np.concatenate([pl["levels"] for pl in pools]).astype(np.int64)
        p = np.concatenate([pl["p"] for pl in pools])
        routes = np.concatenate([pl["routes"] for pl in pools])
        slots = np.repeat(np.arange(len(pools)), [len(pl["levels"]) for pl in pools]) if len(pools) > 1 else None
        order = draft_order(levels, p, slots)
        nodes = _flat(routes[order], self.N)
        return PrefetchJobs(np.concatenate([roots, nodes]),
                            np.concatenate([np.zeros(len(roots), np.int64), np.repeat(levels[order], k)]))

    def layers(self, step: PrefetchStep) -> None:
        return None


class NextLayer:
    """Prefetch layer ℓ + 1's predicted experts of the verified tokens while layer ℓ runs."""

    name: ClassVar[str] = "next-layer"

    def reset(self, shape: CacheShape) -> None:
        self.N = shape.num_experts

    def drafting(self, step: PrefetchStep) -> None:
        return None

    def layers(self, step: PrefetchStep) -> list[list[int]]:
        tokens = [np.asarray(step.roots, dtype=np.int64)]
        chosen, keys = [], []
        for slot, pl in enumerate(step.pools):
            sel = np.asarray(pl["selected"] if pl["selected"] is not None else [], dtype=np.int64)
            if len(sel):
                chosen.append(np.asarray(pl["routes"], dtype=np.int64)[sel])
                keys.append(np.stack([sel, np.full(len(sel), slot), -np.asarray(pl["p"], dtype=np.float64)[sel]]))
        if chosen:   # most probable first, ties by slot, then id
            k = np.concatenate(keys, axis=1)
            tokens.append(np.concatenate(chosen)[np.lexsort((k[0], k[1], k[2]))])
        routes = np.concatenate(tokens, axis=0)            # [t, L, k]
        return [routes[:, layer, :].reshape(-1).tolist() for layer in range(routes.shape[1])]


class Oracle:
    """Prefetch, when the step starts, exactly what its forward will demand (an upper bound)."""

    name: ClassVar[str] = "oracle"
    knows_truth: ClassVar[bool] = True

    def reset(self, shape: CacheShape) -> None:
        self.N = shape.num_experts

    def drafting(self, step: PrefetchStep) -> PrefetchJobs | None:
        assert step.truth is not None
        tokens = [np.asarray(root, dtype=np.int64)[None] for root, _ in step.truth]
        chosen, keys = [], []
        for slot, ((_, nodes), pl) in enumerate(zip(step.truth, step.pools, strict=True)):
            sel = np.asarray(pl["selected"] if pl["selected"] is not None else [], dtype=np.int64)
            if len(sel):
                chosen.append(np.asarray(nodes, dtype=np.int64)[sel])
                keys.append(np.stack([sel, np.full(len(sel), slot), np.asarray(pl["levels"])[sel],
                                      -np.asarray(pl["p"], dtype=np.float64)[sel]]))
        if chosen:
            k = np.concatenate(keys, axis=1)
            tokens.append(np.concatenate(chosen)[np.lexsort((k[0], k[1], k[2], k[3]))])
        pairs = _flat(np.concatenate(tokens, axis=0), self.N)
        return PrefetchJobs(pairs, np.zeros(len(pairs), dtype=np.int64))

    def layers(self, step: PrefetchStep) -> None:
        return None


def prefetch_step(residency, requests, rows, selected) -> PrefetchStep:
    """What a prefetch policy sees of a step (:class:`simmoe.api.PrefetchStep`)."""
    pools = residency.pools
    trace = pools.trace
    roots, infos, truth = [], [], []
    knows = bool(getattr(residency.policy, "knows_truth", False))
    for j, row in enumerate(rows):
        root, nodes = pools.predictions(row)
        s = trace.pool_slice(row)
        roots.append(np.asarray(root))
        infos.append({"levels": trace.node_level[s], "p": trace.node_p[s], "routes": nodes,
                      "selected": None if selected is None else selected[j]})
        if knows:
            truth.append((trace.root_routes[row], trace.node_routes[s]))
    return PrefetchStep(roots=np.stack(roots), pools=tuple(infos), available=residency.engine.available(),
                        requests=tuple(requests), rows=tuple(int(r) for r in rows),
                        truth=tuple(truth) if knows else None)


def check_prefetch(policy: str) -> str:
    """Return ``policy`` if it names a prefetch policy (or ``none``), else raise :class:`SimmoeError` (one line)."""
    from simmoe.replay import plugins

    if policy != "none":
        plugins.load("prefetch", policy)
    return policy


def plan_draft_prefetch(available: np.ndarray, unused: np.ndarray, capacity: int, root_pred, node_pred,
                        node_level, node_p, levels: int) -> list[tuple[int, int]]:
    """The (layer, expert) copies ``draft`` makes for one request when copies share the compute stream.

    ``available`` bool [L, N] (resident or staged), ``unused`` [L] prefetched
    experts not yet used, ``capacity`` slots (or staging buffers) per layer.
    What the copy engine copies in its block after selection on a profile
    with ``overlap = false``; ``hwprobe live --prefetch draft`` makes exactly
    these copies.
    """
    from simmoe.replay.copy_engine import queue_pairs

    available = np.asarray(available, dtype=bool)
    N = available.shape[1]
    tokens = [np.asarray(root_pred, dtype=np.int64)[None]]
    if node_pred is not None and len(node_pred):
        lv = np.asarray(node_level, dtype=np.int64)
        order = draft_order(lv, node_p)
        order = order[lv[order] <= int(levels)]
        tokens.append(np.asarray(node_pred, dtype=np.int64)[order])
    flat = _flat(np.concatenate(tokens, axis=0), N)
    keep = queue_pairs(flat, available.reshape(-1), capacity - np.asarray(unused, dtype=np.int64), N)
    return [(int(p // N), int(p % N)) for p in flat[keep]]

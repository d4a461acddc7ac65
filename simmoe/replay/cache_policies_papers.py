"""Expert-cache policies of MoE runtimes and papers, each a :class:`simmoe.api.CachePolicy`.

Registered in ``pyproject.toml`` under ``simmoe.caches`` like simmoe's own
(:mod:`simmoe.replay.cache_policies`).  Each only ranks experts; the engine's
keep rule (:class:`simmoe.replay.caches.ExpertCache`) keeps the candidates of
largest score after every forward, per layer or under one budget across
layers.  docs/caches.md gives each definition with its source, and the
reading taken where a source leaves it open.

* ``least-stale`` — SpecMD (Hoang et al., arXiv 2602.03921): evict the expert
  longest absent as counted in its own (exponentially weighted) reuse interval.
* ``lfru`` — recency × frequency (vLLM RFC #38256's LFRU, in the reference
  implementation of vLLM PR #37190): keep the largest f / age, f the uses
  since the expert entered the cache, age the accesses of its layer since its
  last use.
* ``eam`` — MoE-Infinity's activation-aware caching (arXiv 2401.14361): the
  product of the current request's expert activation matrix (EAM, row
  normalised), the experts' in-cache use counts and a layer weight that
  favours the first layers (which prefetching cannot hide).

Scores are floats; ties go to the smaller (layer, id) (the engine's rule).
Every update is O(L·N) numpy work per forward.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from simmoe.api import CacheShape, ForwardEvent


class LeastStale:
    """SpecMD's Least-Stale: keep the experts that are least stale for their own reuse pattern.

    Per (layer, expert): ``last`` (the forward of its last demand) and an
    exponentially weighted reuse interval ``ī`` (the first interval seeds
    it, then ī ← (1 − α)·ī + α·Δ with α = 0.25).  After forward t an expert's
    staleness is (t − last) / max(ī, 1): its absence counted in its own reuse
    intervals (an expert not yet reused counts forwards, as LRU does).  The
    score is minus the staleness; the most stale expert goes first.  A
    prefetched expert counts as used when it lands (its interval is not
    updated).
    """

    name: ClassVar[str] = "least-stale"
    alpha: ClassVar[float] = 0.25
    # a forward's experts have staleness 0, every other expert more: forced admission changes nothing
    demand_first: ClassVar[bool] = True

    def reset(self, shape: CacheShape) -> None:
        L, N = shape.num_layers, shape.num_experts
        self._last = np.full((L, N), -1.0)
        self._interval = np.zeros((L, N))
        self._t = 0

    def observe(self, event: ForwardEvent) -> None:
        t = float(self._t)
        idx = np.flatnonzero(event.demand)            # only the demanded experts change
        last = self._last.reshape(-1)
        ival = self._interval.reshape(-1)
        prev, cur = last[idx], ival[idx]
        gap = t - prev
        seen = prev >= 0
        ival[idx] = np.where(seen & (cur == 0), gap,
                             np.where(seen, (1.0 - self.alpha) * cur + self.alpha * gap, cur))
        last[idx] = t
        self._t += 1

    def inserted(self, pairs: np.ndarray) -> None:
        self._last.reshape(-1)[pairs] = float(self._t - 1)

    def scores(self) -> np.ndarray:
        now = float(self._t - 1)
        return -(now - self._last) / np.maximum(self._interval, 1.0)


class LFRU:
    """LFRU: keep the largest f / (clock − last + 1), per layer (vLLM PR #37190's reference).

    Each layer has a clock that advances by one per access; within a forward
    a layer's hits are accessed before its misses, each in ascending id (the
    order simmoe's ``lru`` uses).  ``f`` counts the accesses since the expert
    last entered the cache: a miss (re)inserts it with f = 1, a hit adds 1.
    A prefetched expert enters with f = 1 at the clock of its arrival.
    """

    name: ClassVar[str] = "lfru"

    def reset(self, shape: CacheShape) -> None:
        L, N = shape.num_layers, shape.num_experts
        self._freq = np.zeros((L, N))
        self._last = np.zeros((L, N))
        self._clock = np.zeros(L)
        self.num_experts = N

    def observe(self, event: ForwardEvent) -> None:
        N = self.num_experts
        idx = np.flatnonzero(event.demand)            # by layer, then id
        hit = event.hits.reshape(-1)[idx]
        layer = idx // N
        # access order within a layer: its hits, then its misses, each in ascending id
        order = np.argsort(2 * layer + ~hit, kind="stable")
        idx, hit, layer = idx[order], hit[order], layer[order]
        per = np.bincount(layer, minlength=len(self._clock))
        start = np.cumsum(per) - per
        rank = np.arange(len(idx)) - start[layer] + 1
        self._last.reshape(-1)[idx] = self._clock[layer] + rank
        freq = self._freq.reshape(-1)
        freq[idx] = np.where(hit, freq[idx] + 1.0, 1.0)
        self._clock += per

    def inserted(self, pairs: np.ndarray) -> None:
        N = self.num_experts
        for p in np.asarray(pairs, dtype=np.int64).tolist():   # arrival order: one access each
            layer, e = divmod(p, N)
            self._clock[layer] += 1
            self._last[layer, e] = self._clock[layer]
            self._freq[layer, e] = 1.0

    def scores(self) -> np.ndarray:
        age = self._clock[:, None] - self._last
        age += 1.0
        return np.divide(self._freq, age, out=age)


class EAM:
    """MoE-Infinity's activation-aware cache priority (``priority_score``, decoder-only reading).

    ``eam[r]`` counts, per (layer, expert), the forwards of request r that
    demanded it (its expert activation matrix; at batch > 1 a forward's union
    is credited to each of its requests).  After a forward, the priority of
    (ℓ, e) is the product of three factors, each normalised to sum 1 and
    offset by 1e-6 as in the source: the EAM of the forward's requests with
    rows normalised (an empty row is uniform); the in-cache access count
    (accesses since the expert last entered the cache; uniform when none);
    and the layer weight 1 − ℓ/L for layers after the next forward's first
    layer (1 for ℓ = 0): early layers first, since prefetching hides the later ones.
    """

    name: ClassVar[str] = "eam"
    eps: ClassVar[float] = 1e-6

    def reset(self, shape: CacheShape) -> None:
        L, N = shape.num_layers, shape.num_experts
        self._eam: dict[int, np.ndarray] = {}
        self._current: tuple[int, ...] = ()
        self._visits = np.zeros((L, N))
        w = 1.0 - np.arange(L, dtype=np.float64) / L
        w[0] = 1.0
        self._layer = self._norm(np.repeat(w[:, None], N, axis=1))
        self._shape = (L, N)

    def _norm(self, x: np.ndarray) -> np.ndarray:
        s = x.sum()
        return (x / s if s > 0 else np.full(x.shape, 1.0 / x.size)) + self.eps

    def observe(self, event: ForwardEvent) -> None:
        idx = np.flatnonzero(event.demand)            # only the demanded experts change
        for r in event.requests:
            m = self._eam.get(r)
            if m is None:
                m = self._eam[r] = np.zeros(self._shape)
            m.reshape(-1)[idx] += 1.0
        self._current = tuple(event.requests)
        visits = self._visits.reshape(-1)
        visits[idx] = np.where(event.hits.reshape(-1)[idx], visits[idx] + 1.0, 1.0)

    def inserted(self, pairs: np.ndarray) -> None:
        self._visits.reshape(-1)[pairs] = 0.0       # cached, not yet accessed

    def scores(self) -> np.ndarray:
        L, N = self._shape
        mats = [self._eam[r] for r in self._current]
        act = mats[0] if len(mats) == 1 else np.sum(mats, axis=0) if mats else np.zeros((L, N))
        rows = act.sum(axis=1, keepdims=True)
        if rows.min() > 0:
            act = act / rows
        else:
            act = np.where(rows > 0, act / np.where(rows > 0, rows, 1.0), 1.0 / N)
        out = self._norm(act)
        out *= self._norm(self._visits)
        out *= self._layer
        return out

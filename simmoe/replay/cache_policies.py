"""simmoe's own cache policies, each a :class:`simmoe.api.CachePolicy` (registered in ``pyproject.toml``).

A policy only ranks experts; :class:`simmoe.replay.caches.ExpertCache` serves
the forwards and keeps, per layer, the candidates (resident ∪ demand) of
largest score within the slots, the forward's own experts first under forced
admission (module docstring there).  Scores here are distinct within a layer
by construction (``unique_scores``), so the keep rule needs no tie-break.

* ``lru`` — least recently used (SpecFit §4.1).  Within a forward, hits are
  used before misses (hits compute at once, misses after their copy lands),
  each group in ascending expert id; a stamp per expert records that order.
* ``lfu`` — least frequently used over the whole history (demands, resident
  or not), ties to the more recently used (LRU order as above): textbook LFU
  under forced admission; under bypass a just-missed expert with few uses is
  dropped at once.
* ``belady`` — the offline optimum (Belady's MIN) on the replay's own future
  demand: keeps the experts whose next demand comes soonest, ties to the
  smaller id.  Under each admission rule it minimises copies over every
  policy of that rule that copies only on demand (docs/caches.md), so it is a
  bound, not a deployable policy.
* ``static`` — the ``slots`` most popular experts per layer (popularity
  counted over the replay's demand, ties to the smaller id) are pinned:
  loaded at their first demand and kept; every other expert is copied each
  forward it is needed and never kept.  Under one budget across layers, the
  ``budget`` most popular experts of the model, ties to the smaller (layer, id).

Under one budget across layers every policy's scores are compared across
layers by the same keep rule; ``belady`` stays the offline optimum there
(docs/caches.md states the argument).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from simmoe.api import CacheShape, ForwardEvent
from simmoe.errors import CheckFailed, SimmoeError


class LRU:
    """Least recently used, per layer (SpecFit §4.1)."""

    name: ClassVar[str] = "lru"
    unique_scores: ClassVar[bool] = True
    # a forward's experts get the newest stamps, above every other expert: forced admission changes nothing
    demand_first: ClassVar[bool] = True
    # recency stamps stay below this, so that LFU can pack (frequency, stamp) in one int64
    STAMP_LIMIT: ClassVar[int] = 1 << 32

    def reset(self, shape: CacheShape) -> None:
        L, N = shape.num_layers, shape.num_experts
        self.num_experts = N
        # recency stamp: clock + (N if miss) + expert id, the clock advancing 2N per forward; -1 = never used
        self._stamp = np.full((L, N), -1, dtype=np.int64)
        self._ids = np.arange(N, dtype=np.int64)
        self._clock = 0

    def observe(self, event: ForwardEvent) -> None:
        N = self.num_experts
        if self._clock + 2 * N >= self.STAMP_LIMIT:
            self._renumber()
        # only the demanded experts change (hits ⊆ demand): misses last, hits before them
        flat = np.flatnonzero(event.demand)
        missed = ~event.hits.reshape(-1)[flat]
        np.put(self._stamp, flat, (flat % N) + (self._clock + N * missed))
        self._clock += 2 * N

    def inserted(self, pairs: np.ndarray) -> None:
        """Prefetched experts (flat, in arrival order) become the most recently used, in that order."""
        n = len(pairs)
        if self._clock + 2 * self.num_experts + n >= self.STAMP_LIMIT:
            self._renumber()
        self._stamp.reshape(-1)[pairs] = self._clock + np.arange(n, dtype=np.int64)
        self._clock += n

    def scores(self) -> np.ndarray:
        return self._stamp

    def _renumber(self) -> None:
        """Replace stamps by their rank within the layer (order kept): rare, O(L·N log N)."""
        used = self._stamp >= 0
        rank = np.argsort(np.argsort(np.where(used, self._stamp, -1), axis=1, kind="stable"), axis=1)
        self._stamp = np.where(used, rank, -1).astype(np.int64)
        self._clock = self.num_experts


class LFU(LRU):
    """Least frequently used over the whole history, ties to the least recently used."""

    name: ClassVar[str] = "lfu"
    demand_first: ClassVar[bool] = False      # a just-missed expert may have fewer uses than a resident

    def reset(self, shape: CacheShape) -> None:
        super().reset(shape)
        self._freq = np.zeros((shape.num_layers, shape.num_experts), dtype=np.int64)

    def observe(self, event: ForwardEvent) -> None:
        self._freq += event.demand
        super().observe(event)

    def scores(self) -> np.ndarray:
        # (frequency, recency) as one int64: frequency < 2^31 forwards, stamps < 2^32
        return (self._freq << 32) | np.maximum(self._stamp, 0)


class Belady:
    """Offline optimum (Belady's MIN, under either admission rule) on the known future of demand matrices.

    ``shape.future[t]`` must be the demand of the t-th forward; a mismatch
    raises :class:`CheckFailed`.  Next-use times are kept as sorted occurrence
    lists per (layer, expert): memory O(Σ demand).
    """

    name: ClassVar[str] = "belady"
    unique_scores: ClassVar[bool] = True
    needs_future: ClassVar[bool] = True

    def reset(self, shape: CacheShape) -> None:
        if shape.future is None:
            raise SimmoeError("cache policy 'belady' needs the future demand (a first pass over the replay)")
        L, N = shape.num_layers, shape.num_experts
        flats, times = [], []
        t = -1
        for t, d in enumerate(shape.future):
            d = np.asarray(d, dtype=bool)
            if d.shape != (L, N):
                raise SimmoeError(f"belady future[{t}] must be bool [{L}, {N}], got {list(d.shape)}")
            f = np.flatnonzero(d)
            flats.append(f)
            times.append(np.full(len(f), t, dtype=np.int64))
        self._horizon = t + 1
        flat = np.concatenate(flats) if flats else np.zeros(0, np.int64)
        when = np.concatenate(times) if times else np.zeros(0, np.int64)
        order = np.argsort(flat, kind="stable")  # stable: times stay ascending per expert
        self._occ = when[order]
        self._count = np.bincount(flat, minlength=L * N).astype(np.int64)
        self._start = np.concatenate([[0], np.cumsum(self._count)[:-1]]).astype(np.int64)
        self._shape = (L, N)
        self._ptr = np.zeros(L * N, dtype=np.int64)
        self._never = self._horizon + 1
        nxt = np.full(L * N, self._never, dtype=np.int64)
        has = self._count > 0
        nxt[has] = self._occ[self._start[has]]
        self._next = nxt
        self._ids = np.arange(N, dtype=np.int64)
        self._forwards = 0

    def observe(self, event: ForwardEvent) -> None:
        t = self._forwards
        flat = np.flatnonzero(event.demand)
        due = self._next == t
        if t >= self._horizon or len(flat) != int(due.sum()) or not due[flat].all():
            raise CheckFailed(f"belady cache: demand of forward {t} differs from the future it was given")
        self._ptr[flat] += 1
        p = self._ptr[flat]
        later = p < self._count[flat]
        self._next[flat] = self._never
        self._next[flat[later]] = self._occ[self._start[flat[later]] + p[later]]
        self._forwards += 1

    def scores(self) -> np.ndarray:
        # keep the soonest next use: largest key = -(next * N + id)
        L, N = self._shape
        return -(self._next.reshape(L, N) * N + self._ids)


class Static:
    """The ``slots`` most popular experts per layer are pinned (loaded at first demand, kept).

    Popularity is counted over the replay's demand (``shape.future``), or
    given to the constructor.
    """

    name: ClassVar[str] = "static"
    unique_scores: ClassVar[bool] = True
    needs_future: ClassVar[bool] = True

    def __init__(self, popularity: np.ndarray | None = None):
        self._popularity = popularity

    def reset(self, shape: CacheShape) -> None:
        L, N = shape.num_layers, shape.num_experts
        if self._popularity is not None:
            pop = np.asarray(self._popularity, dtype=np.float64)
        elif shape.future is not None:
            pop = np.zeros((L, N), dtype=np.int64)
            for d in shape.future:
                pop += d
        else:
            raise SimmoeError("cache policy 'static' needs expert popularity [L, N]")
        if pop.shape != (L, N):
            raise SimmoeError(f"static cache popularity must be [{L}, {N}], got {list(pop.shape)}")
        if not np.isfinite(pop).all():
            raise SimmoeError("static cache popularity must be finite")
        pinned = np.zeros((L, N), dtype=bool)
        if shape.budget is not None:
            # one budget: the most popular experts of the whole model, ties to the smaller (layer, id)
            top = np.argsort(-pop.reshape(-1), kind="stable")[:min(max(int(shape.budget), 0), L * N)]
            pinned.reshape(-1)[top] = True
        else:
            s = min(max(int(shape.slots), 0), N)
            # most popular first, ties to the smaller id (stable sort of -pop)
            order = np.argsort(-pop, axis=1, kind="stable")[:, :s]
            np.put_along_axis(pinned, order, True, axis=1)
        self.pinned = pinned
        self._scores = np.where(pinned, 0.0, -np.inf)

    def observe(self, event: ForwardEvent) -> None:
        pass

    def scores(self) -> np.ndarray:
        return self._scores

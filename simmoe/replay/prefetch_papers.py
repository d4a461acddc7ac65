"""Prefetch policies of MoE-Infinity and SpecMD, each a :class:`simmoe.api.PrefetchPolicy`.

Registered under ``simmoe.prefetch`` in ``pyproject.toml``.  Both queue their
copies in the drafting window (:class:`simmoe.api.PrefetchJobs`); the copy
engine drops what is already available, what does not fit the cache's room
(per layer, or the one budget across layers) and what cannot start before
the verification forward.  They compose with every selector and cache.
docs/caches.md gives the sources and the readings taken.

``eam`` (MoE-Infinity, arXiv 2401.14361; ``ExpertTracer.find_most_similar``,
``ExpertPredictor.predict`` and ``ExpertPrefetcher.prefetch_experts``)
    every forward adds its demand to the expert activation matrix (EAM) of
    each request it serves; a request that has left the batch joins the
    collection of past EAMs.  When a step begins, each request's EAM so far
    is matched to the past EAM of largest mean per-layer cosine similarity
    (rows normalised); the matched EAM, rows normalised and weighted by the
    layer decay 1 − ℓ/(L + 1), ranks every expert it activated.  The experts
    are queued most probable first (summed over the batch's requests), all at
    the step's start (drafting window), and again layer by layer (each layer's
    predicted experts while the layer before runs), which also serves
    selectors without a drafter.  No past EAM yet: nothing is prefetched.
``score`` (SpecMD, arXiv 2602.03921: score-based prefetching)
    each expert's score is the expected number of the step's tokens that
    route to it under the predicted routes: 1 for each root, a node's path
    probability for each draft node.  Scores grow as the drafter drafts; an
    expert is queued, with the release of the level at which its score first
    reaches :attr:`ScorePrefetch.threshold` (0.5), highest score first within
    a level.  Unlike a fixed top-k, the number of experts per layer follows
    the scores.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from simmoe.api import CacheShape, ForwardEvent, PrefetchJobs, PrefetchStep


class EAMPrefetch:
    """MoE-Infinity's activation-matrix prefetch (module docstring)."""

    name: ClassVar[str] = "eam"
    capacity: ClassVar[int] = 64          # past EAMs kept (the oldest leaves first)

    def reset(self, shape: CacheShape) -> None:
        self.L, self.N = shape.num_layers, shape.num_experts
        self._eam: dict[int, np.ndarray] = {}
        self._past: list[np.ndarray] = []          # row-normalised past EAMs, oldest first
        self._active: set[int] = set()
        self._seen = 0                               # forwards observed
        self._cached: tuple | None = None
        w = 1.0 - np.arange(self.L, dtype=np.float64) / (self.L + 1)
        self._decay = w[:, None]

    def observe(self, event: ForwardEvent) -> None:
        for r in event.requests:
            m = self._eam.get(r)
            if m is None:
                m = self._eam[r] = np.zeros((self.L, self.N))
            m += event.demand
        self._seen += 1

    def _retire(self, current: tuple[int, ...]) -> None:
        """Requests no longer in the batch have finished: their EAMs join the collection."""
        for r in sorted(self._active - set(current)):
            if r in self._eam:
                self._past.append(_rows(self._eam.pop(r)))
                if len(self._past) > self.capacity:
                    self._past.pop(0)
        self._active = set(current)

    def predict(self, eam: np.ndarray) -> np.ndarray | None:
        """The past EAM (rows normalised) most similar to ``eam``, or None without a past."""
        if not self._past:
            return None
        cur = _rows(eam)
        past = np.stack(self._past)                       # [C, L, N]
        dot = np.einsum("cln,ln->cl", past, cur)
        norms = np.linalg.norm(past, axis=2) * np.linalg.norm(cur, axis=1)[None]
        sim = np.where(norms > 0, dot / np.where(norms > 0, norms, 1.0), 0.0).mean(axis=1)
        return self._past[int(np.argmax(sim))]           # ties: the oldest

    def _score(self, step: PrefetchStep) -> np.ndarray:
        """Priority of every expert for the step's forward (zero: not predicted); once per step."""
        key = (self._seen, tuple(step.requests))
        if self._cached is not None and self._cached[0] == key:
            return self._cached[1]
        self._retire(tuple(step.requests))
        score = np.zeros((self.L, self.N))
        for r in step.requests:
            pred = self.predict(self._eam.get(r, np.zeros((self.L, self.N))))
            if pred is not None:
                score += pred * self._decay
        self._cached = (key, score)
        return score

    def drafting(self, step: PrefetchStep) -> PrefetchJobs | None:
        flat = self._score(step).reshape(-1)
        pairs = np.flatnonzero(flat > 0)
        if not len(pairs):
            return None
        pairs = pairs[np.lexsort((pairs, -flat[pairs]))]   # highest first, ties: smaller (layer, id)
        return PrefetchJobs(pairs, np.zeros(len(pairs), dtype=np.int64))

    def layers(self, step: PrefetchStep) -> list[list[int]]:
        """Layer by layer (also without a drafter): each layer's predicted experts, highest first."""
        score = self._score(step)
        out = []
        for row in score:
            ids = np.flatnonzero(row > 0)
            out.append(ids[np.lexsort((ids, -row[ids]))].tolist())
        return out


def _rows(m: np.ndarray) -> np.ndarray:
    s = m.sum(axis=1, keepdims=True)
    return np.where(s > 0, m / np.where(s > 0, s, 1.0), 0.0)


class ScorePrefetch:
    """SpecMD's score-based prefetch over the predicted routes (module docstring)."""

    name: ClassVar[str] = "score"
    threshold: ClassVar[float] = 0.5

    def reset(self, shape: CacheShape) -> None:
        self.L, self.N = shape.num_layers, shape.num_experts

    def drafting(self, step: PrefetchStep) -> PrefetchJobs | None:
        L, N = self.L, self.N
        offset = (np.arange(L, dtype=np.int64) * N)[:, None]
        score = np.zeros(L * N)
        roots = np.asarray(step.roots, dtype=np.int64)          # [b, L, k]
        for root in roots:
            np.add.at(score, (root + offset).reshape(-1), 1.0)
        queued = np.zeros(L * N, dtype=bool)
        pairs, levels = self._cross(score, queued, 0)
        depth = max((int(np.max(pl["levels"])) for pl in step.pools if len(pl["levels"])), default=0)
        for d in range(1, depth + 1):
            for pl in step.pools:
                at = np.flatnonzero(np.asarray(pl["levels"]) == d)
                if len(at):
                    routes = np.asarray(pl["routes"], dtype=np.int64)[at] + offset[None]   # [n, L, k]
                    weight = np.repeat(np.asarray(pl["p"], dtype=np.float64)[at], routes[0].size)
                    np.add.at(score, routes.reshape(-1), weight)
            p, lv = self._cross(score, queued, d)
            pairs, levels = pairs + p, levels + lv
        if not pairs:
            return None
        return PrefetchJobs(np.asarray(pairs, dtype=np.int64), np.asarray(levels, dtype=np.int64))

    def _cross(self, score: np.ndarray, queued: np.ndarray, level: int) -> tuple[list[int], list[int]]:
        """Experts whose score reaches the threshold at this level, highest first (ties: smaller index)."""
        new = np.flatnonzero((score >= self.threshold) & ~queued)
        queued[new] = True
        new = new[np.lexsort((new, -score[new]))]
        return new.tolist(), [level] * len(new)

    def layers(self, step: PrefetchStep) -> None:
        return None

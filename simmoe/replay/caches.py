"""Per-layer expert caches: which experts a forward finds on the GPU and which it copies.

A forward demands, in every layer, the union of the experts its tokens route
to (SpecFit Eq. 1): ``demand`` is a bool matrix ``[L, N]``.  In each layer an
expert that is resident is a *hit*; every other demanded expert is a *miss*
and is copied host-to-device exactly once in that forward, whoever else in
the forward needs it (SpecFit App. B).  Each layer has ``slots`` slots; the
state carries over between forwards and requests and starts empty (App. B).

Semantics shared by every policy (per layer, per forward):

* hits = |demand ∩ resident|, misses = |demand \\ resident|;
* afterwards the resident set is a subset of ``resident ∪ demand`` of size at
  most ``slots``, chosen by the policy.  When a forward's union exceeds the
  slots, a missed expert still passes through a slot (it is computed once its
  copy lands) and may be dropped again before the forward ends.

Policies (``POLICIES``):

* ``none`` — cleared before every forward: every demanded expert is a miss.
  ``slots == 0`` gives this behaviour under any policy name.
* ``lru`` — least recently used (the paper's).  Within a forward, hits are
  used before misses (hits compute at once, misses after their copy lands),
  each group in ascending expert id; the state keeps the ``slots`` most
  recently used experts.
* ``lfu`` — least frequently used, with frequencies counted over the whole
  history since the last reset (demands, resident or not); ties go to the
  more recently used (LRU order as above).  Keeps the ``slots`` experts of
  largest (frequency, recency).
* ``belady`` — the offline optimum (MIN with bypass) on the replay's own
  future demand: keeps the ``slots`` experts whose next demand comes
  soonest, ties to the smaller id.  It minimises copies over every policy
  that copies only on demand, so it is a bound, not a deployable policy.
* ``static`` — the ``slots`` most popular experts per layer (by a given
  popularity, ties to the smaller id) are pinned: loaded at their first
  demand and kept; every other expert is copied each forward it is needed
  and never kept.

Cost of :meth:`ExpertCache.forward`: O(L·N) numpy work per forward, plus one
O(L·N) partition over the layers when some layer overflows its slots.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from simmoe.errors import CheckFailed, SimmoeError

POLICIES = ("none", "lru", "lfu", "belady", "static")
_LOWEST = np.iinfo(np.int64).min


class ExpertCache:
    """Per-layer expert slots under one replacement policy.

    Counters (cumulative since the last :meth:`reset`): ``copies`` (misses),
    ``hits``, ``forwards``; ``demand`` = copies + hits.
    """

    policy = "base"

    def __init__(self, num_layers: int, num_experts: int, slots: int):
        if num_layers <= 0 or num_experts <= 0:
            raise SimmoeError(f"cache needs num_layers > 0 and num_experts > 0, got {num_layers}, {num_experts}")
        if slots < 0:
            raise SimmoeError(f"cache slots must be >= 0, got {slots}")
        self.num_layers = int(num_layers)
        self.num_experts = int(num_experts)
        self.slots = min(int(slots), self.num_experts)
        self.reset()

    # -- public -------------------------------------------------------------
    def reset(self) -> None:
        """Empty every layer and zero the counters (policy state included)."""
        self.resident = np.zeros((self.num_layers, self.num_experts), dtype=bool)
        self.copies = 0
        self.hits = 0
        self.forwards = 0
        self._reset_policy()

    @property
    def demand(self) -> int:
        return self.copies + self.hits

    @property
    def hit_rate(self) -> float:
        """Hits over demanded experts so far (0.0 before any demand)."""
        total = self.copies + self.hits
        return self.hits / total if total else 0.0

    def forward(self, demand: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Serve one forward's per-layer expert union; return (hits int[L], misses int[L])."""
        demand = np.asarray(demand)
        if demand.shape != (self.num_layers, self.num_experts) or demand.dtype != np.bool_:
            raise SimmoeError(f"demand must be bool [{self.num_layers}, {self.num_experts}], "
                              f"got {demand.dtype} {list(demand.shape)}")
        hit_mask = demand & self.resident
        hits = hit_mask.sum(axis=1)
        misses = demand.sum(axis=1) - hits
        self._update(demand, hit_mask, misses)
        self.forwards += 1
        self.hits += int(hits.sum())
        self.copies += int(misses.sum())
        return hits, misses

    # -- policy hooks -------------------------------------------------------
    def _reset_policy(self) -> None:
        pass

    def _update(self, demand: np.ndarray, hit_mask: np.ndarray, misses: np.ndarray) -> None:
        raise NotImplementedError

    # -- helpers --------------------------------------------------------------
    def _keep_largest(self, candidates: np.ndarray, key: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """Per layer, the ``slots`` candidates of largest ``key`` (keys unique among candidates).

        ``counts``: candidates per layer.  One partition over all layers (a
        layer within its slots keeps everything: its threshold is the lowest
        value): O(L·N) per forward.
        """
        if counts.max(initial=0) <= self.slots:
            return candidates
        masked = np.where(candidates, key, _LOWEST)
        cut = self.num_experts - self.slots
        threshold = np.partition(masked, cut, axis=1)[:, cut]
        return candidates & (masked >= threshold[:, None])


class NoCache(ExpertCache):
    """Cleared before every forward: every demanded expert is copied."""

    policy = "none"

    def _update(self, demand, hit_mask, misses):
        pass  # resident stays empty


class LRUCache(ExpertCache):
    """Least recently used, per layer (SpecFit §4.1)."""

    policy = "lru"
    # recency stamps stay below this, so that LFU can pack (frequency, stamp) in one int64
    STAMP_LIMIT = 1 << 32

    def _reset_policy(self):
        # recency stamp: clock + (N if miss) + expert id, the clock advancing 2N per forward; -1 = never used
        self._stamp = np.full((self.num_layers, self.num_experts), -1, dtype=np.int64)
        self._ids = np.arange(self.num_experts, dtype=np.int64)
        self._clock = 0
        self._count = np.zeros(self.num_layers, dtype=np.int64)   # resident experts per layer

    def _touch(self, demand, hit_mask):
        N = self.num_experts
        if self._clock + 2 * N >= self.STAMP_LIMIT:
            self._renumber()
        np.copyto(self._stamp, self._ids + (self._clock + N), where=demand)   # misses last
        np.copyto(self._stamp, self._ids + self._clock, where=hit_mask)       # hits before them
        self._clock += 2 * N

    def _renumber(self):
        """Replace stamps by their rank within the layer (order kept): rare, O(L·N log N)."""
        used = self._stamp >= 0
        rank = np.argsort(np.argsort(np.where(used, self._stamp, -1), axis=1, kind="stable"), axis=1)
        self._stamp = np.where(used, rank, -1).astype(np.int64)
        self._clock = self.num_experts

    def _priority(self):
        return self._stamp

    def _update(self, demand, hit_mask, misses):
        self._touch(demand, hit_mask)
        np.logical_or(self.resident, demand, out=self.resident)
        self._count += misses
        self.resident = self._keep_largest(self.resident, self._priority(), self._count)
        np.minimum(self._count, self.slots, out=self._count)


class LFUCache(LRUCache):
    """Least frequently used over the whole history, ties to the least recently used."""

    policy = "lfu"

    def _reset_policy(self):
        super()._reset_policy()
        self._freq = np.zeros((self.num_layers, self.num_experts), dtype=np.int64)

    def _priority(self):
        # (frequency, recency) as one int64: frequency < 2^31 forwards, stamps < 2^32
        return (self._freq << 32) | np.maximum(self._stamp, 0)

    def _update(self, demand, hit_mask, misses):
        self._freq += demand
        super()._update(demand, hit_mask, misses)


class BeladyCache(ExpertCache):
    """Offline optimum (MIN with bypass) on a known future of demand matrices.

    ``future[t]`` must be the demand of the t-th call to :meth:`forward`
    after a reset; a mismatch raises :class:`CheckFailed`.  Next-use times are
    kept as sorted occurrence lists per (layer, expert): memory O(Σ demand).
    """

    policy = "belady"

    def __init__(self, num_layers, num_experts, slots, future: Iterable[np.ndarray]):
        L, N = int(num_layers), int(num_experts)
        flats, times = [], []
        t = -1
        for t, d in enumerate(future):
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
        counts = np.bincount(flat, minlength=L * N).astype(np.int64)
        self._start = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        self._count = counts
        super().__init__(num_layers, num_experts, slots)

    def _reset_policy(self):
        L, N = self.num_layers, self.num_experts
        self._ptr = np.zeros(L * N, dtype=np.int64)
        self._never = self._horizon + 1
        nxt = np.full(L * N, self._never, dtype=np.int64)
        has = self._count > 0
        nxt[has] = self._occ[self._start[has]]
        self._next = nxt
        self._ids = np.arange(N, dtype=np.int64)

    def _update(self, demand, hit_mask, misses):
        t = self.forwards
        flat = np.flatnonzero(demand)
        due = self._next == t
        if t >= self._horizon or len(flat) != int(due.sum()) or not due[flat].all():
            raise CheckFailed(f"belady cache: demand of forward {t} differs from the future it was given")
        self._ptr[flat] += 1
        p = self._ptr[flat]
        later = p < self._count[flat]
        self._next[flat] = self._never
        self._next[flat[later]] = self._occ[self._start[flat[later]] + p[later]]
        nxt = self._next.reshape(self.num_layers, self.num_experts)
        # keep the soonest next use: largest key = -(next * N + id)
        key = -(nxt * self.num_experts + self._ids)
        candidates = self.resident | demand
        self.resident = self._keep_largest(candidates, key, candidates.sum(axis=1))


class StaticCache(ExpertCache):
    """The ``slots`` most popular experts per layer are pinned (loaded at first demand, kept)."""

    policy = "static"

    def __init__(self, num_layers, num_experts, slots, popularity):
        pop = np.asarray(popularity, dtype=np.float64)
        if pop.shape != (num_layers, num_experts):
            raise SimmoeError(f"static cache popularity must be [{num_layers}, {num_experts}], got {list(pop.shape)}")
        if not np.isfinite(pop).all():
            raise SimmoeError("static cache popularity must be finite")
        s = min(max(int(slots), 0), num_experts)
        # most popular first, ties to the smaller id (stable sort of -pop)
        order = np.argsort(-pop, axis=1, kind="stable")[:, :s]
        pinned = np.zeros((num_layers, num_experts), dtype=bool)
        np.put_along_axis(pinned, order, True, axis=1)
        self.pinned = pinned
        super().__init__(num_layers, num_experts, slots)

    def _update(self, demand, hit_mask, misses):
        self.resident |= demand & self.pinned


def make_cache(policy: str, num_layers: int, num_experts: int, slots: int, *,
               future: Sequence[np.ndarray] | None = None,
               popularity: np.ndarray | None = None) -> ExpertCache:
    """Build a cache.  ``slots == 0`` means no cache (policy ``none``) whatever ``policy`` says.

    ``belady`` needs ``future`` (the sequence of demand matrices the replay
    will present, in order); ``static`` needs ``popularity`` ``[L, N]``.
    """
    if policy not in POLICIES:
        raise SimmoeError(f"unknown cache policy {policy!r}; choose one of {', '.join(POLICIES)}")
    if slots is None or int(slots) < 0:
        raise SimmoeError(f"cache slots must be >= 0, got {slots}")
    if policy == "none" or int(slots) == 0:
        return NoCache(num_layers, num_experts, 0)
    if policy == "lru":
        return LRUCache(num_layers, num_experts, slots)
    if policy == "lfu":
        return LFUCache(num_layers, num_experts, slots)
    if policy == "belady":
        if future is None:
            raise SimmoeError("cache policy 'belady' needs the future demand (a first pass over the replay)")
        return BeladyCache(num_layers, num_experts, slots, future)
    if popularity is None:
        raise SimmoeError("cache policy 'static' needs expert popularity [L, N]")
    return StaticCache(num_layers, num_experts, slots, popularity)

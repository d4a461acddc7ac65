"""The expert cache: which experts a forward finds on the GPU, which it copies, which stay.

A forward demands, in every layer, the union of the experts its tokens route
to (SpecFit Eq. 1): ``demand`` is a bool matrix ``[L, N]``.  In each layer an
expert that is resident is a *hit*; every other demanded expert is a *miss*
and is copied host-to-device exactly once in that forward, whoever else in
the forward needs it (SpecFit App. B).  Each layer has ``slots`` slots; the
state carries over between forwards and requests and starts empty (App. B).

:class:`ExpertCache` owns that state and its rules, for any
:class:`simmoe.api.CachePolicy` (``simmoe.replay.cache_policies`` holds
simmoe's own; plugins are found by name, :mod:`simmoe.replay.plugins`):

* hits = |demand ∩ resident|, misses = |demand \\ resident|;
* the policy observes the forward, then the resident set becomes the
  candidates resident ∪ demand of largest policy score, at most ``slots`` per
  layer (a score of ``-inf`` is never kept; ties to the smaller id), under one
  of two admission rules (:data:`ADMISSIONS`): ``forced`` (the default, as
  engines do) keeps every expert the forward demanded before any other — the
  best ``slots`` of them by score when they are more — so a missed expert
  always takes a slot; ``bypass`` ranks demanded and resident experts alike,
  so a missed expert of low score is staged, used and dropped at once.  When a
  forward's union exceeds the slots, a missed expert still passes through a
  slot (it is computed once its copy lands) and may be dropped again before
  the forward ends;
* prefetched experts arriving between forwards (:meth:`ExpertCache.insert_many`,
  :meth:`ExpertCache.insert_layer`) become resident and displace the
  lowest-scored experts that are not unused prefetches themselves.

Every array a policy is handed is read-only — the forward's demand and hits,
the pairs of ``inserted``, ``shape.future`` — and so is ``shape.trace``'s
every column (a copy of the trace for a policy that is not simmoe's own,
:func:`read_only_trace`): a policy cannot change what the cache, the copy
engine, the timing or a later replay read.  Views, not copies: a few hundred
nanoseconds per forward.

With one ``budget`` of E experts across all layers (``--cache-experts`` /
``--cache-mib``) instead of ``slots`` per layer, the same rules hold over the
whole model: after each forward the E candidates of largest score are kept,
ties to the smaller (layer, id), and a prefetch displaces the lowest-scored
expert of any layer (docs/caches.md).

``none`` (or ``slots == 0``) is no cache at all: every demanded expert is a
miss (:class:`NoCache`).

Cost of :meth:`ExpertCache.forward`: O(L·N) numpy work per forward, plus one
O(L·N) partition over the layers when some layer overflows its slots.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from simmoe.api import CacheShape, ForwardEvent
from simmoe.errors import CheckFailed, SimmoeError
from simmoe.replay.plugins import read_only, read_only_trace, spec_of

POLICIES = ("none", "lru", "lfu", "belady", "static")
# what happens to a missed expert after its forward (docs/caches.md): it takes a slot, or may bypass the cache
ADMISSIONS = ("forced", "bypass")
# the modules of simmoe's own cache policies (module docstring of simmoe.replay.cache_policies)
OWN_POLICY_MODULES = frozenset({"simmoe.replay.cache_policies", "simmoe.replay.cache_policies_papers",
                                "simmoe.replay.cache_learned"})
_LOWEST = np.iinfo(np.int64).min
_HIGHEST = np.iinfo(np.int64).max


class ExpertCache:
    """Per-layer expert slots ranked by one cache policy.

    Counters (cumulative since the last :meth:`reset`): ``copies`` (misses),
    ``hits``, ``forwards``; ``demand`` = copies + hits.
    """

    def __init__(self, num_layers: int, num_experts: int, slots: int, policy: Any = None, *,
                 future: Sequence[np.ndarray] | None = None, seed: int = 0, trace: Any = None,
                 requests: tuple[int, ...] = (), budget: int | None = None, admission: str = "forced"):
        if num_layers <= 0 or num_experts <= 0:
            raise SimmoeError(f"cache needs num_layers > 0 and num_experts > 0, got {num_layers}, {num_experts}")
        if slots < 0:
            raise SimmoeError(f"cache slots must be >= 0, got {slots}")
        if budget is not None and int(budget) < 0:
            raise SimmoeError(f"cache budget must be >= 0 experts, got {budget}")
        self.admission = check_admission(admission)
        self.num_layers = int(num_layers)
        self.num_experts = int(num_experts)
        # one budget across layers: any layer may hold up to all its experts, the total at most `budget`
        self.budget: int | None = None if budget is None else min(int(budget), self.num_layers * self.num_experts)
        self._E = self.budget if self.budget is not None else 0
        self.slots: int = min(int(slots) if budget is None else self._E, self.num_experts)
        self.policy = policy
        # messages name the policy as the user typed it (a registered name or module:Name)
        self.name = "none" if policy is None else spec_of(policy)
        # simmoe's own policies return valid scores by construction (their tests check them): their hot path
        # skips the check every other policy's scores pass, and only they may promise distinct scores
        self._trusted = type(policy).__module__ in OWN_POLICY_MODULES
        self._unique = self._trusted and bool(getattr(policy, "unique_scores", False))
        # a policy of simmoe's own that ranks a forward's experts above all others (lru, least-stale) keeps
        # the same experts under both rules: its replay skips forcing (tests check the promise)
        self._forced = self.admission == "forced" and not (self._trusted and getattr(policy, "demand_first", False))
        self._inserted = getattr(policy, "inserted", None)
        self._shape = CacheShape(self.num_layers, self.num_experts, self.slots, budget=self.budget,
                                 future=None if future is None else tuple(_handed(d) for d in future),
                                 seed=seed, trace=handed_trace(policy, trace),
                                 requests=tuple(requests))
        self.reset()

    # -- public -------------------------------------------------------------
    def reset(self) -> None:
        """Empty every layer and zero the counters (the policy is reset too)."""
        self.resident = np.zeros((self.num_layers, self.num_experts), dtype=bool)
        self._count = np.zeros(self.num_layers, dtype=np.int64)   # resident experts per layer
        self.copies = 0
        self.hits = 0
        self.forwards = 0
        if self.policy is not None:
            self.policy.reset(self._shape)

    @property
    def demand(self) -> int:
        return self.copies + self.hits

    @property
    def hit_rate(self) -> float:
        """Hits over demanded experts so far (0.0 before any demand)."""
        total = self.copies + self.hits
        return self.hits / total if total else 0.0

    def forward(self, demand: np.ndarray, kind: str = "step", requests=(),
                positions=()) -> tuple[np.ndarray, np.ndarray]:
        """Serve one forward's per-layer expert union; return (hits int[L], misses int[L])."""
        demand = _handed(np.asarray(demand))
        if demand.shape != (self.num_layers, self.num_experts) or demand.dtype != np.bool_:
            raise SimmoeError(f"demand must be bool [{self.num_layers}, {self.num_experts}], "
                              f"got {demand.dtype} {list(demand.shape)}")
        hit_mask = demand & self.resident
        hit_mask.flags.writeable = False     # the policy's and the prefetch policy's observers read it
        self.last_hits = hit_mask            # what the forward found resident (for observers)
        hits = hit_mask.sum(axis=1)
        misses = demand.sum(axis=1) - hits
        self._update(demand, hit_mask, misses, kind, requests, positions)
        self.forwards += 1
        n_hits = int(np.count_nonzero(hit_mask))
        self.hits += n_hits
        self.copies += int(np.count_nonzero(demand)) - n_hits
        return hits, misses

    def insert_many(self, pairs: np.ndarray, per_layer: np.ndarray, protected: np.ndarray) -> None:
        """Prefetched experts (flat layer·N + expert, in arrival order) become resident.

        In a full layer each displaces the lowest-scored resident expert
        outside ``protected`` [L, N] (unused prefetches) and outside the new
        ones.  The caller guarantees protected + new ≤ slots per layer (under
        a budget: ≤ budget in all, and the lowest-scored expert of any layer goes).
        """
        if self._inserted is not None:
            self._inserted(_handed(pairs))      # read below, and by the copy engine after
        self.resident.reshape(-1)[pairs] = True
        self._count += per_layer
        if self.budget is not None:
            if int(self._count.sum()) > self._E:
                new = np.zeros(self.num_layers * self.num_experts, dtype=bool)
                new[pairs] = True
                self._keep_global(self._scores(), protected.reshape(-1) | new)
                if not self.resident.reshape(-1)[pairs].all():
                    raise CheckFailed("prefetch: the cache budget has no expert left to evict")
            return
        if self._count.max(initial=0) <= self.slots:
            return
        over = np.flatnonzero(self._count > self.slots)
        new = np.zeros((self.num_layers, self.num_experts), dtype=bool)
        new.reshape(-1)[pairs] = True
        forced = protected[over] | new[over]
        self.resident[over] = self._keep(self.resident[over], self._scores()[over], forced)
        self._count[over] = self.slots
        if not self.resident.reshape(-1)[pairs].all():     # forced ones rank first: no room was left
            raise CheckFailed("prefetch: a full layer has no expert left to evict")

    def insert_layer(self, layer: int, experts: np.ndarray, protected: np.ndarray) -> None:
        """:meth:`insert_many` for ``experts`` (ids, in order) of one ``layer``, ``protected`` [N].

        Next-layer prefetch inserts one layer at a time, on its hot path: this
        ranks that layer's candidates only (under a budget, every layer's, and
        ``protected`` must then be the whole [L, N] matrix).
        """
        n = len(experts)
        if self.budget is not None:
            self._insert_layer_global(layer, np.asarray(experts, dtype=np.int64), protected)
            return
        evict = max(0, int(self._count[layer]) + n - self.slots)
        if evict:
            cand = np.flatnonzero(self.resident[layer] & ~protected)
            if len(cand) < evict:
                raise CheckFailed("prefetch: a full layer has no expert left to evict")
            key = self._scores()[layer, cand]
            order = np.lexsort((cand, key)) if not self._unique else np.argsort(key)
            self.resident[layer, cand[order[:evict]]] = False
        if self._inserted is not None:
            self._inserted(_handed(layer * self.num_experts + np.asarray(experts, dtype=np.int64)))
        self._count[layer] += n - evict
        self.resident[layer, experts] = True

    # -- the keep rule ----------------------------------------------------------
    def _scores(self) -> np.ndarray:
        if self._trusted:
            return self.policy.scores()
        return check_scores(self.policy.scores(), self.name, self.num_layers, self.num_experts)

    def _update(self, demand, hit_mask, misses, kind, requests, positions) -> None:
        self.policy.observe(ForwardEvent(demand, hit_mask, self.forwards, kind, tuple(requests), tuple(positions)))
        np.logical_or(self.resident, demand, out=self.resident)
        self._count += misses
        scores = self._scores()
        if scores.dtype.kind == "f" and scores.min(initial=0.0) == -np.inf:     # some expert is never kept
            never = scores == -np.inf
            dropped = self.resident & never
            if dropped.any():
                self.resident &= ~never
                self._count -= dropped.sum(axis=1)
        if self.budget is not None:
            if int(self._count.sum()) > self._E:
                self._keep_global(scores, (demand & self.resident).reshape(-1) if self._forced else None)
            return
        if self._count.max(initial=0) > self.slots:
            if self._forced:
                self._keep_forced(demand, scores)
            else:
                # every layer at once: a layer within its slots keeps everything (its threshold is the lowest key)
                self.resident = self._keep(self.resident, scores, None)
            np.minimum(self._count, self.slots, out=self._count)

    def _keep_forced(self, demand: np.ndarray, scores: np.ndarray) -> None:
        """Forced admission, per layer over its slots: the forward's experts first, then the best of the rest.

        A layer whose forward demanded at least ``slots`` experts keeps the
        ``slots`` best of them (by score, ties to the smaller id) and nothing
        else; any other layer keeps all it demanded and fills the remaining
        slots with the best of its other residents.  A demanded expert of
        score -inf has already been dropped (never kept, whatever the rule).
        """
        dem = demand & self.resident
        full = dem.sum(axis=1) > self.slots
        if full.any():   # those layers choose among their demanded experts alone, with no rank forced
            cand = np.where(full[:, None], dem, self.resident)
            dem &= ~full[:, None]
        else:
            cand = self.resident
        # every layer at once, as without forcing: a layer within its slots keeps everything
        self.resident = self._keep(cand, scores, dem, fits=True)

    def _keep_global(self, scores: np.ndarray, forced: np.ndarray | None) -> None:
        """Under one budget: keep the ``budget`` resident experts of largest score (``forced`` [L·N] first).

        Ties go to the smaller flat index ``layer·N + id``, i.e. the smaller (layer, id).
        When the ``forced`` are more than the budget, the best of them are kept.
        """
        flat = self.resident.reshape(-1)
        cand = np.flatnonzero(flat)
        if len(cand) <= self._E:
            return
        key = scores.reshape(-1)[cand]
        if key.dtype.kind != "f":
            key = key.astype(np.int64, copy=False)
        # ascending (forced, score), then descending index: drop the head
        order = np.lexsort((-cand, key) if forced is None else (-cand, key, forced[cand]))
        drop = cand[order[:len(cand) - self._E]]
        flat[drop] = False
        self._count -= np.bincount(drop // self.num_experts, minlength=self.num_layers)

    def _insert_layer_global(self, layer: int, experts: np.ndarray, protected: np.ndarray) -> None:
        """:meth:`insert_layer` under one budget: evict the lowest-scored experts of any layer."""
        n = len(experts)
        N = self.num_experts
        evict = max(0, int(self._count.sum()) + n - self._E)
        if evict:
            cand = np.flatnonzero(self.resident.reshape(-1) & ~protected.reshape(-1))
            if len(cand) < evict:
                raise CheckFailed("prefetch: the cache budget has no expert left to evict")
            key = self._scores().reshape(-1)[cand]
            if key.dtype.kind != "f":
                key = key.astype(np.int64, copy=False)
            out = cand[np.lexsort((-cand, key))[:evict]]     # lowest score first, ties: the larger index
            self.resident.reshape(-1)[out] = False
            self._count -= np.bincount(out // N, minlength=self.num_layers)
        if self._inserted is not None:
            self._inserted(_handed(layer * N + experts))
        self._count[layer] += n
        self.resident[layer, experts] = True

    def _keep(self, candidates: np.ndarray, key: np.ndarray, forced: np.ndarray | None,
              fits: bool = False) -> np.ndarray:
        """Per row, the ``slots`` candidates of largest ``key`` (``forced`` ones first).

        One partition over the rows when keys are distinct (simmoe's own
        policies); otherwise ties go to the smaller expert id.  ``fits``: no
        row has more ``forced`` than slots, so forced keys (the top value) never
        tie at a row's threshold and distinct keys keep the one-partition path.
        """
        if key.dtype.kind == "f":
            top = np.inf
            low = -np.inf
        else:
            key = key.astype(np.int64, copy=False)
            top, low = _HIGHEST, _LOWEST
        if forced is not None and forced.any():
            key = np.where(forced, top, key)
        masked = np.where(candidates, key, low)
        cut = self.num_experts - self.slots
        threshold = np.partition(masked, cut, axis=1)[:, cut]
        unique = self._unique and (forced is None or fits or not forced.any())
        if not unique and masked.dtype == np.float64:
            return self._ties(candidates, masked, threshold[:, None])
        kept = candidates & (masked >= threshold[:, None])
        if unique:
            return kept
        over = np.flatnonzero(kept.sum(axis=1) > self.slots)
        if len(over):   # integer keys compared as float64, as a per-row sort by (-key, id) would
            sub = masked[over].astype(np.float64)
            kept[over] = self._ties(candidates[over], sub, np.partition(sub, cut, axis=1)[:, cut][:, None])
        return kept

    def _ties(self, cand: np.ndarray, key: np.ndarray, thr: np.ndarray) -> np.ndarray:
        """Per row, every candidate above the row's threshold (its slots-th largest key), then the first
        (smallest-id) candidates equal to it, up to the slots: ties at the threshold to the smaller id."""
        above = cand & (key > thr)
        at = cand & (key == thr)
        need = self.slots - above.sum(axis=1, keepdims=True)
        tied = np.flatnonzero(at.sum(axis=1) > need[:, 0])      # more equal to the threshold than room
        if len(tied):
            at[tied] &= np.cumsum(at[tied], axis=1) <= need[tied]
        return above | at


def check_scores(scores: Any, name: str, num_layers: int, num_experts: int) -> np.ndarray:
    """A policy's ``scores()`` as int64 or float64 [L, N], or one line naming the policy and what is wrong.

    Scores are real numbers (bool, integer or float), finite except ``-inf``
    (never keep): NaN compares false with everything, so the keep rule would
    rank it arbitrarily, and ``+inf`` is the rank the engine gives what it must
    keep.  O(L·N) numpy work per call.
    """
    what = f"cache policy {name!r}: scores()"
    want = f"scores must be a real numeric array [L, N] = [{num_layers}, {num_experts}]"
    try:
        s = np.asarray(scores)
    except Exception as exc:   # ragged lists and the like
        raise SimmoeError(f"{what} returned a {type(scores).__name__} that is no array "
                          f"({type(exc).__name__}: {exc}); {want}") from None
    if s.dtype.kind not in "biuf":
        raise SimmoeError(f"{what} returned {s.dtype} values; {want} (bool, integer or float)")
    if s.shape != (num_layers, num_experts):
        raise SimmoeError(f"{what} returned shape {list(s.shape)}; {want}")
    if s.dtype.kind == "f":
        s = s.astype(np.float64, copy=False)
        bad = np.isnan(s) | (s == np.inf)
        if bad.any():
            layer, expert = np.argwhere(bad)[0]
            raise SimmoeError(f"{what} returned {s[layer, expert]} at layer {layer}, expert {expert}; scores "
                              "must be finite (-inf: never keep)")
        return s
    if s.dtype.kind == "u" and s.dtype.itemsize == 8 and s.size and int(s.max()) > _HIGHEST:
        raise SimmoeError(f"{what} returned {int(s.max())}, beyond int64; {want}")
    return s.astype(np.int64, copy=False)


def check_admission(admission: Any) -> str:
    """``admission`` if it is one of :data:`ADMISSIONS`, else one line naming the choices."""
    if not isinstance(admission, str) or admission not in ADMISSIONS:
        raise SimmoeError(f"--admission {admission!r}: the admission rule is one of {', '.join(ADMISSIONS)} "
                          "(forced: every missed expert takes a slot, as engines do; bypass: it may be dropped "
                          "after its forward)")
    return admission


def _handed(a: np.ndarray) -> np.ndarray:
    """``a`` as a policy may see it: itself when already read-only, else a read-only view."""
    return read_only(a) if a.flags.writeable else a


def handed_trace(policy: Any, trace: Any, own: frozenset = OWN_POLICY_MODULES) -> Any:
    """The trace a policy (an instance or its class) is handed: the trace itself for simmoe's own (modules
    ``own``; the learned policy caches its model per trace object), else a :func:`read_only_trace` copy."""
    cls = policy if isinstance(policy, type) else type(policy)
    return trace if cls.__module__ in own else read_only_trace(trace)


class NoCache(ExpertCache):
    """No cache: every demanded expert is copied, nothing is kept."""

    def __init__(self, num_layers: int, num_experts: int, slots: int = 0, policy: Any = None, **_: Any):
        super().__init__(num_layers, num_experts, 0, None)
        self.name = "none"

    def _update(self, demand, hit_mask, misses, kind, requests, positions) -> None:
        pass  # resident stays empty


def builtin_policy(name: str, popularity: np.ndarray | None = None):
    """A new instance of one of simmoe's own cache policies (``none`` → None)."""
    from simmoe.replay import cache_policies as cp

    if name == "none":
        return None
    if name == "static":
        return cp.Static(popularity)
    classes = {"lru": cp.LRU, "lfu": cp.LFU, "belady": cp.Belady}
    if name not in classes:
        raise SimmoeError(f"unknown cache policy {name!r}; choose one of {', '.join(POLICIES)}")
    return classes[name]()


def make_cache(policy: Any, num_layers: int, num_experts: int, slots: int, *,
               future: Sequence[np.ndarray] | None = None, popularity: np.ndarray | None = None,
               seed: int = 0, trace: Any = None, requests: tuple[int, ...] = (),
               budget: int | None = None, admission: str = "forced") -> ExpertCache:
    """Build a cache.  ``slots == 0`` means no cache (policy ``none``) whatever ``policy`` says.

    ``budget``: when not None, one budget of experts across all layers instead
    of ``slots`` per layer (``budget == 0``: no cache).

    ``policy``: a name of simmoe's own policies or a :class:`simmoe.api.CachePolicy`
    instance.  ``belady`` needs ``future`` (the sequence of demand matrices the
    replay will present, in order); ``static`` needs ``popularity`` ``[L, N]``
    or ``future``.  ``admission``: one of :data:`ADMISSIONS` (module docstring).
    """
    check_admission(admission)
    if isinstance(policy, str) and policy not in POLICIES:
        raise SimmoeError(f"unknown cache policy {policy!r}; choose one of {', '.join(POLICIES)}")
    if slots is None or int(slots) < 0:
        raise SimmoeError(f"cache slots must be >= 0, got {slots}")
    if budget is not None and int(budget) < 0:
        raise SimmoeError(f"cache budget must be >= 0 experts, got {budget}")
    size = int(slots) if budget is None else int(budget)
    if policy == "none" or policy is None or size == 0:
        return NoCache(num_layers, num_experts)
    if isinstance(policy, str):
        if policy == "static" and popularity is None and future is None:
            raise SimmoeError("cache policy 'static' needs expert popularity [L, N]")
        policy = builtin_policy(policy, popularity)
    return ExpertCache(num_layers, num_experts, slots, policy, future=future, seed=seed, trace=trace,
                       requests=requests, budget=budget, admission=admission)

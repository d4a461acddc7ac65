"""Prefetching experts while the drafter runs: a sequential event model of whole cycles.

The event model of :mod:`simmoe.replay.timing` times one forward with the copy
engine idle at every layer's start, so layers are independent and a forward is
a sum of tabulated layer times.  Prefetching breaks that independence: copies
issued while the drafter drafts (or during the previous layer) occupy the copy
engine and the cache's slots when the forward needs them.  This module models
a replay as one sequence of events on three engines — the compute stream (the
drafter, attention, experts, commit), the copy engine (``copies_in_flight`` = c
lanes) and the host (selection) — carried across cycles and requests.

Prefetch policies (``--prefetch``; the idea is that of the offloading systems
SpecFit cites in §1 and §5 — MoE-Infinity, ProMoE, Pre-gated MoE — and of
SP-MoE's prefetch during drafting):

``none``
    no prefetch.  The model then equals :mod:`simmoe.replay.timing`'s event
    model exactly (tests/replay/test_prefetch.py).
``draft``
    when a cycle starts, the predicted experts of the root (every layer, in
    layer order) are queued; when level d of the pool has been drafted, those
    of the level's nodes, most probable first (path probability, ties by id),
    each node's layer after layer.  Copies may start until the verification
    forward starts (during drafting and selection: the copy engine's idle
    time); queued copies that have not started by then are dropped.
``next-layer``
    when layer ℓ's router has run, the predicted experts of layer ℓ + 1 of the
    verified tokens (root first, then the selected nodes, most probable first)
    are queued; they may start until layer ℓ + 1's router runs.
``oracle``
    as ``draft``, but queued at the cycle's start with perfect knowledge: the
    experts the forward will demand (the true routes of the root and of the
    selected nodes), in layer order.  A bound on prefetching during drafting
    (it knows the verified subtree and the routes before they exist), not on
    every prefetch scheme.

Predictions are those of :class:`simmoe.replay.route_prediction.RoutePredictor`
(``--route-accuracy a``, SpecFit §4.6; a = 1 is the trace's recorded routes,
i.e. the atlas that SpecFit's measurements and ``hwprobe record`` use), the same
predictions the selectors see.

Rules shared by the model and its simpy reference
(:mod:`simmoe.replay.prefetch_reference`):

* **The copy engine** has c lanes; a copy keeps its lane for its whole
  duration (non-preemptive).  Demand copies (the router has asked for an
  expert that is neither resident nor on its way) go first, FIFO; prefetch
  copies use the lanes only when no demand copy waits, FIFO in issue order, and
  start only before their window's deadline.  This is the link contention
  between prefetches and demand copies: a demand copy can wait for a prefetch
  copy already on the link.
* **Issue.**  A predicted (layer, expert) pair is queued only when it is not
  resident, not staged and not already queued in the same window.
* **Slots.**  A prefetch takes a slot of its layer when its copy starts.  With
  an LRU cache (``slots > 0``) it evicts the least recently used resident
  expert that is not itself an unused prefetch; when every slot of the layer
  holds an unused prefetch the job is skipped (prefetches never evict each
  other).  Without a cache (``slots = 0``) a prefetched expert waits in one of
  the layer's staging buffers (c by default; hwprobe's backend allocates them beside its buffers for copies in
  flight) until the next forward has passed; a full layer skips the job.
* **Demand.**  At layer ℓ's router, a demanded expert that is resident (or
  staged) is a hit — computed at once if it has landed, after its copy lands
  if its prefetch is still in flight; any other is a demand copy.  Experts
  compute on the compute stream in the order they are ready; the layer ends
  when the last has run (with ``overlap = false``: all experts compute after
  the layer's last copy has landed).  The cache is then updated as by
  :class:`simmoe.replay.caches.LRUCache`.
* **Counting.**  A prefetch is *useful* when a forward demands it before it
  leaves the cache, *wasted* when it is evicted, dropped from staging, or still
  unused when the replay ends.  Hits include prefetched experts; misses are
  demand copies only; H2D/token counts demand copies, ``prefetched_per_token``
  the prefetch copies.
* Prefill runs without prefetch and is timed as without it.

Cost: with ``draft`` and ``oracle`` the forward is the tabulated event model
except for its first layers while prefetch copies still hold the link; with
``next-layer`` every layer is stepped in Python.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from simmoe.errors import CheckFailed, SimmoeError
from simmoe.replay.caches import _LOWEST, LRUCache
from simmoe.replay.engine import ReplayResult
from simmoe.replay.prefetch_policies import check_prefetch
from simmoe.replay.timing import drawn_copy_forward, fixed_copy_layer_ends
from simmoe.replay.workers import run_groups, shared

PREFETCH_CACHES = ("lru", "none")
PREFETCH_SEED_SALT = 0x9F  # prefetch copy durations come from their own random stream

# per-cycle columns the prefetch model adds to a replay's cycle records
PREFETCH_CYCLE_COLUMNS = ("prefetched", "useful", "wasted")
# per-token counters it adds to a summary
PREFETCH_COUNTERS = ("prefetched_per_token", "useful_per_token", "wasted_per_token",
                     "saved_ms_per_token", "saved_pct")


def check_prefetch_setting(policy: str, *, profile, config, selectors=(), batch: int = 1,
                           trace=None) -> str:
    """Refuse, in one line, a prefetch setting the model cannot replay (``simmoe replay`` exits 2).

    Checked: a known policy; a profile that copies experts (not the resident
    regime); an LRU cache or none; the event timing model; ``--batch 1``;
    for ``draft``, a trace with draft pools (the source of the predictions);
    ``oracle`` not with a selector that selects from the prefetched experts.
    """
    from simmoe.replay.selectors import SELECTORS

    check_prefetch(policy)
    coupled = [s for s in selectors if getattr(SELECTORS[s], "uses_residency", False)]
    if policy == "none" and not coupled:
        return policy
    what = f"--prefetch {policy}" if policy != "none" else f"selector {coupled[0]!r}"
    if profile.resident:
        raise SimmoeError(f"{what}: profile {profile.name} keeps every expert on the device "
                          "(resident regime): there are no copies to prefetch")
    if config.cache_active and config.cache not in PREFETCH_CACHES:
        raise SimmoeError(f"{what} works with --cache lru or none (prefetches take the cache's "
                          f"slots), got {config.cache}")
    if config.timing != "event":
        raise SimmoeError(f"{what} needs --timing event (the prefetch model extends the event model), "
                          f"got {config.timing}")
    if batch > 1:
        raise SimmoeError(f"{what} is not combined with --batch {batch}: prefetching is modelled "
                          "for one request at a time (--batch 1)")
    if policy == "draft" and trace is not None and len(trace.node_parent) == 0:
        raise SimmoeError("--prefetch draft: the trace holds no draft pools, so no route predictions "
                          "to prefetch from (use --prefetch next-layer or oracle)")
    if policy == "oracle" and coupled:
        raise SimmoeError(f"--prefetch oracle knows the verified subtree before it is selected; "
                          f"selector {coupled[0]!r} selects from what has been prefetched, so the "
                          "two cannot be combined")
    return policy


# --------------------------------------------------------------------------
# slots: an LRU cache that takes prefetches, or staging buffers without a cache
# --------------------------------------------------------------------------
class PrefetchLRU(LRUCache):
    """:class:`LRUCache` that also takes prefetched experts between its forwards.

    :meth:`insert_many` makes experts resident and most recently used (their
    stamps lie between the previous forward's and the next forward's),
    evicting the least recently used unprotected experts of a full layer.
    Forwards behave exactly as :class:`LRUCache`'s.
    """

    policy = "lru"

    def insert_many(self, pairs: np.ndarray, per_layer: np.ndarray, protected: np.ndarray) -> None:
        """Insert the flat (layer·N + expert) ``pairs`` in order, each most recently used at its turn.

        In a full layer each insertion evicts the least recently used resident
        expert outside ``protected`` [L, N].  So a layer keeps its protected
        experts, the new ones (most recent) and, in the slots left, its most
        recently used others: the LRU update's own partition (keep the
        ``slots`` largest keys), with protected experts keyed above every
        stamp.  The caller guarantees protected + new ≤ slots per layer.
        """
        N = self.num_experts
        if self._clock + 2 * N + len(pairs) >= self.STAMP_LIMIT:
            self._renumber()
        self.resident.reshape(-1)[pairs] = True
        self._stamp.reshape(-1)[pairs] = self._clock + np.arange(len(pairs), dtype=np.int64)
        self._clock += len(pairs)
        self._count += per_layer
        if self._count.max(initial=0) <= self.slots:
            return
        over = np.flatnonzero(self._count > self.slots)
        key = self._stamp[over]
        kept = protected[over]
        if kept.any():
            key = np.where(kept, key + self.STAMP_LIMIT, key)
        masked = np.where(self.resident[over], key, _LOWEST)
        cut = self.num_experts - self.slots
        threshold = np.partition(masked, cut, axis=1)[:, cut]
        self.resident[over] = masked >= threshold[:, None]
        self._count[over] = self.slots
        if not self.resident.reshape(-1)[pairs].all():     # protected ones rank first: no room was left
            raise CheckFailed("prefetch: a full layer has no expert left to evict")


    def insert_layer(self, layer: int, experts: np.ndarray, protected: np.ndarray) -> None:
        """:meth:`insert_many` for ``experts`` (ids, in order) of one ``layer``, ``protected`` [N].

        Next-layer prefetch inserts one layer at a time, on its hot path: this
        sorts that layer's candidates only.
        """
        n = len(experts)
        if self._clock + 2 * self.num_experts + n >= self.STAMP_LIMIT:
            self._renumber()
        evict = max(0, int(self._count[layer]) + n - self.slots)
        if evict:
            cand = np.flatnonzero(self.resident[layer] & ~protected)
            if len(cand) < evict:
                raise CheckFailed("prefetch: a full layer has no expert left to evict")
            self.resident[layer, cand[np.argsort(self._stamp[layer, cand])[:evict]]] = False
        self._count[layer] += n - evict
        self.resident[layer, experts] = True
        self._stamp[layer, experts] = self._clock + np.arange(n, dtype=np.int64)
        self._clock += n


# --------------------------------------------------------------------------
# what one cycle needs, and what it gives
# --------------------------------------------------------------------------
@dataclass
class CycleInput:
    """One verification cycle as the model sees it.

    ``demand``: bool [L, N], the forward's true expert union (Eq. 1).
    ``root_pred`` [L, k] and ``node_pred`` [n, L, k]: predicted routes of the
    root and of the pool's nodes; ``node_level``, ``node_p``: the pool's levels
    and path probabilities; ``selected``: pool-local ids of S (ascending).
    """

    levels: int
    selector_ms: float
    n_tokens: int
    demand: np.ndarray
    root_pred: np.ndarray | None = None
    node_pred: np.ndarray | None = None
    node_level: np.ndarray | None = None
    node_p: np.ndarray | None = None
    selected: np.ndarray | None = None
    root_true: np.ndarray | None = None     # true routes of the root [L, k] (oracle)
    node_true: np.ndarray | None = None     # true routes of the pool's nodes [n, L, k] (oracle)


@dataclass
class CycleOutcome:
    draft_ms: float
    selector_ms: float
    forward_ms: float
    commit_ms: float
    hits: int
    misses: int
    prefetched: int
    useful: int
    wasted: int


@dataclass
class _Window:
    """The prefetch jobs of one issue window, FIFO: flat pairs, release times, the latest start.

    ``pos``: jobs before it have started (or been dropped); ``placed``: jobs
    before it hold their slots; ``cut``: jobs from it on belong to levels not
    drafted.  ``avail``: what was available (flat) when the window opened.
    """

    avail: np.ndarray
    pairs: list = field(default_factory=list)
    release: list = field(default_factory=list)
    levels: list = field(default_factory=list)
    pos: int = 0
    placed: int = 0
    deadline: float = math.inf
    deadline_hint: float = math.inf      # when the deadline will be, if known: bounds the jobs worth queuing
    issued: bool = False                 # some job was queued (``PrefetchModel._queued`` is not all false)


def queue_pairs(pairs: np.ndarray, taken: np.ndarray, room: np.ndarray, num_experts: int, *,
                limit: float = math.inf) -> np.ndarray:
    """Indices into ``pairs`` (flat layer·N + expert, in queue order) of the jobs a window queues.

    Left out: pairs marked in ``taken`` (available, or already queued), later
    repeats, per layer every pair beyond the layer's ``room``, and every pair
    after the first ``limit`` kept (a predicted route may name one expert
    twice).  O(n log n).
    """
    if not len(pairs) or room.max() <= 0 or limit <= 0:
        return np.zeros(0, dtype=np.int64)
    lay = pairs // num_experts
    idx = np.flatnonzero((room[lay] > 0) & ~taken[pairs])
    if not len(idx):
        return idx
    _, first = np.unique(pairs[idx], return_index=True)
    if len(first) < len(idx):
        idx = idx[np.sort(first)]
    lay = lay[idx]
    if np.any(np.bincount(lay, minlength=len(room)) > room):   # each layer's first `room` pairs
        order = np.argsort(lay, kind="stable")
        sl = lay[order]
        new_layer = np.empty(len(sl), dtype=bool)
        new_layer[0] = True
        np.not_equal(sl[1:], sl[:-1], out=new_layer[1:])
        heads = np.flatnonzero(new_layer)
        counts = np.empty(len(heads), dtype=np.int64)
        counts[:-1] = heads[1:] - heads[:-1]
        counts[-1] = len(sl) - heads[-1]
        rank = np.empty(len(idx), dtype=np.int64)
        rank[order] = np.arange(len(sl)) - np.repeat(heads, counts)
        idx = idx[rank < room[lay]]
    if len(idx) > limit:
        idx = idx[:int(limit)]
    return idx


def draft_order(node_level, node_p, levels: int | None) -> np.ndarray:
    """Pool-local ids of the nodes ``draft`` prefetches, in order: level by level, most probable first.

    Ties go to the lower id.  Only levels up to ``levels`` (None: every level).
    """
    node_level = np.asarray(node_level, dtype=np.int64)
    ids = np.arange(len(node_level))
    order = ids[np.lexsort((ids, -np.asarray(node_p, dtype=np.float64), node_level))]
    if levels is not None:
        order = order[node_level[order] <= int(levels)]
    return order


def draft_tokens(root_pred, node_pred, node_level, node_p, levels: int | None):
    """The routes ``draft`` prefetches, token after token: the root, then each level's nodes, most probable first.

    Returns (routes [t, L, k], each token's level: 0 for the root).  Only
    levels up to ``levels`` (None: every level).
    """
    tokens = [np.asarray(root_pred, dtype=np.int64)[None]]
    lv = [0]
    if node_pred is not None and len(node_pred):
        order = draft_order(node_level, node_p, levels)
        if len(order):
            tokens.append(np.asarray(node_pred, dtype=np.int64)[order])
            lv += np.asarray(node_level, dtype=np.int64)[order].tolist()
    return np.concatenate(tokens, axis=0), lv


def plan_draft_prefetch(available: np.ndarray, unused: np.ndarray, capacity: int, root_pred, node_pred,
                        node_level, node_p, levels: int) -> list[tuple[int, int]]:
    """The (layer, expert) copies ``draft`` prefetch makes when copies share the compute stream.

    ``available`` bool [L, N] (resident or staged), ``unused`` [L] prefetched
    experts not yet used, ``capacity`` slots (or staging buffers) per layer.
    What :class:`PrefetchModel` copies in its block after selection on a
    profile with ``overlap = false``; ``hwprobe live --prefetch draft`` makes
    exactly these copies on the CPU.
    """
    available = np.asarray(available, dtype=bool)
    L, N = available.shape
    routes, _ = draft_tokens(root_pred, node_pred, node_level, node_p, levels)
    flat = (routes + (np.arange(L, dtype=np.int64) * N)[:, None][None]).reshape(-1)
    keep = queue_pairs(flat, available.reshape(-1), capacity - np.asarray(unused, dtype=np.int64), N)
    return [(int(p // N), int(p % N)) for p in flat[keep]]


class PrefetchModel:
    """The sequential event model of a replay with prefetching (module docstring).

    ``timer``: the replay's :class:`~simmoe.replay.timing.CycleTimer` (its
    profile, random stream of demand copies, drafting and commit times).
    ``record(track, name, category, start_ms, end_ms, args)``, when given,
    receives every event (``simmoe.replay.timeline``); every layer is then
    stepped, so its events exist.
    """

    def __init__(self, timer, num_layers: int, num_experts: int, slots: int, policy: str = "none", *,
                 record: Callable | None = None, staging: int | None = None):
        check_prefetch(policy)
        p = timer.profile
        if p.resident:
            raise SimmoeError(f"profile {p.name} is resident: the prefetch model needs copies")
        self.timer, self.profile, self.policy = timer, p, policy
        self.L, self.N = int(num_layers), int(num_experts)
        self.c = int(p.copies_in_flight)
        self.e = float(p.expert_ms)
        self.x = float(timer.copy_mean)
        self.random = bool(timer.random_copies)
        self.overlap = bool(p.overlap)
        self.serial = not self.overlap        # copies share the compute stream: prefetches block it too
        self.slots = min(int(slots), self.N)
        self.cache = PrefetchLRU(self.L, self.N, self.slots) if self.slots > 0 else None
        self.staged = np.zeros((self.L, self.N), dtype=bool)
        self.staged_count = np.zeros(self.L, dtype=np.int64)
        self.pf_unused = np.zeros((self.L, self.N), dtype=bool)
        self.pf_count = np.zeros(self.L, dtype=np.int64)
        self.inflight: list[dict] = [{} for _ in range(self.L)]   # per layer: expert -> landing (absolute)
        self._inflight_layers: set[int] = set()                    # layers with an entry in `inflight`
        self.lanes = [0.0] * self.c
        self.now = 0.0
        self.rng = np.random.default_rng((int(timer.seed), PREFETCH_SEED_SALT))
        self.record = record
        self._table = None
        self._offset = (np.arange(self.L, dtype=np.int64) * self.N)[:, None]
        self._queued = np.zeros(self.L * self.N, dtype=bool)
        self._pending = np.zeros(self.L, dtype=np.int64)       # queued, not yet started, per layer
        self.staging = self.c if staging is None else int(staging)
        self._capacity = self.slots if self.cache is not None else self.staging
        self._window: _Window | None = None
        self._cycle = None
        self._carry_wasted = 0          # waste seen outside a cycle (prefill), charged to the next cycle
        self._carry_useful = 0          # prefetches a prefill used, charged to the next cycle
        self.extra_selector_ms = 0.0    # time the availability callbacks took (not selector time)

    # -- state ----------------------------------------------------------------
    def available(self) -> np.ndarray:
        """bool [L, N]: experts resident, staged, or prefetched and on their way."""
        if self.cache is not None:
            return self.cache.resident | self.staged
        return self.staged.copy()

    def _layer_table(self, h: np.ndarray, m: np.ndarray) -> np.ndarray:
        need = int(max(h.max(initial=0), m.max(initial=0)))
        if self._table is None or need >= self._table.shape[0]:
            size = max(64, 2 * need + 1)
            hh, mm = np.meshgrid(np.arange(size), np.arange(size), indexing="ij")
            self._table = fixed_copy_layer_ends(hh, mm, self.e, self.x, self.c, self.overlap)
        return self._table

    def _copy_time(self) -> float:
        if not self.random:
            return self.x
        t = self.timer
        if t.samples is not None:
            return float(t.samples[self.rng.integers(0, len(t.samples))])
        shape, scale = t._gamma
        return float(self.rng.gamma(shape, scale))

    # -- prefetch jobs --------------------------------------------------------
    def _open(self, deadline: float = math.inf) -> None:
        """Open an issue window; what it may queue is judged against the state now."""
        self._queued[:] = False
        self._pending[:] = 0
        # with a cache nothing is staged: prefetches go to its slots
        avail = (self.cache.resident if self.cache is not None else self.staged).reshape(-1).copy()
        self._window = _Window(avail=avail, deadline=deadline)

    def _room(self) -> np.ndarray:
        """Per layer, slots (or staging buffers) not holding or promised to an unused prefetch."""
        return self._capacity - self.pf_count - self._pending

    def _issue(self, pairs: np.ndarray, release, level=0, *, limit: float = math.inf) -> bool:
        """Queue the flat (layer·N + expert) ``pairs`` in order; ``release``, ``level``: per pair or one value.

        Left out (:func:`queue_pairs`): pairs available when the window
        opened, pairs already queued, repeats, and pairs beyond their layer's
        free capacity — within a window that capacity only shrinks, so those
        jobs would be skipped when their turn came — and all after the first
        ``limit`` kept.  Returns whether some layer has room left.
        """
        w = self._window
        room = self._room()
        if w is None or not len(pairs):
            return bool(room.max() > 0)
        pairs = np.asarray(pairs, dtype=np.int64)
        keep = queue_pairs(pairs, w.avail | self._queued if w.issued else w.avail, room, self.N, limit=limit)
        if not len(keep):
            return bool(room.max() > 0)
        pairs = pairs[keep]
        n = len(pairs)
        per_layer = np.bincount(pairs // self.N, minlength=self.L)
        self._pending += per_layer
        self._queued[pairs] = True
        w.issued = True
        w.pairs.extend(pairs.tolist())
        if np.ndim(release):
            w.release.extend(np.asarray(release, dtype=np.float64)[keep].tolist())
        else:
            w.release.extend([float(release)] * n)
        if np.ndim(level):
            w.levels.extend(np.asarray(level, dtype=np.int64)[keep].tolist())
        else:
            w.levels.extend([int(level)] * n)
        return bool((room > per_layer).any())

    def _job_limit(self) -> float:
        """How many jobs the window can start at most (fixed copy times, deadline known), else infinity.

        c lanes, each starting at most one copy per copy time before the deadline.
        """
        w = self._window
        if not self.random and self.x > 0 and math.isfinite(w.deadline_hint):
            return self.c * (math.ceil((w.deadline_hint - self._t0) / self.x) + 1)
        return math.inf

    def _issue_tokens(self, routes: np.ndarray, releases, levels, order: np.ndarray | None = None) -> bool:
        """Queue tokens' routes [t, L, k] token after token, each layer after layer.

        ``order``: queue the tokens ``routes[order]`` instead.  The same as
        issuing token after token (:meth:`_issue`): the pairs already taken
        are dropped first, in one pass over every token, then the rest are
        queued in a few prefixes sized by the jobs the window can still start
        (:meth:`_job_limit`).  Returns whether the window can take more jobs.
        """
        w = self._window
        limit = self._job_limit()
        t = len(order) if order is not None else len(routes)
        if not t:
            return len(w.pairs) < limit
        L, k = routes.shape[1], routes.shape[2]
        tok = routes[order] if order is not None else routes
        flat = (np.asarray(tok, dtype=np.int64) + self._offset[None]).reshape(-1)
        if t == 1:
            room = self._issue(flat, float(releases[0]), int(levels[0]), limit=limit - len(w.pairs))
        else:
            taken = w.avail | self._queued if w.issued else w.avail
            cand = np.flatnonzero(~taken[flat])
            releases = np.asarray(releases, dtype=np.float64)
            levels = np.asarray(levels, dtype=np.int64)
            room, i = True, 0
            while room and i < len(cand) and len(w.pairs) < limit:
                # a prefix of the candidates, twice the jobs still wanted (repeats are common), is usually enough
                need = limit - len(w.pairs)
                seg = cand[i:] if not math.isfinite(need) else cand[i:i + max(2 * int(need), 64)]
                tokens = seg // (L * k)
                room = self._issue(flat[seg], releases[tokens], levels[tokens], limit=need)
                i += len(seg)
        return room and len(w.pairs) < limit

    def _run(self, until: float) -> None:
        """Start the window's queued jobs whose start time is before ``until`` (and its deadline).

        The queue holds no job that would be skipped (:meth:`_issue`), so the
        start times are list scheduling on the c lanes, in queue order.
        """
        w = self._window
        if w is None:
            return
        lanes, pairs, release = self.lanes, w.pairs, w.release
        c, n, N = self.c, len(w.pairs), self.N
        record = self.record
        i = w.pos
        last = [-1] * c          # the job each lane took last: the only ones that can still be in flight
        if record is None and not self.random and c <= 2:
            i = self._run_fixed(i, min(w.deadline, until), last)
        else:
            while i < n:
                if c == 1:
                    k = 0
                elif c == 2:
                    k = 0 if lanes[0] <= lanes[1] else 1
                else:
                    k = min(range(c), key=lanes.__getitem__)
                rel = release[i]
                start = lanes[k] if lanes[k] > rel else rel
                if start >= w.deadline or start >= until:
                    break
                end = start + (self.x if not self.random else self._copy_time())
                lanes[k] = end
                last[k] = pairs[i]
                if record is not None:
                    layer, expert = divmod(pairs[i], N)
                    record(f"copy {k}", f"prefetch L{layer} E{expert}", "prefetch", start, end,
                           {"layer": layer, "expert": expert})
                i += 1
        w.pos = i
        for k, pair in enumerate(last):
            if pair >= 0:
                self.inflight[pair // N][pair % N] = lanes[k]
                self._inflight_layers.add(pair // N)

    def _run_fixed(self, i: int, bound: float, last: list) -> int:
        """:meth:`_run`'s loop for fixed copy times, one or two lanes, nothing recorded (the hot case).

        The same choices and the same float operations as the general loop,
        with the lanes in locals.  Returns the first job not started.
        """
        w = self._window
        release, n, x = w.release, len(w.pairs), self.x
        lanes = self.lanes
        ja = jb = -1             # the job each lane took last
        if self.c == 1:
            a = lanes[0]
            while i < n:
                rel = release[i]
                start = a if a > rel else rel
                if start >= bound:
                    break
                a = start + x
                ja = i
                i += 1
            lanes[0] = a
        else:
            a, b = lanes[0], lanes[1]
            while i < n:
                rel = release[i]
                if a <= b:
                    start = a if a > rel else rel
                    if start >= bound:
                        break
                    a = start + x
                    ja = i
                else:
                    start = b if b > rel else rel
                    if start >= bound:
                        break
                    b = start + x
                    jb = i
                i += 1
            lanes[0], lanes[1] = a, b
        for k, j in enumerate((ja, jb)[:self.c]):
            if j >= 0:
                last[k] = w.pairs[j]
        return i

    def _place(self) -> None:
        """Started prefetches take their slots (or staging buffers), in order."""
        w = self._window
        if w is None or w.placed >= w.pos:
            return
        pairs = np.asarray(w.pairs[w.placed:w.pos], dtype=np.int64)
        w.placed = w.pos
        lay = pairs // self.N
        per_layer = np.bincount(lay, minlength=self.L)
        self._pending -= per_layer
        if self.cache is None:
            self.staged.reshape(-1)[pairs] = True
            self.staged_count += per_layer
        else:
            self.cache.insert_many(pairs, per_layer, self.pf_unused)
        self.pf_unused.reshape(-1)[pairs] = True
        self.pf_count += per_layer
        self._cycle["prefetched"] += len(pairs)

    def _close(self) -> None:
        """Place what started; drop the jobs that did not."""
        w = self._window
        if w is None:
            return
        self._place()
        if w.pos < len(w.pairs):
            self._pending -= np.bincount(np.asarray(w.pairs[w.pos:], dtype=np.int64) // self.N, minlength=self.L)
        self._window = None

    # -- the forwards ------------------------------------------------------------
    def prefill(self, prompt_len: int, demand: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        """A request's prefill: through the cache as without prefetch, timed by the event model."""
        demand = np.asarray(demand, dtype=bool)
        if self.pf_count.any():
            used = demand & self.pf_unused
            self._carry_useful += int(used.sum())
            self.pf_unused &= ~used
        if self.cache is not None:
            h, m = self.cache.forward(demand)
        else:
            h = (demand & self.staged).sum(axis=1)
            m = demand.sum(axis=1) - h
        self._after_forward()
        ms = self.timer.prefill_ms(int(prompt_len), h, m)
        if self.record is not None:
            self.record("compute", "prefill", "prefill", self.now, self.now + ms,
                        {"prompt_tokens": int(prompt_len), "copies": int(m.sum())})
        self.now += ms
        return ms, h, m

    def _after_forward(self) -> None:
        """Waste after a forward: unused prefetches evicted by the LRU update, or staging emptied."""
        if not self.pf_count.any() and (self.cache is not None or not self.staged_count.any()):
            return
        if self.cache is not None:
            lost = self.pf_unused & ~self.cache.resident
        else:
            lost = self.pf_unused.copy()
            self.staged[:] = False
            self.staged_count[:] = 0
        n = int(lost.sum())
        if n:
            self.pf_unused &= ~lost
            if self._cycle is not None:
                self._cycle["wasted"] += n
            else:
                self._carry_wasted += n
        self.pf_count = self.pf_unused.sum(axis=1)

    def begin_cycle(self, inp: CycleInput, levels: int | None = None, selector_ms: float | None = None) -> None:
        """Start a cycle at ``self.now``: open the drafting window and queue its prefetches.

        ``draft``: the root's predicted pairs (released now), then each level's
        nodes, most probable first (released when the level has been drafted);
        ``levels`` (when known) limits them to the drafted levels.  ``oracle``:
        the true routes of the root and of the selected nodes, released now.
        ``selector_ms`` (when known) bounds how many jobs can start.
        """
        self._cycle = {"prefetched": 0, "useful": self._carry_useful, "wasted": self._carry_wasted}
        self._carry_useful = 0
        self._carry_wasted = 0
        self._t0 = self.now
        self._levels_run = 0
        self._levels_known = levels is not None
        self._inp = inp
        if self.policy not in ("draft", "oracle") or levels == 0:   # prefetch while drafting: cycles that draft
            return
        self._open()
        w = self._window
        if levels is not None and selector_ms is not None and not self.serial:
            w.deadline_hint = self._t0 + (self.timer.draft_ms(levels) if levels > 0 else 0.0) + selector_ms
            if w.deadline_hint <= self._t0:
                return          # no drafting, no selection: no job could start
        L = self.L
        if self.policy == "draft":
            if inp.root_pred is None:
                return
            root = np.asarray(inp.root_pred, dtype=np.int64)[None]
            assert root.shape[1] == L
            more = self._issue_tokens(root, [self._t0], [0])
            if not more or inp.node_pred is None or not len(inp.node_pred):
                return
            order = draft_order(inp.node_level, inp.node_p, levels)
            lv = np.asarray(inp.node_level, dtype=np.int64)[order]
            p = self.profile
            releases = self._t0 + (p.draft_fixed_ms + p.draft_level_ms * lv)    # level_time, per node
            self._issue_tokens(inp.node_pred, releases, lv, order=order)
            return
        sel = np.asarray(inp.selected if inp.selected is not None else [], dtype=np.int64)
        tokens = [np.asarray(inp.root_true, dtype=np.int64)[None]]
        if len(sel):
            p = np.asarray(inp.node_p, dtype=np.float64)[sel]
            lev = np.asarray(inp.node_level, dtype=np.int64)[sel]
            tokens.append(np.asarray(inp.node_true, dtype=np.int64)[sel[np.lexsort((sel, lev, -p))]])
        routes = np.concatenate(tokens, axis=0)
        assert routes.shape[1] == L
        self._issue_tokens(routes, [self._t0] * len(routes), [0] * len(routes))

    def level_time(self, d: int) -> float:
        """Absolute time at which drafting level ``d`` ends (d >= 1)."""
        p = self.profile
        return self._t0 + (p.draft_fixed_ms + p.draft_level_ms * d)

    def drafted(self, d: int) -> np.ndarray:
        """Level ``d`` has been drafted: run the copy engine until then.

        Returns what is available at that moment (bool [L, N]: resident,
        staged, or prefetched and on its way) — what a prefetch-aware selector
        sees after drafting level d.
        """
        t0 = time.perf_counter()
        if d > self._levels_run and not self.serial:
            self._run(self.level_time(d))
            self._place()
            self._levels_run = d
        out = self.available()
        self.extra_selector_ms += (time.perf_counter() - t0) * 1e3
        return out

    def end_cycle(self, inp: CycleInput, levels: int, selector_ms: float) -> CycleOutcome:
        """Finish the cycle: drafting up to ``levels``, selection, the forward, commit."""
        timer = self.timer
        draft_ms = float(timer.draft_ms(levels)) if levels > 0 else 0.0
        t0 = self._t0
        F = t0 + draft_ms + selector_ms
        if self.record is not None:
            p = self.profile
            if levels > 0 and p.draft_fixed_ms > 0:
                self.record("compute", "draft (fixed)", "draft", t0, t0 + p.draft_fixed_ms, {})
            for d in range(1, levels + 1):
                self.record("compute", f"draft level {d}", "draft", self.level_time(d - 1), self.level_time(d),
                            {"level": d})
            if selector_ms > 0:
                self.record("host", "select", "select", t0 + draft_ms, F, {})
        w = self._window
        levels_known = self._levels_known
        if w is not None and levels == 0:      # nothing drafted (a coupled selector's empty pool): no window
            w.deadline = -math.inf
            self._close()
            w = None
        if w is not None:
            if not levels_known and any(lv > levels for lv in w.levels[w.pos:]):   # levels not drafted
                tail = list(zip(w.pairs[w.pos:], w.release[w.pos:], w.levels[w.pos:], strict=True))
                cut = [pr for pr, _, lv in tail if lv > levels]
                self._pending -= np.bincount(np.asarray(cut, dtype=np.int64) // self.N, minlength=self.L)
                del w.pairs[w.pos:], w.release[w.pos:], w.levels[w.pos:]
                for pr, rl, lv in tail:
                    if lv <= levels:
                        w.pairs.append(pr)
                        w.release.append(rl)
                        w.levels.append(lv)
            if self.serial:       # the copies run after selection, on the compute stream's time
                w.release = [F] * len(w.pairs)
                self._run(math.inf)
                self._close()
                if self._cycle["prefetched"]:
                    block = max(self.lanes) - F
                    F += block
                    draft_ms += block
            else:
                w.deadline = F
                self._run(F)
                self._close()
        fwd, h, m = self._forward(F, inp)
        end = F + fwd
        commit = timer.commit_ms()
        if self.record is not None and commit > 0:
            self.record("compute", "commit", "commit", end, end + commit, {})
        self.now = end + commit
        c = self._cycle
        self._cycle = None
        return CycleOutcome(draft_ms, float(selector_ms), fwd, commit, int(h.sum()), int(m.sum()),
                            c["prefetched"], c["useful"], c["wasted"])

    def cycle(self, inp: CycleInput) -> CycleOutcome:
        """A whole cycle whose drafted levels and selection are known in advance (every plain selector)."""
        self.begin_cycle(inp, int(inp.levels), float(inp.selector_ms))
        return self.end_cycle(inp, int(inp.levels), float(inp.selector_ms))

    def finish(self) -> int:
        """Prefetched experts never used when the replay ends (counted as wasted)."""
        n = int(self.pf_unused.sum()) + self._carry_wasted
        self.pf_unused[:] = False
        self._carry_wasted = 0
        return n

    # -- one forward ------------------------------------------------------------
    def _forward(self, F: float, inp: CycleInput) -> tuple[float, np.ndarray, np.ndarray]:
        timer, p = self.timer, self.profile
        demand = np.asarray(inp.demand, dtype=bool)
        L = self.L
        n_tokens = int(inp.n_tokens)
        nonexpert = p.forward_ms + p.token_ms * max(n_tokens - 1, 0)
        if timer.cache:
            nonexpert += p.cache_overhead_ms
        a = nonexpert / L
        if self.policy != "next-layer":   # nothing enters a layer's slots during the forward
            self._avail_pre = self.available() if self.record is not None else None   # for the copies' names
            if self.cache is not None:    # hits and misses as at every router: the cache's own
                h, m = self.cache.forward(demand)
            else:
                h = (demand & self.staged).sum(axis=1)
                m = demand.sum(axis=1) - h
            if self.record is None and max(self.lanes) <= F + a:   # the link is free: today's model
                fwd = timer.forward_ms(n_tokens, h, m)
            else:
                fwd = self._stepped(F, a, nonexpert, demand, h, m, inp)
        else:                              # hits and misses at each router, after that layer's prefetches
            h = np.zeros(L, dtype=np.int64)
            m = np.zeros(L, dtype=np.int64)
            fwd = self._stepped(F, a, nonexpert, demand, h, m, inp)
            if self.cache is not None:
                hh, mm = self.cache.forward(demand)
                if not (np.array_equal(hh, h) and np.array_equal(mm, m)):
                    raise CheckFailed("prefetch model: the cache's hits and misses differ from the layer's")
        if self.cache is not None and self.pf_count.any():
            # prefetches this forward used, then those the LRU update evicted unused (wasted)
            u = self.pf_unused
            before = int(np.count_nonzero(u))
            np.logical_and(u, ~demand, out=u)
            left = int(np.count_nonzero(u))
            np.logical_and(u, self.cache.resident, out=u)
            self.pf_count = u.sum(axis=1)
            self._cycle["useful"] += before - left
            self._cycle["wasted"] += left - int(self.pf_count.sum())
        else:
            if self.pf_count.any():              # prefetches this forward used
                used = demand & self.pf_unused
                self._cycle["useful"] += int(used.sum())
                self.pf_unused &= ~used
            self._after_forward()
        end = F + fwd
        for layer in list(self._inflight_layers):       # copies landed by the forward's end
            pending = self.inflight[layer]
            for x in [x for x, v in pending.items() if v <= end]:
                del pending[x]
            if not pending:
                self._inflight_layers.discard(layer)
        return fwd, h, m

    def _stepped(self, F, a, nonexpert, demand, h, m, inp) -> float:
        """Layers stepped one by one while the link is busy (every layer for next-layer or a timeline).

        ``h``/``m`` are filled in for the stepped layers (next-layer computes
        them at each router, after that layer's prefetches).  Returns the
        forward's time.
        """
        L, e = self.L, self.e
        next_layer = self.policy == "next-layer"
        record = self.record
        rel = []
        t = F
        j = L
        pred_next = self._next_layer_pairs(inp) if next_layer else None
        for layer in range(L):
            T = t + a
            if not next_layer and record is None and max(self.lanes) <= T:
                j = layer          # the rest is today's model
                break
            if record is not None:
                record("compute", f"attention L{layer}", "attention", t, T, {"layer": layer})
            row = demand[layer]
            if next_layer:
                avail = self.staged[layer] if self.cache is None else (self.cache.resident[layer] | self.staged[layer])
                hit = row & avail
                h[layer] = int(hit.sum())
                m[layer] = int(row.sum()) - h[layer]
            end = self._layer(layer, T, int(h[layer]), int(m[layer]), row)
            rel.append(end)
            t = T + end
            if next_layer and layer + 1 < L:
                if self.serial:    # layer + 1's copies run after this layer, before its attention
                    before = self._cycle["prefetched"]
                    self._next_layer_prefetch(layer + 1, pred_next[layer + 1], t, math.inf)
                    if self._cycle["prefetched"] > before:
                        block = max(self.lanes) - t
                        rel[-1] += block
                        t += block
                else:
                    self._next_layer_prefetch(layer + 1, pred_next[layer + 1], T, t + a)
        if j == L:
            return nonexpert + float(np.sum(np.asarray(rel, dtype=np.float64))) if not self.random \
                else float(np.sum(a + np.asarray(rel, dtype=np.float64)))
        hr, mr = h[j:], m[j:]
        if not self.random:
            ends = self._layer_table(hr, mr)[hr, mr]
            return nonexpert + float(np.sum(np.concatenate([np.asarray(rel, dtype=np.float64), ends])))
        rest = drawn_copy_forward(a, hr, mr, e, self.timer.draw_copy_times(mr), self.c, self.overlap)
        return float(np.sum(a + np.asarray(rel, dtype=np.float64))) + rest

    def _layer(self, layer: int, T: float, h: int, m: int, row: np.ndarray) -> float:
        """One layer from its router at ``T``: time until its last expert has run (relative to T)."""
        e, lanes, c = self.e, self.lanes, self.c
        record = self.record
        ready = []
        hits_now = h
        pending = self.inflight[layer]
        if pending:
            for x, land in pending.items():
                if land > T and row[x]:
                    ready.append(land)
                    hits_now -= 1
        if m:
            durs = self.timer.draw_copy_times(np.array([m])).tolist() if self.random else None
            missing = None
            if record is not None:
                if self.policy != "next-layer":      # the cache has already served this forward
                    avail = self._avail_pre[layer]
                else:
                    avail = self.staged[layer] if self.cache is None else (self.cache.resident[layer]
                                                                           | self.staged[layer])
                missing = np.flatnonzero(row & ~avail).tolist()
            x = self.x
            for i in range(m):
                if c == 1:
                    k = 0
                elif c == 2:
                    k = 0 if lanes[0] <= lanes[1] else 1
                else:
                    k = min(range(c), key=lanes.__getitem__)
                s = lanes[k] if lanes[k] > T else T
                d = s + (durs[i] if durs is not None else x)
                lanes[k] = d
                ready.append(d)
                if record is not None:
                    record(f"copy {k}", f"copy L{layer} E{missing[i]}", "demand", s, d,
                           {"layer": layer, "expert": missing[i]})
        n = hits_now + len(ready)
        if not self.overlap:
            last = max(ready) if ready else T
            start = last if last > T else T
            f = start + n * e
            if record is not None and n:
                record("compute", f"experts L{layer}", "experts", start, f, {"layer": layer, "experts": n})
            return f - T
        ready.sort()
        f = T + hits_now * e
        seg_start, seg_n = T, hits_now
        for r in ready:
            if r > f:
                if record is not None and seg_n:
                    record("compute", f"experts L{layer}", "experts", seg_start, f, {"layer": layer, "experts": seg_n})
                seg_start, seg_n = r, 0
                f = r
            f += e
            seg_n += 1
        if record is not None and seg_n:
            record("compute", f"experts L{layer}", "experts", seg_start, f, {"layer": layer, "experts": seg_n})
        return f - T

    def _next_layer_prefetch(self, j: int, experts: list, release: float, deadline: float) -> None:
        """``next-layer``: layer ``j``'s predicted experts, queued at ``release`` (the router of layer j − 1).

        The same rules as a drafting window (:meth:`_issue`, :meth:`_run`,
        :meth:`_place`), for one layer: the experts not available now, without
        repeats, up to the layer's free capacity, start on the lanes (after the
        demand copies already there) until ``deadline`` (layer j's router).
        """
        cache = self.cache
        if cache is not None:
            room = self.slots - int(self.pf_count[j])
            avail = (cache.resident[j] | self.staged[j]).tolist()
        else:
            room = self.staging - int(self.pf_count[j])
            avail = self.staged[j].tolist()
        if room <= 0 or not experts:
            return
        queue: list = []
        for x in experts:
            if not avail[x]:
                avail[x] = True        # queued: no repeat
                queue.append(x)
                if len(queue) == room:
                    break
        lanes, c, record = self.lanes, self.c, self.record
        started = []
        for x in queue:
            if c == 1:
                k = 0
            elif c == 2:
                k = 0 if lanes[0] <= lanes[1] else 1
            else:
                k = min(range(c), key=lanes.__getitem__)
            start = lanes[k] if lanes[k] > release else release
            if start >= deadline:
                break
            end = start + (self.x if not self.random else self._copy_time())
            lanes[k] = end
            self.inflight[j][x] = end
            self._inflight_layers.add(j)
            started.append(x)
            if record is not None:
                record(f"copy {k}", f"prefetch L{j} E{x}", "prefetch", start, end, {"layer": j, "expert": x})
        if not started:
            return
        n = len(started)
        started = np.asarray(started, dtype=np.int64)
        if cache is not None:
            cache.insert_layer(j, started, self.pf_unused[j])
        else:
            self.staged[j, started] = True
            self.staged_count[j] += n
        self.pf_unused[j, started] = True
        self.pf_count[j] += n
        self._cycle["prefetched"] += n

    def _next_layer_pairs(self, inp: CycleInput) -> list:
        """Per layer, the flat pairs next-layer prefetch queues: root first, then S most probable first."""
        L = self.L
        preds = []
        if inp.root_pred is not None:
            preds.append(np.asarray(inp.root_pred, dtype=np.int64)[None])
        sel = np.asarray(inp.selected if inp.selected is not None else [], dtype=np.int64)
        if len(sel) and inp.node_pred is not None:
            p = np.asarray(inp.node_p, dtype=np.float64)[sel]
            order = sel[np.lexsort((sel, -p))]
            preds.append(np.asarray(inp.node_pred[order], dtype=np.int64))
        if not preds:
            return [[] for _ in range(L)]
        routes = np.concatenate(preds, axis=0)            # [t, L, k]
        return [routes[:, layer, :].reshape(-1).tolist() for layer in range(L)]


# --------------------------------------------------------------------------
# replays
# --------------------------------------------------------------------------
@dataclass
class PrefetchResult(ReplayResult):
    """A replay with prefetching: the cycle records carry ``prefetched``, ``useful``, ``wasted``.

    ``baseline_decode_ms``: decode time of the same replay without prefetch
    (None when not computed), from which ``saved_ms_per_token`` follows;
    ``timeline``: the recorded events, when asked for.
    """

    policy: str = "none"
    baseline_decode_ms: float | None = None
    timeline: list | None = None

    def summary(self) -> dict[str, float]:
        s = super().summary()
        s.update(prefetch_counters(self.cycles, self.requests, self.baseline_decode_ms))
        return s


def prefetch_counters(cycles: dict, requests: dict, baseline_decode_ms: float | None = None) -> dict:
    """Prefetched, useful and wasted copies per output token; time saved per decoded token.

    Time saved = (decode time without prefetch − with) / Σ(N_i − 1), the
    decode tokens of SpecFit Eq. 10; ``saved_pct`` relative to the decode
    time without prefetch.
    """
    tokens = int(np.sum(requests["output_len"], dtype=np.int64))
    decode_tokens = tokens - len(requests["output_len"])
    out = {}
    for key in PREFETCH_CYCLE_COLUMNS:
        total = int(np.sum(cycles.get(key, ()), dtype=np.int64))
        out[f"{key}_per_token"] = total / tokens if tokens else float("nan")
    decode_ms = float(np.sum(requests["decode_ms"]))
    if baseline_decode_ms is None:
        out["saved_ms_per_token"] = float("nan")
        out["saved_pct"] = float("nan")
    else:
        saved = float(baseline_decode_ms) - decode_ms
        out["saved_ms_per_token"] = saved / decode_tokens if decode_tokens > 0 else float("nan")
        out["saved_pct"] = 100.0 * saved / baseline_decode_ms if baseline_decode_ms > 0 else float("nan")
    return out


def _timer(config, profile):
    from simmoe.replay.timing import CycleTimer

    return CycleTimer(profile, model=config.timing, seed=config.seed, cache=config.cache_active)


class _Recorder:
    """Collects events as tuples (track, name, category, start ms, end ms, args)."""

    def __init__(self, limit_requests: int | None = None):
        self.events: list = []

    def __call__(self, track, name, cat, start, end, args=None):
        self.events.append((track, name, cat, float(start), float(end), dict(args or {})))


def _prefill_demand(trace, r: int, L: int, N: int) -> np.ndarray:
    return np.asarray(trace.requests.prefill_union[r], dtype=bool).reshape(L, N)


def simulate_prefetch(trace, p, config, profile=None, policy: str = "draft", *,
                      timeline: bool = False, staging: int | None = None) -> PrefetchResult:
    """Pass 2 of a replay with prefetching: the plan's forwards through :class:`PrefetchModel`.

    Same records as :func:`simmoe.replay.engine.simulate`, plus per-cycle
    ``prefetched``, ``useful`` and ``wasted``.  With ``policy="none"`` the
    times, hits and misses equal ``simulate``'s.
    """
    from simmoe.hardware.profile import load_profile

    config = config.validate()
    if profile is None:
        profile = load_profile(config.hardware)
    check_prefetch_setting(policy, profile=profile, config=config, trace=trace)
    t_start = time.perf_counter()
    L, N = p.num_layers, p.num_experts
    R, C = p.num_requests, p.num_cycles
    timer = _timer(config, profile)
    recorder = _Recorder() if timeline else None
    slots = int(config.slots) if config.cache_active else 0
    model = PrefetchModel(timer, L, N, slots, policy, record=recorder, staging=staging)
    sel_ms = _selector_times(p, config)
    cols = {k: np.zeros(C, np.int32) for k in ("hits", "misses") + PREFETCH_CYCLE_COLUMNS}
    times = {k: np.zeros(C) for k in ("draft_ms", "forward_ms", "commit_ms")}
    pre = {"prefill_hits": np.zeros(R, np.int32), "prefill_misses": np.zeros(R, np.int32),
           "prefill_ms": np.zeros(R)}
    for kind, i, item in replay_items(trace, p, config, policy, sel_ms):
        if kind == "prefill":
            ms, h, m = model.prefill(*item)
            pre["prefill_hits"][i], pre["prefill_misses"][i], pre["prefill_ms"][i] = h.sum(), m.sum(), ms
        else:
            _store(cols, times, i, model.cycle(item))
    if C:
        cols["wasted"][C - 1] += model.finish()
    return _result(trace, p, config, cols, times, sel_ms, pre, policy, t_start,
                   timeline=recorder.events if recorder is not None else None)


def replay_items(trace, p, config, policy: str, sel_ms: np.ndarray):
    """The forwards of a plan in replay order, as the prefetch model takes them.

    Yields ``("prefill", r, (prompt_len, demand))`` and ``("cycle", c,
    CycleInput)``; predicted routes come from the route predictor of
    ``config`` (the selectors' own), the true routes from the trace.
    """
    from simmoe.replay.route_prediction import RoutePredictor

    L, N = p.num_layers, p.num_experts
    predictor = RoutePredictor(N, config.route_accuracy, config.seed)
    bounds = np.searchsorted(p.request, np.arange(p.num_requests + 1))
    needs_routes = policy != "none"
    for r in range(p.num_requests):
        yield "prefill", r, (int(p.prompt_len[r]), _prefill_demand(trace, r, L, N))
        for c in range(bounds[r], bounds[r + 1]):
            row = int(p.row[c])
            inp = CycleInput(levels=int(p.drafted_levels[c]), selector_ms=float(sel_ms[c]),
                             n_tokens=1 + int(p.draft_nodes[c]), demand=p.demand_of(c))
            if needs_routes:
                s = trace.pool_slice(row)
                inp.root_pred, inp.node_pred = predictor.predict(row, trace.root_routes[row], trace.node_routes[s])
                inp.node_level, inp.node_p = trace.node_level[s], trace.node_p[s]
                inp.selected = p.selected_of(c)
                inp.root_true, inp.node_true = trace.root_routes[row], trace.node_routes[s]
            yield "cycle", c, inp


def _selector_times(p, config) -> np.ndarray:
    C = p.num_cycles
    if not p.selector_uses_time:
        return np.zeros(C)
    if config.selector_ms is not None:
        return np.full(C, float(config.selector_ms))
    return (p.selector_ms if config.selector_clock == "wall" else p.selector_cpu_ms).copy()


def _store(cols, times, c, out: CycleOutcome) -> None:
    cols["hits"][c], cols["misses"][c] = out.hits, out.misses
    cols["prefetched"][c], cols["useful"][c], cols["wasted"][c] = out.prefetched, out.useful, out.wasted
    times["draft_ms"][c], times["forward_ms"][c], times["commit_ms"][c] = out.draft_ms, out.forward_ms, out.commit_ms


def _result(trace, p, config, cols, times, sel_ms, pre, policy, t_start, timeline=None) -> PrefetchResult:
    R = p.num_requests
    cycle_ms = times["draft_ms"] + sel_ms + times["forward_ms"] + times["commit_ms"]
    decode_ms = np.bincount(p.request, weights=cycle_ms, minlength=R)
    committed = np.bincount(p.request, weights=p.committed, minlength=R).astype(np.int64)
    if not np.array_equal(committed, p.output_len.astype(np.int64)):
        bad = int(np.flatnonzero(committed != p.output_len)[0])
        raise CheckFailed(f"request {bad} committed {committed[bad]} tokens, output length {p.output_len[bad]}")
    cycles = {
        "request": p.request, "position": p.position, "row": p.row,
        "draft_nodes": p.draft_nodes, "accepted": p.accepted, "committed": p.committed,
        "drafted_levels": p.drafted_levels, "pool_levels": p.pool_levels,
        "pool_size": p.pool_size, "hits": cols["hits"], "misses": cols["misses"],
        "draft_ms": times["draft_ms"], "selector_ms": sel_ms, "forward_ms": times["forward_ms"],
        "commit_ms": times["commit_ms"], "cycle_ms": cycle_ms,
        "prefetched": cols["prefetched"], "useful": cols["useful"], "wasted": cols["wasted"],
    }
    requests = {
        "output_len": p.output_len, "prompt_len": p.prompt_len,
        "prefill_hits": pre["prefill_hits"], "prefill_misses": pre["prefill_misses"],
        "prefill_ms": pre["prefill_ms"], "decode_ms": decode_ms, "request_ms": pre["prefill_ms"] + decode_ms,
    }
    return PrefetchResult(config=config, cycles=cycles, requests=requests, synthetic=bool(trace.is_synthetic),
                          plan_wall_s=p.wall_s, simulate_wall_s=time.perf_counter() - t_start,
                          lambda_star=p.meta.get("lambda_star"), policy=policy, timeline=timeline)


def replay_coupled(trace, config, profile=None, policy: str = "none", *, timeline: bool = False,
                   progress: Callable[[int], None] | None = None) -> PrefetchResult:
    """Replay a selector that selects from the cache state (``uses_residency``, e.g. ``specfit-prefetch``).

    Selection and simulation run together, cycle by cycle: after drafting
    level d the selector sees which experts are resident, staged or on their
    way (:meth:`PrefetchModel.drafted`), so no plan is shared with other
    configurations.  The selector's time excludes the simulation's.
    Otherwise as :func:`simmoe.replay.engine.plan` followed by
    :func:`simulate_prefetch`.
    """
    from simmoe.hardware.profile import load_profile
    from simmoe.replay.engine import Plan, selector_context
    from simmoe.replay.prefetch_selector import PrefetchView, profile_discount
    from simmoe.replay.route_prediction import RoutePredictor
    from simmoe.replay.sampling import sampled_agree
    from simmoe.replay.selectors import accepted_length, make_selector
    from simmoe.trace.sampling import check_replay_temperature
    from solvers.errors import InvalidInput

    config = config.validate()
    if profile is None:
        profile = load_profile(config.hardware)
    check_prefetch_setting(policy, profile=profile, config=config, selectors=(config.selector,), trace=trace)
    t_start = time.perf_counter()
    g = trace.geometry
    L, N = g.num_layers, g.num_experts
    R = len(trace.requests) if config.requests is None else min(int(config.requests), len(trace.requests))
    ctx = selector_context(trace, profile, config)
    ctx.options.setdefault("residency_discount", profile_discount(profile))
    selector = make_selector(config.selector, ctx)
    predictor = RoutePredictor(N, config.route_accuracy, config.seed)
    check_replay_temperature(trace, config.temperature)
    verdicts = sampled_agree(trace, float(config.temperature), config.draw_seed)
    timer = _timer(config, profile)
    recorder = _Recorder() if timeline else None
    slots = int(config.slots) if config.cache_active else 0
    model = PrefetchModel(timer, L, N, slots, policy, record=recorder)
    offset = (np.arange(L, dtype=np.int64) * N)[:, None]
    rec: dict[str, list] = {k: [] for k in ("request", "row", "position", "draft_nodes", "accepted", "committed",
                                            "drafted_levels", "pool_levels", "pool_size", "selector_ms",
                                            "selector_cpu_ms")}
    outs: list[CycleOutcome] = []
    selected: list[np.ndarray] = []
    pre = {"prefill_hits": np.zeros(R, np.int32), "prefill_misses": np.zeros(R, np.int32),
           "prefill_ms": np.zeros(R)}
    output_len = np.asarray(trace.requests.output_len[:R], dtype=np.int32)
    perf, cpu = time.perf_counter, time.thread_time
    mask = np.zeros(L * N, dtype=bool)
    for r in range(R):
        ms, h, m = model.prefill(int(trace.requests.prompt_len[r]), _prefill_demand(trace, r, L, N))
        pre["prefill_hits"][r], pre["prefill_misses"][r], pre["prefill_ms"][r] = h.sum(), m.sum(), ms
        start = int(trace.request_positions(r)[0])
        n_out = int(output_len[r])
        t = 0
        while t < n_out:
            i = start + t
            s = trace.pool_slice(i)
            root_pred, node_pred = predictor.predict(i, trace.root_routes[i], trace.node_routes[s])
            view = PrefetchView(row=i, parents=trace.node_parent[s], levels=trace.node_level[s],
                                p=trace.node_p[s], q=trace.node_q[s], agree=verdicts[s],
                                root_routes=root_pred, node_routes=node_pred, num_experts=N,
                                available=model.drafted)
            inp = CycleInput(levels=0, selector_ms=0.0, n_tokens=1, demand=np.zeros((L, N), dtype=bool),
                             root_pred=root_pred, node_pred=node_pred, node_level=trace.node_level[s],
                             node_p=trace.node_p[s])
            model.begin_cycle(inp)
            model.extra_selector_ms = 0.0
            c1, t1 = cpu(), perf()
            try:
                choice = selector.select(view)
            except InvalidInput as exc:
                raise SimmoeError(f"selector {config.selector!r} at request {r}, position {t}: {exc}") from None
            wall_ms = max((perf() - t1) * 1e3 - model.extra_selector_ms, 0.0)
            cpu_ms = max((cpu() - c1) * 1e3 - model.extra_selector_ms, 0.0)
            nodes = np.asarray(choice.nodes, dtype=np.int64)
            acc = accepted_length(trace.node_parent[s], verdicts[s], nodes)
            committed = min(1 + acc, n_out - t)
            mask[:] = False
            mask[(trace.root_routes[i] + offset).ravel()] = True
            if len(nodes):
                mask[(trace.node_routes[s.start + nodes] + offset[None]).ravel()] = True
            inp.demand = mask.reshape(L, N).copy()
            inp.n_tokens = 1 + len(nodes)
            inp.selected = nodes
            if config.selector_ms is not None:
                sel_ms = float(config.selector_ms)
            else:
                sel_ms = wall_ms if config.selector_clock == "wall" else cpu_ms
            outs.append(model.end_cycle(inp, int(choice.drafted_levels), sel_ms))
            levels = trace.node_level[s]
            for key, val in (("request", r), ("row", i), ("position", t), ("draft_nodes", len(nodes)),
                             ("accepted", acc), ("committed", committed),
                             ("drafted_levels", int(choice.drafted_levels)),
                             ("pool_levels", int(levels.max()) if len(levels) else 0),
                             ("pool_size", len(levels)), ("selector_ms", wall_ms), ("selector_cpu_ms", cpu_ms)):
                rec[key].append(val)
            selected.append(nodes)
            t += committed
            if progress is not None:
                progress(committed)
    C = len(outs)
    dtypes = {"request": np.int32, "row": np.int64, "position": np.int32, "draft_nodes": np.int16,
              "accepted": np.int16, "committed": np.int16, "drafted_levels": np.int8, "pool_levels": np.int8,
              "pool_size": np.int16, "selector_ms": np.float64, "selector_cpu_ms": np.float64}
    arr = {k: np.asarray(v, dtype=dtypes[k]) for k, v in rec.items()}
    p = Plan(selector=config.selector, num_requests=R, demand=np.zeros((C, 0), np.uint8),
             selected=(np.concatenate(selected) if selected else np.zeros(0)).astype(np.int16),
             output_len=output_len, prompt_len=np.asarray(trace.requests.prompt_len[:R], np.int32),
             num_layers=L, num_experts=N, wall_s=time.perf_counter() - t_start, **arr)
    cols = {k: np.zeros(C, np.int32) for k in ("hits", "misses") + PREFETCH_CYCLE_COLUMNS}
    times = {k: np.zeros(C) for k in ("draft_ms", "forward_ms", "commit_ms")}
    sel_ms = np.array([o.selector_ms for o in outs], dtype=np.float64)
    for c, out in enumerate(outs):
        _store(cols, times, c, out)
    if C:
        cols["wasted"][C - 1] += model.finish()
    res = _result(trace, p, config, cols, times, sel_ms, pre, policy, t_start,
                  timeline=recorder.events if recorder is not None else None)
    res.plan_wall_s = 0.0
    return res


def uses_residency(selector: str) -> bool:
    from simmoe.replay.selectors import SELECTORS

    return bool(SELECTORS[selector].uses_residency)


def replay_prefetch(trace, config, profile=None, policy: str = "draft", *, plans: dict | None = None,
                    paired: bool = True, timeline: bool = False, staging: int | None = None,
                    progress: Callable[[int], None] | None = None) -> ReplayResult:
    """Replay ``config`` with a prefetch policy; ``paired`` also replays it without prefetch (time saved).

    Plain selectors share plans (``plans``, keyed by
    :func:`simmoe.replay.engine.plan_key`); with ``policy="none"`` and no
    timeline they take today's path (:func:`simmoe.replay.engine.simulate`),
    so results are those of ``simmoe replay`` without ``--prefetch``.
    """
    from simmoe.hardware.profile import load_profile
    from simmoe.replay.engine import plan, plan_key, simulate

    config = config.validate()
    if profile is None:
        profile = load_profile(config.hardware)
    if uses_residency(config.selector):
        res = replay_coupled(trace, config, profile, policy, timeline=timeline, progress=progress)
        if paired and policy != "none":
            base = replay_coupled(trace, config, profile, "none")
            res.baseline_decode_ms = float(np.sum(base.requests["decode_ms"]))
        return res
    key = plan_key(config)
    p = plans.get(key) if plans is not None else None
    if p is None:
        p = plan(trace, config, profile, progress=progress)
        if plans is not None:
            plans[key] = p
    elif progress is not None:
        progress(int(p.committed.sum()))
    if policy == "none" and not timeline:
        return simulate(trace, p, config, profile)
    if policy in ("draft", "oracle") and not timeline and not np.any(p.drafted_levels):
        # no cycle drafts (``ar``), so nothing is copied while drafting: the replay without prefetch, exactly
        return _unprefetched(simulate(trace, p, config, profile), policy, paired)
    res = simulate_prefetch(trace, p, config, profile, policy, timeline=timeline, staging=staging)
    if paired and policy != "none":
        base = simulate(trace, p, config, profile)
        res.baseline_decode_ms = float(np.sum(base.requests["decode_ms"]))
    return res


def _unprefetched(res: ReplayResult, policy: str, paired: bool) -> PrefetchResult:
    """``res`` (a replay without prefetch) as the result of a ``policy`` that prefetched nothing."""
    zeros = np.zeros(len(res.cycles["committed"]), dtype=np.int32)
    cycles = {**res.cycles, **{k: zeros.copy() for k in PREFETCH_CYCLE_COLUMNS}}
    return PrefetchResult(config=res.config, cycles=cycles, requests=res.requests, synthetic=res.synthetic,
                          plan_wall_s=res.plan_wall_s, simulate_wall_s=res.simulate_wall_s,
                          lambda_star=res.lambda_star, policy=policy,
                          baseline_decode_ms=float(np.sum(res.requests["decode_ms"])) if paired else None)


def _group(jobs: list, progress=None) -> list:
    trace, profiles = shared()
    plans: dict = {}
    return [replay_prefetch(trace, cfg, profiles[cfg.hardware], pol, plans=plans, paired=paired,
                            timeline=tl, progress=progress) for cfg, pol, paired, tl in jobs]


def replay_all_prefetch(trace, configs: list, profiles: dict, policies, *, workers: int = 1,
                        timeline: bool = False, paired: bool = True, on_done=None, progress=None) -> list:
    """Several configurations of one trace, each with its prefetch policy (``policies[i]``).

    As :func:`simmoe.replay.engine.replay_all`: configurations that share a
    plan run in one task, tasks in forked worker processes.  A configuration
    whose policy is not ``none`` is also replayed without prefetch, for the
    time saved (``paired=False``: not).  ``timeline``: record the events of
    every configuration.
    """
    from simmoe.replay.engine import plan_key

    configs = [c.validate() for c in configs]
    jobs = [(cfg, pol, paired and pol != "none", timeline) for cfg, pol in zip(configs, policies, strict=True)]
    groups: dict[tuple, list[int]] = {}
    for i, cfg in enumerate(configs):
        key = (cfg.hardware, plan_key(cfg)) if not uses_residency(cfg.selector) else ("coupled", i)
        groups.setdefault(key, []).append(i)
    order = sorted(groups.values(), key=lambda ix: not uses_residency(configs[ix[0]].selector))
    return run_groups(order, jobs, _group, trace=trace, profiles=profiles, workers=workers, on_done=on_done,
                      progress=progress)

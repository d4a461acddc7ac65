"""The copy engine: c lanes over the host-to-device link, shared by demand copies and prefetches.

The event model of :mod:`simmoe.replay.timing` times one forward with the link
idle at every layer's start.  Prefetching breaks that: copies issued while the
drafter drafts (or during the previous layer) occupy the lanes and the cache's
slots when the forward needs them.  So the residency stage keeps one copy
engine for the whole replay, carried across steps and requests
(:mod:`simmoe.replay.residency`), with these rules (shared with the simpy
reference in ``tests/replay/prefetch_reference.py``):

* **Lanes.**  c lanes (``copies_in_flight``); a copy keeps its lane for its
  whole duration.  Demand copies go first, FIFO; prefetch copies use the lanes
  only when no demand copy waits, FIFO in issue order, and start only before
  their window's deadline — so a demand copy can wait for a prefetch copy
  already on the link.
* **Issue.**  A prefetch window collects a policy's jobs (:class:`simmoe.api.PrefetchJobs`).
  A (layer, expert) pair is queued only when it is not resident, not staged
  and not already queued in the window, and while its layer has room.
* **Slots.**  A prefetch takes a slot of its layer when its copy starts (under
  one budget across layers, a place in the budget: the room is then counted
  over all layers).  With
  a cache it displaces the lowest-ranked resident expert that is not itself an
  unused prefetch (:meth:`simmoe.replay.caches.ExpertCache.insert_many`; a layer
  full of unused prefetches skips the job).  Without a cache a prefetched
  expert waits in one of the layer's staging buffers (c by default) until the
  next forward has passed.
* **Counting.**  A prefetch is *useful* when a forward demands it before it
  leaves the cache, *wasted* when it is evicted, dropped from staging, or still
  unused when the replay ends.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

PREFETCH_SEED_SALT = 0x9F  # prefetch copy durations come from their own random stream


@dataclass
class Window:
    """The prefetch jobs of one issue window, FIFO: flat pairs, release times, the latest start.

    ``pos``: jobs before it have started (or been dropped); ``placed``: jobs
    before it hold their slots.  ``avail``: what was available (flat) when the
    window opened.
    """

    avail: np.ndarray
    pairs: list = field(default_factory=list)
    release: list = field(default_factory=list)
    levels: list = field(default_factory=list)
    pos: int = 0
    placed: int = 0
    deadline: float = math.inf
    deadline_hint: float = math.inf      # when the deadline will be, if known: bounds the jobs worth queuing
    issued: bool = False                 # some job was queued (``CopyEngine.queued`` is not all false)


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


class CopyEngine:
    """The lanes, the prefetch windows, the staging buffers and the prefetch counters of one replay.

    ``cache``: the replay's :class:`~simmoe.replay.caches.ExpertCache` (None:
    no cache, prefetches are staged); ``copy_ms``: the fixed copy time, or
    ``draw()`` a drawn one (a prefetch's duration comes from its own stream).
    """

    def __init__(self, cache, num_layers: int, num_experts: int, slots: int, lanes: int, copy_ms: float,
                 draw=None, staging: int | None = None, record=None):
        self.cache = cache
        self.L, self.N, self.c = int(num_layers), int(num_experts), int(lanes)
        self.x = float(copy_ms)
        self.draw = draw
        self.random = draw is not None
        self.slots = min(int(slots), self.N)
        self.staged = np.zeros((self.L, self.N), dtype=bool)
        self.staged_count = np.zeros(self.L, dtype=np.int64)
        self.pf_unused = np.zeros((self.L, self.N), dtype=bool)
        self.pf_count = np.zeros(self.L, dtype=np.int64)
        self.inflight: list[dict] = [{} for _ in range(self.L)]   # per layer: expert -> landing (absolute)
        self.inflight_layers: set[int] = set()                    # layers with an entry in `inflight`
        self.lanes = [0.0] * self.c
        self.record = record
        self.queued = np.zeros(self.L * self.N, dtype=bool)
        self.pending = np.zeros(self.L, dtype=np.int64)         # queued, not yet started, per layer
        self.staging = self.c if staging is None else int(staging)
        self.capacity = self.slots if cache is not None else self.staging
        self.budget = getattr(cache, "budget", None) if cache is not None else None
        self.window: Window | None = None
        self.t0 = 0.0
        self.counts = {"prefetched": 0, "useful": 0, "wasted": 0}

    # -- state ------------------------------------------------------------------
    def available(self) -> np.ndarray:
        """bool [L, N]: experts resident, staged, or prefetched and on their way."""
        if self.cache is not None:
            return self.cache.resident | self.staged
        return self.staged.copy()

    def link_free_at(self) -> float:
        return max(self.lanes)

    def copy_time(self) -> float:
        return self.x if not self.random else float(self.draw())

    def lane(self) -> int:
        """The lane a copy takes: the earliest free (the first of equals)."""
        lanes = self.lanes
        if self.c == 1:
            return 0
        if self.c == 2:
            return 0 if lanes[0] <= lanes[1] else 1
        return min(range(self.c), key=lanes.__getitem__)

    # -- prefetch windows -------------------------------------------------------------
    def open(self, t0: float, deadline: float = math.inf) -> Window:
        """Open an issue window at ``t0``; what it may queue is judged against the state now."""
        self.queued[:] = False
        self.pending[:] = 0
        self.t0 = t0
        # with a cache nothing is staged: prefetches go to its slots
        avail = (self.cache.resident if self.cache is not None else self.staged).reshape(-1).copy()
        self.window = Window(avail=avail, deadline=deadline)
        return self.window

    def room(self) -> np.ndarray:
        """Per layer, slots (or staging buffers) not holding or promised to an unused prefetch."""
        return self.capacity - self.pf_count - self.pending

    def budget_room(self) -> float:
        """Under one budget across layers: experts not holding or promised to an unused prefetch (else inf)."""
        if self.budget is None:
            return math.inf
        return float(self.budget - int(self.pf_count.sum()) - int(self.pending.sum()))

    def _issue(self, pairs: np.ndarray, release, level, *, limit: float = math.inf) -> bool:
        """Queue the flat ``pairs`` in order (``release``, ``level``: per pair); whether some layer has room left.

        Left out (:func:`queue_pairs`): pairs available when the window
        opened, pairs already queued, repeats, and pairs beyond their layer's
        free capacity — within a window that capacity only shrinks, so those
        jobs would be skipped when their turn came — and all after the first
        ``limit`` kept.
        """
        w = self.window
        room = self.room()
        total = self.budget_room()
        if w is None or not len(pairs):
            return bool(room.max() > 0) and total > 0
        keep = queue_pairs(pairs, w.avail | self.queued if w.issued else w.avail, room, self.N,
                           limit=min(limit, total))
        if not len(keep):
            return bool(room.max() > 0) and total > 0
        pairs = pairs[keep]
        per_layer = np.bincount(pairs // self.N, minlength=self.L)
        self.pending += per_layer
        self.queued[pairs] = True
        w.issued = True
        w.pairs.extend(pairs.tolist())
        w.release.extend(release[keep].tolist())
        w.levels.extend(level[keep].tolist())
        return bool((room > per_layer).any()) and total > len(keep)

    def job_limit(self) -> float:
        """How many jobs the window can start at most (fixed copy times, deadline known), else infinity.

        c lanes, each starting at most one copy per copy time before the deadline.
        """
        w = self.window
        assert w is not None
        if not self.random and self.x > 0 and math.isfinite(w.deadline_hint):
            return self.c * (math.ceil((w.deadline_hint - self.t0) / self.x) + 1)
        return math.inf

    def issue(self, pairs: np.ndarray, release: np.ndarray, levels: np.ndarray) -> bool:
        """Queue jobs (flat pairs in queue order, their release times and levels); whether more would fit.

        The same as issuing the jobs one by one: pairs already taken are
        dropped first, in one pass, then the rest are queued in a few prefixes
        sized by the jobs the window can still start (:meth:`job_limit`).
        """
        w = self.window
        assert w is not None
        limit = self.job_limit()
        if not len(pairs):
            return len(w.pairs) < limit
        taken = w.avail | self.queued if w.issued else w.avail
        cand = np.flatnonzero(~taken[pairs])
        room, i = True, 0
        while room and i < len(cand) and len(w.pairs) < limit:
            # a prefix of the candidates, twice the jobs still wanted (repeats are common), is usually enough
            need = limit - len(w.pairs)
            seg = cand[i:] if not math.isfinite(need) else cand[i:i + max(2 * int(need), 64)]
            room = self._issue(pairs[seg], release[seg], levels[seg], limit=need)
            i += len(seg)
        return room and len(w.pairs) < limit

    def cut_levels(self, levels: int) -> None:
        """Drop the window's queued jobs of levels deeper than ``levels`` (not drafted after all)."""
        w = self.window
        if w is None or not any(lv > levels for lv in w.levels[w.pos:]):
            return
        tail = list(zip(w.pairs[w.pos:], w.release[w.pos:], w.levels[w.pos:], strict=True))
        cut = [pr for pr, _, lv in tail if lv > levels]
        self.pending -= np.bincount(np.asarray(cut, dtype=np.int64) // self.N, minlength=self.L)
        del w.pairs[w.pos:], w.release[w.pos:], w.levels[w.pos:]
        for pr, rl, lv in tail:
            if lv <= levels:
                w.pairs.append(pr)
                w.release.append(rl)
                w.levels.append(lv)

    def run(self, until: float) -> None:
        """Start the window's queued jobs whose start time is before ``until`` (and its deadline).

        The queue holds no job that would be skipped (:meth:`_issue`), so the
        start times are list scheduling on the c lanes, in queue order.
        """
        w = self.window
        if w is None:
            return
        lanes, pairs, release = self.lanes, w.pairs, w.release
        n, N = len(w.pairs), self.N
        record = self.record
        i = w.pos
        last = [-1] * self.c     # the job each lane took last: the only ones that can still be in flight
        if record is None and not self.random and self.c <= 2:
            i = self._run_fixed(i, min(w.deadline, until), last)
        else:
            while i < n:
                k = self.lane()
                rel = release[i]
                start = lanes[k] if lanes[k] > rel else rel
                if start >= w.deadline or start >= until:
                    break
                end = start + self.copy_time()
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
                self.inflight_layers.add(pair // N)

    def _run_fixed(self, i: int, bound: float, last: list) -> int:
        """:meth:`run`'s loop for fixed copy times, one or two lanes, nothing recorded (the hot case).

        The same choices and the same float operations as the general loop,
        with the lanes in locals.  Returns the first job not started.
        """
        w = self.window
        assert w is not None
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

    def place(self) -> None:
        """Started prefetches take their slots (or staging buffers), in order."""
        w = self.window
        if w is None or w.placed >= w.pos:
            return
        pairs = np.asarray(w.pairs[w.placed:w.pos], dtype=np.int64)
        w.placed = w.pos
        per_layer = np.bincount(pairs // self.N, minlength=self.L)
        self.pending -= per_layer
        if self.cache is None:
            self.staged.reshape(-1)[pairs] = True
            self.staged_count += per_layer
        else:
            self.cache.insert_many(pairs, per_layer, self.pf_unused)
        self.pf_unused.reshape(-1)[pairs] = True
        self.pf_count += per_layer
        self.counts["prefetched"] += len(pairs)

    def demand_landings(self, T: float, m: int) -> list[float]:
        """``m`` demand copies released at ``T``, fixed copy time, one or two lanes: when each lands.

        The hot case of a stepped layer's demand copies: the same lane choices
        (the earliest free, the first of equals) and the same float
        operations as copying one at a time, with the lanes in locals.
        """
        lanes, x, out = self.lanes, self.x, []
        if self.c == 1:
            a = lanes[0]
            for _ in range(m):
                a = (a if a > T else T) + x
                out.append(a)
            lanes[0] = a
            return out
        a, b = lanes[0], lanes[1]
        for _ in range(m):
            if a <= b:
                a = (a if a > T else T) + x
                out.append(a)
            else:
                b = (b if b > T else T) + x
                out.append(b)
        lanes[0], lanes[1] = a, b
        return out

    def close(self) -> None:
        """Place what started; drop the jobs that did not."""
        w = self.window
        if w is None:
            return
        self.place()
        if w.pos < len(w.pairs):
            self.pending -= np.bincount(np.asarray(w.pairs[w.pos:], dtype=np.int64) // self.N, minlength=self.L)
        self.window = None

    # -- one layer ahead ------------------------------------------------------------
    def prefetch_layer(self, j: int, experts: list, release: float, deadline: float,
                       busy: np.ndarray | None = None) -> None:
        """Layer ``j``'s experts, queued at ``release`` (the router of layer j − 1), started until ``deadline``.

        The same rules as a drafting window, for one layer: the experts not
        available now, without repeats, up to the layer's free capacity, start
        on the lanes (after the demand copies already there).  Under one
        budget across layers a prefetch may displace an expert of another
        layer, but never one the running forward demands (``busy`` [L, N]).
        """
        cache = self.cache
        protected = None
        if cache is not None:
            room = self.slots - int(self.pf_count[j])
            if self.budget is not None:
                protected = self.pf_unused | (busy & cache.resident) if busy is not None else self.pf_unused
                room = min(room, self.budget - int(np.count_nonzero(protected)))
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
        lanes, record, landing = self.lanes, self.record, self.inflight[j]
        started = []
        for x in queue:
            k = self.lane()
            start = lanes[k] if lanes[k] > release else release
            if start >= deadline:
                break
            end = start + self.copy_time()
            lanes[k] = end
            landing[x] = end
            started.append(x)
            if record is not None:
                record(f"copy {k}", f"prefetch L{j} E{x}", "prefetch", start, end, {"layer": j, "expert": x})
        if not started:
            return
        self.inflight_layers.add(j)
        n = len(started)
        arr = np.asarray(started, dtype=np.int64)
        if cache is not None:
            cache.insert_layer(j, arr, protected if protected is not None else self.pf_unused[j])
        else:
            self.staged[j, arr] = True
            self.staged_count[j] += n
        self.pf_unused[j, arr] = True
        self.pf_count[j] += n
        self.counts["prefetched"] += n

    # -- after a forward ----------------------------------------------------------------
    def used(self, demand: np.ndarray) -> None:
        """A forward demanded ``demand``: prefetches it used, then those evicted or unstaged unused."""
        if self.cache is not None and self.pf_count.any():
            u = self.pf_unused
            before = int(np.count_nonzero(u))
            np.logical_and(u, ~demand, out=u)
            left = int(np.count_nonzero(u))
            np.logical_and(u, self.cache.resident, out=u)
            self.pf_count = u.sum(axis=1)
            self.counts["useful"] += before - left
            self.counts["wasted"] += left - int(self.pf_count.sum())
            return
        if self.pf_count.any():
            used = demand & self.pf_unused
            self.counts["useful"] += int(used.sum())
            self.pf_unused &= ~used
        self.after_forward()

    def after_forward(self) -> None:
        """Waste after a forward: unused prefetches evicted by the cache's update, or staging emptied."""
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
            self.counts["wasted"] += n
        self.pf_count = self.pf_unused.sum(axis=1)

    def landed(self, end: float) -> None:
        """Forget in-flight copies that have landed by ``end``."""
        for layer in list(self.inflight_layers):
            pending = self.inflight[layer]
            for x in [x for x, v in pending.items() if v <= end]:
                del pending[x]
            if not pending:
                self.inflight_layers.discard(layer)

    def take_counts(self) -> dict:
        """The prefetch counters since the last call (charged to the step that ends now)."""
        out = self.counts
        self.counts = {"prefetched": 0, "useful": 0, "wasted": 0}
        return out

    def finish(self) -> int:
        """Prefetched experts never used when the replay ends (counted as wasted)."""
        n = int(self.pf_unused.sum())
        self.pf_unused[:] = False
        return n

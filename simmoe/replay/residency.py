"""Expert residency: where each demanded expert's weights are when the forward asks for them.

Two implementations of one stage (the profile decides which):

* :class:`ResidentWeights` — every expert lives in HBM (EVICT's regime): no
  cache, no copies, no prefetch.  A forward reads its experts' weights from
  HBM; the counters say how many (``reads``), and the timing stage prices them.
* :class:`OffloadedExperts` — the experts live in host memory: an expert
  cache on the GPU (a :class:`simmoe.api.CachePolicy` ranking its slots, or
  none), a prefetch policy (or none) and the copy engine
  (:mod:`simmoe.replay.copy_engine`), carried across steps and requests.

The offloaded stage times a step as drafting (its levels) + the selector's
time + the verification forward + commit.  While nothing is on the link at a
layer's start, layers are independent and the forward is the timing stage's
model (:class:`simmoe.replay.timing.CycleTimer`: event, simpy or closed);
layers that start with copies still on the link — prefetches of this step,
next-layer prefetches, or a timeline that records every event — are stepped
one by one (:meth:`OffloadedExperts._layer`: hits compute at once, late
prefetches when they land, misses queue on the lanes after any copy there).
With ``--timing closed`` nothing overlaps: prefetch copies run in blocks on
the compute stream's time, as with ``overlap = false``.

Prefetch windows (:class:`simmoe.api.PrefetchPolicy`): a drafting window opens
when a step begins (jobs released at the start or when their draft level has
been drafted) and closes when the verification forward starts; layer jobs are
queued at layer ℓ − 1's router and start until layer ℓ's.

What the policies are handed is read-only (the forward's demand and hits,
every array of a :class:`simmoe.api.PrefetchStep`; the cache's side in
:mod:`simmoe.replay.caches`), so no stage reads a value a policy changed; the
outputs of a policy that is not simmoe's own are checked, and a refusal names
it as the user did (``module:Name`` or its registered name).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from simmoe.errors import CheckFailed
from simmoe.replay.copy_engine import PREFETCH_SEED_SALT, CopyEngine
from simmoe.replay.plugins import read_only, spec_of
from simmoe.replay.prefetch_policies import OWN_POLICY_MODULES, check_jobs, check_layers
from simmoe.replay.timing import closed_forward, drawn_copy_forward, fixed_copy_layer_ends


class Served(NamedTuple):
    """Who a prefill forward serves, read as a step's: its request, at position -1."""

    requests: tuple[int, ...]
    positions: tuple[int, ...]


class ResidentWeights:
    """Every expert resident in HBM: a forward reads its union; nothing is cached, copied or prefetched."""

    resident = True

    def __init__(self, timer):
        self.timer = timer
        self.physical = timer.physical

    def prefill(self, prompt_len: int, demand: np.ndarray, request: int = 0):
        reads = demand.sum(axis=1)
        return self.timer.prefill_ms(prompt_len, reads, np.zeros_like(reads)), reads, np.zeros_like(reads)

    def step(self, step, selector_ms: float):
        """(draft, forward, commit ms, experts read per layer, zeros, {}) for one step."""
        timer = self.timer
        reads = step.demand.sum(axis=1)
        n = step.size
        fwd = timer.forward_ms(step.tokens, reads, np.zeros_like(reads), context=step.context, requests=n)
        lv = step.levels
        draft = 0.0 if lv <= 0 else (self.physical.draft_ms(lv, n, verified=step.tokens)
                                     if self.physical is not None else timer.draft_ms(lv, step.tokens))
        return draft, fwd, timer.commit_ms(), reads, np.zeros_like(reads), None

    def finish(self) -> int:
        return 0


class OffloadedExperts:
    """The offloaded regime's residency stage: cache + prefetch policy + copy engine (module docstring).

    ``policy``: a prefetch policy instance or None; ``sequential``: keep the
    copy engine's state across steps even without a policy (a residency-reading
    selector, or a timeline); ``pools``: the replay's
    :class:`~simmoe.replay.pools.TracePools` (predictions for the policy).
    """

    resident = False

    def __init__(self, timer, cache, num_layers: int, num_experts: int, slots: int, *, policy=None,
                 sequential: bool = False, pools=None, record=None, staging: int | None = None):
        p = timer.profile
        self.timer, self.profile, self.cache, self.policy, self.pools = timer, p, cache, policy, pools
        self.record = record
        self.no_cache = cache is None
        self.L, self.N = int(num_layers), int(num_experts)
        self.overlap = bool(p.overlap) and timer.model != "closed"
        self.serial = not self.overlap        # copies share the compute stream: prefetches block it too
        self.e = float(p.expert_ms)
        self.random = bool(timer.random_copies) and timer.model != "closed"
        self.sequential = bool(sequential or policy is not None or record is not None)
        self.now = 0.0
        self._zeros = np.zeros(self.L, dtype=np.int64)
        self._table: np.ndarray | None = None
        self._avail_pre: np.ndarray | None = None
        draw = _prefetch_draw(timer) if self.random and self.sequential else None
        # the copy engine's state is carried across steps only when something can be on the link between them
        self.engine = CopyEngine(cache, self.L, self.N, slots, int(p.copies_in_flight), float(timer.copy_mean),
                                 draw, staging=staging, record=record)
        self._step_open = False
        self.extra_selector_ms = 0.0          # time the availability callbacks took (not selector time)
        # a prefetch policy may observe every forward, as cache policies do (simmoe.api.PrefetchPolicy)
        self._observe = getattr(policy, "observe", None) if policy is not None else None
        self._forwards = 0
        # another's policy has its outputs checked (one line naming it); simmoe's own skip that on the hot path
        self._checked = policy is not None and type(policy).__module__ not in OWN_POLICY_MODULES
        self._spec = spec_of(policy) if policy is not None else "none"   # as the user named it

    # -- prefill --------------------------------------------------------------------
    def prefill(self, prompt_len: int, demand: np.ndarray, request: int = 0):
        """A request's prefill: through the cache as without prefetch, timed by the timing stage."""
        eng = self.engine
        if self.sequential and eng.pf_count.any():
            used = demand & eng.pf_unused
            eng.counts["useful"] += int(used.sum())
            eng.pf_unused &= ~used
        who = Served((request,), (-1,))
        h, m = self._serve(demand, "prefill", who)
        self._tell(demand, "prefill", who)
        if self.sequential:
            eng.after_forward()
        ms = self.timer.prefill_ms(int(prompt_len), h, m)
        if self.record is not None:
            self.record("compute", "prefill", "prefill", self.now, self.now + ms,
                        {"prompt_tokens": int(prompt_len), "copies": int(m.sum())})
        self.now += ms
        return ms, h, m

    def _tell(self, demand, kind, who) -> None:
        """The prefetch policy observes a forward it has been served (when it defines ``observe``)."""
        if self._observe is None:
            return
        from simmoe.api import ForwardEvent

        eng = self.engine
        assert eng is not None     # a prefetch policy always runs with the copy engine
        if self.cache is not None:
            hits = self.cache.last_hits     # read-only (the cache's forward)
        else:
            hits = demand & eng.staged
            hits.flags.writeable = False
        if demand.flags.writeable:          # the copy engine and the timing read it after
            demand = read_only(demand)
        self._observe(ForwardEvent(demand, hits, self._forwards, kind, tuple(who.requests), tuple(who.positions)))
        self._forwards += 1

    def _serve(self, demand, kind, who):
        """(hits, misses) per layer of one forward; ``who`` (a :class:`Served` or a step) is read by a cache only."""
        if self.no_cache:
            if self.sequential:
                h = (demand & self.engine.staged).sum(axis=1)
                return h, demand.sum(axis=1) - h
            return self._zeros, demand.sum(axis=1)
        return self.cache.forward(demand, kind, who.requests, who.positions)

    # -- a step -----------------------------------------------------------------------
    def open(self, step_index: int, requests, rows, levels: int | None = None,
             selector_ms: float | None = None, selected=None) -> None:
        """A step begins at ``self.now``: open the drafting window and queue the policy's jobs.

        ``levels`` and ``selector_ms`` (when known) bound which jobs can start;
        ``selected`` (per request, when known) is what the policy may read of the selection.
        """
        eng = self.engine
        self._step_open = True
        self._t0 = self.now
        self._levels_run = 0
        self._levels_known = levels is not None
        self._requests, self._rows = list(requests), list(rows)
        self._selected = selected
        if self.policy is None or levels == 0:   # prefetch while drafting: steps that draft
            return
        from simmoe.replay.prefetch_policies import prefetch_step

        ctx = prefetch_step(self, self._requests, self._rows, selected)
        jobs = self.policy.drafting(ctx)
        if jobs is None:
            return
        if self._checked:
            pairs, lv = check_jobs(jobs, self._spec, self.L, self.N)
        else:
            pairs = np.asarray(jobs.pairs, dtype=np.int64)
            lv = np.asarray(jobs.levels, dtype=np.int64)
        w = eng.open(self._t0)
        if levels is not None and selector_ms is not None and not self.serial:
            w.deadline_hint = self._t0 + (self.timer.draft_ms(levels) if levels > 0 else 0.0) + selector_ms
            if w.deadline_hint <= self._t0:
                return          # no drafting, no selection: no job could start
        if levels is not None:
            keep = lv <= levels
            if not keep.all():
                pairs, lv = pairs[keep], lv[keep]
        p = self.profile
        release = np.where(lv > 0, self._t0 + (p.draft_fixed_ms + p.draft_level_ms * lv), self._t0)
        eng.issue(pairs, release, lv)

    def level_time(self, d: int) -> float:
        """Absolute time at which drafting level ``d`` ends (d >= 1)."""
        p = self.profile
        return self._t0 + (p.draft_fixed_ms + p.draft_level_ms * d)

    def available_after(self, d: int) -> np.ndarray:
        """Level ``d`` has been drafted: run the copy engine until then; what is available then (bool [L, N])."""
        import time

        t0 = time.perf_counter()
        eng = self.engine
        if d > self._levels_run and not self.serial:
            eng.run(self.level_time(d))
            eng.place()
            self._levels_run = d
        out = eng.available()
        self.extra_selector_ms += (time.perf_counter() - t0) * 1e3
        return out

    def step(self, step, selector_ms: float):
        """Time one step: drafting, selection, the forward, commit; its hits, misses and prefetch counts."""
        if not self.sequential:
            return self._tabulated(step, selector_ms)
        if not self._step_open:
            sel = step.nodes if (self.policy is not None and getattr(self.policy, "knows_truth", False)) else None
            self.open(step.index, step.requests, step.rows, step.levels, selector_ms, sel)
        self._step_open = False
        return self._sequential(step, selector_ms)

    def _tabulated(self, step, selector_ms: float):
        """No copy engine state: the step is its parts, the forward the timing stage's model."""
        timer = self.timer
        demand = step.demand
        h, m = self._serve(demand, "step", step)
        fwd = timer.forward_ms(step.tokens, h, m, context=step.context, requests=step.size)
        draft = float(timer.draft_ms(step.levels, step.tokens)) if step.levels > 0 else 0.0
        return draft, fwd, timer.commit_ms(), h, m, None

    def _sequential(self, step, selector_ms: float):
        eng, timer = self.engine, self.timer
        levels = int(step.levels)
        draft_ms = float(timer.draft_ms(levels, step.tokens)) if levels > 0 else 0.0
        t0 = self._t0
        F = t0 + draft_ms + selector_ms
        if self.record is not None:
            self._record_drafting(t0, levels, draft_ms, selector_ms, F)
        w = eng.window
        if w is not None and levels == 0:      # nothing drafted (a coupled selector's empty pool): no window
            w.deadline = -math.inf
            eng.close()
            w = None
        if w is not None:
            if not self._levels_known:
                eng.cut_levels(levels)
            if self.serial:       # the copies run after selection, on the compute stream's time
                w.release = [F] * len(w.pairs)
                before = eng.counts["prefetched"]
                eng.run(math.inf)
                eng.close()
                if eng.counts["prefetched"] > before:
                    block = eng.link_free_at() - F
                    F += block
                    draft_ms += block
            else:
                w.deadline = F
                eng.run(F)
                eng.close()
        fwd, h, m = self._forward(F, step)
        end = F + fwd
        commit = timer.commit_ms()
        if self.record is not None and commit > 0:
            self.record("compute", "commit", "commit", end, end + commit, {})
        self.now = end + commit
        return draft_ms, fwd, commit, h, m, eng.take_counts()

    def _record_drafting(self, t0, levels, draft_ms, selector_ms, F) -> None:
        p = self.profile
        if levels > 0 and p.draft_fixed_ms > 0:
            self.record("compute", "draft (fixed)", "draft", t0, t0 + p.draft_fixed_ms, {})
        for d in range(1, levels + 1):
            self.record("compute", f"draft level {d}", "draft", self.level_time(d - 1), self.level_time(d),
                        {"level": d})
        if selector_ms > 0:
            self.record("host", "select", "select", t0 + draft_ms, F, {})

    def finish(self) -> int:
        """Prefetched experts never used when the replay ends (counted as wasted)."""
        return self.engine.finish() if self.sequential else 0

    # -- one forward against the copy engine -------------------------------------------------
    def _forward(self, F: float, step) -> tuple[float, np.ndarray, np.ndarray]:
        timer, p, eng = self.timer, self.profile, self.engine
        demand = step.demand
        n_tokens = int(step.tokens)
        nonexpert = p.forward_ms + p.token_ms * max(n_tokens - 1, 0)
        if timer.cache:
            nonexpert += p.cache_overhead_ms
        a = nonexpert / self.L
        layers = None
        if self.policy is not None:
            from simmoe.replay.prefetch_policies import prefetch_step

            layers = self.policy.layers(prefetch_step(self, step.requests, step.rows, step.nodes))
            if self._checked:
                layers = check_layers(layers, self._spec, self.L, self.N)
        if layers is None:   # nothing enters a layer's slots during the forward
            self._avail_pre = eng.available() if self.record is not None else None   # for the copies' names
            h, m = self._serve(demand, "step", step)
            if self.record is None and eng.link_free_at() <= F + a:   # the link is free: the timing stage's model
                fwd = timer.forward_ms(n_tokens, h, m, context=step.context, requests=step.size)
            else:
                fwd = self._stepped(F, a, nonexpert, demand, h, m, None)
        else:                 # hits and misses at each router, after that layer's prefetches
            h = np.zeros(self.L, dtype=np.int64)
            m = np.zeros(self.L, dtype=np.int64)
            fwd = self._stepped(F, a, nonexpert, demand, h, m, layers)
            if self.cache is not None:
                hh, mm = self.cache.forward(demand, "step", step.requests, step.positions)
                if not (np.array_equal(hh, h) and np.array_equal(mm, m)):
                    raise CheckFailed("residency: the cache's hits and misses differ from the layer's")
        self._tell(demand, "step", step)
        eng.used(demand)
        eng.landed(F + fwd)
        return fwd, h, m

    def _stepped(self, F, a, nonexpert, demand, h, m, layers) -> float:
        """Layers stepped one by one while the link is busy (every layer with layer jobs or a timeline).

        ``h``/``m`` are filled in for the stepped layers (with layer jobs, at
        each router, after that layer's prefetches).  Returns the forward's time.
        """
        L, eng, record = self.L, self.engine, self.record
        ahead = layers is not None
        rel: list[float] = []
        t = F
        j = L
        for layer in range(L):
            T = t + a
            if not ahead and record is None and eng.link_free_at() <= T:
                j = layer          # the rest: layers start with the link free
                break
            if record is not None:
                record("compute", f"attention L{layer}", "attention", t, T, {"layer": layer})
            row = demand[layer]
            if ahead:
                avail = eng.staged[layer] if self.cache is None else (self.cache.resident[layer] | eng.staged[layer])
                h[layer] = np.count_nonzero(row & avail)
                m[layer] = np.count_nonzero(row) - h[layer]
            end = self._layer(layer, T, int(h[layer]), int(m[layer]), row, ahead)
            rel.append(end)
            t = T + end
            if ahead and layer + 1 < L:
                nxt = list(layers[layer + 1])
                if self.serial:    # layer + 1's copies run after this layer, before its attention
                    before = eng.counts["prefetched"]
                    eng.prefetch_layer(layer + 1, nxt, t, math.inf, busy=demand)
                    if eng.counts["prefetched"] > before:
                        block = eng.link_free_at() - t
                        rel[-1] += block
                        t += block
                else:
                    eng.prefetch_layer(layer + 1, nxt, T, t + a, busy=demand)
        done = np.asarray(rel, dtype=np.float64)
        if j == L:
            return nonexpert + float(np.sum(done)) if not self.random else float(np.sum(a + done))
        hr, mr = h[j:], m[j:]
        if self.timer.model == "closed":
            return float(np.sum(a + done)) + closed_forward(a, hr, mr, self.e, self.timer.copy_mean, eng.c)
        if not self.random:
            ends = self._layer_table(hr, mr)[hr, mr]
            return nonexpert + float(np.sum(np.concatenate([done, ends])))
        rest = drawn_copy_forward(a, hr, mr, self.e, self.timer.draw_copy_times(mr), eng.c, self.overlap)
        return float(np.sum(a + done)) + rest

    def _layer_table(self, h: np.ndarray, m: np.ndarray) -> np.ndarray:
        need = int(max(h.max(initial=0), m.max(initial=0)))
        if self._table is None or need >= self._table.shape[0]:
            size = max(64, 2 * need + 1)
            hh, mm = np.meshgrid(np.arange(size), np.arange(size), indexing="ij")
            self._table = fixed_copy_layer_ends(hh, mm, self.e, self.timer.copy_mean, self.engine.c, self.overlap)
        return self._table

    def _layer(self, layer: int, T: float, h: int, m: int, row: np.ndarray, ahead: bool) -> float:
        """One layer from its router at ``T``: time until its last expert has run (relative to T)."""
        e, eng, record = self.e, self.engine, self.record
        lanes = eng.lanes
        ready = []
        hits_now = h
        pending = eng.inflight[layer]
        if pending:
            for x, land in pending.items():
                if land > T and row[x]:
                    ready.append(land)
                    hits_now -= 1
        if m:
            durs = self.timer.draw_copy_times(np.array([m])).tolist() if self.random else None
            if durs is None and record is None and eng.c <= 2:
                ready += eng.demand_landings(T, m)
            else:
                missing = self._missing(layer, row, ahead) if record is not None else []
                x = eng.x
                for i in range(m):
                    k = eng.lane()
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

    def _missing(self, layer: int, row: np.ndarray, ahead: bool) -> list:
        """The layer's demand copies by expert id (for the timeline's names)."""
        eng = self.engine
        if not ahead:      # the cache has already served this forward
            assert self._avail_pre is not None
            avail = self._avail_pre[layer]
        else:
            avail = eng.staged[layer] if self.cache is None else (self.cache.resident[layer] | eng.staged[layer])
        return np.flatnonzero(row & ~avail).tolist()


def _prefetch_draw(timer):
    """Prefetch copy durations, from their own random stream (so demand copies draw as without prefetch)."""
    rng = np.random.default_rng((int(timer.seed), PREFETCH_SEED_SALT))
    if timer.samples is not None:
        samples = timer.samples
        return lambda: float(samples[rng.integers(0, len(samples))])
    shape, scale = timer._gamma
    return lambda: float(rng.gamma(shape, scale))

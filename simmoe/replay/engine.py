"""The replay engine: one cycle loop whose stages compose, for every setting.

A trace fixes, per output position, the pool the drafter builds and what the
target accepts (the trace contract, :mod:`simmoe.trace.schema`); a replay
decides where cycles begin and what each costs.  Every step of every replay
passes through the same stages, each a small interface with interchangeable
implementations (docs/architecture.md draws the cycle):

    admission      continuous batching of B requests (B = 1: one at a time)   admission.py
    pools          each request's pool, routes as the selector may know them  pools.py
    selection      a Selector (simmoe.api), batch-aware costs at B > 1        selection.py
    verification   greedy, or sampled at temperature T                        verification.py
    demand         the per-layer expert union across the batch (Eq. 1)        demand.py
    residency      resident weights, or cache policy + prefetch policy +      residency.py
                   copy engine                                                 caches.py, copy_engine.py
    timing         event, simpy, closed, or the physical model                 timing.py
    metrics        per step, per request-cycle, per request                   results.py

The first five stages never look at residency unless the selector declares
``uses_residency``; then their outcome — the :class:`~simmoe.replay.schedule.Schedule`
— is recorded once and replayed through any residency and timing setting
(``plans`` memoizes it across calls: one plan serves every cache policy and
size, which is what makes a sweep cheap).  A residency-reading selector runs
the same stages live, inside the loop, with the residency stage at hand.

A configuration enters the engine once: :func:`~simmoe.replay.config.resolve`
turns it into a :class:`~simmoe.replay.config.Setting` (its plugins' classes
and what they declare, every check of the whole setting made before any
work), which the stages read; each replay builds its plugins new from it.
Combinations refused, one line each (exit 2), because they have no meaning:
prefetching, a cache, or a timeline with every expert resident (nothing is
copied); ``--prefetch oracle`` with a selector that selects from what has
been prefetched (the oracle knows the selection before it is made); an
offline cache policy (``needs_future``) with such a selector (its future
depends on the cache).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial

import numpy as np

from simmoe.errors import CheckFailed, SimmoeError
from simmoe.replay.config import (  # noqa: F401  (the replay's public names, re-exported)
    DEFAULT_PROFILE,
    SELECTOR_CLOCKS,
    TIMING_MODELS,
    ReplayConfig,
    Setting,
    ar_baseline,
    check_batch,
    check_budget,
    check_profile_geometry,
    plan_key,
    requests_of,
    resolve,
)
from simmoe.replay.results import ReplayResult
from simmoe.replay.schedule import Prefill, Schedule, ScheduleRecorder, Stages, live_steps
from simmoe.replay.schedule import plan as plan_stages
from simmoe.replay.workers import run_groups, shared

CACHE_POLICIES = ("lru", "lfu", "belady", "static", "none")   # simmoe's own (plugins: simmoe.replay.plugins)


def check_setting(trace, config: ReplayConfig | Setting, profile) -> Setting:
    """``config`` resolved and checked on ``trace`` and ``profile``: every check of a replay before any work.

    One line for anything that cannot be replayed: the setting's own checks
    (:meth:`Setting.check`, among them the combinations with no physical
    meaning, module docstring), then its selector's construction with the
    profile's cost models (built once here, and new again in the replay).
    """
    from simmoe.replay.selection import selector_context

    setting = resolve(config, trace, profile)
    c = setting.config
    setting.new_selector(selector_context(trace, profile, c, c.batch, setting.selector_flags))
    return setting


def _edge(trace, config: ReplayConfig | Setting, profile) -> tuple[Setting, object]:
    """A replay's configuration resolved and checked once, as it enters the engine, and its profile.

    A :class:`Setting` is taken as already checked (``replay_all`` checks
    every configuration before it hands them out).
    """
    if profile is None:
        from simmoe.hardware.profile import load_profile

        profile = load_profile((config.config if isinstance(config, Setting) else config.validate()).hardware)
    from simmoe.drafters import with_trace_drafter

    profile = with_trace_drafter(trace, profile)   # drafting as the drafter that made the pools drafts
    if isinstance(config, Setting):
        return config, profile
    return check_setting(trace, config, profile), profile


def _timer(config, profile):
    from simmoe.replay.timing import CycleTimer

    return CycleTimer(profile, model=config.timing, seed=config.seed,
                      cache=config.cache_active and not profile.resident)


def build_residency(trace, config, profile, timer, pools, *, future=None, sequential=False, record=None,
                    staging=None, requests=()):
    """The residency stage of ``config``: resident weights, or cache + prefetch policy + copy engine.

    Its policies are built new (``config`` a :class:`ReplayConfig` or its resolved :class:`Setting`).
    """
    from simmoe.replay.caches import ExpertCache
    from simmoe.replay.residency import OffloadedExperts, ResidentWeights

    if profile.resident:
        return ResidentWeights(timer)
    setting = resolve(config)
    if getattr(getattr(profile, "physical", None), "placement", None) is not None:   # experts on the CPU
        from simmoe.replay.residency_cpu import build_cpu_residency

        return build_cpu_residency(trace, setting, profile, timer, future=future, record=record, requests=requests)
    config = setting.config
    g = trace.geometry
    L, N = int(g.num_layers), int(g.num_experts)
    cache = None
    budget = config.cache_budget if config.cache_active else None
    slots = (int(config.slots) if budget is None else min(int(budget), N)) if config.cache_active else 0
    if config.cache_active:
        policy = setting.new_cache_policy()
        cache = ExpertCache(L, N, int(config.slots), policy, future=future, seed=config.seed, trace=trace,
                            requests=requests, budget=budget, admission=config.admission)
    prefetch = None
    if config.prefetch != "none":
        prefetch = setting.new_prefetch_policy()
        from simmoe.api import CacheShape
        from simmoe.replay.prefetch_policies import policy_trace

        prefetch.reset(CacheShape(L, N, slots, budget=budget, seed=config.seed, trace=policy_trace(prefetch, trace),
                                  requests=tuple(requests)))
    return OffloadedExperts(timer, cache, L, N, slots, policy=prefetch, sequential=sequential, pools=pools,
                            record=record, staging=staging)


def replay(trace, config: ReplayConfig | Setting, profile=None, *, plans: dict | None = None,
           progress: Callable[[int], None] | None = None, timeline: bool = False, paired: bool = False,
           staging: int | None = None) -> ReplayResult:
    """Replay ``trace`` under ``config``.  ``plans`` memoizes schedules across calls.

    ``config``: a :class:`ReplayConfig` (resolved and checked here), or a
    :class:`Setting` already checked on this trace and profile.  Every plugin
    is built new for this replay.  ``timeline``: record every event of the
    copy-engine model; ``paired``: with a prefetch policy, also replay without
    it, for the time saved.
    """
    setting, profile = _edge(trace, config, profile)
    config = setting.config
    R = requests_of(trace, config)
    from simmoe.replay.pools import TracePools
    from simmoe.replay.route_prediction import RoutePredictor
    from simmoe.replay.verification import verdicts_for

    predictor = RoutePredictor(trace.geometry.num_experts, config.route_accuracy, config.seed)
    verdicts = verdicts_for(trace, float(config.temperature), config.draw_seed)
    coupled = setting.uses_residency
    schedule = None
    t_plan = time.perf_counter()
    if not coupled:
        schedule = _schedule(trace, setting, profile, R, verdicts, predictor, plans, progress)
    plan_s = time.perf_counter() - t_plan
    t0 = time.perf_counter()
    res = _run(trace, setting, profile, R, schedule, verdicts, predictor, progress=progress, timeline=timeline,
               staging=staging, pools=TracePools(trace, predictor, verdicts))
    res.plan_wall_s = schedule.wall_s if schedule is not None else plan_s
    res.simulate_wall_s = time.perf_counter() - t0
    if paired and config.prefetch != "none":
        base = _run(trace, setting.without_prefetch(), profile, R, schedule, verdicts, predictor,
                    pools=TracePools(trace, predictor, verdicts))
        res.baseline_decode_ms = float(np.sum(base.requests["decode_ms"]))
    return res


def plan(trace, config: ReplayConfig | Setting, profile=None, *,
         progress: Callable[[int], None] | None = None) -> Schedule:
    """The first five stages alone: the :class:`~simmoe.replay.schedule.Schedule` of ``config`` on ``trace``.

    Not for selectors that read residency (their schedule depends on the cache).
    """
    from simmoe.replay.route_prediction import RoutePredictor
    from simmoe.replay.verification import verdicts_for

    setting = resolve(config)   # a plan depends on none of the residency settings: those are not checked
    config = setting.config
    if profile is None:
        from simmoe.hardware.profile import load_profile

        profile = load_profile(config.hardware)
    if setting.uses_residency:
        raise SimmoeError(f"selector {config.selector!r} selects from the cache: its schedule is made inside "
                          "the replay (replay(), not plan())")
    R = requests_of(trace, config)
    check_batch(config.batch, R)
    predictor = RoutePredictor(trace.geometry.num_experts, config.route_accuracy, config.seed)
    verdicts = verdicts_for(trace, float(config.temperature), config.draw_seed)
    return _schedule(trace, setting, profile, R, verdicts, predictor, None, progress)


def simulate(trace, schedule: Schedule, config: ReplayConfig | Setting, profile=None, *, timeline: bool = False,
             staging: int | None = None) -> ReplayResult:
    """The residency, timing and metrics stages over a recorded schedule (``config``'s cache, prefetch, timing)."""
    from simmoe.replay.pools import TracePools
    from simmoe.replay.route_prediction import RoutePredictor

    setting, profile = _edge(trace, config, profile)
    config = setting.config
    predictor = RoutePredictor(trace.geometry.num_experts, config.route_accuracy, config.seed)
    t0 = time.perf_counter()
    res = _run(trace, setting, profile, schedule.num_requests, schedule, None, predictor, timeline=timeline,
               staging=staging, pools=TracePools(trace, predictor, trace.node_agree))
    res.plan_wall_s, res.simulate_wall_s = schedule.wall_s, time.perf_counter() - t0
    return res


def _schedule(trace, setting: Setting, profile, R, verdicts, predictor, plans, progress) -> Schedule:
    key = plan_key(setting)
    schedule = plans.get(key) if plans is not None else None
    if schedule is None:
        schedule = plan_stages(Stages(trace, setting, profile, R, verdicts, predictor), progress=progress)
        if plans is not None:
            plans[key] = schedule
    elif progress is not None:
        progress(int(schedule.cycles["committed"].sum()))
    return schedule


def _run(trace, setting: Setting, profile, R, schedule, verdicts, predictor, *, pools, progress=None,
         timeline=False, staging=None, sequential=False) -> ReplayResult:
    """Residency, timing and metrics over the schedule's events (or the live stages, for a coupled selector)."""
    config = setting.config
    timer = _timer(config, profile)
    recorder = _Recorder() if timeline else None
    coupled = schedule is None
    future = list(schedule.demands(trace)) if setting.offline_cache(profile) and schedule is not None else None
    residency = build_residency(trace, setting, profile, timer, pools, future=future,
                                sequential=coupled or sequential, record=recorder, staging=staging,
                                requests=tuple(range(R)))
    live = None
    if coupled:   # the stages before residency run live, their outcome recorded as they go
        stages = Stages(trace, setting, profile, R, verdicts, predictor)
        live = ScheduleRecorder(stages)
        events = live_steps(stages, available=residency.available_after, opened=residency.open,
                            overhead=lambda: residency.extra_selector_ms, progress=progress)
        uses_time = stages.selection.drafts
    else:
        events = schedule.events_iter()
        uses_time = schedule.selector_uses_time
    rec = _Records(trace, config, R, residency, uses_time)
    for ev in events:
        rec.add(ev)
        if live is not None:
            live.add(ev)
    return rec.result(live.schedule() if live is not None else schedule,
                      recorder.events if recorder is not None else None,
                      counted=config.prefetch != "none" or coupled or sequential)


class _Recorder:
    """Collects events as tuples (track, name, category, start ms, end ms, args)."""

    def __init__(self):
        self.events: list = []

    def __call__(self, track, name, cat, start, end, args=None):
        self.events.append((track, name, cat, float(start), float(end), dict(args or {})))


class _Records:
    """The metrics stage: per-step times and counts as the loop goes; per-request records at the end."""

    def __init__(self, trace, config, R: int, residency, uses_time: bool):
        self.trace, self.config, self.R, self.residency, self.uses_time = trace, config, R, residency, uses_time
        self.prompt_len = np.asarray(trace.requests.prompt_len[:R], dtype=np.int32)
        self.output_len = np.asarray(trace.requests.output_len[:R], dtype=np.int32)
        self.rows: list[tuple] = []      # per step: hits, misses, draft, selector, forward, commit ms
        self.pf: list[tuple] = []        # per step: prefetched, useful, wasted
        self.pre: dict[str, np.ndarray] = {
            "prefill_hits": np.zeros(R, np.int32), "prefill_misses": np.zeros(R, np.int32),
            "prefill_ms": np.zeros(R), "admit_ms": np.zeros(R)}
        self.clock = 0.0
        self.step_end: list[float] = []
        fixed = config.selector_ms
        self.fixed = None if fixed is None else float(fixed)
        self.wall = config.selector_clock == "wall"

    def add(self, ev) -> None:
        if isinstance(ev, Prefill):
            r = ev.request
            ms, h, m = self.residency.prefill(int(self.prompt_len[r]), self.trace.prefill_demand(r), r)
            self.pre["prefill_hits"][r], self.pre["prefill_misses"][r], self.pre["prefill_ms"][r] = h.sum(), m.sum(), ms
            self.pre["admit_ms"][r] = self.clock
            self.clock += ms
            return
        # selector time charged: none (no drafter), fixed, or measured on the chosen clock
        sel = 0.0 if not self.uses_time else (
            self.fixed if self.fixed is not None else (ev.selector_ms if self.wall else ev.selector_cpu_ms))
        draft, fwd, commit, h, m, counts = self.residency.step(ev, sel)
        self.rows.append((sum(h.tolist()), sum(m.tolist()), draft, sel, fwd, commit))   # (faster than int(h.sum()))
        if counts is not None:
            self.pf.append((counts["prefetched"], counts["useful"], counts["wasted"]))
        self.clock += draft + sel + fwd + commit
        self.step_end.append(self.clock)

    def result(self, schedule: Schedule, timeline, counted: bool) -> ReplayResult:
        R = self.R
        cy = schedule.cycles
        cols = list(zip(*self.rows, strict=True)) if self.rows else [()] * 6
        hits, misses = np.asarray(cols[0], dtype=np.int32), np.asarray(cols[1], dtype=np.int32)
        draft, sel, fwd, commit = (np.asarray(c, dtype=np.float64) for c in cols[2:])
        step_ms = draft + sel + fwd + commit
        committed = np.bincount(cy["request"], weights=cy["committed"], minlength=R).astype(np.int64)
        if not np.array_equal(committed, self.output_len.astype(np.int64)):
            bad = int(np.flatnonzero(committed != self.output_len)[0])
            raise CheckFailed(f"request {bad} committed {committed[bad]} tokens, output length {self.output_len[bad]}")
        s = cy["step"]
        first = np.r_[True, s[1:] != s[:-1]] if (self.config.batch > 1 and len(s)) else None
        cycles = {**cy, "hits": hits[s], "misses": misses[s], "draft_ms": draft[s], "selector_ms": sel[s],
                  "forward_ms": fwd[s], "commit_ms": commit[s], "cycle_ms": step_ms[s]}
        if first is not None:
            # the step's copies and hits belong to the batch: charge them once (to the step's first cycle)
            cycles["hits"] = np.where(first, cycles["hits"], 0).astype(np.int32)
            cycles["misses"] = np.where(first, cycles["misses"], 0).astype(np.int32)
        if counted:
            pf = np.asarray(self.pf, dtype=np.int32).reshape(-1, 3) if self.pf else \
                np.zeros((len(step_ms), 3), np.int32)
            if len(pf):
                pf[-1, 2] += self.residency.finish()   # prefetches never used by the end: wasted
            for i, key in enumerate(("prefetched", "useful", "wasted")):
                col = pf[s, i]
                cycles[key] = np.where(first, col, 0).astype(np.int32) if first is not None else col
        st = schedule.steps
        steps = {"requests": st["requests"], "tokens": st["tokens"], "context": st["context"],
                 "levels": st["levels"], "hits": hits, "misses": misses, "draft_ms": draft, "selector_ms": sel,
                 "forward_ms": fwd, "commit_ms": commit, "step_ms": step_ms}
        return ReplayResult(config=self.config, steps=steps, cycles=cycles, requests=self._requests(cy, step_ms),
                            synthetic=bool(self.trace.is_synthetic), plan_wall_s=0.0, simulate_wall_s=0.0,
                            lambda_star=schedule.meta.get("lambda_star"),
                            regime=getattr(self.residency, "regime", "resident" if self.residency.resident
                                           else "offload"),
                            cpu=self.residency.counters() if hasattr(self.residency, "counters") else None,
                            expert_bytes=int(getattr(self.trace.geometry, "expert_bytes", 0) or 0),
                            counted_prefetch=counted, timeline=timeline)

    def _requests(self, cy, step_ms) -> dict:
        R = self.R
        pre_ms = self.pre["prefill_ms"]
        last = np.zeros(R, np.int64)
        np.maximum.at(last, cy["request"], cy["step"])
        finish_ms = np.asarray(self.step_end, dtype=np.float64)[last] if len(self.step_end) else np.zeros(R)
        admit = self.pre["admit_ms"]
        decode_span = finish_ms - (admit + pre_ms)
        with np.errstate(invalid="ignore", divide="ignore"):
            tpot = np.where(self.output_len > 1, decode_span / np.maximum(self.output_len - 1, 1), np.nan)
        # a request's own decode time: its cycles' steps (at batch 1 each request's cycles, summed)
        decode_ms = np.bincount(cy["request"], weights=step_ms[cy["step"]], minlength=R)
        return {"output_len": self.output_len, "prompt_len": self.prompt_len,
                "prefill_hits": self.pre["prefill_hits"], "prefill_misses": self.pre["prefill_misses"],
                "prefill_ms": pre_ms, "admit_ms": admit, "finish_ms": finish_ms, "latency_ms": finish_ms - admit,
                "tpot_ms": tpot, "decode_ms": decode_ms, "request_ms": pre_ms + decode_ms}


# --------------------------------------------------------------------------
# several configurations of one trace, in parallel
# --------------------------------------------------------------------------
def _replay_group(jobs: list, progress=None, **kw) -> list[ReplayResult]:
    trace, profiles = shared()
    plans: dict = {}
    return [replay(trace, s, profiles[s.config.hardware], plans=plans, progress=progress, **kw) for s in jobs]


def replay_all(trace, configs: list[ReplayConfig] | list[Setting], profiles: dict | None = None, *, workers: int = 1,
               on_done: Callable[[list[ReplayResult]], None] | None = None,
               progress: Callable[[int], None] | None = None, timeline: bool = False,
               paired: bool = False) -> list[ReplayResult]:
    """Replay several configurations of one trace; results in the order of ``configs``.

    Configurations sharing a schedule (:func:`plan_key`) run together, so each
    is planned once.  With ``workers > 1`` the groups run in forked worker
    processes, which inherit the trace instead of reading it again (where
    ``fork`` is unavailable they run one after another).  Results equal those
    of one-by-one :func:`replay` calls (with a fixed selector time, exactly).
    ``on_done`` is called with each finished group; ``progress`` with committed
    tokens as they are replayed (in this process only: forked workers report
    through ``on_done``).
    """
    settings = [resolve(c) for c in configs]
    if profiles is None:
        from simmoe.hardware.profile import load_profile

        profiles = {}
        for s in settings:
            if s.config.hardware not in profiles:
                profiles[s.config.hardware] = load_profile(s.config.hardware)
    for s in settings:  # a profile without the selector's cost model, or a setting with no meaning, fails here
        check_setting(trace, s, profiles[s.config.hardware])
    groups: dict[tuple, list[int]] = {}
    for i, s in enumerate(settings):
        key = ("coupled", i) if s.uses_residency else (s.config.hardware, plan_key(s))
        groups.setdefault(key, []).append(i)
    # the exact searches are the slow plans: start them first
    order = sorted(groups.values(), key=lambda ix: not settings[ix[0]].uses_cost)
    run = partial(_replay_group, timeline=timeline, paired=paired)
    # a worker receives each setting as its configuration and resolves it there (Setting.__reduce__)
    return run_groups(order, settings, run, trace=trace, profiles=profiles, workers=workers,
                      on_done=on_done, progress=progress)

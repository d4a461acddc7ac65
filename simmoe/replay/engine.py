"""The replay engine: a trace, a selector, a cache and a hardware profile → per-cycle records.

Greedy verification is lossless, so a trace fixes the committed text and a
replay only decides where cycles begin (SpecFit §2; the trace contract in
:mod:`simmoe.trace.schema`).  Per request, a cursor ``t`` runs over the
output positions:

    pool(t) → the selector chooses S and how many levels were drafted
            → accepted path = longest root-to-node path inside S whose nodes
              all agree → commit 1 + its length (at most the positions left)
            → t advances by that.

The replay has two passes, because selections never depend on the cache:

1. :func:`plan` runs the selector over the trace once and records, per
   cycle, the selected nodes' count, drafted levels, committed tokens, the
   selector's wall time and the forward's expert demand (the per-layer union
   of the true routes of the root and of S, Eq. 1), bit-packed.
2. :func:`simulate` replays the demands through an expert cache (state
   carried over between requests, starting empty: SpecFit App. B), the
   prefill of every request first, and times every forward with the
   profile's :class:`~simmoe.replay.timing.CycleTimer`.

One plan serves every cache policy and size, which is what makes a sweep
cheap.  :func:`replay` runs both for one :class:`ReplayConfig`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from simmoe.errors import CheckFailed, SimmoeError
from simmoe.replay.route_prediction import RoutePredictor, check_accuracy
from simmoe.replay.selectors import (
    SELECTORS,
    PoolView,
    SelectorContext,
    accepted_length,
    make_selector,
)
from simmoe.replay.workers import run_groups, shared

CACHE_POLICIES = ("lru", "lfu", "belady", "static", "none")
TIMING_MODELS = ("event", "simpy", "closed")
SELECTOR_CLOCKS = ("wall", "cpu")
DEFAULT_PROFILE = "a100-pcie-40gb"


@dataclass(frozen=True)
class ReplayConfig:
    """One replay configuration.

    ``selector_ms=None`` uses the measured selector time, read from the
    ``selector_clock``: ``"wall"`` (elapsed time, as the paper measures it)
    or ``"cpu"`` (the selecting thread's CPU time: the same on an idle core,
    but not inflated when other processes share the machine).
    """

    selector: str = "specfit"
    slots: int = 48
    cache: str = "lru"
    hardware: str = DEFAULT_PROFILE
    route_accuracy: float = 1.0
    selector_ms: float | None = None
    selector_clock: str = "wall"
    timing: str = "event"
    seed: int = 0
    requests: int | None = None
    options: tuple[tuple[str, float], ...] = ()
    # 0: greedy verification; T > 0: sampled verification (simmoe.replay.sampling), its draws keyed by
    # ``sampling_seed`` (None: ``seed``; hwprobe runs record theirs apart from the route seed)
    temperature: float = 0.0
    sampling_seed: int | None = None

    @property
    def draw_seed(self) -> int:
        """The seed of the target's draws at temperature > 0."""
        return int(self.seed if self.sampling_seed is None else self.sampling_seed)

    @property
    def cache_active(self) -> bool:
        """Whether an expert cache keeps experts between forwards."""
        return self.slots > 0 and self.cache != "none"

    def validate(self) -> ReplayConfig:
        if self.selector not in SELECTORS:
            raise SimmoeError(f"unknown selector {self.selector!r}; known: {', '.join(SELECTORS)}")
        if isinstance(self.slots, bool) or int(self.slots) != self.slots or self.slots < 0:
            raise SimmoeError(f"slots must be a non-negative integer, got {self.slots!r}")
        if self.cache not in CACHE_POLICIES:
            raise SimmoeError(f"unknown cache policy {self.cache!r}; known: {', '.join(CACHE_POLICIES)}")
        if self.timing not in TIMING_MODELS:
            raise SimmoeError(f"unknown timing model {self.timing!r}; known: {', '.join(TIMING_MODELS)}")
        check_accuracy(self.route_accuracy)
        if self.selector_clock not in SELECTOR_CLOCKS:
            raise SimmoeError(f"unknown selector clock {self.selector_clock!r}; known: {', '.join(SELECTOR_CLOCKS)}")
        if self.selector_ms is not None and not (math.isfinite(float(self.selector_ms))
                                                 and float(self.selector_ms) >= 0.0):
            raise SimmoeError(f"selector time must be a non-negative number of ms, got {self.selector_ms!r}")
        if self.requests is not None and int(self.requests) < 1:
            raise SimmoeError(f"requests must be at least 1, got {self.requests!r}")
        from simmoe.trace.sampling import check_temperature_value

        check_temperature_value(self.temperature, "temperature")
        return self

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["options"] = dict(self.options)
        return d


# --------------------------------------------------------------------------
# pass 1: selection
# --------------------------------------------------------------------------
@dataclass
class Plan:
    """Selections of one selector over a trace (independent of the cache).

    Per-cycle arrays have one entry per cycle, in replay order; ``demand``
    holds each forward's expert demand ``bool [L, N]`` bit-packed per cycle.
    """

    selector: str
    num_requests: int
    request: np.ndarray          # int32 [C]
    row: np.ndarray              # int64 [C]: trace position row of the cycle's root
    position: np.ndarray         # int32 [C]: output position t of the root
    draft_nodes: np.ndarray      # int16 [C]: |S|
    accepted: np.ndarray         # int16 [C]: accepted path length
    committed: np.ndarray        # int16 [C]: tokens committed (1 + accepted, capped)
    drafted_levels: np.ndarray   # int8  [C]
    pool_levels: np.ndarray      # int8  [C]: depth of the recorded pool
    pool_size: np.ndarray        # int16 [C]
    selector_ms: np.ndarray      # float64 [C]: measured wall time of the selection
    selector_cpu_ms: np.ndarray  # float64 [C]: CPU time of the selecting thread
    demand: np.ndarray           # uint8 [C, ceil(L*N/8)]
    selected: np.ndarray         # int16 [Σ|S|]: pool-local ids of S, cycle after cycle
    output_len: np.ndarray       # int32 [R]
    prompt_len: np.ndarray       # int32 [R]
    num_layers: int
    num_experts: int
    selector_uses_time: bool = True  # False for AR: no selector runs
    wall_s: float = 0.0
    meta: dict = field(default_factory=dict)

    @property
    def num_cycles(self) -> int:
        return len(self.request)

    def selected_of(self, c: int) -> np.ndarray:
        """Pool-local ids of the nodes verified in cycle ``c`` (ascending)."""
        ptr = self._selected_ptr()
        return self.selected[ptr[c]:ptr[c + 1]]

    def _selected_ptr(self) -> np.ndarray:
        if getattr(self, "_ptr", None) is None:
            self._ptr = np.concatenate([[0], np.cumsum(self.draft_nodes, dtype=np.int64)])
        return self._ptr

    def demand_of(self, c: int) -> np.ndarray:
        L, N = self.num_layers, self.num_experts
        return np.unpackbits(self.demand[c], count=L * N).view(bool).reshape(L, N)


def _view(trace, row: int, predictor: RoutePredictor, num_experts: int, agree=None) -> PoolView:
    s = trace.pool_slice(row)
    root_routes, node_routes = predictor.predict(row, trace.root_routes[row], trace.node_routes[s])
    agree = trace.node_agree if agree is None else agree  # the verdicts (only the oracle looks)
    return PoolView(row=row, parents=trace.node_parent[s], levels=trace.node_level[s],
                    p=trace.node_p[s], q=trace.node_q[s], agree=agree[s],
                    root_routes=root_routes, node_routes=node_routes, num_experts=num_experts)


def selector_context(trace, profile, config: ReplayConfig) -> SelectorContext:
    """The selector's configuration: the trace's K, the profile's cost models (Eq. 4, EVICT C(k))."""
    cls = SELECTORS[config.selector]
    cost = profile.cost_model(config.cache_active) if cls.uses_cost else None
    if cls.uses_evict_cost:  # a physical profile's C(k) is profiled on the trace (simmoe.replay.batch)
        from simmoe.replay.batch import evict_table

        evict = evict_table(trace, profile)
    else:
        evict = ()
    return SelectorContext(K=trace.pool_shape.K, cost=cost, evict_cost=evict,
                           options=dict(config.options))


def plan(trace, config: ReplayConfig, profile=None, *,
         progress: Callable[[int], None] | None = None) -> Plan:
    """Pass 1: run the selector over every cycle of the first ``config.requests`` requests.

    O(cycles · selector); the demand of a cycle is built by fancy indexing
    over the selected nodes' true routes, O(|S|·L·k + L·N / 8).
    """
    from solvers.errors import InvalidInput  # importing solvers is slow: not for `simmoe --help`

    config = config.validate()
    if profile is None and (SELECTORS[config.selector].uses_cost
                            or SELECTORS[config.selector].uses_evict_cost):
        from simmoe.hardware.profile import load_profile

        profile = load_profile(config.hardware)
    g = trace.geometry
    L, N = g.num_layers, g.num_experts
    R = len(trace.requests) if config.requests is None else min(int(config.requests), len(trace.requests))
    if R == 0:
        raise SimmoeError("the trace has no requests")
    selector = make_selector(config.selector, selector_context(trace, profile, config))
    predictor = RoutePredictor(N, config.route_accuracy, config.seed)
    # the verdicts: greedy agreement, or at T > 0 the target's draws (simmoe.replay.sampling)
    from simmoe.replay.sampling import sampled_agree
    from simmoe.trace.sampling import check_replay_temperature

    check_replay_temperature(trace, config.temperature)
    verdicts = sampled_agree(trace, float(config.temperature), config.draw_seed)
    starts = np.array([trace.request_positions(r)[0] for r in range(R)]
                      + [trace.request_positions(R - 1)[1]], dtype=np.int64)
    output_len = np.asarray(trace.requests.output_len[:R], dtype=np.int32)
    for r in range(R):
        if starts[r + 1] - starts[r] != output_len[r]:
            raise SimmoeError(f"request {r} has {starts[r + 1] - starts[r]} positions but "
                              f"output length {output_len[r]}")
    P = int(starts[R])
    t0 = time.perf_counter()
    if selector.needs_prepare:
        try:
            selector.prepare(trace, R, lambda rows: [_view(trace, int(i), predictor, N, verdicts) for i in rows])
        except InvalidInput as exc:
            raise SimmoeError(f"selector {config.selector!r}: {exc}") from None

    nbytes = (L * N + 7) // 8
    request = np.empty(P, np.int32)
    row_a = np.empty(P, np.int64)
    pos_a = np.empty(P, np.int32)
    nodes_a = np.empty(P, np.int16)
    acc_a = np.empty(P, np.int16)
    com_a = np.empty(P, np.int16)
    lev_a = np.empty(P, np.int8)
    plev_a = np.empty(P, np.int8)
    psize_a = np.empty(P, np.int16)
    sel_a = np.empty(P, np.float64)
    cpu_a = np.empty(P, np.float64)
    demand = np.empty((P, nbytes), np.uint8)
    selected: list[np.ndarray] = []

    layer_offset = (np.arange(L, dtype=np.int64) * N)[:, None]      # [L, 1]
    node_ptr, node_level = trace.node_ptr, trace.node_level
    node_parent, node_agree, node_routes = trace.node_parent, verdicts, trace.node_routes
    root_routes = trace.root_routes
    perf, cpu = time.perf_counter, time.thread_time
    mask = np.zeros(L * N, dtype=bool)
    c = 0
    for r in range(R):
        start, n_out = int(starts[r]), int(output_len[r])
        t = 0
        while t < n_out:
            i = start + t
            lo, hi = int(node_ptr[i]), int(node_ptr[i + 1])
            if selector.drafts:
                view = _view(trace, i, predictor, N, verdicts)
                c1, t1 = cpu(), perf()
                try:
                    choice = selector.select(view)
                except InvalidInput as exc:  # e.g. a cost model too short for the trace's K
                    raise SimmoeError(f"selector {config.selector!r} at request {r}, position {t}: "
                                      f"{exc}") from None
                sel_ms, cpu_ms = (perf() - t1) * 1e3, (cpu() - c1) * 1e3
                nodes = choice.nodes
                levels = node_level[lo:hi]
                acc = accepted_length(node_parent[lo:hi], node_agree[lo:hi], nodes)
                drafted = choice.drafted_levels
                depth = int(levels.max()) if hi > lo else 0
            else:
                nodes, acc, drafted, depth, sel_ms, cpu_ms = (), 0, 0, 0, 0.0, 0.0
            committed = min(1 + acc, n_out - t)
            # Eq. 1: the forward executes the true routes of the root and of S
            mask[:] = False
            mask[(root_routes[i] + layer_offset).ravel()] = True
            if len(nodes):
                nodes = np.asarray(nodes, dtype=np.int64)
                sel_routes = node_routes[lo + nodes]  # [m, L, k]
                mask[(sel_routes + layer_offset[None]).ravel()] = True
                selected.append(nodes)
            demand[c] = np.packbits(mask)
            request[c], row_a[c], pos_a[c] = r, i, t
            nodes_a[c], acc_a[c], com_a[c] = len(nodes), acc, committed
            lev_a[c], plev_a[c], psize_a[c], sel_a[c], cpu_a[c] = drafted, depth, hi - lo, sel_ms, cpu_ms
            c += 1
            t += committed
            if progress is not None:
                progress(committed)
    wall = time.perf_counter() - t0
    return Plan(selector=config.selector, num_requests=R,
                request=request[:c].copy(), row=row_a[:c].copy(), position=pos_a[:c].copy(),
                draft_nodes=nodes_a[:c].copy(), accepted=acc_a[:c].copy(),
                committed=com_a[:c].copy(), drafted_levels=lev_a[:c].copy(),
                pool_levels=plev_a[:c].copy(), pool_size=psize_a[:c].copy(),
                selector_ms=sel_a[:c].copy(), selector_cpu_ms=cpu_a[:c].copy(),
                demand=demand[:c].copy(),
                selected=(np.concatenate(selected) if selected else np.zeros(0)).astype(np.int16),
                output_len=output_len, prompt_len=np.asarray(trace.requests.prompt_len[:R], np.int32),
                num_layers=L, num_experts=N, selector_uses_time=selector.drafts, wall_s=wall,
                meta={"lambda_star": getattr(selector, "lam", None)})


# --------------------------------------------------------------------------
# pass 2: cache and timing
# --------------------------------------------------------------------------
@dataclass
class ReplayResult:
    """Per-cycle and per-request records of one replay, with the summary counters."""

    config: ReplayConfig
    cycles: dict[str, np.ndarray]
    requests: dict[str, np.ndarray]
    synthetic: bool
    plan_wall_s: float
    simulate_wall_s: float
    lambda_star: float | None = None

    def summary(self) -> dict[str, float]:
        from simmoe.replay.metrics import summarize

        return summarize(self.cycles, self.requests)

    def cycles_frame(self):
        import pandas as pd

        df = pd.DataFrame(self.cycles)
        for key in ("selector", "cache", "slots", "hardware", "route_accuracy"):
            df.insert(0, key, getattr(self.config, key))
        df["synthetic"] = self.synthetic
        return df


def _forwards(trace, p: Plan):
    """Every forward's demand in replay order: each request's prefill, then its cycles."""
    L, N = p.num_layers, p.num_experts
    bounds = np.searchsorted(p.request, np.arange(p.num_requests + 1))
    for r in range(p.num_requests):
        yield -1 - r, np.asarray(trace.requests.prefill_union[r], dtype=bool).reshape(L, N)
        for c in range(bounds[r], bounds[r + 1]):
            yield c, np.unpackbits(p.demand[c], count=L * N).view(bool).reshape(L, N)


def simulate(trace, p: Plan, config: ReplayConfig, profile=None) -> ReplayResult:
    """Pass 2: replay the plan's forwards through the cache and time them.

    Cycle time = drafting (per drafted level) + selector time (measured, or
    ``config.selector_ms``; none for AR) + the verification forward (event
    model, from the forward's per-layer hits and misses) + commit.  Prefill
    loads its expert union into the cache and is timed by the profile.
    O(forwards · (cache + timer)).
    """
    from simmoe.hardware.profile import load_profile
    from simmoe.replay.timing import CycleTimer

    config = config.validate()
    if profile is None:
        profile = load_profile(config.hardware)
    t0 = time.perf_counter()
    L, N = p.num_layers, p.num_experts
    R, C = p.num_requests, p.num_cycles
    policy, cache = replay_cache(config, L, N, lambda: (d for _, d in _forwards(trace, p)))
    timer = CycleTimer(profile, model=config.timing, seed=config.seed,
                       cache=config.cache_active)

    hits = np.zeros(C, np.int32)
    misses = np.zeros(C, np.int32)
    draft_ms = np.zeros(C)
    forward_ms = np.zeros(C)
    commit_ms = np.zeros(C)
    sel_ms = charged_selector_ms(config, C, p.selector_uses_time, p.selector_ms, p.selector_cpu_ms)
    pre_hits = np.zeros(R, np.int32)
    pre_misses = np.zeros(R, np.int32)
    pre_ms = np.zeros(R)
    draft_cost: dict[int, float] = {}
    no_cache = policy == "none"
    zeros = np.zeros(L, dtype=np.int64)
    # KV tokens each forward reads (physical profiles only), as plain ints
    context = (p.prompt_len[p.request].astype(np.int64) + p.position).tolist() if timer.physical is not None \
        else [0] * C
    for c, demand in _forwards(trace, p):
        if no_cache:  # the cache's own semantics, without its bookkeeping: every expert is a miss
            h, m = zeros, demand.sum(axis=1)
        else:
            h, m = cache.forward(demand)
        if c < 0:
            r = -1 - c
            pre_hits[r], pre_misses[r] = h.sum(), m.sum()
            pre_ms[r] = timer.prefill_ms(int(p.prompt_len[r]), h, m)
            continue
        hits[c], misses[c] = h.sum(), m.sum()
        forward_ms[c] = timer.forward_ms(1 + int(p.draft_nodes[c]), h, m, context=context[c])
        lv = int(p.drafted_levels[c])
        if lv not in draft_cost:
            draft_cost[lv] = float(timer.draft_ms(lv)) if lv > 0 else 0.0
        draft_ms[c] = draft_cost[lv]
        commit_ms[c] = timer.commit_ms()
    cycle_ms = draft_ms + sel_ms + forward_ms + commit_ms
    decode_ms = np.bincount(p.request, weights=cycle_ms, minlength=R)
    committed = np.bincount(p.request, weights=p.committed, minlength=R).astype(np.int64)
    if not np.array_equal(committed, p.output_len.astype(np.int64)):
        bad = int(np.flatnonzero(committed != p.output_len)[0])
        raise CheckFailed(f"request {bad} committed {committed[bad]} tokens, "
                          f"output length {p.output_len[bad]}")
    cycles = {
        "request": p.request, "position": p.position, "row": p.row,
        "draft_nodes": p.draft_nodes, "accepted": p.accepted, "committed": p.committed,
        "drafted_levels": p.drafted_levels, "pool_levels": p.pool_levels,
        "pool_size": p.pool_size, "hits": hits, "misses": misses,
        "draft_ms": draft_ms, "selector_ms": sel_ms, "forward_ms": forward_ms,
        "commit_ms": commit_ms, "cycle_ms": cycle_ms,
    }
    requests = {
        "output_len": p.output_len, "prompt_len": p.prompt_len,
        "prefill_hits": pre_hits, "prefill_misses": pre_misses, "prefill_ms": pre_ms,
        "decode_ms": decode_ms, "request_ms": pre_ms + decode_ms,
    }
    return ReplayResult(config=config, cycles=cycles, requests=requests,
                        synthetic=bool(trace.is_synthetic), plan_wall_s=p.wall_s,
                        simulate_wall_s=time.perf_counter() - t0,
                        lambda_star=p.meta.get("lambda_star"))


# --------------------------------------------------------------------------
# both passes, with plans shared between configurations
# --------------------------------------------------------------------------
def plan_key(config: ReplayConfig) -> tuple:
    """What a plan depends on: configurations with equal keys share one plan."""
    cls = SELECTORS[config.selector]
    cost_key = (config.hardware if (cls.uses_cost or cls.uses_evict_cost) else None,
                config.cache_active if cls.uses_cost else None)
    exact = config.route_accuracy >= 1.0  # exact routes do not depend on the seed
    route_key = (config.route_accuracy, None if exact else config.seed) if cls.drafts else None
    sampling_key = (float(config.temperature), config.draw_seed) if config.temperature > 0 else None
    return (config.selector, cost_key, route_key, config.requests, config.options, sampling_key)


def replay(trace, config: ReplayConfig, profile=None, *, plans: dict | None = None,
           progress: Callable[[int], None] | None = None) -> ReplayResult:
    """Replay ``trace`` under ``config``.  ``plans`` memoizes selections across calls."""
    config = config.validate()
    if profile is None:
        from simmoe.hardware.profile import load_profile

        profile = load_profile(config.hardware)
    if SELECTORS[config.selector].uses_residency:  # selects from the cache state: no separate plan pass
        from simmoe.replay.prefetch import replay_coupled

        return replay_coupled(trace, config, profile, progress=progress)
    key = plan_key(config)
    p = plans.get(key) if plans is not None else None
    if p is None:
        p = plan(trace, config, profile, progress=progress)
        if plans is not None:
            plans[key] = p
    elif progress is not None:
        progress(int(p.committed.sum()))
    return simulate(trace, p, config, profile)


def replay_cache(config: ReplayConfig, L: int, N: int, demands: Callable[[], Any]):
    """The policy name and the expert cache of a replay; ``demands()`` yields each forward's demand.

    Belady reads the demand stream once (the future); static counts it once
    (popularity); the other policies never look at it.
    """
    from simmoe.replay.caches import make_cache

    future = popularity = None
    if config.cache == "belady" and config.slots > 0:
        future = demands()
    if config.cache == "static" and config.slots > 0:
        popularity = np.zeros((L, N), dtype=np.int64)
        for d in demands():
            popularity += d
    policy = config.cache if config.slots > 0 else "none"
    return policy, make_cache(policy, L, N, int(config.slots), future=future, popularity=popularity)


def charged_selector_ms(config: ReplayConfig, n: int, uses_time: bool, wall_ms, cpu_ms) -> np.ndarray:
    """Selector time charged to each of ``n`` cycles: none, fixed, or measured on the chosen clock."""
    if not uses_time:
        return np.zeros(n)
    if config.selector_ms is not None:
        return np.full(n, float(config.selector_ms))
    return (wall_ms if config.selector_clock == "wall" else cpu_ms).copy()


def check_profile_geometry(trace, profile, name: str) -> None:
    """Refuse a profile made for a model with another number of layers than the trace's.

    A profile's timing (non-expert forward time, copies per layer) belongs to one
    model; ``num_layers = 0`` in a profile means "not stated" and is accepted.
    """
    want = int(getattr(profile, "num_layers", 0) or 0)
    have = int(trace.geometry.num_layers)
    phys = getattr(profile, "physical", None)  # a physical profile knows its model's experts too
    g = trace.geometry
    if phys is not None and (phys.model.trace_experts, phys.model.trace_top_k) != (g.num_experts, g.top_k):
        raise SimmoeError(f"profile {name} is {phys.model.name} ({phys.model.trace_experts} experts, "
                          f"top-{phys.model.trace_top_k}) but the trace routes to {g.num_experts} experts, "
                          f"top-{g.top_k}; name the trace's model in the profile (simmoe models)")
    if want and want != have:
        raise SimmoeError(f"profile {name} describes a {want}-layer model but the trace has {have} "
                          "layers; use a profile of this model (simmoe fit or hwprobe calibrate)")


def ar_baseline(config: ReplayConfig) -> ReplayConfig:
    """The reference of every speedup: AR without a cache, same trace and profile."""
    return replace(config, selector="ar", slots=0, cache="none", selector_ms=None)


# --------------------------------------------------------------------------
# several configurations of one trace, in parallel
# --------------------------------------------------------------------------
def _replay_group(configs: list[ReplayConfig], progress=None) -> list[ReplayResult]:
    trace, profiles = shared()
    plans: dict = {}
    return [replay(trace, cfg, profiles[cfg.hardware], plans=plans, progress=progress)
            for cfg in configs]


def replay_all(trace, configs: list[ReplayConfig], profiles: dict | None = None, *,
               workers: int = 1,
               on_done: Callable[[list[ReplayResult]], None] | None = None,
               progress: Callable[[int], None] | None = None) -> list[ReplayResult]:
    """Replay several configurations of one trace; results in the order of ``configs``.

    Configurations sharing a plan (:func:`plan_key`) run together, so each
    plan is computed once.  With ``workers > 1`` the groups run in forked
    worker processes, which inherit the trace instead of reading it again
    (where ``fork`` is unavailable they run one after another).  Results
    equal those of one-by-one :func:`replay` calls (with a fixed selector
    time, exactly).  ``on_done`` is called with each finished group;
    ``progress`` with committed tokens as they are replayed (in this process
    only: forked workers report through ``on_done``).
    """
    configs = [c.validate() for c in configs]
    if profiles is None:
        from simmoe.hardware.profile import load_profile

        profiles = {}
        for c in configs:
            if c.hardware not in profiles:
                profiles[c.hardware] = load_profile(c.hardware)
    for cfg in configs:  # a profile without the selector's cost model fails here, before any work
        make_selector(cfg.selector, selector_context(trace, profiles[cfg.hardware], cfg))
    groups: dict[tuple, list[int]] = {}
    for i, cfg in enumerate(configs):
        groups.setdefault((cfg.hardware, plan_key(cfg)), []).append(i)
    # the exact searches are the slow plans: start them first
    order = sorted(groups.values(), key=lambda ix: not (SELECTORS[configs[ix[0]].selector].uses_cost))
    return run_groups(order, configs, _replay_group, trace=trace, profiles=profiles, workers=workers,
                      on_done=on_done, progress=progress)

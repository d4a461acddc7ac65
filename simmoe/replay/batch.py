"""Batched decoding: B requests decode together with continuous batching (``simmoe replay --batch B``).

B slots hold the first B requests of the trace; when a request commits its
last token its slot takes the next request (continuous batching: EVICT App.
C.5's vLLM setting).  A step is one drafting pass and one target forward over
every selected token of every request in the batch:

1. each active request, in slot order, selects from its own pool exactly as
   at batch 1 (its own tree, its own accepted path and commit);
2. the forward's expert demand is, per layer, the union over the batch of
   the true routes of every root and every selected node (SpecFit Eq. 1
   across requests); an offload cache sees that union once per step;
3. the step time is drafting (the deepest drafted level of the batch, for all
   requests at once) + selector time (the slowest selection of the step: one
   per request, in parallel) + the forward over all tokens + commit.

Selectors that take a cost model get the batch-aware one (:class:`BatchCost`):
the cost of a request's subtree given what the rest of the step brings.  For
SpecFit's T̂(S) = b_|S| + βF(S) (Eq. 4), F is counted over the experts not
covered by the other requests' roots and the earlier slots' selections
(``solvers.Pool.with_free``, then the unchanged exact search), and b'_j is the
step's time with j nodes of the request's own and the others' tokens and
experts: with a resident physical profile the physical forward over the
others' tokens plus 1 + j with the others' unions read (β' the time one more
expert adds at that load, 0 when the step is compute-bound); offloaded, the
profile's batch-1 b_j plus ``token_ms`` per other token plus β per expert the
others bring (β unchanged: a copy and a compute).  Each request maximises its
own tokens per step time given the others.  EVICT's C(k) is its profiled
table (EVICT §3.2.3): with a physical profile profiled on the trace at this
batch size (every request of a step verifying its k best nodes), else the
profile's C(k).

Prefill: a newly admitted request's prefill is its own forward before the
step in which it first decodes (no chunked prefill); the others wait.  As at
batch 1, selections never depend on the cache or on times, so a batched
replay is a plan pass (:func:`plan_batched`: the schedule, selections and
per-step demand) and a simulate pass (:func:`simulate_batched`), and
``--batch 1`` gives the engine's results exactly (tests/replay/test_batch.py).

Metrics: aggregate decode throughput Σ(N_i − 1) / (makespan − prefill time)
and Σ N_i / makespan (at batch 1 SpecFit Eq. 10); the steady-state throughput
``decode_tps_full``, tokens committed per second over the steps with every slot
busy (a finite trace ends with a draining batch); per-request latency
(admission to last token) and time per output token, with percentiles.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial

import numpy as np

from simmoe.errors import CheckFailed, SimmoeError
from simmoe.replay.workers import run_groups, shared

PERCENTILES = (50, 90, 99)


@dataclass
class BatchPlan:
    """The batched schedule and selections (independent of the cache and of times).

    ``events`` lists, in order, ``(-1 - r)`` for request r's prefill and ``s`` for step s.
    Per request-cycle arrays (``request``, ``step``, ...) are in step order, slot
    order within a step; ``demand`` holds each step's union bit-packed.
    """

    selector: str
    batch: int
    num_requests: int
    events: list
    step_requests: np.ndarray    # int32 [S]: active requests in the step
    step_tokens: np.ndarray      # int32 [S]: tokens of the forward
    step_context: np.ndarray     # int64 [S]: context tokens the step's attention reads
    step_levels: np.ndarray      # int8  [S]: deepest drafted level
    step_selector_ms: np.ndarray      # float64 [S]: slowest selection (wall)
    step_selector_cpu_ms: np.ndarray  # float64 [S]
    demand: np.ndarray           # uint8 [S, ceil(L*N/8)]
    request: np.ndarray          # int32 [C]
    step: np.ndarray             # int32 [C]
    position: np.ndarray         # int32 [C]
    row: np.ndarray              # int64 [C]
    draft_nodes: np.ndarray      # int16 [C]
    accepted: np.ndarray         # int16 [C]
    committed: np.ndarray        # int16 [C]
    drafted_levels: np.ndarray   # int8 [C]
    pool_levels: np.ndarray      # int8 [C]
    pool_size: np.ndarray        # int16 [C]
    selected: np.ndarray         # int16 [Σ|S|]: pool-local ids of each cycle's S, cycle after cycle
    output_len: np.ndarray       # int32 [R]
    prompt_len: np.ndarray       # int32 [R]
    num_layers: int
    num_experts: int
    selector_uses_time: bool = True
    wall_s: float = 0.0
    meta: dict = field(default_factory=dict)

    @property
    def num_steps(self) -> int:
        return len(self.step_tokens)

    def selected_of(self, c: int) -> np.ndarray:
        """Pool-local ids of the nodes request-cycle ``c`` verified (ascending)."""
        ptr = np.concatenate([[0], np.cumsum(self.draft_nodes, dtype=np.int64)])
        return self.selected[ptr[c]:ptr[c + 1]]

    def demand_of(self, s: int) -> np.ndarray:
        L, N = self.num_layers, self.num_experts
        return np.unpackbits(self.demand[s], count=L * N).view(bool).reshape(L, N)


@dataclass
class BatchResult:
    """Per-step, per-request-cycle and per-request records of one batched replay."""

    config: object
    batch: int
    steps: dict[str, np.ndarray]
    cycles: dict[str, np.ndarray]
    requests: dict[str, np.ndarray]
    synthetic: bool
    plan_wall_s: float
    simulate_wall_s: float
    lambda_star: float | None = None

    def summary(self) -> dict[str, float]:
        """The replay's counters: :func:`simmoe.replay.metrics.summarize`'s, made aggregate over the batch."""
        return summarize_batched(self.steps, self.cycles, self.requests, self.batch)

    def cycles_frame(self):
        """Every request-cycle (with its step and batch size) as a DataFrame, like ``ReplayResult.cycles_frame``."""
        import pandas as pd

        df = pd.DataFrame(self.cycles)
        for key in ("selector", "cache", "slots", "hardware", "route_accuracy"):
            df.insert(0, key, getattr(self.config, key))
        df["batch"] = self.batch
        df["synthetic"] = self.synthetic
        return df


def summarize_batched(steps, cycles, requests, batch: int) -> dict[str, float]:
    """Aggregate throughput, per-request-cycle counters and latency percentiles.  O(cycles + requests)."""
    from simmoe.replay.metrics import summarize

    # per request-cycle counters as at batch 1 (cycle_ms there is the step's time)
    s = summarize(cycles, requests)
    n_out = np.asarray(requests["output_len"], dtype=np.int64)
    pre = np.asarray(requests["prefill_ms"], dtype=np.float64)
    makespan = float(np.sum(steps["step_ms"])) + float(pre.sum())
    decode_ms = makespan - float(pre.sum())
    tokens = int(n_out.sum())
    if batch > 1:  # at batch 1 summarize's per-request sums are these (and the engine's, bit for bit)
        s["decode_tps"] = 1e3 * (tokens - len(n_out)) / decode_ms if decode_ms > 0 else float("nan")
        s["request_tps"] = 1e3 * tokens / makespan if makespan > 0 else float("nan")
        s["decode_s"] = decode_ms / 1e3
    s["ms_per_cycle"] = float(np.mean(steps["step_ms"])) if len(steps["step_ms"]) else float("nan")
    s["steps"] = int(len(steps["step_ms"]))
    s["batch"] = int(batch)
    # steady state: the steps with every slot busy (a finite trace ends with a draining batch)
    full = np.asarray(steps["requests"]) == batch
    cyc_step = np.asarray(cycles["step"])
    t_full = float(np.sum(np.asarray(steps["step_ms"])[full]))
    tok_full = float(np.sum(np.asarray(cycles["committed"])[full[cyc_step]])) if len(cyc_step) else 0.0
    s["full_steps"] = int(full.sum())
    s["ms_per_step_full"] = t_full / s["full_steps"] if s["full_steps"] else float("nan")
    s["decode_tps_full"] = 1e3 * tok_full / t_full if t_full > 0 else float("nan")
    s["mean_batch"] = float(np.mean(steps["requests"])) if len(steps["requests"]) else float("nan")
    lat = np.asarray(requests["latency_ms"], dtype=np.float64)
    tpot = np.asarray(requests["tpot_ms"], dtype=np.float64)
    for q in PERCENTILES:
        s[f"latency_p{q}_ms"] = float(np.percentile(lat, q)) if len(lat) else float("nan")
    for q in (50, 90):
        s[f"tpot_p{q}_ms"] = float(np.nanpercentile(tpot, q)) if np.isfinite(tpot).any() else float("nan")
    return s


# --------------------------------------------------------------------------
# batch-aware costs
# --------------------------------------------------------------------------
class BatchCost:
    """The cost model of one request given the step so far: T̂(S | others), the step's time with S.

    A request of a batched step is priced by what its subtree does to the step it
    joins (module docstring): its experts that the other requests already bring
    are free (``Pool.with_free``: F counts only the rest), and the intercepts b'_j
    are the step's time with j nodes of its own and no experts beyond the
    others', so that each request maximises its tokens per step time given the
    others (the others' tokens are not in its reward).

    * resident, physical profile: b'_j = drafting (for the batch) + ``step_ms`` +
      the physical forward over the others' tokens + 1 + j with the others'
      per-layer unions read; β' = what one more expert per layer adds at that
      load (0 when the step is compute-bound);
    * offload (any profile, physical ``+LINK`` included): the profile's own
      linear model of the step, the terms the event model charges a forward
      (:mod:`simmoe.replay.timing`): b'_j = b_j + ``token_ms`` · (others' tokens)
      + β · F_others, where F_others is Σ_ℓ of the others' per-layer union, and
      β' = β (a copy plus a compute per expert the step does not yet read).
      Drafting, commit and the fixed forward time are in b_j already and, as in
      the event model's step, do not grow with the batch.

    With no other request (batch 1, or the last request of a draining batch)
    both are the profile's batch-1 model, so ``--batch 1`` is the engine exactly.
    """

    def __init__(self, profile, base_cost, K: int, levels: int):
        self.phys = getattr(profile, "physical", None) if getattr(profile, "resident", False) else None
        self.token_ms = 0.0 if getattr(profile, "resident", False) else float(getattr(profile, "token_ms", 0.0))
        self.base = base_cost
        self.K = int(K)
        self.levels = int(levels)

    def cost(self, other_tokens: int, covered_per_layer: np.ndarray, context: float, requests: int):
        """``solvers.CostModel`` for a request whose step already holds ``other_tokens`` tokens.

        ``covered_per_layer``: the experts per MoE layer the others already bring
        (their roots and the earlier slots' selections); ``context``: the step's
        context tokens, summed over its ``requests``.
        """
        from solvers.cost import CostModel

        if self.base is None:
            return self.base
        if self.phys is None:   # offload: the event model's linear terms of the step
            shift = self.token_ms * max(int(other_tokens), 0) \
                + self.base.beta * float(np.sum(covered_per_layer))
            if shift <= 0:
                return self.base
            return CostModel([x + shift for x in self.base.b], self.base.beta)
        p = self.phys
        j = np.arange(self.K + 1, dtype=np.float64)
        n = other_tokens + 1 + j
        fwd = p.forward_ms(n, covered_per_layer[None, :], context, n * context / max(requests, 1), requests)
        b = fwd + p.draft_ms(self.levels, requests) + p.o.step_ms
        n0 = other_tokens + 1.0
        t0 = p.forward_ms(n0, covered_per_layer, context, n0 * context / max(requests, 1), requests)
        t1 = p.forward_ms(n0, covered_per_layer + 1.0, context, n0 * context / max(requests, 1), requests)
        beta = max(float(t1 - t0), 0.0) / max(p.L_moe, 1)
        return CostModel([float(x) for x in b], beta)


def evict_table(trace, profile, batch: int = 1) -> tuple[float, ...]:
    """EVICT's C(k) for this replay (EVICT §3.2.3: profiled on the running system before decoding).

    A physical profile's table is profiled on the trace at this batch size:
    resident, the physical forward (:func:`simmoe.hardware.physical.profile_evict_cost`);
    offloaded, its linear cost b_k + β·F without a cache over the profiled unions.
    Any other profile's table is its ``evict.cost_ms``.  Memoized per (trace, profile, batch).
    """
    phys = getattr(profile, "physical", None)
    if phys is None:
        return tuple(profile.evict_cost)
    import weakref

    from simmoe.hardware.physical import profile_evict_cost

    key = (id(trace), profile.name, int(batch))
    ref, hit = _EVICT_CACHE.get(key, (None, None))
    if ref is None or ref() is not trace:  # an id can be reused once its trace is gone
        hit = None
    if hit is None:
        samples = 256 if batch <= 1 else max(16, 512 // int(batch))
        if profile.resident:
            hit = profile_evict_cost(trace, phys, samples=samples, batch=int(batch))
        else:  # offloaded: the profile's linear cost without a cache over the profiled unions
            from simmoe.hardware.union_profile import prefix_unions

            K = max(int(trace.pool_shape.max_nodes), 1)
            unions, _ = prefix_unions(trace, K, samples=samples, batch=int(batch))
            b, beta = profile.cost_b_no_cache, profile.cost_beta_no_cache
            hit = tuple(float(b[min(k, len(b) - 1)] + beta * unions[:, k, :].sum(axis=1).mean())
                        for k in range(1, K + 1))
        if len(_EVICT_CACHE) > 32:
            _EVICT_CACHE.clear()
        _EVICT_CACHE[key] = (weakref.ref(trace), hit)
    return hit


_EVICT_CACHE: dict = {}


# --------------------------------------------------------------------------
# pass 1: schedule and selections
# --------------------------------------------------------------------------
def plan_batched(trace, config, profile, batch: int, *,
                 progress: Callable[[int], None] | None = None) -> BatchPlan:
    """The batched schedule of ``config`` on ``trace``: who decodes in which step, what each selects."""
    from simmoe.replay.engine import _view, selector_context
    from simmoe.replay.route_prediction import RoutePredictor
    from simmoe.replay.selectors import SELECTORS, accepted_length, make_selector
    from solvers.errors import InvalidInput

    config = config.validate()
    g = trace.geometry
    L, N = g.num_layers, g.num_experts
    R = len(trace.requests) if config.requests is None else min(int(config.requests), len(trace.requests))
    check_batch(batch, R)
    B = int(batch)
    cls = SELECTORS[config.selector]
    check_batchable(config.selector)
    ctx = selector_context(trace, profile, config)
    if cls.uses_evict_cost and B > 1:
        ctx = replace(ctx, evict_cost=evict_table(trace, profile, B))
    selector = make_selector(config.selector, ctx)
    batch_cost = BatchCost(profile, ctx.cost, max(int(trace.pool_shape.max_nodes), ctx.K),
                           int(trace.pool_shape.depth)) if cls.uses_cost else None
    predictor = RoutePredictor(N, config.route_accuracy, config.seed)
    verdicts = trace.node_agree
    temperature = float(getattr(config, "temperature", 0.0) or 0.0)
    if temperature > 0:
        from simmoe.replay.sampling import sampled_agree
        from simmoe.trace.sampling import check_replay_temperature

        check_replay_temperature(trace, temperature)
        verdicts = sampled_agree(trace, temperature, config.seed)
    starts = np.array([trace.request_positions(r)[0] for r in range(R)], dtype=np.int64)
    output_len = np.asarray(trace.requests.output_len[:R], dtype=np.int32)
    prompt_len = np.asarray(trace.requests.prompt_len[:R], dtype=np.int32)
    t0 = time.perf_counter()
    if selector.needs_prepare:
        try:
            selector.prepare(trace, R, lambda rows: [_view(trace, int(i), predictor, N, verdicts) for i in rows])
        except InvalidInput as exc:
            raise SimmoeError(f"selector {config.selector!r}: {exc}") from None

    off = (np.arange(L, dtype=np.int64) * N)[:, None]
    node_ptr, node_level, node_parent = trace.node_ptr, trace.node_level, trace.node_parent
    node_routes, root_routes = trace.node_routes, trace.root_routes
    perf, cpu = time.perf_counter, time.thread_time
    rec = {k: [] for k in ("request", "step", "position", "row", "draft_nodes", "accepted", "committed",
                           "drafted_levels", "pool_levels", "pool_size")}
    steps = {k: [] for k in ("requests", "tokens", "context", "levels", "sel", "cpu")}
    demand: list[np.ndarray] = []
    selected: list[np.ndarray] = []
    events: list[int] = []
    cursor = np.zeros(R, dtype=np.int64)
    slots: list[int | None] = [None] * B
    next_req = 0
    s = 0
    mask = np.zeros(L * N, dtype=bool)
    root_count = np.zeros(L * N, dtype=np.int16)
    chosen = np.zeros(L * N, dtype=bool)
    while True:
        for k in range(B):  # admit: a free slot takes the next request
            if slots[k] is None and next_req < R:
                slots[k] = next_req
                events.append(-1 - next_req)
                next_req += 1
        active = [r for r in slots if r is not None]
        if not active:
            break
        rows = [int(starts[r] + cursor[r]) for r in active]
        # what the step reads for sure: every root (as the selectors see them)
        views = {}
        root_count[:] = 0
        chosen[:] = False
        if selector.drafts:
            for r, i in zip(active, rows, strict=True):
                views[r] = _view(trace, i, predictor, N, verdicts)
                root_count[np.unique((np.asarray(views[r].root_routes, dtype=np.int64) + off).ravel())] += 1
        mask[:] = False
        tokens = 0
        context = 0
        levels = 0
        sel_max = cpu_max = 0.0
        others_tokens = len(active)
        step_context = context_of(prompt_len, cursor, active)
        for r, i in zip(active, rows, strict=True):
            lo, hi = int(node_ptr[i]), int(node_ptr[i + 1])
            t = int(cursor[r])
            n_left = int(output_len[r]) - t
            if selector.drafts:
                view = views[r]
                sel = selector
                if batch_cost is not None and len(active) > 1:
                    own = np.zeros(L * N, dtype=np.int16)
                    own[np.unique((np.asarray(view.root_routes, dtype=np.int64) + off).ravel())] = 1
                    others = ((root_count - own) > 0) | chosen   # the other roots, the earlier selections
                    view = replace(view, _pool=None)   # solvers' marginal pool: the others' experts are free
                    view._pool = view.pool().with_free(others.reshape(L, N))
                    per_layer = others.reshape(L, N).sum(axis=1).astype(np.float64)
                    sel = copy.copy(selector)
                    sel.context = replace(selector.context, cost=batch_cost.cost(
                        others_tokens - 1, per_layer, float(step_context), len(active)))
                    if hasattr(sel, "_affine"):
                        sel._affine = {}
                c1, t1 = cpu(), perf()
                try:
                    choice = sel.select(view)
                except InvalidInput as exc:
                    raise SimmoeError(f"selector {config.selector!r} at request {r}, position {t}: {exc}") from None
                sel_ms, cpu_ms = (perf() - t1) * 1e3, (cpu() - c1) * 1e3
                nodes = np.asarray(choice.nodes, dtype=np.int64)
                acc = accepted_length(node_parent[lo:hi], verdicts[lo:hi], nodes)
                drafted = int(choice.drafted_levels)
                depth = int(node_level[lo:hi].max()) if hi > lo else 0
                if len(nodes):  # the selector's view of what this request adds
                    chosen[(np.asarray(views[r].node_routes[nodes], dtype=np.int64) + off[None]).ravel()] = True
                others_tokens += len(nodes)
            else:
                nodes, acc, drafted, depth, sel_ms, cpu_ms = np.zeros(0, np.int64), 0, 0, 0, 0.0, 0.0
            committed = min(1 + acc, n_left)
            mask[(root_routes[i] + off).ravel()] = True          # Eq. 1: the true routes are executed
            if len(nodes):
                mask[(node_routes[lo + nodes] + off[None]).ravel()] = True
                selected.append(nodes)
            tokens += 1 + len(nodes)
            context += int(prompt_len[r]) + t
            levels = max(levels, drafted)
            sel_max, cpu_max = max(sel_max, sel_ms), max(cpu_max, cpu_ms)
            for key, v in (("request", r), ("step", s), ("position", t), ("row", i),
                           ("draft_nodes", len(nodes)), ("accepted", acc), ("committed", committed),
                           ("drafted_levels", drafted), ("pool_levels", depth), ("pool_size", hi - lo)):
                rec[key].append(v)
            cursor[r] += committed
            if progress is not None:
                progress(committed)
        demand.append(np.packbits(mask))
        for key, v in (("requests", len(active)), ("tokens", tokens), ("context", context), ("levels", levels),
                       ("sel", sel_max), ("cpu", cpu_max)):
            steps[key].append(v)
        events.append(s)
        s += 1
        for k in range(B):  # a finished request frees its slot
            r = slots[k]
            if r is not None and cursor[r] >= output_len[r]:
                slots[k] = None
    wall = time.perf_counter() - t0
    a = {k: np.asarray(v) for k, v in rec.items()}
    return BatchPlan(
        selector=config.selector, batch=B, num_requests=R, events=events,
        step_requests=np.asarray(steps["requests"], np.int32), step_tokens=np.asarray(steps["tokens"], np.int32),
        step_context=np.asarray(steps["context"], np.int64), step_levels=np.asarray(steps["levels"], np.int8),
        step_selector_ms=np.asarray(steps["sel"], np.float64),
        step_selector_cpu_ms=np.asarray(steps["cpu"], np.float64),
        demand=np.stack(demand) if demand else np.zeros((0, (L * N + 7) // 8), np.uint8),
        request=a["request"].astype(np.int32), step=a["step"].astype(np.int32),
        position=a["position"].astype(np.int32), row=a["row"].astype(np.int64),
        draft_nodes=a["draft_nodes"].astype(np.int16), accepted=a["accepted"].astype(np.int16),
        committed=a["committed"].astype(np.int16), drafted_levels=a["drafted_levels"].astype(np.int8),
        pool_levels=a["pool_levels"].astype(np.int8), pool_size=a["pool_size"].astype(np.int16),
        selected=(np.concatenate(selected) if selected else np.zeros(0)).astype(np.int16),
        output_len=output_len, prompt_len=prompt_len, num_layers=L, num_experts=N,
        selector_uses_time=selector.drafts, wall_s=wall, meta={"lambda_star": getattr(selector, "lam", None)})


def context_of(prompt_len, cursor, active) -> int:
    """Context tokens (prompt + committed) of the active requests, summed."""
    return int(sum(int(prompt_len[r]) + int(cursor[r]) for r in active))


def check_batchable(selector: str) -> None:
    """Selectors that select from the cache state run inside the per-request simulation only."""
    from simmoe.replay.selectors import SELECTORS

    if getattr(SELECTORS[selector], "uses_residency", False):
        raise SimmoeError(f"selector {selector!r} selects from the experts on the device, which the batched "
                          "replay does not model; use it without --batch")


def check_batch(batch, requests: int) -> int:
    """``--batch`` must be an integer from 1 to the number of requests replayed."""
    if isinstance(batch, bool) or int(batch) != batch or batch < 1:
        raise SimmoeError(f"--batch {batch}: the batch size must be an integer >= 1")
    if batch > requests:
        raise SimmoeError(f"--batch {batch}: only {requests} request{'s' if requests != 1 else ''} to replay; "
                          f"the batch size must be at most that")
    return int(batch)


# --------------------------------------------------------------------------
# pass 2: cache and timing
# --------------------------------------------------------------------------
def _forwards(trace, p: BatchPlan):
    L, N = p.num_layers, p.num_experts
    for e in p.events:
        if e < 0:
            r = -1 - e
            yield e, np.asarray(trace.requests.prefill_union[r], dtype=bool).reshape(L, N)
        else:
            yield e, np.unpackbits(p.demand[e], count=L * N).view(bool).reshape(L, N)


def simulate_batched(trace, p: BatchPlan, config, profile) -> BatchResult:
    """Replay the batched plan's forwards through the cache and the timer (module docstring)."""
    from simmoe.replay.engine import charged_selector_ms, replay_cache
    from simmoe.replay.timing import CycleTimer

    config = config.validate()
    t0 = time.perf_counter()
    L, N = p.num_layers, p.num_experts
    R, S, C = p.num_requests, p.num_steps, len(p.request)
    policy, cache = replay_cache(config, L, N, lambda: (d for _, d in _forwards(trace, p)))
    timer = CycleTimer(profile, model=config.timing, seed=config.seed, cache=config.cache_active)
    phys = timer.physical
    hits = np.zeros(S, np.int32)
    misses = np.zeros(S, np.int32)
    draft_ms = np.zeros(S)
    forward_ms = np.zeros(S)
    commit_ms = np.zeros(S)
    sel_ms = charged_selector_ms(config, S, p.selector_uses_time, p.step_selector_ms, p.step_selector_cpu_ms)
    pre_h = np.zeros(R, np.int32)
    pre_m = np.zeros(R, np.int32)
    pre_ms = np.zeros(R)
    admit_ms = np.zeros(R)
    step_end = np.zeros(S)
    no_cache = policy == "none"
    zeros = np.zeros(L, dtype=np.int64)
    clock = 0.0
    for e, d in _forwards(trace, p):
        h, m = (zeros, d.sum(axis=1)) if no_cache else cache.forward(d)
        if e < 0:
            r = -1 - e
            pre_h[r], pre_m[r] = h.sum(), m.sum()
            pre_ms[r] = timer.prefill_ms(int(p.prompt_len[r]), h, m)
            admit_ms[r] = clock
            clock += pre_ms[r]
            continue
        hits[e], misses[e] = h.sum(), m.sum()
        n_req = int(p.step_requests[e])
        forward_ms[e] = timer.forward_ms(int(p.step_tokens[e]), h, m, context=int(p.step_context[e]),
                                         requests=n_req)
        lv = int(p.step_levels[e])
        if lv > 0:
            draft_ms[e] = phys.draft_ms(lv, n_req) if phys is not None else timer.draft_ms(lv)
        commit_ms[e] = timer.commit_ms()
        clock += draft_ms[e] + sel_ms[e] + forward_ms[e] + commit_ms[e]
        step_end[e] = clock   # a request whose last cycle is in step e finishes here
    step_ms = draft_ms + sel_ms + forward_ms + commit_ms
    committed = np.bincount(p.request, weights=p.committed, minlength=R).astype(np.int64)
    if not np.array_equal(committed, p.output_len.astype(np.int64)):
        bad = int(np.flatnonzero(committed != p.output_len)[0])
        raise CheckFailed(f"request {bad} committed {committed[bad]} tokens, output length {p.output_len[bad]}")
    last = np.zeros(R, np.int64)
    np.maximum.at(last, p.request, p.step)
    finish_ms = step_end[last]
    latency = finish_ms - admit_ms
    decode_span = finish_ms - (admit_ms + pre_ms)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(p.output_len > 1, decode_span / np.maximum(p.output_len - 1, 1), np.nan)
    cyc_ms = step_ms[p.step]
    cycles = {
        "request": p.request, "step": p.step, "position": p.position, "row": p.row,
        "draft_nodes": p.draft_nodes, "accepted": p.accepted, "committed": p.committed,
        "drafted_levels": p.drafted_levels, "pool_levels": p.pool_levels, "pool_size": p.pool_size,
        "hits": hits[p.step], "misses": misses[p.step],
        "draft_ms": draft_ms[p.step], "selector_ms": sel_ms[p.step], "forward_ms": forward_ms[p.step],
        "commit_ms": commit_ms[p.step], "cycle_ms": cyc_ms,
    }
    if p.batch > 1:
        # the step's copies and hits belong to the batch: charge them once (to the step's first cycle)
        first = np.r_[True, p.step[1:] != p.step[:-1]] if C else np.zeros(0, bool)
        cycles["hits"] = np.where(first, hits[p.step], 0).astype(np.int32)
        cycles["misses"] = np.where(first, misses[p.step], 0).astype(np.int32)
    steps = {"requests": p.step_requests, "tokens": p.step_tokens, "context": p.step_context,
             "levels": p.step_levels, "hits": hits, "misses": misses, "draft_ms": draft_ms,
             "selector_ms": sel_ms, "forward_ms": forward_ms, "commit_ms": commit_ms, "step_ms": step_ms}
    # a request's own decode time: its cycles' steps (at batch 1 the engine's per-request sums)
    decode_ms = np.bincount(p.request, weights=cyc_ms, minlength=R)
    requests = {
        "output_len": p.output_len, "prompt_len": p.prompt_len, "prefill_hits": pre_h, "prefill_misses": pre_m,
        "prefill_ms": pre_ms, "admit_ms": admit_ms, "finish_ms": finish_ms, "latency_ms": latency,
        "tpot_ms": tpot, "decode_ms": decode_ms, "request_ms": pre_ms + decode_ms,
    }
    return BatchResult(config=config, batch=p.batch, steps=steps, cycles=cycles, requests=requests,
                       synthetic=bool(trace.is_synthetic), plan_wall_s=p.wall_s,
                       simulate_wall_s=time.perf_counter() - t0, lambda_star=p.meta.get("lambda_star"))


# --------------------------------------------------------------------------
# both passes; several configurations
# --------------------------------------------------------------------------
def replay_batched(trace, config, profile=None, batch: int = 1, *, plans: dict | None = None,
                   progress: Callable[[int], None] | None = None) -> BatchResult:
    """Both passes for one configuration; ``plans`` memoizes batched plans across calls."""
    from simmoe.replay.engine import plan_key

    config = config.validate()
    if profile is None:
        from simmoe.hardware.profile import load_profile

        profile = load_profile(config.hardware)
    key = (plan_key(config), int(batch))
    p = plans.get(key) if plans is not None else None
    if p is None:
        p = plan_batched(trace, config, profile, batch, progress=progress)
        if plans is not None:
            plans[key] = p
    elif progress is not None:
        progress(int(p.committed.sum()))
    return simulate_batched(trace, p, config, profile)


def _group(configs, progress=None, *, batch: int):
    trace, profiles = shared()
    plans: dict = {}
    return [replay_batched(trace, c, profiles[c.hardware], batch, plans=plans, progress=progress) for c in configs]


def replay_all_batched(trace, configs, profiles: dict, batch: int, *, workers: int = 1,
                       on_done=None, progress=None) -> list[BatchResult]:
    """:func:`replay_batched` for several configurations, grouped by plan, in forked workers (as ``replay_all``)."""
    from simmoe.replay.engine import plan_key, selector_context
    from simmoe.replay.selectors import SELECTORS, make_selector

    configs = [c.validate() for c in configs]
    R = len(trace.requests) if configs[0].requests is None else min(configs[0].requests, len(trace.requests))
    check_batch(batch, R)
    for cfg in configs:  # a profile without the selector's cost model fails here, before any work
        check_batchable(cfg.selector)
        make_selector(cfg.selector, selector_context(trace, profiles[cfg.hardware], cfg))
    groups: dict = {}
    for i, cfg in enumerate(configs):
        groups.setdefault((cfg.hardware, plan_key(cfg)), []).append(i)
    order = sorted(groups.values(), key=lambda ix: not SELECTORS[configs[ix[0]].selector].uses_cost)
    return run_groups(order, configs, partial(_group, batch=batch), trace=trace, profiles=profiles,
                      workers=workers, on_done=on_done, progress=progress)

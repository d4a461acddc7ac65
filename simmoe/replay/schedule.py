"""The schedule: what the first five stages of the cycle decide, step after step.

admission → pools → selection → verification → demand give, per step, the
requests it serves, what each verifies and commits, and the forward's expert
demand.  :func:`live_steps` runs those stages and yields the events in replay
order — each admitted request's :class:`Prefill`, then the :class:`Step`.

Selections depend on the expert cache only for selectors that declare
``uses_residency``.  For every other selector the schedule is the same under
every cache, prefetch and timing setting, so it is recorded once
(:class:`Schedule`, by :func:`plan`) and replayed through any number of
residency and timing settings (:meth:`Schedule.events`): what makes a sweep
cheap.  A residency-reading selector runs its stages live, inside the
replay, with the residency stage at hand (:mod:`simmoe.replay.engine`).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from simmoe.api import StepInfo
from simmoe.replay.admission import ContinuousBatching
from simmoe.replay.demand import DemandUnion
from simmoe.replay.pools import TracePools
from simmoe.replay.selection import SelectionStage
from simmoe.replay.verification import Verification


@dataclass
class Prefill:
    """Request ``request``'s prefill forward (its prompt), before its first step."""

    request: int


CYCLE_FIELDS = ("requests", "rows", "positions", "nodes", "accepted", "committed", "drafted", "depth",
                "pool_size")


class CycleLog:
    """Per request-cycle values as Python lists, one attribute per field of :data:`CYCLE_FIELDS`.

    In step order, slot order within a step.  :func:`live_steps` appends to a
    fresh log as it goes; a recorded :class:`Schedule`'s log holds its
    columns as lists (``nodes``, slices of ``selected``, made on first use).
    A :class:`Step` is a slice of one.
    """

    # field → the Schedule's cycle column it is recorded as ("nodes" is the ``selected`` array, sliced)
    RECORDED = {"requests": "request", "rows": "row", "positions": "position", "accepted": "accepted",
                "committed": "committed", "drafted": "drafted_levels", "depth": "pool_levels",
                "pool_size": "pool_size"}

    requests: list
    rows: list
    positions: list
    accepted: list
    committed: list
    drafted: list
    depth: list
    pool_size: list

    def __init__(self, schedule: Schedule | None = None):
        self.schedule = schedule
        if schedule is None:
            for f in CYCLE_FIELDS:      # (a live log's ``nodes`` list hides the recorded one below)
                setattr(self, f, [])
        else:
            for f, column in self.RECORDED.items():
                setattr(self, f, schedule.cycles[column].tolist())

    @functools.cached_property
    def nodes(self) -> list:
        """A recorded log's selected nodes per request-cycle: slices of the schedule's ``selected``."""
        sc = self.schedule
        assert sc is not None, "a live log's nodes list is set when it is made"
        ptr = np.concatenate([[0], np.cumsum(sc.cycles["draft_nodes"], dtype=np.int64)]).tolist()
        return [sc.selected[ptr[j]:ptr[j + 1]] for j in range(len(ptr) - 1)]


def _per_request(field: str) -> property:
    """A :class:`Step`'s per-request values of ``field``: its slice of the log."""
    return property(lambda step: getattr(step.log, field)[step.lo:step.hi], doc=f"per request: {field}")


class Step:
    """One step: a drafting pass and one target forward over every request in the batch.

    Per request, in slot order (a slice ``[lo, hi)`` of a :class:`CycleLog`):
    ``requests``, ``rows`` (trace position rows), ``positions`` (output
    positions), ``nodes`` (selected pool-local ids, ascending), ``accepted``,
    ``committed``, ``drafted`` (levels), ``depth`` (pool depth), ``pool_size``.
    For the step: ``levels`` (the deepest drafted level: the batch drafts
    together), ``tokens`` (of the forward), ``context`` (KV tokens read,
    summed), ``selector_ms`` / ``selector_cpu_ms`` (the slowest selection: one
    per request, in parallel), ``demand`` (bool [L, N], SpecFit Eq. 1's union
    across the batch).
    """

    __slots__ = ("log", "index", "lo", "hi", "levels", "tokens", "context", "selector_ms", "selector_cpu_ms",
                 "demand")

    def __init__(self, log: CycleLog, index: int, lo: int, hi: int, levels: int, tokens: int, context: int,
                 selector_ms: float, selector_cpu_ms: float, demand: np.ndarray):
        self.log, self.index, self.lo, self.hi = log, index, lo, hi
        self.levels, self.tokens, self.context = levels, tokens, context
        self.selector_ms, self.selector_cpu_ms, self.demand = selector_ms, selector_cpu_ms, demand

    requests = _per_request("requests")
    rows = _per_request("rows")
    positions = _per_request("positions")
    nodes = _per_request("nodes")
    accepted = _per_request("accepted")
    committed = _per_request("committed")
    drafted = _per_request("drafted")
    depth = _per_request("depth")
    pool_size = _per_request("pool_size")

    @property
    def size(self) -> int:
        """How many requests the step serves."""
        return self.hi - self.lo


class Stages:
    """The stages before residency for one replay: admission, pools, selection, verification, demand."""

    def __init__(self, trace, setting, profile, num_requests: int, verdicts: np.ndarray, predictor):
        self.trace = trace
        self.R = int(num_requests)
        self.batch = int(setting.config.batch)
        self.selection = SelectionStage(trace, setting, profile, self.batch)
        self.pools = TracePools(trace, predictor, verdicts, self.selection.context.cost,
                                reads_verdicts=self.selection.flags["reads_verdicts"])
        self.verification = Verification(trace, verdicts)
        self.demand = DemandUnion(trace)
        self.output_len = np.asarray(trace.requests.output_len[:self.R], dtype=np.int32)
        self.prompt_len = np.asarray(trace.requests.prompt_len[:self.R], dtype=np.int32)
        self.starts = [int(trace.request_positions(r)[0]) for r in range(self.R)]
        self.node_ptr = trace.node_ptr.tolist()
        self.pool_depth = pool_depths(trace)
        self.log = CycleLog()     # what live_steps decided per request-cycle (a new log per run)
        self.selection.prepare(trace, self.R, lambda rows: [self.pools.view(int(i)) for i in rows])


def live_steps(st: Stages, *, available: Callable | None = None, opened: Callable | None = None,
               overhead: Callable[[], float] | None = None, progress: Callable[[int], None] | None = None,
               reuse_demand: bool = False) -> Iterator[Prefill | Step]:
    """Run admission → pools → selection → verification → demand; yield the events in replay order.

    ``opened(step_index, requests, rows)``, when given, is called once the step's
    pools are known and before any selection (the residency stage opens its
    drafting window there); ``available`` is handed to the views of a
    residency-reading selector; ``overhead()`` (milliseconds, cumulative) is
    the part of a selection's time those callbacks took, not charged to it.
    ``reuse_demand``: every step's ``demand`` is the same array, valid until the
    next step (for a consumer that copies it at once, as :func:`plan` packs it).
    """
    adm = ContinuousBatching(st.output_len, st.batch)
    sel, demand = st.selection, st.demand
    node_ptr, starts = st.node_ptr, st.starts
    prompt = st.prompt_len.tolist()
    cursor, left = adm.cursor, adm.left
    log = st.log = CycleLog()
    add_req, add_row, add_pos, add_nodes, add_acc, add_com, add_drf, add_dep, add_size = (
        getattr(log, f).append for f in CYCLE_FIELDS)
    s = n = 0
    while True:
        for r in adm.admit():
            yield Prefill(r)
        active = adm.active()
        if not active:
            return
        rows = [starts[r] + cursor[r] for r in active]
        if opened is not None:
            opened(s, active, rows)
        context = sum([prompt[r] + cursor[r] for r in active])     # KV tokens the forward reads
        picks = _select(st, active, rows, context, available, overhead) if sel.drafts else None
        demand.start(fresh=not reuse_demand)
        tokens, levels, wall, cpu_ms = 0, 0, 0.0, 0.0
        for j, r in enumerate(active):
            i = rows[j]
            nodes, acc, lv, dp, w, c = picks[j] if picks is not None else _NO_PICK
            committed = min(1 + acc, left(r))
            demand.add(i, nodes)
            add_req(r), add_row(i), add_pos(cursor[r]), add_nodes(nodes), add_acc(acc), add_com(committed)
            add_drf(lv), add_dep(dp), add_size(node_ptr[i + 1] - node_ptr[i])
            tokens += 1 + len(nodes)
            if lv > levels:
                levels = lv
            if w > wall:
                wall = w
            if c > cpu_ms:
                cpu_ms = c
            adm.commit(r, committed)
            if progress is not None:
                progress(committed)
        yield Step(log, s, n, n + len(active), levels, tokens, context, wall, cpu_ms, demand.matrix())
        n += len(active)
        adm.release()
        s += 1


def _select(st: Stages, active, rows, context: int, available, overhead) -> list[tuple]:
    """Each request's selection in slot order: (nodes, accepted, drafted levels, pool depth, wall ms, CPU ms)."""
    sel, pool_depth = st.selection, st.pool_depth
    views = [st.pools.view(i) for i in rows]
    covered = _root_cover(st, views) if sel.batch_cost is not None and len(active) > 1 else None
    others_tokens = len(active)
    out = []
    for slot, (r, i) in enumerate(zip(active, rows, strict=True)):
        view = views[slot]
        if available is not None:
            view.available = available
        if covered is not None:
            rest = (covered[0] - _own(st, view)) + covered[1]    # the others' tokens per expert
            others = rest > 0
            view = sel.priced(view, StepInfo(len(active), slot, others_tokens, others), others_tokens, context, rest)
        spent = overhead() if overhead is not None else 0.0
        choice, wall, cpu_ms = sel.choose(view, r, int(i - st.starts[r]))
        if overhead is not None:
            spent = overhead() - spent
            wall, cpu_ms = max(wall - spent, 0.0), max(cpu_ms - spent, 0.0)
        nodes = np.asarray(choice.nodes, dtype=np.int64)
        depth = pool_depth[i]
        if covered is not None and len(nodes):   # the selector's view of what this request adds
            np.add.at(covered[1], (np.asarray(views[slot].node_routes[nodes], dtype=np.int64)
                                   + st.demand.offset[None]).ravel(), 1)
        others_tokens += len(nodes)
        out.append((nodes, st.verification.accepted(i, choice), int(choice.drafted_levels), depth, wall, cpu_ms))
    return out


_NO_NODES = np.zeros(0, dtype=np.int64)
_NO_PICK = (_NO_NODES, 0, 0, 0, 0.0, 0.0)     # a step with no drafter: the root alone


def pool_depths(trace) -> list[int]:
    """The deepest level of the pool at every position row (0 for an empty pool), in one pass."""
    ptr = np.asarray(trace.node_ptr, dtype=np.int64)
    depth = np.zeros(len(ptr) - 1, dtype=np.int64)
    filled = np.flatnonzero(ptr[1:] > ptr[:-1])
    if len(filled):   # empty pools have no nodes, so each filled pool's segment ends where the next begins
        depth[filled] = np.maximum.reduceat(np.asarray(trace.node_level), ptr[filled])
    return depth.tolist()


def _root_cover(st: Stages, views) -> tuple[np.ndarray, np.ndarray]:
    """(how many roots of the step route to each expert, how many tokens the earlier slots' selections
    route there), flat."""
    L, N = st.demand.L, st.demand.N
    count = np.zeros(L * N, dtype=np.int32)
    for v in views:
        count[np.unique((np.asarray(v.root_routes, dtype=np.int64) + st.demand.offset).ravel())] += 1
    return count, np.zeros(L * N, dtype=np.int32)


def _own(st: Stages, view) -> np.ndarray:
    own = np.zeros(st.demand.L * st.demand.N, dtype=np.int16)
    own[np.unique((np.asarray(view.root_routes, dtype=np.int64) + st.demand.offset).ravel())] = 1
    return own


@dataclass
class Schedule:
    """The recorded schedule of one selector: every event, every step, every request-cycle.

    Per request-cycle arrays (``request``, ``step``, ``position``, ...) are in
    step order, slot order within a step; per-step arrays (``step_*``) and
    ``demand`` (bit-packed [S, ceil(L·N/8)]) in step order; ``events`` lists
    ``-1 - r`` for request r's prefill and ``s`` for step s, in replay order.
    """

    selector: str
    batch: int
    num_requests: int
    num_layers: int
    num_experts: int
    events: list
    cycles: dict[str, np.ndarray]
    steps: dict[str, np.ndarray]
    demand: np.ndarray
    selected: np.ndarray
    output_len: np.ndarray
    prompt_len: np.ndarray
    selector_uses_time: bool = True
    wall_s: float = 0.0
    meta: dict = field(default_factory=dict)

    @property
    def num_steps(self) -> int:
        return len(self.steps["tokens"])

    @property
    def num_cycles(self) -> int:
        return len(self.cycles["request"])

    def demand_of(self, s: int) -> np.ndarray:
        L, N = self.num_layers, self.num_experts
        return np.unpackbits(self.demand[s], count=L * N).view(bool).reshape(L, N)

    def selected_of(self, c: int) -> np.ndarray:
        """Pool-local ids of the nodes request-cycle ``c`` verified (ascending)."""
        ptr = self.__dict__.get("_ptr")
        if ptr is None:
            ptr = self.__dict__["_ptr"] = np.concatenate([[0], np.cumsum(self.cycles["draft_nodes"], dtype=np.int64)])
        return self.selected[ptr[c]:ptr[c + 1]]

    def demands(self, trace) -> Iterator[np.ndarray]:
        """Every forward's demand in replay order (prefills included): what offline caches read."""
        for e in self.events:
            yield trace.prefill_demand(-1 - e) if e < 0 else self.demand_of(e)

    def events_iter(self) -> Iterator[Prefill | Step]:
        """The recorded events, as :func:`live_steps` yielded them (each step's per-request lists read on demand)."""
        log = CycleLog(self)
        st = self.steps
        levels, tokens, context = st["levels"].tolist(), st["tokens"].tolist(), st["context"].tolist()
        wall, cpu = st["selector_ms"].tolist(), st["selector_cpu_ms"].tolist()
        ptr = np.searchsorted(self.cycles["step"], np.arange(self.num_steps + 1)).tolist()
        packed, unpack, LN, shape = self.demand, np.unpackbits, self.num_layers * self.num_experts, \
            (self.num_layers, self.num_experts)
        for e in self.events:
            if e < 0:
                yield Prefill(-1 - e)
                continue
            yield Step(log, e, ptr[e], ptr[e + 1], levels[e], tokens[e], context[e], wall[e], cpu[e],
                       unpack(packed[e], count=LN).view(bool).reshape(shape))   # demand_of(e), inline


# the recorded columns: per request-cycle (CycleLog field: dtype), per step (column, dtype)
CYCLE_COLUMNS = {"requests": np.int32, "rows": np.int64, "positions": np.int32, "accepted": np.int16,
                 "committed": np.int16, "drafted": np.int8, "depth": np.int8, "pool_size": np.int16}
STEP_COLUMNS = (("requests", np.int32), ("tokens", np.int32), ("context", np.int64), ("levels", np.int8),
                ("selector_ms", np.float64), ("selector_cpu_ms", np.float64))


class ScheduleRecorder:
    """Collects the events of :func:`live_steps` into a :class:`Schedule`.

    The per request-cycle values are the stages' :class:`CycleLog`, read once
    at the end; per step, the scalars and the demand (packed at once: the
    array may be reused by the next step).
    """

    def __init__(self, st: Stages):
        self.st = st
        self.events: list[int] = []
        self.stp: list[tuple] = []       # one tuple per step, in STEP_COLUMNS order
        self.demand: list[np.ndarray] = []
        self.t0 = time.perf_counter()

    def add(self, ev: Prefill | Step) -> None:
        if isinstance(ev, Prefill):
            self.events.append(-1 - ev.request)
            return
        self.events.append(ev.index)
        self.stp.append((ev.hi - ev.lo, ev.tokens, ev.context, ev.levels, ev.selector_ms, ev.selector_cpu_ms))
        self.demand.append(np.packbits(ev.demand))

    def schedule(self) -> Schedule:
        st = self.st
        g = st.trace.geometry
        L, N = int(g.num_layers), int(g.num_experts)
        sel = st.selection
        log = st.log
        cycles = {CycleLog.RECORDED[f]: np.array(getattr(log, f), dtype=t) for f, t in CYCLE_COLUMNS.items()}
        steps = _columns(self.stp, STEP_COLUMNS)
        cycles["step"] = np.repeat(np.arange(len(self.stp), dtype=np.int32), steps["requests"])
        nodes = log.nodes
        cycles["draft_nodes"] = np.fromiter(map(len, nodes), np.int16, len(nodes))
        return Schedule(
            selector=sel.name, batch=st.batch, num_requests=st.R, num_layers=L, num_experts=N,
            events=self.events, cycles=cycles, steps=steps,
            demand=np.stack(self.demand) if self.demand else np.zeros((0, (L * N + 7) // 8), np.uint8),
            selected=(np.concatenate(nodes) if nodes else np.zeros(0)).astype(np.int16),
            output_len=st.output_len, prompt_len=st.prompt_len, selector_uses_time=sel.drafts,
            wall_s=time.perf_counter() - self.t0,
            meta={"lambda_star": getattr(sel.selector, "lam", None)})


def _columns(rows: list[tuple], spec) -> dict[str, np.ndarray]:
    """Rows of tuples as named columns of the given dtypes."""
    if not rows:
        return {k: np.zeros(0, dtype=t) for k, t in spec}
    table = np.array(rows, dtype=np.float64)    # integers here are far below 2^53: exact
    return {k: np.ascontiguousarray(table[:, i]).astype(t) for i, (k, t) in enumerate(spec)}


def plan(st: Stages, progress: Callable[[int], None] | None = None) -> Schedule:
    """Run the stages before residency over the whole replay and record the schedule."""
    rec = ScheduleRecorder(st)
    rec.t0 = time.perf_counter()
    for ev in live_steps(st, progress=progress, reuse_demand=True):
        rec.add(ev)
    return rec.schedule()

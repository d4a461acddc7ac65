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


@dataclass(slots=True)
class Step:
    """One step: a drafting pass and one target forward over every request in the batch.

    Per request, in slot order: ``requests``, ``rows`` (trace position rows),
    ``positions`` (output positions), ``nodes`` (selected pool-local ids,
    ascending), ``accepted``, ``committed``, ``drafted`` (levels), ``depth``
    (pool depth), ``pool_size``.  For the step: ``levels`` (the deepest
    drafted level: the batch drafts together), ``tokens`` (of the forward),
    ``context`` (KV tokens read, summed), ``selector_ms`` / ``selector_cpu_ms``
    (the slowest selection: one per request, in parallel), ``demand`` (bool
    [L, N], SpecFit Eq. 1's union across the batch).
    """

    index: int
    requests: list[int]
    rows: list[int]
    positions: list[int]
    nodes: list[np.ndarray]
    accepted: list[int]
    committed: list[int]
    drafted: list[int]
    depth: list[int]
    pool_size: list[int]
    levels: int
    tokens: int
    context: int
    selector_ms: float
    selector_cpu_ms: float
    demand: np.ndarray

    @property
    def size(self) -> int:
        """How many requests the step serves."""
        return len(self.requests)


class Stages:
    """The stages before residency for one replay: admission, pools, selection, verification, demand."""

    def __init__(self, trace, config, profile, num_requests: int, verdicts: np.ndarray, predictor):
        self.trace = trace
        self.R = int(num_requests)
        self.batch = int(config.batch)
        self.selection = SelectionStage(trace, config, profile, self.batch)
        self.pools = TracePools(trace, predictor, verdicts, self.selection.context.cost)
        self.verification = Verification(trace, verdicts)
        self.demand = DemandUnion(trace)
        self.output_len = np.asarray(trace.requests.output_len[:self.R], dtype=np.int32)
        self.prompt_len = np.asarray(trace.requests.prompt_len[:self.R], dtype=np.int32)
        self.starts = [int(trace.request_positions(r)[0]) for r in range(self.R)]
        self.node_ptr = trace.node_ptr.tolist()
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
    node_ptr = st.node_ptr
    prompt = st.prompt_len.tolist()
    cursor = adm.cursor
    s = 0
    while True:
        for r in adm.admit():
            yield Prefill(r)
        active = adm.active()
        if not active:
            return
        rows = [st.starts[r] + cursor[r] for r in active]
        if opened is not None:
            opened(s, active, rows)
        context = sum(prompt[r] + cursor[r] for r in active)
        picks = _select(st, active, rows, context, available, overhead) if sel.drafts else None
        demand.start(fresh=not reuse_demand)
        positions, nodes_, accepted, committed_, drafted, depth, size = [], [], [], [], [], [], []
        tokens, levels, wall, cpu_ms = 0, 0, 0.0, 0.0
        for j, (r, i) in enumerate(zip(active, rows, strict=True)):
            size.append(node_ptr[i + 1] - node_ptr[i])
            nodes, acc, lv, dp, w, c = picks[j] if picks is not None else (_NO_NODES, 0, 0, 0, 0.0, 0.0)
            committed = min(1 + acc, adm.left(r))
            demand.add(i, nodes)
            positions.append(cursor[r])
            nodes_.append(nodes)
            accepted.append(acc)
            committed_.append(committed)
            drafted.append(lv)
            depth.append(dp)
            tokens += 1 + len(nodes)
            levels, wall, cpu_ms = max(levels, lv), max(wall, w), max(cpu_ms, c)
            adm.commit(r, committed)
            if progress is not None:
                progress(committed)
        yield Step(s, active, rows, positions, nodes_, accepted, committed_, drafted, depth, size, levels, tokens,
                   context, wall, cpu_ms, demand.matrix())
        adm.release()
        s += 1


def _select(st: Stages, active, rows, context: int, available, overhead) -> list[tuple]:
    """Each request's selection in slot order: (nodes, accepted, drafted levels, pool depth, wall ms, CPU ms)."""
    sel, node_ptr, node_level = st.selection, st.trace.node_ptr, st.trace.node_level
    views = [st.pools.view(i) for i in rows]
    covered = _root_cover(st, views) if sel.batch_cost is not None and len(active) > 1 else None
    others_tokens = len(active)
    out = []
    for slot, (r, i) in enumerate(zip(active, rows, strict=True)):
        view = views[slot]
        if available is not None:
            view.available = available
        if covered is not None:
            others = ((covered[0] - _own(st, view)) > 0) | covered[1]
            view = sel.priced(view, StepInfo(len(active), slot, others_tokens, others), others_tokens, context)
        spent = overhead() if overhead is not None else 0.0
        choice, wall, cpu_ms = sel.choose(view, r, int(i - st.starts[r]))
        if overhead is not None:
            spent = overhead() - spent
            wall, cpu_ms = max(wall - spent, 0.0), max(cpu_ms - spent, 0.0)
        nodes = np.asarray(choice.nodes, dtype=np.int64)
        lo, hi = int(node_ptr[i]), int(node_ptr[i + 1])
        depth = int(node_level[lo:hi].max()) if hi > lo else 0
        if covered is not None and len(nodes):   # the selector's view of what this request adds
            covered[1][(np.asarray(views[slot].node_routes[nodes], dtype=np.int64)
                        + st.demand.offset[None]).ravel()] = True
        others_tokens += len(nodes)
        out.append((nodes, st.verification.accepted(i, choice), int(choice.drafted_levels), depth, wall, cpu_ms))
    return out


_NO_NODES = np.zeros(0, dtype=np.int64)


def _root_cover(st: Stages, views) -> tuple[np.ndarray, np.ndarray]:
    """(how many roots of the step bring each expert, what earlier slots' selections bring), flat."""
    L, N = st.demand.L, st.demand.N
    count = np.zeros(L * N, dtype=np.int16)
    for v in views:
        count[np.unique((np.asarray(v.root_routes, dtype=np.int64) + st.demand.offset).ravel())] += 1
    return count, np.zeros(L * N, dtype=bool)


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

    def events_iter(self) -> Iterator[Prefill | Step | RecordedStep]:
        """The recorded events, as :func:`live_steps` yielded them (each step's per-request lists read on demand)."""
        cols = _RecordedColumns(self)
        st = self.steps
        levels, tokens, context = st["levels"].tolist(), st["tokens"].tolist(), st["context"].tolist()
        wall, cpu = st["selector_ms"].tolist(), st["selector_cpu_ms"].tolist()
        ptr = cols.ptr
        for e in self.events:
            if e < 0:
                yield Prefill(-1 - e)
                continue
            yield RecordedStep(cols, e, ptr[e], ptr[e + 1], levels[e], tokens[e], context[e], wall[e], cpu[e],
                               self.demand_of(e))


class _RecordedColumns:
    """A schedule's per request-cycle columns as Python lists, made once per replay of the schedule."""

    def __init__(self, schedule: Schedule):
        c = schedule.cycles
        self.c = c
        self.lists: dict[str, list] = {}
        self.ptr = np.searchsorted(c["step"], np.arange(schedule.num_steps + 1)).tolist()
        self.sel_ptr = np.concatenate([[0], np.cumsum(c["draft_nodes"], dtype=np.int64)]).tolist()
        self.selected = schedule.selected

    def column(self, key: str) -> list:
        out = self.lists.get(key)
        if out is None:
            out = self.lists[key] = self.c[key].tolist()
        return out


class RecordedStep:
    """A :class:`Step` read back from a :class:`Schedule`: the same fields, the per-request ones on demand.

    The residency and timing stages read a step's scalars and demand; its
    per-request lists (what each request verified and committed) are sliced
    from the schedule only when something asks for them.
    """

    __slots__ = ("_cols", "index", "_lo", "_hi", "levels", "tokens", "context", "selector_ms", "selector_cpu_ms",
                 "demand")

    def __init__(self, cols, index, lo, hi, levels, tokens, context, selector_ms, selector_cpu_ms, demand):
        self._cols, self.index, self._lo, self._hi = cols, index, lo, hi
        self.levels, self.tokens, self.context = levels, tokens, context
        self.selector_ms, self.selector_cpu_ms, self.demand = selector_ms, selector_cpu_ms, demand

    def _slice(self, key: str) -> list:
        return self._cols.column(key)[self._lo:self._hi]

    requests = property(lambda self: self._slice("request"))
    rows = property(lambda self: self._slice("row"))
    positions = property(lambda self: self._slice("position"))
    accepted = property(lambda self: self._slice("accepted"))
    committed = property(lambda self: self._slice("committed"))
    drafted = property(lambda self: self._slice("drafted_levels"))
    depth = property(lambda self: self._slice("pool_levels"))
    pool_size = property(lambda self: self._slice("pool_size"))

    @property
    def size(self) -> int:
        """How many requests the step serves."""
        return self._hi - self._lo

    @property
    def nodes(self) -> list[np.ndarray]:
        p, sel = self._cols.sel_ptr, self._cols.selected
        return [sel[p[j]:p[j + 1]] for j in range(self._lo, self._hi)]


CYCLE_COLUMNS = (("request", np.int32), ("step", np.int32), ("position", np.int32), ("row", np.int64),
                 ("draft_nodes", np.int16), ("accepted", np.int16), ("committed", np.int16),
                 ("drafted_levels", np.int8), ("pool_levels", np.int8), ("pool_size", np.int16))
STEP_COLUMNS = (("requests", np.int32), ("tokens", np.int32), ("context", np.int64), ("levels", np.int8),
                ("selector_ms", np.float64), ("selector_cpu_ms", np.float64))


class ScheduleRecorder:
    """Collects the events of :func:`live_steps` into a :class:`Schedule`."""

    def __init__(self, st: Stages):
        self.st = st
        self.events: list[int] = []
        self.cyc: list[tuple] = []       # one tuple per request-cycle, in CYCLE_COLUMNS order
        self.stp: list[tuple] = []       # one tuple per step, in STEP_COLUMNS order
        self.demand: list[np.ndarray] = []
        self.selected: list[np.ndarray] = []
        self.t0 = time.perf_counter()

    def add(self, ev: Prefill | Step) -> None:
        if isinstance(ev, Prefill):
            self.events.append(-1 - ev.request)
            return
        s = ev.index
        self.events.append(s)
        for j, nodes in enumerate(ev.nodes):
            self.cyc.append((ev.requests[j], s, ev.positions[j], ev.rows[j], len(nodes), ev.accepted[j],
                             ev.committed[j], ev.drafted[j], ev.depth[j], ev.pool_size[j]))
            if len(nodes):
                self.selected.append(nodes)
        self.stp.append((len(ev.requests), ev.tokens, ev.context, ev.levels, ev.selector_ms, ev.selector_cpu_ms))
        self.demand.append(np.packbits(ev.demand))

    def schedule(self) -> Schedule:
        st = self.st
        g = st.trace.geometry
        L, N = int(g.num_layers), int(g.num_experts)
        sel = st.selection
        return Schedule(
            selector=sel.name, batch=st.batch, num_requests=st.R, num_layers=L, num_experts=N,
            events=self.events, cycles=_columns(self.cyc, CYCLE_COLUMNS), steps=_columns(self.stp, STEP_COLUMNS),
            demand=np.stack(self.demand) if self.demand else np.zeros((0, (L * N + 7) // 8), np.uint8),
            selected=(np.concatenate(self.selected) if self.selected else np.zeros(0)).astype(np.int16),
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

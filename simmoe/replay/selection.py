"""Selection: each request's selector chooses what the target verifies, priced for the step it joins.

A selector is built once per replay with a :class:`~simmoe.api.SelectorContext`
(the trace's K, the profile's cost models) and asked once per request per
step (:meth:`SelectionStage.choose`).  At batch 1 it sees the context's cost
model.  At batch > 1, requests select in slot order and a cost-model selector
sees :class:`BatchCost`'s model of what its subtree adds to the step.

Batch-aware costs (SpecFit Eq. 4 across requests): for T̂(S) = b_|S| + βF(S),
F is counted over the experts not covered by the other requests' roots and
the earlier slots' selections (``solvers.Pool.with_free``, then the unchanged
exact search), and b'_j is the step's time with j nodes of the request's own
and the others' tokens and experts: with a resident physical profile the
physical forward over the others' tokens plus 1 + j with the others' unions
read (β' the time one more expert adds at that load, 0 when the step is
compute-bound); offloaded, the profile's batch-1 b_j plus ``token_ms`` per
other token plus β per expert the others bring (β unchanged: a copy and a
compute).  Each request maximises its own tokens per step time given the
others.  EVICT's C(k) is its profiled table (EVICT §3.2.3): with a physical
profile profiled on the trace at this batch size (every request of a step
verifying its k best nodes), else the profile's C(k).
"""

from __future__ import annotations

import functools
import time
from dataclasses import replace

import numpy as np

from simmoe.api import Choice, PoolView, SelectorContext, StepInfo, Undeclared, UndeclaredError
from simmoe.errors import SimmoeError
from simmoe.replay import plugins

NO_CONTEXT_COST = Undeclared("context.cost", "uses_cost")


def selector_flags(name: str) -> dict[str, bool]:
    """What a selector declares it needs (:class:`simmoe.api.Selector`'s optional attributes)."""
    cls = plugins.load("selector", name)
    return {"drafts": bool(getattr(cls, "drafts", True)), "uses_cost": bool(getattr(cls, "uses_cost", False)),
            "uses_evict_cost": bool(getattr(cls, "uses_evict_cost", False)),
            "uses_residency": bool(getattr(cls, "uses_residency", False)),
            "reads_verdicts": bool(getattr(cls, "reads_verdicts", False)),
            "needs_prepare": bool(getattr(cls, "needs_prepare", False))}


def selector_context(trace, profile, config, batch: int = 1, flags: dict[str, bool] | None = None) -> SelectorContext:
    """The selector's configuration: the trace's K, the profile's cost models (Eq. 4, EVICT C(k)).

    ``flags``: the selector's declarations (a resolved setting's ``selector_flags``); looked up by name if None.
    """
    flags = selector_flags(config.selector) if flags is None else flags
    cost = profile.cost_model(config.cache_active) if flags["uses_cost"] else NO_CONTEXT_COST
    if flags["uses_cost"] and getattr(getattr(profile, "physical", None), "placement", None) is not None:
        # experts on the CPU: SpecFit's exact cost too
        from simmoe.replay.selection_cpu import priced_cost

        cost = priced_cost(profile, cost)
    evict = evict_table(trace, profile, batch) if flags["uses_evict_cost"] else ()
    options = dict(config.options)
    if flags["uses_residency"]:
        from simmoe.replay.timing import profile_discount

        options.setdefault("residency_discount", profile_discount(profile))
    return SelectorContext(K=trace.pool_shape.K, cost=cost, evict_cost=evict, options=options)


class BatchCost:
    """The cost model of one request given the step so far: T̂(S | others), the step's time with S.

    With no other request (batch 1, or the last request of a draining batch)
    it is the profile's batch-1 model (module docstring for the two regimes).
    """

    def __init__(self, profile, base_cost, K: int, levels: int):
        self.phys = getattr(profile, "physical", None) if getattr(profile, "resident", False) else None
        self.token_ms = 0.0 if getattr(profile, "resident", False) else float(getattr(profile, "token_ms", 0.0))
        self.base = base_cost
        self.K = int(K)
        self.levels = int(levels)
        # a static CPU placement: SpecFit's exact cost of one request of the batch (selection_cpu)
        self.cpu_fwd = getattr(profile, "physical", None) if getattr(base_cost, "cpu", None) is not None else None

    def cost(self, other_tokens: int, covered_per_layer: np.ndarray, context: float, requests: int,
             tokens: np.ndarray | None = None):
        """``solvers.CostModel`` for a request whose step already holds ``other_tokens`` tokens.

        ``covered_per_layer``: the experts per MoE layer the others already bring;
        ``context``: the step's context tokens, summed over its ``requests``;
        ``tokens``: the others' tokens per (layer, expert) [L, N], for a static CPU placement.
        """
        from solvers.cost import CostModel

        if self.base is None:
            return self.base
        if self.phys is None:   # offload: the event model's linear terms of the step
            shift = self.token_ms * max(int(other_tokens), 0) + self.base.beta * float(np.sum(covered_per_layer))
            out = self.base if shift <= 0 else CostModel([x + shift for x in self.base.b], self.base.beta)
            if self.cpu_fwd is not None and tokens is not None:
                from simmoe.replay.selection_cpu import batch_cpu_cost

                return batch_cpu_cost(self.cpu_fwd, out, self.K, self.levels, other_tokens, tokens, context,
                                      requests)
            return out
        p = self.phys
        j = np.arange(self.K + 1, dtype=np.float64)
        n = other_tokens + 1 + j
        fwd = p.forward_ms(n, covered_per_layer[None, :], context, n * context / max(requests, 1), requests)
        b = fwd + p.draft_ms(self.levels, requests) + p.o.spec_token_ms * n + p.o.step_ms
        n0 = other_tokens + 1.0
        t0 = p.forward_ms(n0, covered_per_layer, context, n0 * context / max(requests, 1), requests)
        t1 = p.forward_ms(n0, covered_per_layer + 1.0, context, n0 * context / max(requests, 1), requests)
        beta = max(float(t1 - t0), 0.0) / max(p.L_moe, 1)
        return CostModel([float(x) for x in b], beta)


def evict_table(trace, profile, batch: int = 1) -> tuple[float, ...]:
    """EVICT's C(k) for this replay (EVICT §3.2.3: profiled on the running system before decoding).

    A physical profile's table is profiled on the trace at this batch size:
    resident, the physical forward (:func:`simmoe.hardware.physical.profile_evict_cost`);
    with experts on the CPU, the same profiling with the placement's forward
    (:class:`simmoe.hardware.cpu_forward.CpuForward`; a cache placement's layers count every
    expert on the CPU, as a cold cache); offloaded, its linear cost b_k + β·F without a cache
    over the profiled unions.
    Any other profile's table is its ``evict.cost_ms``.  Memoized per (trace, profile, batch).
    """
    phys = getattr(profile, "physical", None)
    if phys is None:
        return tuple(profile.evict_cost)
    import weakref

    key = (id(trace), profile.name, int(batch))
    ref, hit = _EVICT_CACHE.get(key, (None, None))
    if ref is None or ref() is not trace:  # an id can be reused once its trace is gone
        hit = None
    if hit is None:
        hit = _profile_evict_table(trace, profile, phys, int(batch))
        if len(_EVICT_CACHE) > 32:
            _EVICT_CACHE.clear()
        _EVICT_CACHE[key] = (weakref.ref(trace), hit)
    return hit


def _profile_evict_table(trace, profile, phys, batch: int) -> tuple[float, ...]:
    samples = 256 if batch <= 1 else max(16, 512 // batch)
    from simmoe.hardware.cpu_forward import CpuForward

    if profile.resident or isinstance(phys, CpuForward):    # the forward itself, resident or CPU-placed
        from simmoe.hardware.physical import profile_evict_cost

        return profile_evict_cost(trace, phys, samples=samples, batch=batch)
    from simmoe.hardware.union_profile import prefix_unions  # offloaded: b_k + β·F without a cache

    K = max(int(trace.pool_shape.max_nodes), 1)
    unions, _ = prefix_unions(trace, K, samples=samples, batch=batch)
    b, beta = profile.cost_b_no_cache, profile.cost_beta_no_cache
    return tuple(float(b[min(k, len(b) - 1)] + beta * unions[:, k, :].sum(axis=1).mean()) for k in range(1, K + 1))


_EVICT_CACHE: dict = {}


class SelectionStage:
    """The selection stage of one replay: the selector, its batch-aware costs, its timing and checks."""

    def __init__(self, trace, setting, profile, batch: int):
        config = setting.config             # setting: the replay's resolved configuration (config.Setting)
        self.name = config.selector
        self.flags = setting.selector_flags
        self.drafts = self.flags["drafts"]
        self.context = selector_context(trace, profile, config, batch, self.flags)
        self.selector = setting.new_selector(self.context)
        self.batch_cost = BatchCost(profile, self.context.cost, max(int(trace.pool_shape.max_nodes), self.context.K),
                                    int(trace.pool_shape.depth)) if self.flags["uses_cost"] and batch > 1 else None
        self.checked = not type(self.selector).__module__.startswith("simmoe.")   # plugins' choices are checked
        self.g = trace.geometry
        self._available: tuple = (None, None)    # (the residency's callable, its read-only wrapper)

    def prepare(self, trace, num_requests: int, views_at) -> None:
        """Trace-level preparation (``optimal``'s λ*) over the first ``num_requests`` requests."""
        if not self.flags["needs_prepare"]:
            return
        from solvers.errors import InvalidInput

        if self.checked:        # an outside plugin sees the trace read-only, its verdicts only if it declares them
            trace = plugin_trace(trace, self.flags["reads_verdicts"])
        try:
            self.selector.prepare(trace, num_requests, views_at)
        except InvalidInput as exc:
            raise SimmoeError(f"selector {self.name!r}: {exc}") from None
        except UndeclaredError as exc:
            raise SimmoeError(f"selector {self.name!r} in prepare(): {exc}") from None
        except SimmoeError:
            raise
        except Exception as exc:
            raise plugins.plugin_error("selector", self.name, exc, "in prepare()") from None

    def priced(self, view: PoolView, info: StepInfo, others_tokens: int, context: float,
               tokens: np.ndarray | None = None) -> PoolView:
        """``view`` priced for the step it joins: the others' experts free, the batch-aware cost
        (``tokens``: the others' tokens per flat (layer, expert), which a static CPU placement prices)."""
        if self.batch_cost is None or info.size <= 1 or info.covered is None:
            return view
        L, N = self.g.num_layers, self.g.num_experts
        covered = info.covered.reshape(L, N)
        view = replace(view, _pool=None, batch=replace(info, covered=_read_only(covered)))
        view._pool = view.pool().with_free(covered)
        view.cost = self.batch_cost.cost(others_tokens - 1, covered.sum(axis=1).astype(np.float64),
                                         float(context), info.size,
                                         None if tokens is None else np.asarray(tokens).reshape(L, N))
        return view

    def choose(self, view: PoolView, request: int, position: int) -> tuple[Choice, float, float]:
        """The selector's choice at ``view``, its wall and CPU milliseconds."""
        if view.available is not None:
            view.available = self._read_only_available(view.available)
        parents, levels = view.parents, view.levels     # checked against these, whatever the selector rebinds
        perf, cpu = time.perf_counter, time.thread_time
        c1, t1 = cpu(), perf()
        try:
            choice = self.selector.select(view)
        except _invalid_input() as exc:  # e.g. a cost model too short for the trace's K
            raise SimmoeError(f"selector {self.name!r} at request {request}, position {position}: {exc}") from None
        except UndeclaredError as exc:
            raise SimmoeError(f"selector {self.name!r} at request {request}, position {position}: {exc}") from None
        except SimmoeError:
            raise
        except Exception as exc:
            raise plugins.plugin_error("selector", self.name, exc,
                                       f"at request {request}, position {position}") from None
        wall, cpu_ms = (perf() - t1) * 1e3, (cpu() - c1) * 1e3
        if self.checked:
            choice = check_choice(self.name, choice, parents, levels, self.context.K,
                                  f"at request {request}, position {position}")
        return choice, wall, cpu_ms

    def _read_only_available(self, available):
        """``available`` whose arrays are read-only (one wrapper per residency callable)."""
        if self._available[0] is not available:
            def read_only_available(d: int):
                out = available(d)
                return out if out is None else _read_only(np.asarray(out))

            self._available = (available, read_only_available)
        return self._available[1]


# the trace's columns that carry the target's verdicts (greedy agreement; the target's distribution at T > 0)
VERDICT_COLUMNS = ("node_agree", "node_target_prob", "node_target_cdf")


def plugin_trace(trace, reads_verdicts: bool):
    """``trace`` as an outside selector's ``prepare`` sees it: :func:`plugins.read_only_trace` (every array
    read-only, its meta a copy), its verdict columns (:data:`VERDICT_COLUMNS`) only if the selector declares
    ``reads_verdicts``."""
    out = plugins.read_only_trace(trace)
    if not reads_verdicts:
        for name in VERDICT_COLUMNS:
            object.__setattr__(out, name, Undeclared(f"trace.{name}", "reads_verdicts"))
    return out


def _read_only(a: np.ndarray) -> np.ndarray:
    v = a.view()
    v.flags.writeable = False
    return v


@functools.cache
def _invalid_input() -> type[Exception]:
    from solvers.errors import InvalidInput  # importing solvers is slow: not for `simmoe --help`

    return InvalidInput


def check_choice(name: str, choice, parents: np.ndarray, levels: np.ndarray, K: int, where: str) -> Choice:
    """A plugin's choice, refused unless it is what :class:`simmoe.api.Choice` says; a copy it cannot change.

    Ids must be integers (not a bool mask, not floats), strictly ascending,
    inside the pool of ``len(parents)`` nodes, at most ``K`` and ancestor-closed;
    the drafted levels an integer between the deepest chosen level and the
    pool's depth.  Nothing is coerced: each refusal is one line naming the
    selector, ``where`` (request and position) and the offending entry.
    """
    who = f"selector {name!r} {where}"
    if not hasattr(choice, "nodes") or not hasattr(choice, "drafted_levels"):
        raise SimmoeError(f"{who} returned {type(choice).__name__}, not a simmoe.api.Choice")
    nodes = _node_ids(who, choice.nodes, len(parents), K)
    chosen_parents = parents[nodes]
    orphan = np.flatnonzero((chosen_parents >= 0) & ~np.isin(chosen_parents, nodes))
    if len(orphan):
        v = int(nodes[orphan[0]])
        raise SimmoeError(f"{who}: chose node {v} (nodes[{int(orphan[0])}]) without its parent "
                          f"{int(parents[v])} (a selection must be ancestor-closed)")
    drafted = choice.drafted_levels
    if isinstance(drafted, (bool, np.bool_)) or not isinstance(drafted, (int, np.integer)):
        raise SimmoeError(f"{who}: drafted_levels is {drafted!r} ({type(drafted).__name__}), not an integer")
    drafted = int(drafted)
    need = int(levels[nodes].max()) if len(nodes) else 0
    depth = int(levels.max()) if len(levels) else 0
    if not need <= drafted <= depth:
        raise SimmoeError(f"{who}: drafted {drafted} levels; its nodes need {need} and the pool has {depth}")
    return Choice(nodes, drafted)


def _node_ids(who: str, raw, n: int, K: int) -> np.ndarray:
    """``raw`` as a fresh int64 array, if it is a valid id list (:func:`check_choice`); else one line."""
    try:
        ids = np.asarray(raw)
    except Exception as exc:    # a ragged list, an object numpy cannot read
        raise SimmoeError(f"{who}: nodes cannot be read as an array ({type(exc).__name__}: {exc})") from None
    if ids.ndim != 1:
        raise SimmoeError(f"{who}: nodes must be a 1-D list of ids, got shape {ids.shape}")
    if ids.size and ids.dtype.kind not in "iu":
        what = "a bool mask" if ids.dtype.kind == "b" else f"{ids.dtype} values"
        raise SimmoeError(f"{who}: nodes are {what}, not integer ids (nodes[0] = {ids[0].item()!r})")
    ids = ids.astype(np.int64)      # a copy: the selector keeps no handle on what the replay records
    outside = np.flatnonzero((ids < 0) | (ids >= n))
    if len(outside):
        i = int(outside[0])
        raise SimmoeError(f"{who}: nodes[{i}] = {int(ids[i])} is outside the pool of {n} nodes (ids 0..{n - 1})")
    step = np.flatnonzero(ids[1:] <= ids[:-1])
    if len(step):
        i = int(step[0]) + 1
        how = "repeats" if ids[i] == ids[i - 1] else "is below"
        raise SimmoeError(f"{who}: nodes[{i}] = {int(ids[i])} {how} nodes[{i - 1}] = {int(ids[i - 1])}; "
                          "ids must be strictly ascending")
    if len(ids) > K:
        raise SimmoeError(f"{who}: chose {len(ids)} nodes, more than K = {K}")
    return ids

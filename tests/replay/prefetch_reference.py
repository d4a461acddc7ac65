"""The readable reference of the prefetch model: the rules of :mod:`simmoe.replay.copy_engine` in simpy.

Slow and literal, for the tests (tests/replay/test_prefetch.py): every copy
lane, drafting level, attention and expert is a simpy process; the cache is
one ``OrderedDict`` per layer (least recently used first); every queued
prefetch job is kept and judged when a lane takes it (skipped when its layer
has no room), where the fast model leaves such jobs out when it queues.
Prefill is timed by :func:`simmoe.replay.timing.simpy_forward`, as without
prefetch.

``reference_replay(timer, L, N, slots, policy, items)`` takes :class:`CycleInput`
items (``items``: ``("prefill", prompt_len, demand)`` or ``("cycle", CycleInput)``;
:func:`reference_items` converts a batch-1 :class:`~simmoe.replay.schedule.Schedule`
into them) and returns, per item, ``(ms, hits, misses)`` for a prefill and a
:class:`CycleOutcome` for a cycle.  ``policy`` is the prefetch policy's name
(``none``, ``draft``, ``next-layer`` or ``oracle``); ``timer`` is a fresh
:class:`~simmoe.replay.timing.CycleTimer` (its random stream gives the demand
copies' durations, in the same order as the replay's).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass

import numpy as np

from simmoe.replay.copy_engine import PREFETCH_SEED_SALT
from simmoe.replay.timing import simpy_forward


@dataclass
class CycleInput:
    """One verification cycle as the reference sees it.

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


def charged_selector_ms(schedule, config, step) -> float:
    """The selector time the replay charges to ``step`` (none without a drafter, fixed, or measured)."""
    if not schedule.selector_uses_time:
        return 0.0
    if config.selector_ms is not None:
        return float(config.selector_ms)
    return float(step.selector_ms if config.selector_clock == "wall" else step.selector_cpu_ms)


def reference_items(trace, schedule, config, with_routes: bool = True) -> list:
    """A batch-1 schedule's forwards in replay order, as :func:`reference_replay` takes them.

    ``("prefill", prompt_len, demand)`` per admitted request, ``("cycle", CycleInput)``
    per step.  Predicted routes come from the route predictor of ``config`` (the
    selectors' and prefetch policies' own), the true routes from the trace.
    """
    from simmoe.replay.route_prediction import RoutePredictor
    from simmoe.replay.schedule import Prefill

    predictor = RoutePredictor(trace.geometry.num_experts, config.route_accuracy, config.seed)
    items: list = []
    for ev in schedule.events_iter():
        if isinstance(ev, Prefill):
            items.append(("prefill", int(schedule.prompt_len[ev.request]), trace.prefill_demand(ev.request)))
            continue
        if len(ev.requests) != 1:
            raise ValueError("the reference replays one request per step (batch 1)")
        inp = CycleInput(levels=int(ev.levels), selector_ms=charged_selector_ms(schedule, config, ev),
                         n_tokens=int(ev.tokens), demand=np.asarray(ev.demand, dtype=bool))
        if with_routes:
            row = int(ev.rows[0])
            s = trace.pool_slice(row)
            inp.root_pred, inp.node_pred = predictor.predict(row, trace.root_routes[row], trace.node_routes[s])
            inp.node_level, inp.node_p = trace.node_level[s], trace.node_p[s]
            inp.selected = np.asarray(ev.nodes[0], dtype=np.int64)
            inp.root_true, inp.node_true = trace.root_routes[row], trace.node_routes[s]
        items.append(("cycle", inp))
    return items


def reference_replay(timer, L: int, N: int, slots: int, policy: str, items, staging: int | None = None) -> list:
    import simpy

    p = timer.profile
    c, e, overlap = int(p.copies_in_flight), float(p.expert_ms), bool(p.overlap)
    staging = c if staging is None else int(staging)
    serial = not overlap      # copies share the compute stream: prefetches run in blocks, nothing overlaps
    slots = min(int(slots), N)
    pf_rng = np.random.default_rng((int(timer.seed), PREFETCH_SEED_SALT))

    def prefetch_duration():
        if not timer.random_copies:
            return timer.copy_mean
        if timer.samples is not None:
            return float(timer.samples[pf_rng.integers(0, len(timer.samples))])
        shape, scale = timer._gamma
        return float(pf_rng.gamma(shape, scale))

    env = simpy.Environment()
    compute = simpy.Resource(env, capacity=1)
    lru = [OrderedDict() for _ in range(L)] if slots > 0 else None
    staged = [[] for _ in range(L)]
    pf_unused: set = set()
    landing: dict = {}                     # (layer, expert) -> simpy event of its prefetch copy landing
    demand_q: deque = deque()
    st = {"wake": env.event(), "window": None, "counts": None, "carry_useful": 0, "carry_wasted": 0,
          "active": 0, "drained": env.event()}

    def wake():
        ev, st["wake"] = st["wake"], env.event()
        ev.succeed()

    def count(key, n=1):
        if st["counts"] is not None:
            st["counts"][key] += n
        else:
            st["carry_" + key] += n

    def is_available(layer, expert):
        if lru is not None and expert in lru[layer]:
            return True
        return expert in staged[layer]

    def waste(pair):
        if pair in pf_unused:
            pf_unused.discard(pair)
            count("wasted")

    # -- the copy engine -----------------------------------------------------------
    def take_slot(layer, expert):
        """Slot rules of a prefetch when its copy would start; False: skipped."""
        if is_available(layer, expert):
            return False
        if lru is None:
            if len(staged[layer]) >= staging:
                return False
            staged[layer].append(expert)
            return True
        if sum(1 for x in lru[layer] if (layer, x) in pf_unused) >= slots:
            return False
        if len(lru[layer]) >= slots:
            victim = next(x for x in lru[layer] if (layer, x) not in pf_unused)
            del lru[layer][victim]
        lru[layer][expert] = True          # most recently used
        return True

    def next_prefetch():
        """The next prefetch job a free lane starts now (jobs are released when queued)."""
        w = st["window"]
        while w is not None and w["pos"] < len(w["jobs"]):
            if env.now >= w["deadline"]:
                w["pos"] = len(w["jobs"])
                return None
            pair = w["jobs"][w["pos"]]
            w["pos"] += 1
            if take_slot(*pair):
                return pair
        return None

    def lane():
        while True:
            if demand_q:
                duration, done = demand_q.popleft()
                yield env.timeout(duration)
                done.succeed()
                continue
            pair = next_prefetch()
            if pair is None:
                yield st["wake"]
                continue
            pf_unused.add(pair)
            count("prefetched")
            ev = env.event()
            landing[pair] = ev
            st["active"] += 1
            yield env.timeout(prefetch_duration())
            st["active"] -= 1
            ev.succeed()
            done_ev, st["drained"] = st["drained"], env.event()
            done_ev.succeed()

    for _ in range(c):
        env.process(lane())

    # -- windows and their jobs ------------------------------------------------------
    def open_window(deadline):
        avail = {(layer, x) for layer in range(L) for x in range(N) if is_available(layer, x)}
        st["window"] = {"jobs": [], "pos": 0, "deadline": deadline, "avail": avail, "queued": set()}

    def issue(routes_by_token):
        """Queue tokens' routes (each L lists of experts) now: token after token, layer after layer."""
        w = st["window"]
        for routes in routes_by_token:
            for layer in range(L):
                for x in routes[layer]:
                    pair = (layer, int(x))
                    if pair in w["avail"] or pair in w["queued"]:
                        continue
                    w["queued"].add(pair)
                    w["jobs"].append(pair)
        wake()

    def drain():
        """Serial blocks: wait until every queued prefetch has been started and has landed."""
        while True:
            yield env.timeout(0)             # let the woken lanes take their jobs first
            w = st["window"]
            if (w is None or w["pos"] >= len(w["jobs"])) and st["active"] == 0:
                return
            yield st["drained"]

    def order_nodes(nodes, inp):
        pv = np.asarray(inp.node_p, dtype=np.float64)
        lv = np.asarray(inp.node_level)
        return sorted(nodes, key=lambda v: (-pv[v], int(lv[v]), v))

    # -- forwards --------------------------------------------------------------------
    def layer_demand(layer, row, T):
        """Router of a layer at T: hits, in-flight hits, demand copies; returns (ready events, h, m)."""
        events, hits, misses = [], 0, 0
        missing = []
        for x in np.flatnonzero(row).tolist():
            if is_available(layer, x):
                hits += 1
                ev = landing.get((layer, x))
                if ev is not None and not ev.triggered:
                    events.append(ev)
                else:
                    events.append(None)
            else:
                misses += 1
                missing.append(x)
        durs = timer.draw_copy_times(np.array([len(missing)])) if timer.random_copies else None
        for i, _ in enumerate(missing):
            done = env.event()
            demand_q.append((float(durs[i]) if durs is not None else timer.copy_mean, done))
            events.append(done)
        use_and_touch(layer, row)
        wake()
        return events, hits, misses

    def use_and_touch(layer, row):
        """Useful prefetches, then the LRU update (hits before misses, each ascending); (hits, misses) or None."""
        for x in np.flatnonzero(row).tolist():
            if (layer, x) in pf_unused:
                pf_unused.discard((layer, x))
                count("useful")
        if lru is None:
            return None
        cache = lru[layer]
        hit_ids = [x for x in np.flatnonzero(row).tolist() if x in cache]
        miss_ids = [x for x in np.flatnonzero(row).tolist() if x not in cache]
        for x in hit_ids + miss_ids:
            cache.pop(x, None)
            cache[x] = True
        while len(cache) > slots:
            victim, _ = cache.popitem(last=False)
            waste((layer, victim))
        return len(hit_ids), len(miss_ids)

    def expert(ev):
        if ev is not None:
            yield ev
        with compute.request() as turn:
            yield turn
            yield env.timeout(e)

    def forward(demand, n_tokens, inp, out):
        a = (p.forward_ms + p.token_ms * max(n_tokens - 1, 0) + (p.cache_overhead_ms if timer.cache else 0.0)) / L
        pred_next = None
        if policy == "next-layer":
            tokens = [np.asarray(inp.root_pred)]
            sel = list(np.asarray(inp.selected if inp.selected is not None else [], dtype=np.int64))
            tokens += [np.asarray(inp.node_pred)[v] for v in sorted(sel, key=lambda v: (-float(inp.node_p[v]), v))]
            pred_next = tokens
        hits = misses = 0
        for layer in range(L):
            with compute.request() as turn:
                yield turn
                yield env.timeout(a)
            if policy == "next-layer" and layer > 0:
                st["window"] = None                   # jobs for this layer that did not start are dropped
            evs, h, m = layer_demand(layer, demand[layer], env.now)
            hits, misses = hits + h, misses + m
            if policy == "next-layer" and layer + 1 < L and not serial:
                open_window(np.inf)
                issue([_only_layer(tok, layer + 1, L) for tok in pred_next])
            if overlap:
                yield simpy.AllOf(env, [env.process(expert(ev)) for ev in evs])
            else:
                waits = [ev for ev in evs if ev is not None]
                if waits:
                    yield simpy.AllOf(env, waits)
                yield simpy.AllOf(env, [env.process(expert(None)) for _ in evs])
            if policy == "next-layer" and layer + 1 < L and serial:    # a block before the next attention
                open_window(np.inf)
                issue([_only_layer(tok, layer + 1, L) for tok in pred_next])
                yield env.process(drain())
                st["window"] = None
            elif policy == "next-layer" and layer + 1 < L and st["window"] is not None:
                st["window"]["deadline"] = env.now + a
        # staging holds experts until the forward has passed
        for layer in range(L):
            for x in staged[layer]:
                waste((layer, x))
            staged[layer] = []
        out["hits"], out["misses"] = hits, misses

    def cycle(inp, out):
        t0 = env.now
        st["counts"] = {"prefetched": 0, "useful": st["carry_useful"], "wasted": st["carry_wasted"]}
        st["carry_useful"] = st["carry_wasted"] = 0
        D, sel_ms = int(inp.levels), float(inp.selector_ms)
        draft_ms = (p.draft_fixed_ms + p.draft_level_ms * D) if D > 0 else 0.0
        F = t0 + draft_ms + sel_ms
        lv = np.asarray(inp.node_level) if inp.node_pred is not None else np.zeros(0)

        def draft_tokens(d):
            return [np.asarray(inp.node_pred)[v] for v in order_nodes([v for v in range(len(lv)) if lv[v] == d], inp)]

        def oracle_tokens():
            sel = list(np.asarray(inp.selected if inp.selected is not None else [], dtype=np.int64))
            return [np.asarray(inp.root_true)] + [np.asarray(inp.node_true)[v] for v in order_nodes(sel, inp)]

        if not serial and D > 0 and policy == "draft" and inp.root_pred is not None:
            open_window(F)
            issue([np.asarray(inp.root_pred)])

            def issuer():
                for d in range(1, D + 1):
                    td = t0 + (p.draft_fixed_ms + p.draft_level_ms * d)
                    yield env.timeout(td - env.now)
                    issue(draft_tokens(d))
            env.process(issuer())
        elif not serial and D > 0 and policy == "oracle":
            open_window(F)
            issue(oracle_tokens())
        if D > 0:
            with compute.request() as turn:
                yield turn
                yield env.timeout(draft_ms)
        yield env.timeout(F - env.now)               # selection, on the host
        if serial and D > 0 and (policy == "oracle" or (policy == "draft" and inp.root_pred is not None)):
            open_window(np.inf)                      # the copies block the compute stream until they land
            if policy == "draft":
                issue([np.asarray(inp.root_pred)])
                for d in range(1, D + 1):
                    issue(draft_tokens(d))
            else:
                issue(oracle_tokens())
            yield env.process(drain())
            draft_ms += env.now - F
        if policy in ("draft", "oracle"):
            st["window"] = None
        f0 = env.now
        yield env.process(forward(np.asarray(inp.demand, dtype=bool), int(inp.n_tokens), inp, out))
        out["forward_ms"] = env.now - f0
        yield env.timeout(p.commit_ms)
        counts = st["counts"]
        st["counts"] = None
        out["outcome"] = CycleOutcome(draft_ms, sel_ms, out["forward_ms"], p.commit_ms, out["hits"],
                                      out["misses"], counts["prefetched"], counts["useful"], counts["wasted"])

    def prefill(prompt_len, demand, out):
        demand = np.asarray(demand, dtype=bool)
        h = np.zeros(L, dtype=np.int64)
        m = np.zeros(L, dtype=np.int64)
        for layer in range(L):
            row = demand[layer]
            touched = use_and_touch(layer, row)
            if touched is not None:
                h[layer], m[layer] = touched
            else:
                h[layer] = sum(1 for x in np.flatnonzero(row).tolist() if x in staged[layer])
                m[layer] = int(row.sum()) - h[layer]
        for layer in range(L):
            for x in staged[layer]:
                waste((layer, x))
            staged[layer] = []
        a = (p.forward_ms + p.prefill_token_ms * max(int(prompt_len), 0)
             + (p.cache_overhead_ms if timer.cache else 0.0)) / L
        copies = timer.draw_copy_times(m) if timer.random_copies else None
        ms = simpy_forward(a, h, m, e, timer.copy_mean, c, overlap, copies)
        yield env.timeout(ms)
        out["result"] = (ms, h, m)

    results = []

    def driver():
        for item in items:
            out: dict = {}
            if item[0] == "prefill":
                yield env.process(prefill(item[1], item[2], out))
                results.append(out["result"])
            else:
                yield env.process(cycle(item[1], out))
                results.append(out["outcome"])
        done["end"] = True

    done = {"end": False}
    env.process(driver())
    while not done["end"]:
        env.step()
    leftover = len(pf_unused)
    if leftover:
        for i in range(len(results) - 1, -1, -1):
            if isinstance(results[i], CycleOutcome):
                r = results[i]
                results[i] = CycleOutcome(r.draft_ms, r.selector_ms, r.forward_ms, r.commit_ms, r.hits, r.misses,
                                          r.prefetched, r.useful, r.wasted + leftover)
                break
    return results


def _only_layer(routes, layer: int, L: int):
    """A token's routes with only ``layer`` kept (the others empty), as [L] lists."""
    out = [[] for _ in range(L)]
    out[layer] = list(np.asarray(routes)[layer])
    return out

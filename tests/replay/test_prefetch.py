"""Prefetching (the copy engine of simmoe.replay.residency): against the event model and its simpy reference."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
from factories import random_trace
from hypothesis import given, settings
from hypothesis import strategies as st
from prefetch_reference import CycleOutcome, charged_selector_ms, reference_items, reference_replay

from simmoe.api import CacheShape
from simmoe.errors import SimmoeError
from simmoe.hardware.profile import load_profile
from simmoe.replay.caches import make_cache
from simmoe.replay.engine import ReplayConfig, _timer, build_residency, check_setting, plan, replay, simulate
from simmoe.replay.pools import TracePools
from simmoe.replay.prefetch_policies import Draft
from simmoe.replay.residency import OffloadedExperts
from simmoe.replay.route_prediction import RoutePredictor
from simmoe.replay.schedule import CYCLE_FIELDS, CycleLog, Prefill, Step

L, N, K = 4, 8, 2  # L a power of two: per-layer times stay binary fractions
POLICIES = ("none", "draft", "next-layer", "oracle")


def profile(**changes):
    """An offload profile whose times are binary fractions, so that every sum is exact."""
    base = dict(num_layers=0, link_gbps=0.0, copy_ms=0.75, copies_in_flight=2, copy_cv=0.0, forward_ms=6.0,
                token_ms=0.125, expert_ms=0.25, cache_overhead_ms=1.5, draft_level_ms=1.5, draft_fixed_ms=0.5,
                commit_ms=0.25, prefill_token_ms=0.0625, overlap=True)
    base.update(changes)
    return load_profile("a100-pcie-40gb").replace(**base)


def plan_of(trace, selector="eagle3", slots=3, accuracy=1.0, seed=0, prof=None, selector_ms=0.5):
    cfg = ReplayConfig(selector=selector, slots=slots, selector_ms=selector_ms, route_accuracy=accuracy, seed=seed)
    return cfg, plan(trace, cfg, prof or profile())


def residency_items(trace, schedule, cfg, prof, *, staging=None, sequential=False):
    """The residency stage of ``cfg`` over the schedule's events, one outcome per event, and its leftover.

    A prefill gives ``(ms, hits [L], misses [L])``, a step a :class:`CycleOutcome`
    (the shape of the reference's results).
    """
    timer = _timer(cfg, prof)
    pools = TracePools(trace, RoutePredictor(trace.geometry.num_experts, cfg.route_accuracy, cfg.seed),
                       trace.node_agree)
    res = build_residency(trace, cfg, prof, timer, pools, staging=staging, sequential=sequential,
                          requests=tuple(range(schedule.num_requests)))
    out = []
    for ev in schedule.events_iter():
        if isinstance(ev, Prefill):
            out.append(res.prefill(int(schedule.prompt_len[ev.request]), trace.prefill_demand(ev.request),
                                   ev.request))
            continue
        sel = charged_selector_ms(schedule, cfg, ev)
        draft, fwd, commit, h, m, counts = res.step(ev, sel)
        counts = counts or {"prefetched": 0, "useful": 0, "wasted": 0}
        out.append(CycleOutcome(draft, sel, fwd, commit, int(h.sum()), int(m.sum()), counts["prefetched"],
                                counts["useful"], counts["wasted"]))
    return out, res.finish()


def run_both(trace, cfg, p, prof, policy, staging=None):
    """The replay's residency stage and the simpy reference on the same forwards.

    Also checks that :func:`simulate` records exactly the residency stage's outcomes.
    Returns (fast outcomes, leftover prefetches at the end, reference outcomes).
    """
    cfg = replace(cfg, prefetch=policy)
    fast, leftover = residency_items(trace, p, cfg, prof, staging=staging)
    slots = cfg.slots if cfg.cache_active else 0
    ref = reference_replay(_timer(cfg, prof), L, N, slots, policy, reference_items(trace, p, cfg), staging=staging)
    res = simulate(trace, p, cfg, prof, staging=staging)
    cycles = [x for x in fast if isinstance(x, CycleOutcome)]
    for key in ("draft_ms", "forward_ms", "hits", "misses"):
        assert res.cycles[key].tolist() == [getattr(x, key) for x in cycles], key
    if policy != "none":
        for key in ("prefetched", "useful"):
            assert res.cycles[key].tolist() == [getattr(x, key) for x in cycles], key
        assert res.cycles["wasted"].sum() == sum(x.wasted for x in cycles) + leftover
    return fast, leftover, ref


# -- nothing prefetched: the event model, exactly ------------------------------------
@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), slots=st.sampled_from([0, 2, 5]),
       copies=st.sampled_from(["fixed", "gamma", "samples"]), overlap=st.booleans(),
       selector=st.sampled_from(["ar", "eagle3", "specfit"]))
def test_policy_none_equals_the_event_model_bit_for_bit(seed, slots, copies, overlap, selector):
    # the copy engine carried across steps with nothing prefetched times every forward as the event model
    extra = {"fixed": {}, "gamma": {"copy_cv": 0.3}, "samples": {"copy_samples_ms": (0.5, 0.75, 1.25)}}[copies]
    prof = profile(overlap=overlap, **extra)
    trace = random_trace(seed, num_requests=2, L=L, N=N, k=K, pool_nodes=7)
    cfg, p = plan_of(trace, selector, slots, prof=prof, seed=seed)
    a = simulate(trace, p, cfg, prof)
    b, leftover = residency_items(trace, p, cfg, prof, sequential=True)
    steps = [x for x in b if isinstance(x, CycleOutcome)]
    pre = [x for x in b if not isinstance(x, CycleOutcome)]
    for key in ("forward_ms", "draft_ms", "hits", "misses"):
        assert a.cycles[key].tolist() == [getattr(x, key) for x in steps], key
    assert a.cycles["cycle_ms"].tolist() == [x.draft_ms + x.selector_ms + x.forward_ms + x.commit_ms for x in steps]
    assert a.requests["prefill_ms"].tolist() == [x[0] for x in pre]
    assert a.requests["prefill_hits"].tolist() == [int(x[1].sum()) for x in pre]
    assert a.requests["prefill_misses"].tolist() == [int(x[2].sum()) for x in pre]
    assert sum(x.prefetched for x in steps) == 0 and leftover == 0


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10_000), slots=st.sampled_from([0, 3]), policy=st.sampled_from(["draft", "oracle"]),
       copies=st.sampled_from(["fixed", "gamma"]))
def test_a_selector_that_never_drafts_gets_nothing_from_drafting_prefetch(seed, slots, policy, copies):
    # no step drafts, so the drafting window never opens: the result is the replay without prefetch
    prof = profile(**({"copy_cv": 0.3} if copies == "gamma" else {}))
    trace = random_trace(seed, num_requests=2, L=L, N=N, k=K, pool_nodes=7)
    cfg, p = plan_of(trace, "ar", slots, prof=prof, seed=seed)
    assert not p.cycles["drafted_levels"].any()
    base = replay(trace, cfg, prof)
    res = replay(trace, replace(cfg, prefetch=policy), prof, paired=True)
    assert set(base.cycles) <= set(res.cycles)
    for key in base.cycles:
        assert np.array_equal(base.cycles[key], res.cycles[key]), key
    for key in base.requests:
        assert np.array_equal(base.requests[key], res.requests[key], equal_nan=True), key
    assert res.cycles["prefetched"].sum() == 0
    assert res.baseline_decode_ms == float(np.sum(res.requests["decode_ms"]))
    assert res.summary()["saved_ms_per_token"] == 0.0


# -- the replay against its simpy reference -------------------------------------------
@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), slots=st.sampled_from([0, 1, 2, 4, 8]),
       policy=st.sampled_from(POLICIES), c=st.sampled_from([1, 2, 3]),
       accuracy=st.sampled_from([1.0, 0.6, 0.0]), overlap=st.booleans(),
       selector=st.sampled_from(["eagle3", "specfit", "ar", "oracle"]), staging=st.sampled_from([None, 1, 3]))
def test_model_equals_the_simpy_reference(seed, slots, policy, c, accuracy, overlap, selector, staging):
    # overlap = false: copies share the compute stream, so prefetches run in blocks (the CPU's case)
    prof = profile(copies_in_flight=c, overlap=overlap)
    trace = random_trace(seed, num_requests=2, output_len=(4, 9), L=L, N=N, k=K, pool_nodes=8)
    cfg, p = plan_of(trace, selector, slots, accuracy=accuracy, seed=seed, prof=prof)
    fast, leftover, ref = run_both(trace, cfg, p, prof, policy, staging)
    assert len(fast) == len(ref)
    wasted_fast = leftover
    for a, b in zip(fast, ref, strict=True):
        if isinstance(a, tuple):     # a prefill: exact with binary-fraction times
            assert a[0] == b[0] and np.array_equal(a[1], b[1]) and np.array_equal(a[2], b[2])
            continue
        assert (a.draft_ms, a.forward_ms) == (b.draft_ms, b.forward_ms)
        assert (a.hits, a.misses, a.prefetched, a.useful) == (b.hits, b.misses, b.prefetched, b.useful)
        wasted_fast += a.wasted
    assert wasted_fast == sum(b.wasted for b in ref if not isinstance(b, tuple))


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10_000), policy=st.sampled_from(["draft", "next-layer", "oracle"]),
       cv=st.sampled_from([0.2, 0.6]))
def test_model_equals_the_reference_with_drawn_copy_times(seed, policy, cv):
    prof = profile(copy_cv=cv, copy_ms=0.8, forward_ms=5.3)
    trace = random_trace(seed, num_requests=2, output_len=(4, 8), L=L, N=N, k=K, pool_nodes=8)
    cfg, p = plan_of(trace, "eagle3", 3, accuracy=0.7, seed=seed, prof=prof)
    fast, _, ref = run_both(trace, cfg, p, prof, policy)
    for a, b in zip(fast, ref, strict=True):
        if not isinstance(a, tuple):
            assert a.forward_ms == pytest.approx(b.forward_ms, rel=1e-12)
            assert (a.hits, a.misses, a.prefetched, a.useful) == (b.hits, b.misses, b.prefetched, b.useful)


# -- counting and the cache ------------------------------------------------------------
@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), slots=st.sampled_from([0, 2, 6]),
       policy=st.sampled_from(["draft", "next-layer", "oracle"]), accuracy=st.sampled_from([1.0, 0.5]))
def test_every_prefetch_is_used_or_wasted_and_demand_is_unchanged(seed, slots, policy, accuracy):
    prof = profile()
    trace = random_trace(seed, num_requests=3, L=L, N=N, k=K, pool_nodes=8)
    cfg, p = plan_of(trace, "eagle3", slots, accuracy=accuracy, seed=seed, prof=prof)
    base = simulate(trace, p, cfg, prof)
    res = simulate(trace, p, replace(cfg, prefetch=policy), prof)
    cyc = res.cycles
    assert cyc["prefetched"].sum() == cyc["useful"].sum() + cyc["wasted"].sum()
    # the forwards demand the same experts; prefetch only turns demand copies into hits
    assert np.array_equal(cyc["hits"] + cyc["misses"], base.cycles["hits"] + base.cycles["misses"])
    assert np.array_equal(cyc["committed"], base.cycles["committed"])
    if policy == "oracle":
        assert cyc["wasted"].sum() == 0         # it copies only what the forward will demand
    if policy == "oracle" and slots == 0:
        assert (cyc["useful"] <= cyc["prefetched"]).all()


def _one_pool(root, L_, N_):
    """The pools stage of a one-position trace with an empty pool and the given root routes."""
    empty = np.zeros(0)
    trace = SimpleNamespace(pool_slice=lambda row: slice(0, 0), node_level=empty, node_p=empty,
                            root_routes=np.asarray([root]), node_routes=np.zeros((0, L_, 1), dtype=np.int64))
    return SimpleNamespace(trace=trace, levels=trace.node_level, p=trace.node_p, root_routes=trace.root_routes,
                           node_routes=trace.node_routes,
                           predictions=lambda row: (np.asarray(root), np.zeros((0, L_, 1), dtype=np.int64)))


def _step(levels, demand):
    """Request 0's root alone at row 0, after ``levels`` drafted levels."""
    log = CycleLog()
    for field, value in zip(CYCLE_FIELDS, (0, 0, 0, np.zeros(0, dtype=np.int64), 0, 1, levels, levels, 0),
                            strict=True):
        getattr(log, field).append(value)
    return Step(log, 0, 0, 1, levels, 1, 0, 0.0, 0.0, demand)


def _draft_residency(prof, cfg, root):
    """One layer of four experts, an LRU cache of ``cfg.slots``, ``draft`` prefetch of a root routed to ``root``."""
    policy = Draft()
    policy.reset(CacheShape(1, 4, cfg.slots))
    return OffloadedExperts(_timer(cfg, prof), make_cache("lru", 1, 4, cfg.slots), 1, 4, cfg.slots, policy=policy,
                            pools=_one_pool([[root]], 1, 4))


def test_a_prefetch_lands_in_the_cache_and_saves_the_demand_copy():
    # one layer, one expert, one cycle: the root's expert is prefetched while drafting and found resident
    prof = profile(copies_in_flight=1)
    cfg = ReplayConfig(slots=4, selector_ms=0.5)
    res = _draft_residency(prof, cfg, 1)
    demand = np.array([[False, True, False, False]])
    draft, fwd, _, h, m, counts = res.step(_step(2, demand), 0.5)
    assert (counts["prefetched"], counts["useful"], int(h.sum()), int(m.sum())) == (1, 1, 1, 0)
    # the forward then computes one expert on top of attention: no copy on its path
    nonexpert = prof.forward_ms + prof.cache_overhead_ms
    assert fwd == nonexpert + prof.expert_ms


def test_a_prefetch_still_in_flight_delays_its_expert():
    # the copy starts at the end of the (short) drafting and lands during attention
    prof = profile(copies_in_flight=1, copy_ms=8.0, draft_level_ms=0.5, draft_fixed_ms=0.0,
                   cache_overhead_ms=0.0, forward_ms=4.0)
    cfg = ReplayConfig(slots=4, selector_ms=0.0)
    res = _draft_residency(prof, cfg, 0)
    demand = np.array([[True, False, False, False]])
    _, fwd, _, h, m, _ = res.step(_step(1, demand), 0.0)
    # the copy starts with drafting (t = 0) and lands at 8; the forward starts at 0.5, attention ends at 4.5
    assert int(h.sum()) == 1 and int(m.sum()) == 0
    assert fwd == pytest.approx((8.0 - 0.5) + prof.expert_ms)


# -- settings: refused in one line, or (now) combined ------------------------------------
def test_settings_refused_and_settings_that_now_combine():
    trace = random_trace(1, L=L, N=N, k=K, num_requests=2)
    cfg = ReplayConfig(selector="eagle3", slots=3, selector_ms=0.5)
    with pytest.raises(SimmoeError, match="unknown prefetch policy"):
        replace(cfg, prefetch="later").validate()
    with pytest.raises(SimmoeError, match="resident"):
        check_setting(trace, replace(cfg, prefetch="draft"), load_profile("a100-sxm-resident"))
    with pytest.raises(SimmoeError, match="no draft pools"):
        check_setting(random_trace(2, L=L, N=N, k=K, pool_nodes=0), replace(cfg, prefetch="draft"), profile())
    with pytest.raises(SimmoeError, match="oracle"):
        check_setting(trace, replace(cfg, selector="specfit-prefetch", prefetch="oracle"), profile())
    check_setting(trace, replace(cfg, prefetch="next-layer"), profile())
    # the copy engine composes with any cache policy and with batching: these used to be refused
    for changes in ({"cache": "belady"}, {"cache": "static"}, {"batch": 2}):
        res = replay(trace, replace(cfg, prefetch="draft", **changes), profile())
        assert res.cycles["prefetched"].sum() == res.cycles["useful"].sum() + res.cycles["wasted"].sum()
        assert res.summary()["output_tokens"] == trace.num_positions


def test_replay_prefetch_reports_the_time_saved():
    prof = profile()
    trace = random_trace(3, num_requests=3, L=L, N=N, k=K, pool_nodes=8)
    cfg = ReplayConfig(selector="eagle3", slots=0, selector_ms=0.5)
    res = replay(trace, replace(cfg, prefetch="oracle"), prof, paired=True)
    base = replay(trace, cfg, prof)
    s = res.summary()
    decode_tokens = int(trace.requests.output_len.sum()) - len(trace.requests)
    saved = float(base.requests["decode_ms"].sum() - res.requests["decode_ms"].sum()) / decode_tokens
    assert s["saved_ms_per_token"] == pytest.approx(saved)
    assert s["prefetched_per_token"] == pytest.approx(res.cycles["prefetched"].sum() / trace.num_positions)

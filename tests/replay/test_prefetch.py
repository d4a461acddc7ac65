"""Prefetching (simmoe.replay.prefetch): the model against today's event model and its simpy reference."""

from __future__ import annotations

import numpy as np
import pytest
from factories import random_trace
from hypothesis import given, settings
from hypothesis import strategies as st

from simmoe.errors import SimmoeError
from simmoe.hardware.profile import load_profile
from simmoe.replay.engine import ReplayConfig, plan, simulate
from simmoe.replay.prefetch import (
    PrefetchModel,
    _selector_times,
    _timer,
    check_prefetch_setting,
    replay_items,
    replay_prefetch,
    simulate_prefetch,
)
from simmoe.replay.prefetch_policies import PREFETCH_POLICIES
from simmoe.replay.prefetch_reference import reference_replay

L, N, K = 4, 8, 2  # L a power of two: per-layer times stay binary fractions


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


def run_both(trace, cfg, p, prof, policy, staging=None):
    """The fast model and the simpy reference on the same forwards: (fast results, reference results)."""
    items = list(replay_items(trace, p, cfg, policy, _selector_times(p, cfg)))
    slots = cfg.slots if cfg.cache_active else 0
    model = PrefetchModel(_timer(cfg, prof), L, N, slots, policy, staging=staging)
    fast = [model.prefill(*it) if kind == "prefill" else model.cycle(it) for kind, _, it in items]
    leftover = model.finish()
    ref = reference_replay(_timer(cfg, prof), L, N, slots, policy,
                           [("prefill", *it) if kind == "prefill" else ("cycle", it) for kind, _, it in items],
                           staging=staging)
    return fast, leftover, ref


# -- nothing prefetched: today's event model, exactly ------------------------------
@settings(max_examples=20)
@given(seed=st.integers(0, 10_000), slots=st.sampled_from([0, 2, 5]),
       copies=st.sampled_from(["fixed", "gamma", "samples"]), overlap=st.booleans(),
       selector=st.sampled_from(["ar", "eagle3", "specfit"]))
def test_policy_none_equals_the_event_model_bit_for_bit(seed, slots, copies, overlap, selector):
    extra = {"fixed": {}, "gamma": {"copy_cv": 0.3}, "samples": {"copy_samples_ms": (0.5, 0.75, 1.25)}}[copies]
    prof = profile(overlap=overlap, **extra)
    trace = random_trace(seed, num_requests=2, L=L, N=N, k=K, pool_nodes=7)
    cfg, p = plan_of(trace, selector, slots, prof=prof, seed=seed)
    a = simulate(trace, p, cfg, prof)
    b = simulate_prefetch(trace, p, cfg, prof, "none")
    for key in ("cycle_ms", "forward_ms", "draft_ms", "hits", "misses"):
        assert np.array_equal(a.cycles[key], b.cycles[key]), key
    for key in ("prefill_ms", "prefill_hits", "prefill_misses", "decode_ms"):
        assert np.array_equal(a.requests[key], b.requests[key]), key
    assert b.cycles["prefetched"].sum() == 0


@settings(max_examples=10)
@given(seed=st.integers(0, 10_000), slots=st.sampled_from([0, 3]), policy=st.sampled_from(["draft", "oracle"]),
       copies=st.sampled_from(["fixed", "gamma"]))
def test_a_selector_that_never_drafts_gets_the_model_result_without_running_it(seed, slots, policy, copies):
    # replay_prefetch skips the model when no cycle drafts: its result must be the model's, bit for bit
    prof = profile(**({"copy_cv": 0.3} if copies == "gamma" else {}))
    trace = random_trace(seed, num_requests=2, L=L, N=N, k=K, pool_nodes=7)
    cfg, p = plan_of(trace, "ar", slots, prof=prof, seed=seed)
    assert not p.drafted_levels.any()
    full = simulate_prefetch(trace, p, cfg, prof, policy)
    short = replay_prefetch(trace, cfg, prof, policy)
    assert full.cycles.keys() == short.cycles.keys()
    for key in full.cycles:
        assert np.array_equal(full.cycles[key], short.cycles[key]), key
    for key in full.requests:
        assert np.array_equal(full.requests[key], short.requests[key]), key
    assert short.baseline_decode_ms == float(np.sum(full.requests["decode_ms"]))
    assert short.summary()["saved_ms_per_token"] == 0.0


# -- the fast model against its simpy reference -------------------------------------
@settings(max_examples=30)
@given(seed=st.integers(0, 10_000), slots=st.sampled_from([0, 1, 2, 4, 8]),
       policy=st.sampled_from(PREFETCH_POLICIES), c=st.sampled_from([1, 2, 3]),
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


@settings(max_examples=10)
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
@settings(max_examples=15)
@given(seed=st.integers(0, 10_000), slots=st.sampled_from([0, 2, 6]),
       policy=st.sampled_from(["draft", "next-layer", "oracle"]), accuracy=st.sampled_from([1.0, 0.5]))
def test_every_prefetch_is_used_or_wasted_and_demand_is_unchanged(seed, slots, policy, accuracy):
    prof = profile()
    trace = random_trace(seed, num_requests=3, L=L, N=N, k=K, pool_nodes=8)
    cfg, p = plan_of(trace, "eagle3", slots, accuracy=accuracy, seed=seed, prof=prof)
    base = simulate(trace, p, cfg, prof)
    res = simulate_prefetch(trace, p, cfg, prof, policy)
    cyc = res.cycles
    assert cyc["prefetched"].sum() == cyc["useful"].sum() + cyc["wasted"].sum()
    # the forwards demand the same experts; prefetch only turns demand copies into hits
    assert np.array_equal(cyc["hits"] + cyc["misses"], base.cycles["hits"] + base.cycles["misses"])
    assert np.array_equal(cyc["committed"], base.cycles["committed"])
    if policy == "oracle":
        assert cyc["wasted"].sum() == 0         # it copies only what the forward will demand
    if policy == "oracle" and slots == 0:
        assert (cyc["useful"] <= cyc["prefetched"]).all()


def test_a_prefetch_lands_in_the_cache_and_saves_the_demand_copy():
    # one layer, one expert, one cycle: the root's expert is prefetched while drafting and found resident
    from simmoe.replay.prefetch import CycleInput

    prof = profile(copies_in_flight=1)
    timer = _timer(ReplayConfig(slots=4, selector_ms=0.5), prof)
    model = PrefetchModel(timer, 1, 4, 4, "draft")
    demand = np.array([[False, True, False, False]])
    inp = CycleInput(levels=2, selector_ms=0.5, n_tokens=1, demand=demand, root_pred=np.array([[1]]),
                     node_pred=np.zeros((0, 1, 1), dtype=np.int64), node_level=np.zeros(0), node_p=np.zeros(0),
                     selected=np.zeros(0, dtype=np.int64))
    out = model.cycle(inp)
    assert (out.prefetched, out.useful, out.hits, out.misses) == (1, 1, 1, 0)
    # the forward then computes one expert on top of attention: no copy on its path
    nonexpert = prof.forward_ms + prof.cache_overhead_ms
    assert out.forward_ms == nonexpert + prof.expert_ms


def test_a_prefetch_still_in_flight_delays_its_expert():
    # the copy starts at the end of the (short) drafting and lands during attention
    from simmoe.replay.prefetch import CycleInput

    prof = profile(copies_in_flight=1, copy_ms=8.0, draft_level_ms=0.5, draft_fixed_ms=0.0,
                   cache_overhead_ms=0.0, forward_ms=4.0)
    timer = _timer(ReplayConfig(slots=4, selector_ms=0.0), prof)
    model = PrefetchModel(timer, 1, 4, 4, "draft")
    demand = np.array([[True, False, False, False]])
    inp = CycleInput(levels=1, selector_ms=0.0, n_tokens=1, demand=demand, root_pred=np.array([[0]]),
                     node_pred=np.zeros((0, 1, 1), dtype=np.int64), node_level=np.zeros(0), node_p=np.zeros(0),
                     selected=np.zeros(0, dtype=np.int64))
    out = model.cycle(inp)
    # the copy starts with drafting (t = 0) and lands at 8; the forward starts at 0.5, attention ends at 4.5
    assert out.hits == 1 and out.misses == 0
    assert out.forward_ms == pytest.approx((8.0 - 0.5) + prof.expert_ms)


# -- bad settings: one line -----------------------------------------------------------------
def test_settings_the_model_refuses():
    trace = random_trace(1, L=L, N=N, k=K)
    cfg = ReplayConfig(selector="eagle3", slots=3)
    with pytest.raises(SimmoeError, match="unknown prefetch policy"):
        check_prefetch_setting("later", profile=profile(), config=cfg)
    with pytest.raises(SimmoeError, match="resident"):
        check_prefetch_setting("draft", profile=load_profile("a100-sxm-resident"), config=cfg)
    with pytest.raises(SimmoeError, match="--cache lru or none"):
        check_prefetch_setting("draft", profile=profile(), config=ReplayConfig(cache="belady", slots=3))
    with pytest.raises(SimmoeError, match="--batch"):
        check_prefetch_setting("draft", profile=profile(), config=cfg, batch=2)
    with pytest.raises(SimmoeError, match="no draft pools"):
        check_prefetch_setting("draft", profile=profile(), config=cfg,
                               trace=random_trace(2, L=L, N=N, k=K, pool_nodes=0))
    with pytest.raises(SimmoeError, match="oracle"):
        check_prefetch_setting("oracle", profile=profile(), config=cfg, selectors=("specfit-prefetch",))
    assert check_prefetch_setting("next-layer", profile=profile(), config=cfg, trace=trace) == "next-layer"


def test_replay_prefetch_reports_the_time_saved():
    prof = profile()
    trace = random_trace(3, num_requests=3, L=L, N=N, k=K, pool_nodes=8)
    cfg = ReplayConfig(selector="eagle3", slots=0, selector_ms=0.5)
    res = replay_prefetch(trace, cfg, prof, "oracle")
    base = replay_prefetch(trace, cfg, prof, "none")
    s = res.summary()
    decode_tokens = int(trace.requests.output_len.sum()) - len(trace.requests)
    saved = float(base.requests["decode_ms"].sum() - res.requests["decode_ms"].sum()) / decode_tokens
    assert s["saved_ms_per_token"] == pytest.approx(saved)
    assert s["prefetched_per_token"] == pytest.approx(res.cycles["prefetched"].sum() / trace.num_positions)

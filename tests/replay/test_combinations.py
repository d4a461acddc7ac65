"""Every stage composes: batch x prefetch policy x cache policy x timing model, on small random traces.

The schedule (admission, selection, verification, demand) does not depend on
residency or timing, so every combination must select, verify and commit what
the plan of the same selector and batch does; the residency stage only turns
demand copies into hits, and counts every prefetch as used or wasted.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from factories import random_trace
from hypothesis import given, settings
from hypothesis import strategies as st

from simmoe.hardware.profile import load_profile
from simmoe.replay.engine import ReplayConfig, plan, replay

PROFILE = load_profile("a100-pcie-40gb").replace(num_layers=0)
COMBINATIONS = list(itertools.product((1, 4), ("none", "draft", "next-layer", "oracle"),
                                      ("lru", "lfu", "belady", "static", "none"), ("event", "simpy", "closed")))


@pytest.mark.parametrize("batch, prefetch, cache, timing", COMBINATIONS)
@settings(max_examples=3, deadline=None)
@given(seed=st.integers(0, 10_000), nodes=st.integers(0, 8), slots=st.integers(1, 8),
       selector=st.sampled_from(["ar", "eagle3", "specfit"]))
def test_every_combination_replays_the_plan_and_commits_every_token(batch, prefetch, cache, timing, seed, nodes,
                                                                    slots, selector):
    if prefetch == "draft" and nodes == 0:
        nodes = 1                       # draft prefetch needs pools to predict from (refused otherwise)
    trace = random_trace(seed, num_requests=5, output_len=(1, 8), L=3, N=8, k=2, pool_nodes=nodes)
    cfg = ReplayConfig(selector=selector, cache=cache, slots=0 if cache == "none" else slots, timing=timing,
                       batch=batch, prefetch=prefetch, selector_ms=0.5, seed=seed)
    res = replay(trace, cfg, PROFILE)
    sched = plan(trace, cfg, PROFILE)    # the first five stages alone: no residency, no timing
    c = res.cycles
    assert np.array_equal(np.bincount(c["request"], weights=c["committed"], minlength=5),
                          trace.requests.output_len)
    for key in ("request", "step", "row", "draft_nodes", "accepted", "committed", "drafted_levels"):
        assert np.array_equal(c[key], sched.cycles[key]), key
    # every step is served: hits + misses = the union its forward demands (Eq. 1)
    union = np.array([int(sched.demand_of(s).sum()) for s in range(sched.num_steps)])
    assert np.array_equal(res.steps["hits"] + res.steps["misses"], union)
    if cache == "none" and prefetch == "none":
        assert not res.steps["hits"].any()
    assert np.isfinite(res.steps["step_ms"]).all() and (res.steps["step_ms"] > 0).all()
    s = res.summary()
    assert s["output_tokens"] == trace.num_positions and s["batch"] == batch
    if prefetch == "none":
        assert "prefetched" not in c
    else:
        assert c["prefetched"].sum() == c["useful"].sum() + c["wasted"].sum()
        assert s["prefetched_per_token"] == pytest.approx(s["useful_per_token"] + s["wasted_per_token"])


@pytest.mark.parametrize("batch, prefetch, cache, timing", [
    combo for combo in COMBINATIONS if combo[1] != "oracle" and combo[2] not in ("belady", "static")])
def test_the_residency_reading_selector_runs_with_every_setting_it_accepts(batch, prefetch, cache, timing):
    # specfit-prefetch selects inside the replay (no shared plan); oracle prefetch and offline caches are
    # refused with it (tests/replay/test_prefetch.py), every other setting runs and commits every token
    trace = random_trace(batch + len(prefetch), num_requests=5, output_len=(1, 8), L=3, N=8, k=2, pool_nodes=6)
    cfg = ReplayConfig(selector="specfit-prefetch", cache=cache, slots=0 if cache == "none" else 3, timing=timing,
                       batch=batch, prefetch=prefetch, selector_ms=0.5)
    res = replay(trace, cfg, PROFILE)
    c = res.cycles
    assert np.array_equal(np.bincount(c["request"], weights=c["committed"], minlength=5),
                          trace.requests.output_len)
    assert (res.steps["requests"] <= batch).all() and res.summary()["batch"] == batch
    assert c["prefetched"].sum() == c["useful"].sum() + c["wasted"].sum()


RESIDENT = load_profile("a100-sxm-resident").replace(num_layers=0)


@pytest.mark.parametrize("batch, prefetch, cache", list(itertools.product((1, 3), ("none", "draft", "next-layer"),
                                                                          ("lru", "belady", "none"))))
@settings(max_examples=3, deadline=None)
@given(seed=st.integers(0, 10_000), selector=st.sampled_from(["eagle3", "specfit", "oracle"]))
def test_sampled_verification_composes_with_batch_prefetch_and_cache(batch, prefetch, cache, seed, selector):
    from sampling_factories import sampled_trace

    trace = sampled_trace(seed, num_requests=4, output_len=(2, 8), pool_nodes=6)
    cfg = ReplayConfig(selector=selector, cache=cache, slots=0 if cache == "none" else 3, batch=batch,
                       prefetch=prefetch, selector_ms=0.5, seed=seed, temperature=1.0)
    res = replay(trace, cfg, PROFILE)
    sched = plan(trace, cfg, PROFILE)
    assert np.array_equal(np.bincount(res.cycles["request"], weights=res.cycles["committed"], minlength=4),
                          trace.requests.output_len)
    assert np.array_equal(res.cycles["accepted"], sched.cycles["accepted"])   # the draws do not see the cache
    if prefetch != "none":
        assert res.cycles["prefetched"].sum() == res.cycles["useful"].sum() + res.cycles["wasted"].sum()


@pytest.mark.parametrize("batch, temperature", [(1, 0.0), (3, 0.0), (1, 1.0), (3, 1.0)])
@pytest.mark.parametrize("timing", ["event", "simpy", "closed"])
def test_the_resident_regime_composes_with_batch_temperature_and_timing(batch, temperature, timing):
    from sampling_factories import sampled_trace

    trace = sampled_trace(7 + batch, num_requests=4, output_len=(2, 8), pool_nodes=6)
    for selector in ("ar", "eagle3", "evict"):      # the fitted resident profile prices with EVICT's C(k) only
        cfg = ReplayConfig(selector=selector, batch=batch, temperature=temperature, timing=timing, selector_ms=0.5)
        res = replay(trace, cfg, RESIDENT)
        s = res.summary()
        assert res.regime == "resident" and "h2d_per_token" not in s and "hit_rate" not in s
        # every expert a forward demands is read from HBM: the reads are the forwards' unions, prefill included
        sched = plan(trace, cfg, RESIDENT)
        union = sum(int(sched.demand_of(t).sum()) for t in range(sched.num_steps))
        prefill = sum(int(np.asarray(trace.requests.prefill_union[r]).sum()) for r in range(4))
        assert s["expert_reads_per_token"] == pytest.approx((union + prefill) / trace.num_positions)
        assert np.array_equal(np.bincount(res.cycles["request"], weights=res.cycles["committed"], minlength=4),
                              trace.requests.output_len)

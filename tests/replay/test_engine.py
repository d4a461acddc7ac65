"""The replay engine: lossless commits, cycle accounting, a brute-force replay, determinism."""

from __future__ import annotations

import numpy as np
import pytest
from factories import random_trace
from hypothesis import given, settings
from hypothesis import strategies as st

from simmoe.errors import SimmoeError
from simmoe.replay.engine import ReplayConfig, plan, replay, simulate
from simmoe.replay.metrics import summarize
from simmoe.replay.selectors import SELECTORS

FAST = tuple(n for n in SELECTORS if n != "optimal")  # optimal has its own, smaller test


def make_profile(**changes):
    """Timing with exact binary fractions, so sums are exact and results bit-reproducible."""
    from simmoe.hardware.profile import HardwareProfile

    base = dict(name="test", description="engine tests", source="hand-written for tests",
                copy_ms=0.5, copies_in_flight=2, forward_ms=64.0, expert_ms=0.125,
                draft_level_ms=4.0, commit_ms=1.0, prefill_token_ms=0.25,
                cost_b_cache=tuple(128.0 + 2.0 * j for j in range(33)), cost_beta_cache=0.25,
                cost_b_no_cache=tuple(112.0 + 1.0 * j for j in range(33)), cost_beta_no_cache=0.5,
                evict_cost=tuple(128.0 + 4.0 * k for k in range(1, 33)))
    base.update(changes)
    return HardwareProfile(**base)


PROFILE = make_profile()


def run(trace, **kw):
    kw.setdefault("selector_ms", 0.5)
    return replay(trace, ReplayConfig(**kw), PROFILE)


def longest_agreeing(trace, row) -> int:
    s = trace.pool_slice(row)
    par, agree = trace.node_parent[s], trace.node_agree[s]
    best = 0
    for v in range(len(par)):
        u, n, ok = v, 0, True
        while u >= 0:
            ok &= bool(agree[u])
            u, n = int(par[u]), n + 1
        if ok:
            best = max(best, n)
    return best


# -- losslessness and per-selector guarantees -------------------------------------
@settings(max_examples=12)
@given(seed=st.integers(0, 10_000), nodes=st.integers(0, 12), slots=st.sampled_from([0, 3, 8]))
def test_every_selector_commits_exactly_every_output_position(seed, nodes, slots):
    trace = random_trace(seed, num_requests=3, output_len=(1, 12), pool_nodes=nodes)
    for name in FAST:
        res = run(trace, selector=name, slots=slots)
        c = res.cycles
        per_request = np.bincount(c["request"], weights=c["committed"], minlength=3)
        assert np.array_equal(per_request, trace.requests.output_len), name
        # cycles tile the positions: each starts where the previous one ended
        for r in range(3):
            pos = c["position"][c["request"] == r]
            com = c["committed"][c["request"] == r]
            assert np.array_equal(pos, np.concatenate([[0], np.cumsum(com)[:-1]])), name
        assert (c["committed"] >= 1).all()
        assert (c["committed"] <= 1 + c["draft_nodes"]).all()
        s = res.summary()
        assert s["cycles"] * s["committed"] == pytest.approx(trace.num_positions)
        assert s["output_tokens"] == trace.num_positions


@settings(max_examples=12)
@given(seed=st.integers(0, 10_000), nodes=st.integers(0, 18))
def test_ar_eagle3_and_oracle_cycle_counters(seed, nodes):
    trace = random_trace(seed, num_requests=2, output_len=(3, 15), pool_nodes=nodes, agree_rate=0.7)
    ar = run(trace, selector="ar").cycles
    assert len(ar["committed"]) == trace.num_positions and (ar["committed"] == 1).all()
    assert (ar["draft_nodes"] == 0).all() and (ar["drafted_levels"] == 0).all()
    eagle = run(trace, selector="eagle3").cycles
    sizes = np.diff(trace.node_ptr)[eagle["row"]]
    assert np.array_equal(eagle["draft_nodes"], np.minimum(7, sizes))
    oracle = run(trace, selector="oracle").cycles
    starts = [trace.request_positions(r)[0] for r in range(len(trace.requests))]
    for row, com, r, t in zip(oracle["row"], oracle["committed"], oracle["request"], oracle["position"]):
        remaining = int(trace.requests.output_len[r]) - int(t)
        assert com == min(1 + longest_agreeing(trace, row), remaining)
        assert row == starts[r] + t
    # with full-depth pools, no selector commits more than the oracle in the same state
    for name in FAST:
        c = run(trace, selector=name).cycles
        for row, com, r, t in zip(c["row"], c["committed"], c["request"], c["position"]):
            remaining = int(trace.requests.output_len[r]) - int(t)
            assert com <= min(1 + longest_agreeing(trace, row), remaining), name


def test_optimal_is_lossless_and_reports_lambda_star():
    trace = random_trace(4, num_requests=2, output_len=(4, 8), pool_nodes=8)
    res = run(trace, selector="optimal", slots=4)
    assert res.cycles["committed"].sum() == trace.num_positions
    assert res.lambda_star is not None and res.lambda_star > 0


def test_optimal_uses_the_lambda_star_of_simmoe_bound():
    # The same λ* as Table 5 (simmoe bound) on SpecFit's drafted pools, for every prefix of requests.
    from simmoe.theory.cycles import specfit_cycles
    from simmoe.theory.table5 import compute_table5

    trace = random_trace(9, num_requests=3, output_len=(5, 9), pool_nodes=9)
    cost = PROFILE.cost_model(True)
    for requests in (1, 3):
        res = run(trace, selector="optimal", slots=4, requests=requests)
        cycles = [c for c in specfit_cycles(trace, cost) if c.request < requests]
        table = compute_table5(cycles, trace.pool_shape.K, cost, synthetic=True)
        assert res.lambda_star == pytest.approx(table.lambda_star, rel=1e-9)


# -- an independent brute-force replay ----------------------------------------------
def brute_force_replay(trace, slots: int, policy: str, K: int = 7):
    """eagle3 under LRU or no cache, in plain Python: (copies, hits, cycles, committed list)."""
    L = trace.geometry.num_layers
    cache = [[] for _ in range(L)]  # least recently used first

    def serve(demand):  # demand: list of L sets
        copies = hits = 0
        for layer in range(L):
            if policy == "none" or slots == 0:
                copies += len(demand[layer])
                continue
            hit = sorted(e for e in demand[layer] if e in cache[layer])
            miss = sorted(e for e in demand[layer] if e not in cache[layer])
            for e in hit:  # hits are used first, then misses as their copies land
                cache[layer].remove(e)
                cache[layer].append(e)
            cache[layer].extend(miss)
            del cache[layer][:max(0, len(cache[layer]) - slots)]
            copies, hits = copies + len(miss), hits + len(hit)
        return copies, hits

    copies = hits = 0
    committed = []
    row = 0
    for r in range(len(trace.requests)):
        pre = trace.requests.prefill_union[r]
        c, h = serve([set(int(e) for e in np.flatnonzero(pre[layer])) for layer in range(L)])
        copies, hits = copies + c, hits + h
        n_out, t = int(trace.requests.output_len[r]), 0
        while t < n_out:
            i = row + t
            lo, hi = int(trace.node_ptr[i]), int(trace.node_ptr[i + 1])
            nodes = list(range(hi - lo))
            ranked = sorted(nodes, key=lambda v: (-float(trace.node_p[lo + v]), int(trace.node_level[lo + v]), v))
            chosen = set(ranked[:K])
            best = 0
            for v in chosen:
                u, n, ok = v, 0, True
                while u >= 0:
                    ok = ok and u in chosen and bool(trace.node_agree[lo + u])
                    u, n = int(trace.node_parent[lo + u]), n + 1
                if ok:
                    best = max(best, n)
            com = min(1 + best, n_out - t)
            demand = [set(int(e) for e in trace.root_routes[i][layer]) for layer in range(L)]
            for v in chosen:
                for layer in range(L):
                    demand[layer] |= set(int(e) for e in trace.node_routes[lo + v][layer])
            c, h = serve(demand)
            copies, hits = copies + c, hits + h
            committed.append(com)
            t += com
        row += n_out
    return copies, hits, committed


@settings(max_examples=15)
@given(seed=st.integers(0, 10_000), slots=st.integers(0, 8), policy=st.sampled_from(["lru", "none"]))
def test_engine_counters_equal_a_brute_force_replay(seed, slots, policy):
    trace = random_trace(seed, num_requests=3, output_len=(2, 14), pool_nodes=9, L=3, N=10, k=2)
    copies, hits, committed = brute_force_replay(trace, slots, policy)
    res = run(trace, selector="eagle3", slots=slots, cache=policy)
    s = res.summary()
    assert s["cycles"] == len(committed)
    assert list(res.cycles["committed"]) == committed
    assert s["h2d_per_token"] == pytest.approx(copies / trace.num_positions, rel=1e-12)
    total = copies + hits
    assert s["hit_rate"] == pytest.approx(hits / total if total else float("nan"), nan_ok=True)


# -- timing accounting and metrics (Eq. 10) -----------------------------------------
def test_cycle_time_is_the_sum_of_its_parts_and_eq10_holds():
    trace = random_trace(7, num_requests=3, output_len=(5, 12), pool_nodes=10)
    res = run(trace, selector="eagle3", slots=4, selector_ms=0.75)
    c, r = res.cycles, res.requests
    parts = c["draft_ms"] + c["selector_ms"] + c["forward_ms"] + c["commit_ms"]
    assert np.array_equal(c["cycle_ms"], parts)
    assert (c["selector_ms"] == 0.75).all()
    assert np.array_equal(c["draft_ms"], 4.0 * c["drafted_levels"])
    assert np.allclose(r["request_ms"] - r["prefill_ms"], np.bincount(c["request"], weights=c["cycle_ms"]))
    s = res.summary()
    N = trace.requests.output_len.astype(float)
    assert s["decode_tps"] == pytest.approx(1e3 * (N - 1).sum() / (r["request_ms"] - r["prefill_ms"]).sum())
    assert s["request_tps"] == pytest.approx(1e3 * N.sum() / r["request_ms"].sum())
    misses = c["misses"].sum() + r["prefill_misses"].sum()
    assert s["h2d_per_token"] == pytest.approx(misses / N.sum())
    assert s["ms_per_cycle"] == pytest.approx(c["cycle_ms"].mean())


def test_ar_has_no_selector_or_drafting_time():
    trace = random_trace(8, num_requests=2, output_len=(4, 9), pool_nodes=6)
    c = run(trace, selector="ar", slots=0, selector_ms=3.0).cycles
    assert (c["selector_ms"] == 0).all() and (c["draft_ms"] == 0).all()


def test_cache_state_carries_over_between_requests_and_starts_empty():
    trace = random_trace(9, num_requests=4, output_len=(3, 6), pool_nodes=5, L=2, N=6, k=2)
    r = run(trace, selector="ar", slots=6).requests  # every expert fits: only first uses miss
    assert r["prefill_hits"][0] == 0
    total_misses = r["prefill_misses"].sum() + run(trace, selector="ar", slots=6).cycles["misses"].sum()
    assert total_misses <= 2 * 6  # each (layer, expert) is copied at most once overall


def test_stopped_early_and_drafted_levels():
    trace = random_trace(10, num_requests=2, output_len=(8, 12), pool_nodes=14, agree_rate=0.5)
    res = run(trace, selector="ddd", options=(("ddd_threshold", 0.9),))
    c, s = res.cycles, res.summary()
    assert s["stopped_early_pct"] == pytest.approx(100 * np.mean(c["drafted_levels"] < c["pool_levels"]))
    assert s["stopped_early_pct"] > 0
    assert s["drafted_levels"] == pytest.approx(c["drafted_levels"].mean())
    full = run(trace, selector="eagle3").summary()
    assert full["stopped_early_pct"] == 0


# -- route information, plans, determinism -----------------------------------------
def true_demand(trace, row, nodes):
    L, N = trace.geometry.num_layers, trace.geometry.num_experts
    d = np.zeros((L, N), bool)
    lo = int(trace.node_ptr[row])
    for layer in range(L):
        d[layer, trace.root_routes[row, layer]] = True
        for v in nodes:
            d[layer, trace.node_routes[lo + v, layer]] = True
    return d


def test_predicted_routes_change_selection_but_never_verification():
    trace = random_trace(11, num_requests=2, output_len=(10, 14), pool_nodes=12, L=3, N=16, k=3)
    exact = plan(trace, ReplayConfig(selector="specfit-full", slots=4), PROFILE)
    same = plan(trace, ReplayConfig(selector="specfit-full", slots=4, route_accuracy=1.0, seed=5), PROFILE)
    assert np.array_equal(exact.demand, same.demand)  # a = 1 is exact, whatever the seed
    noisy = plan(trace, ReplayConfig(selector="specfit-full", slots=4, route_accuracy=0.0, seed=5), PROFILE)
    assert not np.array_equal(exact.cycles["draft_nodes"], noisy.cycles["draft_nodes"]) or \
        not np.array_equal(exact.demand, noisy.demand)
    # verification executes the true routes of whatever was selected (batch 1: step c is cycle c)
    for p in (exact, noisy):
        assert np.array_equal(p.cycles["step"], np.arange(p.num_steps))
        for c in range(p.num_cycles):
            chosen = p.selected_of(c).tolist()
            assert len(chosen) == p.cycles["draft_nodes"][c]
            assert np.array_equal(p.demand_of(c), true_demand(trace, int(p.cycles["row"][c]), chosen))


def test_replays_are_deterministic_by_seed_and_plans_are_shared():
    trace = random_trace(12, num_requests=3, output_len=(6, 12), pool_nodes=12)
    cfg = ReplayConfig(selector="specfit", slots=3, route_accuracy=0.6, seed=3, selector_ms=0.5)
    a, b = replay(trace, cfg, PROFILE), replay(trace, cfg, PROFILE)
    for key in a.cycles:
        assert np.array_equal(a.cycles[key], b.cycles[key]), key
    plans: dict = {}
    one = replay(trace, cfg, PROFILE, plans=plans)
    two = replay(trace, ReplayConfig(**{**cfg.__dict__, "cache": "lfu"}), PROFILE, plans=plans)
    assert len(plans) == 1 and np.array_equal(one.cycles["committed"], two.cycles["committed"])


def test_measured_selector_time_comes_from_the_chosen_clock():
    trace = random_trace(17, num_requests=2, output_len=(6, 10), pool_nodes=10)
    p = plan(trace, ReplayConfig(selector="specfit"), PROFILE)
    assert (p.steps["selector_ms"] > 0).all() and (p.steps["selector_cpu_ms"] >= 0).all()
    for clock, column in (("wall", p.steps["selector_ms"]), ("cpu", p.steps["selector_cpu_ms"])):
        res = simulate(trace, p, ReplayConfig(selector="specfit", selector_clock=clock), PROFILE)
        assert np.array_equal(res.cycles["selector_ms"], column)
        assert np.array_equal(res.cycles["cycle_ms"], res.cycles["draft_ms"] + column
                              + res.cycles["forward_ms"] + res.cycles["commit_ms"])


def test_belady_and_static_never_copy_more_than_no_cache():
    trace = random_trace(13, num_requests=3, output_len=(6, 12), pool_nodes=8, L=3, N=12, k=2)
    none = run(trace, selector="eagle3", slots=0).summary()["h2d_per_token"]
    lru = run(trace, selector="eagle3", slots=4, cache="lru").summary()["h2d_per_token"]
    belady = run(trace, selector="eagle3", slots=4, cache="belady").summary()["h2d_per_token"]
    static = run(trace, selector="eagle3", slots=4, cache="static").summary()["h2d_per_token"]
    assert belady <= lru <= none and static <= none


def test_requests_limit_replays_a_prefix():
    trace = random_trace(14, num_requests=4, output_len=(3, 7), pool_nodes=6)
    res = run(trace, selector="eagle3", requests=2)
    assert res.summary()["output_tokens"] == int(trace.requests.output_len[:2].sum())


@pytest.mark.parametrize("bad, match", [
    (dict(slots=-1), "slots"), (dict(selector="nope"), "unknown selector"),
    (dict(cache="fifo"), "cache policy"), (dict(route_accuracy=2.0), "route accuracy"),
    (dict(selector_ms=-1.0), "selector time"), (dict(timing="exact"), "timing model"),
    (dict(requests=0), "requests"), (dict(selector_clock="sundial"), "selector clock"),
])
def test_bad_configurations_raise_one_clear_error(bad, match):
    trace = random_trace(15, num_requests=1, output_len=(3, 3), pool_nodes=3)
    with pytest.raises(SimmoeError, match=match):
        replay(trace, ReplayConfig(**bad), PROFILE)


def test_timing_models_agree_when_copies_are_fixed_and_do_not_overlap():
    profile = make_profile(overlap=False)
    trace = random_trace(16, num_requests=2, output_len=(4, 8), pool_nodes=8)
    out = {m: replay(trace, ReplayConfig(selector="eagle3", slots=3, timing=m, selector_ms=0.5), profile)
           for m in ("event", "closed")}
    assert out["event"].cycles["cycle_ms"] == pytest.approx(out["closed"].cycles["cycle_ms"])
    assert summarize(out["event"].cycles, out["event"].requests)["cycles"] == len(out["closed"].cycles["cycle_ms"])


# -- the resident regime: no cache, experts read from HBM --------------------------------
@pytest.mark.parametrize("batch", [1, 3])
def test_resident_counters_are_the_experts_each_token_reads(batch):
    # every expert lives in HBM: no copies and no hit rate; each forward reads its union (Eq. 1) once
    from simmoe.hardware.profile import load_profile

    prof = load_profile("a100-sxm-resident").replace(num_layers=0)
    trace = random_trace(18, num_requests=3, output_len=(4, 9), pool_nodes=7)
    cfg = ReplayConfig(selector="eagle3", slots=0, cache="none", selector_ms=0.5, hardware=prof.name, batch=batch)
    res = replay(trace, cfg, prof)
    sched = plan(trace, cfg, prof)
    assert res.regime == "resident"
    s = res.summary()
    assert "h2d_per_token" not in s and "hit_rate" not in s
    reads = sum(int(sched.demand_of(i).sum()) for i in range(sched.num_steps)) \
        + int(np.asarray(trace.requests.prefill_union[:3], dtype=bool).sum())
    tokens = trace.num_positions
    assert s["expert_reads_per_token"] == pytest.approx(reads / tokens)
    assert s["expert_mb_per_token"] == pytest.approx(reads * trace.geometry.expert_bytes / 1e6 / tokens)
    assert not res.steps["misses"].any() and not res.requests["prefill_misses"].any()
    # a cache setting changes nothing there (nothing is copied, so nothing is kept)
    cached = replay(trace, ReplayConfig(**{**cfg.__dict__, "cache": "lru", "slots": 4}), prof)
    assert np.array_equal(cached.steps["step_ms"], res.steps["step_ms"])

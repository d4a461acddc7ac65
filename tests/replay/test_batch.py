"""Batched decoding (the admission stage of simmoe.replay.engine): batch 1, the batch's union, continuous batching."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from factories import random_trace
from hypothesis import given, settings
from hypothesis import strategies as st

from simmoe.errors import SimmoeError
from simmoe.replay.config import check_batch
from simmoe.replay.engine import ReplayConfig, plan, replay
from simmoe.replay.selectors import SELECTORS, PoolView

BATCH_SELECTORS = tuple(n for n, c in SELECTORS.items()
                        if n != "optimal" and not getattr(c, "uses_residency", False))


def batch_profile(**changes):
    """Binary-fraction times (sums exact), cost models long enough for any random pool."""
    from simmoe.hardware.profile import HardwareProfile

    base = dict(name="batch-test", description="batch tests", source="hand-written for tests",
                copy_ms=0.5, copies_in_flight=2, forward_ms=64.0, expert_ms=0.125, token_ms=0.25,
                draft_level_ms=4.0, commit_ms=1.0, prefill_token_ms=0.25,
                cost_b_cache=tuple(128.0 + 2.0 * j for j in range(33)), cost_beta_cache=0.25,
                cost_b_no_cache=tuple(112.0 + 1.0 * j for j in range(33)), cost_beta_no_cache=0.5,
                evict_cost=tuple(128.0 + 4.0 * k for k in range(1, 33)))
    base.update(changes)
    return HardwareProfile(**base)


PROFILE = batch_profile()


def plan_batched(trace, cfg, prof, batch):
    return plan(trace, replace(cfg, batch=batch), prof)


def replay_batched(trace, cfg, prof, batch):
    return replay(trace, replace(cfg, batch=batch), prof)


# -- batch 1: one request at a time -----------------------------------------------------
@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10_000), nodes=st.integers(0, 10),
       cache=st.sampled_from([("lru", 3), ("lfu", 4), ("belady", 3), ("static", 5), ("none", 0)]))
def test_batch_one_is_one_request_at_a_time_and_its_summary_is_eq10(seed, nodes, cache):
    trace = random_trace(seed, num_requests=3, output_len=(1, 10), pool_nodes=nodes)
    R = 3
    for name in BATCH_SELECTORS:
        cfg = ReplayConfig(selector=name, cache=cache[0], slots=cache[1], selector_ms=0.5)
        res = replay_batched(trace, cfg, PROFILE, 1)
        c, st_, rq = res.cycles, res.steps, res.requests
        # every step serves one request; requests run one after another, in order
        assert (st_["requests"] == 1).all(), name
        assert np.array_equal(c["step"], np.arange(len(st_["step_ms"]))), name
        assert (np.diff(c["request"]) >= 0).all(), name
        # the request-cycle records are the step records
        for key in ("hits", "misses", "draft_ms", "selector_ms", "forward_ms", "commit_ms"):
            assert np.array_equal(c[key], st_[key]), (name, key)
        assert np.array_equal(c["cycle_ms"], st_["step_ms"]), name
        assert np.array_equal(c["draft_nodes"] + 1, st_["tokens"]), name
        decode = np.bincount(c["request"], weights=c["cycle_ms"], minlength=R)
        assert np.array_equal(rq["decode_ms"], decode), name
        assert np.array_equal(rq["request_ms"], rq["prefill_ms"] + decode), name
        # a request is admitted when the previous one has finished
        assert np.allclose(rq["admit_ms"][1:], rq["finish_ms"][:-1]), name
        # SpecFit Eq. 10 from the per-request sums equals the batch formulas (makespan) at batch 1
        s = res.summary()
        n_out = trace.requests.output_len.astype(float)
        makespan = float(st_["step_ms"].sum() + rq["prefill_ms"].sum())
        assert s["decode_tps"] == pytest.approx(1e3 * (n_out - 1).sum() / float(st_["step_ms"].sum())), name
        assert s["request_tps"] == pytest.approx(1e3 * n_out.sum() / makespan), name
        assert s["batch"] == 1 and s["mean_batch"] == 1.0 and s["full_steps"] == s["steps"], name


def test_batch_one_requests_without_a_cache_do_not_interact_on_a_physical_profile():
    # no cache, nothing carried between requests: each request's steps are those of its replay alone
    from simmoe.hardware.profile import load_profile
    from simmoe.trace.subset import select_requests

    prof = load_profile("olmoe-1b-7b@h100-sxm")
    trace = random_trace(3, num_requests=2, output_len=(4, 8), pool_nodes=6, L=16, N=64, k=8)
    for name in ("ar", "eagle3", "specfit"):
        cfg = ReplayConfig(selector=name, cache="none", slots=0, hardware=prof.name, selector_ms=0.0)
        both = replay_batched(trace, cfg, prof, 1)
        for r in range(2):
            alone = replay_batched(select_requests(trace, [r]), cfg, prof, 1)
            mine = both.cycles["request"] == r
            for key in ("draft_nodes", "committed", "cycle_ms", "forward_ms"):
                assert np.array_equal(both.cycles[key][mine], alone.cycles[key]), (name, r, key)
            assert both.requests["prefill_ms"][r] == alone.requests["prefill_ms"][0]


# -- the batch's union and the schedule ----------------------------------------------------
@settings(max_examples=10)
@given(seed=st.integers(0, 10_000), nodes=st.integers(0, 8), batch=st.integers(1, 5),
       selector=st.sampled_from(["ar", "eagle3", "evict", "specfit", "ddd", "oracle"]))
def test_step_demand_is_the_union_of_its_requests_true_routes(seed, nodes, batch, selector):
    trace = random_trace(seed, num_requests=5, output_len=(1, 9), pool_nodes=nodes)
    p = plan_batched(trace, ReplayConfig(selector=selector, selector_ms=0.5), PROFILE, batch)
    g = trace.geometry
    for s in range(p.num_steps):  # recomputed step by step, one request at a time, with sets
        want = [set() for _ in range(g.num_layers)]
        for c in np.flatnonzero(p.cycles["step"] == s):
            row = int(p.cycles["row"][c])
            lo = int(trace.node_ptr[row])
            for layer in range(g.num_layers):
                want[layer] |= set(trace.root_routes[row][layer].tolist())
                for v in p.selected_of(c):
                    want[layer] |= set(trace.node_routes[lo + int(v)][layer].tolist())
        got = p.demand_of(s)
        for layer in range(g.num_layers):
            assert set(np.flatnonzero(got[layer]).tolist()) == want[layer]


@settings(max_examples=10)
@given(seed=st.integers(0, 10_000), batch=st.integers(1, 4), requests=st.integers(1, 7))
def test_continuous_batching_keeps_slots_full_and_requests_in_order(seed, batch, requests):
    batch = min(batch, requests)
    trace = random_trace(seed, num_requests=requests, output_len=(1, 9), pool_nodes=5)
    p = plan_batched(trace, ReplayConfig(selector="eagle3"), PROFILE, batch)
    assert np.bincount(p.cycles["request"], weights=p.cycles["committed"], minlength=requests).astype(int).tolist() \
        == trace.requests.output_len.tolist()
    admitted = [-1 - e for e in p.events if e < 0]
    assert admitted == list(range(requests))
    for r in range(requests):  # once admitted, a request decodes in every step until it finishes
        steps = p.cycles["step"][p.cycles["request"] == r]
        assert np.array_equal(steps, np.arange(steps[0], steps[0] + len(steps)))
    for s in range(p.num_steps):  # the batch is full while requests wait
        active = int(p.steps["requests"][s])
        assert active <= batch
        started = sum(1 for e in p.events[:p.events.index(s)] if e < 0)
        if started < requests:
            assert active == batch


def test_batch_counts_and_latencies():
    trace = random_trace(5, num_requests=6, output_len=(3, 9), pool_nodes=6)
    cfg = ReplayConfig(selector="eagle3", selector_ms=0.5, slots=4)
    res = replay_batched(trace, cfg, PROFILE, 3)
    s = res.summary()
    makespan = res.steps["step_ms"].sum() + res.requests["prefill_ms"].sum()
    tokens = int(trace.requests.output_len.sum())
    assert s["request_tps"] == pytest.approx(1e3 * tokens / makespan)
    assert s["steps"] == len(res.steps["step_ms"]) and s["batch"] == 3
    assert s["latency_p50_ms"] <= s["latency_p90_ms"] <= s["latency_p99_ms"] <= makespan
    # a step's copies are charged once, however many requests it serves
    assert res.cycles["misses"].sum() == res.steps["misses"].sum()


def test_larger_batches_raise_aggregate_throughput_of_ar_without_cache():
    trace = random_trace(8, num_requests=8, output_len=(6, 12), pool_nodes=0, L=4, N=16, k=2)
    cfg = ReplayConfig(selector="ar", slots=0, cache="none")
    tps = [replay_batched(trace, cfg, PROFILE, b).summary()["decode_tps"] for b in (1, 2, 4, 8)]
    assert tps == sorted(tps) and tps[-1] > 2 * tps[0]


# -- batch-aware cost ----------------------------------------------------------------------
@settings(max_examples=30)
@given(seed=st.integers(0, 10_000), nodes=st.integers(0, 9), cover=st.floats(0.0, 0.9))
def test_the_marginal_pool_counts_only_uncovered_experts(seed, nodes, cover):
    from factories import random_routes, random_tree

    rng = np.random.default_rng(seed)
    L, N, k = 3, 10, 2
    par, lev = random_tree(rng, nodes)
    n = len(par)
    p = np.sort(rng.random(n))[::-1].astype(np.float32) if n else np.zeros(0, np.float32)
    view = PoolView(row=0, parents=par, levels=lev, p=p, q=p, agree=np.zeros(n, bool),
                    root_routes=random_routes(rng, 1, L, N, k)[0], node_routes=random_routes(rng, n, L, N, k),
                    num_experts=N)
    covered = rng.random(L * N) < cover
    pool = view.pool().with_free(covered.reshape(L, N))   # what the batched plan hands the exact searches
    for _ in range(5):  # brute force over random ancestor-closed subsets
        chosen = [v for v in range(n) if rng.random() < 0.5]
        closed = sorted({a for v in chosen for a in _ancestors(par, v)})
        pairs = {layer * N + int(e) for layer in range(L) for e in view.root_routes[layer]}
        for v in closed:
            pairs |= {layer * N + int(e) for layer in range(L) for e in view.node_routes[v][layer]}
        want = len([x for x in pairs if not covered[x]])
        mask = 0
        for v in closed:
            mask |= pool.masks[v]
        assert pool.root_count + mask.bit_count() == want


def _ancestors(par, v):
    out = []
    while v >= 0:
        out.append(int(v))
        v = int(par[v])
    return out


def test_specfit_sees_a_cheaper_subtree_when_the_batch_covers_its_experts():
    """With every expert already read by the step, the marginal F is 0: SpecFit verifies at least as many."""
    trace = random_trace(11, num_requests=4, output_len=(8, 12), pool_nodes=8, L=2, N=4, k=2)
    cfg = ReplayConfig(selector="specfit", selector_ms=0.5, slots=0, cache="none")
    one = plan_batched(trace, cfg, PROFILE, 1)
    four = plan_batched(trace, cfg, PROFILE, 4)
    assert four.cycles["draft_nodes"].mean() >= one.cycles["draft_nodes"].mean()


def test_offload_marginal_cost_adds_the_others_tokens_and_experts_to_the_intercepts():
    from simmoe.replay.selection import BatchCost
    from solvers.cost import CostModel

    base = PROFILE.cost_model(False)
    bc = BatchCost(PROFILE, base, 8, 3)
    assert bc.cost(0, np.zeros(3), 0.0, 1) is base   # nobody else in the step: the batch-1 model
    got = bc.cost(5, np.array([3.0, 4.0, 0.0]), 100.0, 3)
    shift = PROFILE.token_ms * 5 + base.beta * 7
    assert got == CostModel([x + shift for x in base.b], base.beta)


def _subtrees(par, K):
    """Every ancestor-closed subset of at most K nodes (ascending ids), the empty one included."""
    n = len(par)
    for bits in range(1 << n):
        nodes = [v for v in range(n) if bits >> v & 1]
        if len(nodes) <= K and all(par[v] < 0 or bits >> int(par[v]) & 1 for v in nodes):
            yield nodes


@settings(max_examples=8)
@given(seed=st.integers(0, 10_000), batch=st.integers(2, 3))
def test_offload_batched_specfit_maximises_its_tokens_per_predicted_step_time(seed, batch):
    """Brute force: each request's subtree maximises R̂(S) / (b_|S| + token_ms·n_others + β(F_others + F_new(S)))."""
    trace = random_trace(seed, num_requests=4, output_len=(2, 5), pool_nodes=5, L=2, N=6, k=2)
    cfg = ReplayConfig(selector="specfit-full", selector_ms=0.5, slots=0, cache="none")
    p = plan_batched(trace, cfg, PROFILE, batch)
    base = PROFILE.cost_model(False)
    L, N, K = 2, 6, trace.pool_shape.K

    def pairs(row, nodes):
        lo = int(trace.node_ptr[row])
        out = set()
        for v in nodes:
            out |= {layer * N + int(e) for layer in range(L) for e in trace.node_routes[lo + v][layer]}
        return out

    def root(row):
        return {layer * N + int(e) for layer in range(L) for e in trace.root_routes[row][layer]}

    checked = 0
    for s in range(p.num_steps):
        cyc = np.flatnonzero(p.cycles["step"] == s)
        if len(cyc) < 2:
            continue
        for i, c in enumerate(cyc):
            row = int(p.cycles["row"][c])
            others = set()
            for c2 in cyc:
                if c2 != c:
                    others |= root(int(p.cycles["row"][c2]))
            for c2 in cyc[:i]:
                others |= pairs(int(p.cycles["row"][c2]), p.selected_of(c2).tolist())
            n_others = len(cyc) - 1 + int(sum(p.cycles["draft_nodes"][c2] for c2 in cyc[:i]))
            lo, hi = int(trace.node_ptr[row]), int(trace.node_ptr[row + 1])
            par, prob = trace.node_parent[lo:hi], trace.node_p[lo:hi].astype(np.float64)

            def ratio(nodes, row=row, others=others, prob=prob, n_others=n_others):
                new = len((root(row) | pairs(row, nodes)) - others)
                reward = 1.0 + sum(float(prob[v]) for v in nodes)
                return reward / (base.b[len(nodes)] + PROFILE.token_ms * n_others + base.beta * (len(others) + new))

            best = max(ratio(S) for S in _subtrees(par, K))
            assert ratio(p.selected_of(c).tolist()) == pytest.approx(best, rel=1e-12)
            checked += 1
    assert checked or p.num_steps == 0


def test_bad_batch_sizes_are_one_line_errors():
    with pytest.raises(SimmoeError, match="integer >= 1"):
        check_batch(0, 5)
    with pytest.raises(SimmoeError, match="at most"):
        check_batch(6, 5)
    assert check_batch(5, 5) == 5


def test_cli_batch_one_prints_what_the_default_prints(tmp_path):
    from simmoe.cli import main
    from simmoe.hardware.profile import save_profile
    from simmoe.trace.io import write_trace

    path, prof = tmp_path / "t.parquet", tmp_path / "p.toml"
    write_trace(random_trace(4, num_requests=3, output_len=(3, 7), pool_nodes=5), path)
    save_profile(PROFILE, prof)
    outs = []
    for extra in ([], ["--batch", "1"]):
        out = tmp_path / f"o{len(extra)}.json"
        assert main(["replay", str(path), "--slots", "2", "--selector-ms", "0.5", "--no-progress", "--workers", "1",
                     "--json", str(out), "--hardware", str(prof), *extra]) == 0
        outs.append(out.read_text())
    assert outs[0] == outs[1]


@pytest.mark.parametrize("batch", ["0", "9"])
def test_cli_bad_batch_exits_2_with_one_line(tmp_path, capsys, batch):
    from simmoe.cli import main
    from simmoe.hardware.profile import save_profile
    from simmoe.trace.io import write_trace

    path, prof = tmp_path / "t.parquet", tmp_path / "p.toml"
    write_trace(random_trace(4, num_requests=3, output_len=(3, 7), pool_nodes=5), path)
    save_profile(PROFILE, prof)
    assert main(["replay", str(path), "--batch", batch, "--no-progress", "--hardware", str(prof)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--batch" in err[0]

"""specfit-prefetch (simmoe.replay.prefetch_selector): SpecFit with available experts discounted."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest
from factories import random_trace
from hypothesis import given, settings
from hypothesis import strategies as st

from simmoe.hardware.profile import load_profile
from simmoe.replay.engine import ReplayConfig, replay
from simmoe.replay.prefetch_selector import (
    SpecFitPrefetch,
    profile_discount,
    residency_weights,
    weighted_pool,
)
from simmoe.replay.selectors import PoolView, SelectorContext, make_selector


def cost_model():
    from solvers import CostModel

    return CostModel(tuple(40.0 + 1.5 * j for j in range(8)), 0.8)


def views(seed, n=8, N=8, L=3, k=2):
    trace = random_trace(seed, num_requests=1, output_len=(4, 6), L=L, N=N, k=k, pool_nodes=n)
    for i in range(trace.num_positions):
        s = trace.pool_slice(i)
        yield PoolView(row=i, parents=trace.node_parent[s], levels=trace.node_level[s], p=trace.node_p[s],
                       q=trace.node_q[s], agree=trace.node_agree[s], root_routes=trace.root_routes[i],
                       node_routes=trace.node_routes[s], num_experts=N)


def closed_subsets(view, K):
    n = view.size
    for size in range(0, min(K, n) + 1):
        for S in itertools.combinations(range(n), size):
            if all(view.parents[v] < 0 or view.parents[v] in S for v in S):
                yield S


def brute_time(view, S, avail, rho, cost):
    """T̂_ρ(S) = b_|S| + β(|U \\ A| + ρ|U ∩ A|), U the per-layer union of the root's and S's routes."""
    f = 0.0
    for layer in range(view.root_routes.shape[0]):
        union = set(view.root_routes[layer].tolist())
        for v in S:
            union |= set(view.node_routes[v][layer].tolist())
        f += sum(rho if avail[layer, e] else 1.0 for e in union)
    return cost.b[len(S)] + cost.beta * f


@settings(max_examples=25)
@given(seed=st.integers(0, 10_000), p=st.integers(1, 4), q=st.integers(1, 4), density=st.floats(0, 1))
def test_weighted_pool_prices_available_experts_at_rho(seed, p, q, density):
    from solvers.cost import evaluate

    if p > q:
        p, q = q, p
    rng = np.random.default_rng(seed)
    cost = cost_model()
    for view in list(views(seed, n=6))[:2]:
        avail = rng.random((3, 8)) < density
        pool, wcost = weighted_pool(view, avail, p, q, cost)
        for S in closed_subsets(view, 7):
            got = evaluate(pool, S, wcost).time
            assert got == pytest.approx(brute_time(view, S, avail, p / q, cost), rel=1e-12)


@settings(max_examples=25)
@given(seed=st.integers(0, 10_000), nodes=st.integers(0, 12))
def test_with_nothing_available_it_is_specfit(seed, nodes):
    ctx = SelectorContext(K=7, cost=cost_model(), options={"residency_discount": 0.5})
    plain, aware = make_selector("specfit", ctx), SpecFitPrefetch(ctx)
    for view in views(seed, n=nodes):
        a = plain.select(view)
        empty = replace(view, _pool=None, available=lambda d: np.zeros((3, 8), dtype=bool))
        for b in (aware.select(view), aware.select(empty)):   # no cache state, or nothing on the device
            assert list(a.nodes) == list(b.nodes) and a.drafted_levels == b.drafted_levels


@settings(max_examples=20)
@given(seed=st.integers(0, 10_000), density=st.floats(0.1, 0.9))
def test_its_selection_has_the_largest_discounted_ratio(seed, density):
    rng = np.random.default_rng(seed)
    cost = cost_model()
    ctx = SelectorContext(K=7, cost=cost, options={"residency_discount": 0.5})
    sel = SpecFitPrefetch(ctx)
    for view in list(views(seed, n=8))[:3]:
        avail = rng.random((3, 8)) < density
        pv = replace(view, _pool=None, available=lambda d, avail=avail: avail)
        choice = sel.select(pv)
        d = choice.drafted_levels
        within = [S for S in closed_subsets(view, 7) if all(view.levels[v] <= d for v in S)]

        def ratio(S, view=view, avail=avail):
            return (1.0 + sum(float(view.p[v]) for v in S)) / brute_time(view, S, avail, 0.5, cost)

        best = max(ratio(S) for S in within)
        assert ratio(tuple(choice.nodes.tolist())) == pytest.approx(best, rel=1e-12)


def test_residency_weights_and_the_profile_discount():
    assert residency_weights(0.53) == (1, 2)
    assert residency_weights(1.0) == (1, 1)
    assert residency_weights(0.0) == (1, 4)          # clamped to 1/4
    assert residency_weights(0.7) == (2, 3)
    a100 = load_profile("a100-pcie-40gb")
    assert profile_discount(a100) == pytest.approx(a100.expert_ms / (a100.copy_ms / a100.copies_in_flight))


def test_replay_without_anything_on_the_device_equals_specfit():
    # no cache and no prefetch: nothing is ever available, so selections and times are specfit's
    prof = load_profile("a100-pcie-40gb").replace(num_layers=0)
    trace = random_trace(7, num_requests=2, L=3, N=8, k=2, pool_nodes=9)
    cfg = ReplayConfig(selector="specfit", slots=0, selector_ms=1.0)
    a = replay(trace, cfg, prof)
    b = replay(trace, ReplayConfig(selector="specfit-prefetch", slots=0, selector_ms=1.0), prof)
    for key in ("draft_nodes", "drafted_levels", "committed", "cycle_ms", "misses"):
        assert np.array_equal(a.cycles[key], b.cycles[key]), key


def test_replay_with_prefetch_is_lossless_and_counts_every_prefetch():
    prof = load_profile("a100-pcie-40gb").replace(num_layers=0)
    trace = random_trace(8, num_requests=3, L=3, N=16, k=2, pool_nodes=12)
    cfg = ReplayConfig(selector="specfit-prefetch", slots=4, selector_ms=1.0, prefetch="draft")
    res = replay(trace, cfg, prof)
    assert np.array_equal(np.bincount(res.cycles["request"], weights=res.cycles["committed"]),
                          trace.requests.output_len)
    assert res.cycles["prefetched"].sum() == res.cycles["useful"].sum() + res.cycles["wasted"].sum()

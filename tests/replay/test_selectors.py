"""Selectors against brute-force references on random pools; the route predictor."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from factories import random_trace, views_of
from hypothesis import given, settings
from hypothesis import strategies as st

from simmoe.errors import SimmoeError
from simmoe.replay.route_prediction import RoutePredictor, replace_routes
from simmoe.replay.selectors import (
    DEFAULT_SELECTORS,
    SELECTORS,
    Choice,
    SelectorContext,
    accepted_length,
    longest_agreeing_path,
    make_selector,
    parse_selectors,
)

B_CACHE = (142.214, 147.532, 150.522, 152.269, 152.743, 163.204, 155.175, 156.068)
BETA_CACHE = 0.210715513


def cost_model():
    from solvers import CostModel

    return CostModel(B_CACHE, BETA_CACHE)


def ancestor_closed(view, nodes) -> bool:
    chosen = set(int(v) for v in nodes)
    return all(int(view.parents[v]) < 0 or int(view.parents[v]) in chosen for v in chosen)


def brute_top(view, k):
    """Reference top-k by path probability: sort Python tuples (-p, level, id)."""
    keys = sorted((-float(view.p[v]), int(view.levels[v]), v) for v in range(view.size))
    return sorted(v for _, _, v in keys[:k])


def brute_longest_path(view, within=None) -> int:
    """Longest root-to-node path whose nodes all agree (and lie in ``within``)."""
    best = 0
    allowed = set(range(view.size)) if within is None else set(int(v) for v in within)
    for v in range(view.size):
        u, length, ok = v, 0, True
        while u >= 0:
            if u not in allowed or not view.agree[u]:
                ok = False
                break
            u, length = int(view.parents[u]), length + 1
        if ok:
            best = max(best, length)
    return best


seeds = st.integers(0, 10_000)


@settings(max_examples=25)
@given(seed=seeds, n=st.integers(0, 18))
def test_eagle3_takes_the_K_most_probable_nodes(seed, n):
    trace = random_trace(seed, num_requests=1, output_len=(6, 6), pool_nodes=n)
    sel = make_selector("eagle3", SelectorContext(K=7))
    for view in views_of(trace):
        c = sel.select(view)
        assert len(c.nodes) == min(7, view.size)
        assert list(c.nodes) == brute_top(view, 7)
        assert ancestor_closed(view, c.nodes)
        assert c.drafted_levels == view.depth


@settings(max_examples=25)
@given(seed=seeds, n=st.integers(0, 12))
def test_accepted_length_and_oracle_match_brute_force(seed, n):
    trace = random_trace(seed, num_requests=1, output_len=(6, 6), pool_nodes=n, agree_rate=0.7)
    rng = np.random.default_rng(seed)
    oracle = make_selector("oracle", SelectorContext(K=7))
    for view in views_of(trace):
        c = oracle.select(view)
        full = brute_longest_path(view)
        assert len(c.nodes) == full == c.drafted_levels
        assert all(view.agree[c.nodes])
        assert ancestor_closed(view, c.nodes)
        assert accepted_length(view.parents, view.agree, c.nodes) == full
        # an arbitrary ancestor-closed subset: its accepted path never beats the oracle's
        subset = [v for v in range(view.size) if rng.random() < 0.6]
        subset = [v for v in subset if all(u in subset for u in _ancestors(view, v))]
        got = accepted_length(view.parents, view.agree, np.array(subset, dtype=np.int64))
        assert got == brute_longest_path(view, subset) <= full


def test_longest_agreeing_path_ties_go_to_the_smaller_end_id():
    parents = np.array([-1, -1, 0, 1, 3])
    ok = np.array([True, True, True, True, False])
    assert longest_agreeing_path(parents, ok).tolist() == [0, 2]
    ok[2] = False
    assert longest_agreeing_path(parents, ok).tolist() == [1, 3]
    ok[4] = True
    assert longest_agreeing_path(parents, ok).tolist() == [1, 3, 4]
    ok[1] = False  # a path breaks where a node disagrees
    assert longest_agreeing_path(parents, ok).tolist() == [0]
    assert longest_agreeing_path(parents, np.zeros(5, bool)).tolist() == []


def _ancestors(view, v):
    out, u = [], int(view.parents[v])
    while u >= 0:
        out.append(u)
        u = int(view.parents[u])
    return out


@settings(max_examples=25)
@given(seed=seeds, n=st.integers(1, 18), slope=st.floats(0.0, 40.0))
def test_evict_prefix_maximizes_expected_length_over_cost(seed, n, slope):
    C = tuple(100.0 + slope * k + (5.0 if k % 3 == 0 else 0.0) for k in range(1, 33))
    trace = random_trace(seed, num_requests=1, output_len=(5, 5), pool_nodes=n)
    sel = make_selector("evict", SelectorContext(K=7, evict_cost=C))
    for view in views_of(trace):
        c = sel.select(view)
        ratios = []
        for k in range(1, view.size + 1):
            top = brute_top(view, k)
            ratios.append((1.0 + sum(float(view.p[v]) for v in top)) / C[k - 1])
        best = int(np.argmax(ratios)) + 1
        assert list(c.nodes) == brute_top(view, best)
        assert ancestor_closed(view, c.nodes)


def test_evict_needs_a_cost_table():
    with pytest.raises(SimmoeError, match="C\\(k\\)"):
        make_selector("evict", SelectorContext(K=7, evict_cost=()))


@settings(max_examples=20)
@given(seed=seeds, n=st.integers(1, 18))
def test_coverage_is_the_smallest_prefix_reaching_rho(seed, n):
    trace = random_trace(seed, num_requests=1, output_len=(5, 5), pool_nodes=n)
    eagle = make_selector("eagle3", SelectorContext(K=7))
    full = make_selector("coverage", SelectorContext(K=7, options={"coverage_rho": 1.0}))
    half = make_selector("coverage", SelectorContext(K=7, options={"coverage_rho": 0.5}))
    for view in views_of(trace):
        assert list(full.select(view).nodes) == list(eagle.select(view).nodes)
        got = half.select(view).nodes
        K = min(7, view.size)
        mass = [sum(float(view.p[v]) for v in brute_top(view, k)) for k in range(1, K + 1)]
        k = next(k for k in range(1, K + 1) if mass[k - 1] >= 0.5 * mass[-1])
        assert list(got) == brute_top(view, k)


@settings(max_examples=20)
@given(seed=seeds, n=st.integers(1, 18), threshold=st.floats(0.0, 1.5))
def test_ddd_stops_at_the_first_unconfident_level(seed, n, threshold):
    trace = random_trace(seed, num_requests=1, output_len=(5, 5), pool_nodes=n)
    sel = make_selector("ddd", SelectorContext(K=7, options={"ddd_threshold": threshold}))
    for view in views_of(trace):
        c = sel.select(view)
        mass = {d: sum(float(view.p[v]) for v in range(view.size) if view.levels[v] == d)
                for d in range(1, view.depth + 1)}
        expect = next((d for d in range(1, view.depth) if mass[d] < threshold), view.depth)
        assert c.drafted_levels == expect
        within = [v for v in range(view.size) if view.levels[v] <= expect]
        keys = sorted((-float(view.p[v]), int(view.levels[v]), v) for v in within)
        assert list(c.nodes) == sorted(v for *_, v in keys[:7])


def _brute_best_ratio(view, cost, K):
    from solvers import evaluate

    pool = view.pool()
    best = evaluate(pool, (), cost).ratio
    for r in range(1, min(K, view.size) + 1):
        for nodes in itertools.combinations(range(view.size), r):
            if pool.is_legal(nodes):
                best = max(best, evaluate(pool, nodes, cost).ratio)
    return best


@settings(max_examples=10)
@given(seed=seeds, n=st.integers(1, 9))
def test_specfit_full_attains_the_best_ratio_and_specfit_stops_consistently(seed, n):
    from solvers import evaluate

    cost = cost_model()
    trace = random_trace(seed, num_requests=1, output_len=(3, 3), pool_nodes=n, L=2, N=6, k=2)
    ctx = SelectorContext(K=7, cost=cost)
    full, adaptive = make_selector("specfit-full", ctx), make_selector("specfit", ctx)
    for view in views_of(trace):
        c = full.select(view)
        assert ancestor_closed(view, c.nodes) and len(c.nodes) <= 7
        ratio = evaluate(view.pool(), tuple(int(v) for v in c.nodes), cost).ratio
        assert ratio == pytest.approx(_brute_best_ratio(view, cost, 7), rel=1e-12)
        a = adaptive.select(view)
        assert 1 <= a.drafted_levels <= view.depth
        assert all(view.levels[a.nodes] <= a.drafted_levels)
        # Lemma 2: stopping early keeps the full-pool choice when that choice is shallow enough
        if len(c.nodes) == 0 or view.levels[c.nodes].max() < a.drafted_levels:
            assert list(a.nodes) == list(c.nodes)


def test_every_selector_returns_legal_choices():
    from solvers import CostModel

    trace = random_trace(5, num_requests=2, output_len=(4, 6), pool_nodes=10)
    b = tuple(100.0 + 3 * j for j in range(19))
    ctx = SelectorContext(K=7, cost=CostModel(b, 0.3), evict_cost=tuple(100.0 + 3 * k for k in range(1, 33)))
    views = list(views_of(trace))
    for name in SELECTORS:
        sel = make_selector(name, ctx)
        sel.prepare(trace, len(trace.requests), lambda rows: [views[int(i)] for i in rows])
        for view in views:
            c = sel.select(view)
            assert isinstance(c, Choice)
            assert list(c.nodes) == sorted(set(int(v) for v in c.nodes))
            assert ancestor_closed(view, c.nodes)
            assert 0 <= c.drafted_levels <= view.depth
            if len(c.nodes):
                assert view.levels[c.nodes].max() <= c.drafted_levels
            if name not in ("evict", "unconstrained", "oracle"):
                assert len(c.nodes) <= 7
            if name == "ar":
                assert len(c.nodes) == 0 and c.drafted_levels == 0


def test_parse_selectors():
    assert parse_selectors(None) == list(DEFAULT_SELECTORS)
    assert parse_selectors("all") == [n for n, c in SELECTORS.items() if not c.uses_residency]
    assert parse_selectors("specfit, ar,specfit") == ["specfit", "ar"]
    with pytest.raises(SimmoeError, match="unknown selector 'nope'"):
        parse_selectors("ar,nope")


# -- route predictor (SpecFit §4.6) ----------------------------------------------
@settings(max_examples=30)
@given(seed=seeds, a=st.floats(0.0, 1.0), N=st.integers(3, 40))
def test_predicted_routes_keep_or_replace_outside_the_true_set(seed, a, N):
    rng = np.random.default_rng(seed)
    k = int(rng.integers(1, N))
    true = np.sort(np.argsort(rng.random((20, 4, N)), axis=-1)[..., :k], axis=-1).astype(np.uint8)
    pred = replace_routes(true, N, a, np.random.default_rng(seed + 1))
    assert pred.shape == true.shape and pred.dtype == true.dtype
    assert (np.diff(pred.astype(int), axis=-1) >= 0).all()
    for idx in np.ndindex(true.shape[:-1]):
        t, p = set(true[idx].tolist()), pred[idx].tolist()
        kept = [e for e in p if e in t]
        assert all(0 <= e < N for e in p)
        assert len(kept) + sum(e not in t for e in p) == k


def test_predictor_accuracy_is_the_kept_fraction_and_is_seeded():
    rng = np.random.default_rng(0)
    true = np.sort(np.argsort(rng.random((400, 8, 64)), axis=-1)[..., :8], axis=-1).astype(np.uint8)
    for a in (0.0, 0.6, 1.0):
        pred = replace_routes(true, 64, a, np.random.default_rng(1))
        kept = np.mean([np.isin(pred[i, layer], true[i, layer]).mean()
                        for i in range(400) for layer in range(8)])
        assert kept == pytest.approx(a, abs=0.02)
    p1 = RoutePredictor(64, 0.6, seed=3)
    p2 = RoutePredictor(64, 0.6, seed=3)
    p3 = RoutePredictor(64, 0.6, seed=4)
    r1 = p1.predict(17, true[0], true[1:10])
    assert all(np.array_equal(x, y) for x, y in zip(r1, p2.predict(17, true[0], true[1:10])))
    assert not np.array_equal(r1[1], p3.predict(17, true[0], true[1:10])[1])
    exact = RoutePredictor(64, 1.0).predict(5, true[0], true[1:4])
    assert np.array_equal(exact[0], true[0]) and np.array_equal(exact[1], true[1:4])


def test_predictor_rejects_bad_accuracy():
    with pytest.raises(SimmoeError, match="route accuracy"):
        RoutePredictor(8, 1.5)

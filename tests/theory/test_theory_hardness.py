"""Proposition 2 (simmoe.theory.hardness): graphs with known answers, and the reduction itself."""

from __future__ import annotations

import itertools

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simmoe.theory.hardness import decide, has_clique, instance_record, selected_is_clique, subtree_count
from solvers import CostModel, Pool, select_exact


@pytest.mark.parametrize("n, r", [(3, 2), (4, 3), (5, 3), (5, 4), (6, 4), (5, 5)])
def test_complete_graphs_reach_theta(n, r):
    g = nx.complete_graph(n)
    case, _ = decide(g, r)
    assert case.clique and case.reaches and case.agree
    assert selected_is_clique(case, g)
    assert case.best_ratio == pytest.approx(case.theta, rel=1e-12)


@pytest.mark.parametrize("seed", range(6))
def test_planted_cliques_are_found(seed):
    rng = np.random.default_rng(seed)
    n, r = 9, int(rng.integers(3, 5))
    g = nx.gnp_random_graph(n, 0.15, seed=seed)
    members = [int(v) for v in rng.choice(n, size=r, replace=False)]
    g.add_edges_from(itertools.combinations(members, 2))
    case, _ = decide(g, r)
    assert case.clique and case.reaches
    assert selected_is_clique(case, g)


@pytest.mark.parametrize("a, b, r", [(3, 3, 3), (2, 4, 3), (3, 4, 4), (4, 4, 3)])
def test_bipartite_graphs_never_reach_theta(a, b, r):
    # bipartite graphs have no triangle, hence no r-clique for r >= 3
    g = nx.complete_bipartite_graph(a, b)
    case, _ = decide(g, r)
    assert not case.clique and not case.reaches
    assert case.best_ratio < case.theta


@pytest.mark.parametrize("seed", range(4))
def test_random_bipartite_graphs_never_reach_theta(seed):
    g = nx.bipartite.random_graph(4, 5, 0.7, seed=seed)
    g = nx.convert_node_labels_to_integers(g)
    case, _ = decide(g, 3)
    assert not case.clique and not case.reaches


def test_r_equals_two_is_any_edge():
    empty = nx.empty_graph(4)
    assert not decide(empty, 2)[0].reaches
    one = nx.empty_graph(4)
    one.add_edge(1, 3)
    case, _ = decide(one, 2)
    assert case.reaches and case.selected_vertices == (1, 3)


@settings(max_examples=40)
@given(n=st.integers(3, 7), q=st.floats(0.0, 1.0), r=st.integers(2, 4),
       seed=st.integers(0, 10_000))
def test_selector_and_networkx_agree_on_random_graphs(n, q, r, seed):
    r = min(r, n)
    g = nx.gnp_random_graph(n, q, seed=seed)
    case, _ = decide(g, r)
    brute = any(all(g.has_edge(u, w) for u, w in itertools.combinations(c, 2))
                for c in itertools.combinations(range(n), r))
    assert case.clique == brute
    assert case.reaches == brute


@settings(max_examples=20)
@given(n=st.integers(3, 6), q=st.floats(0.2, 1.0), r=st.integers(2, 4),
       seed=st.integers(0, 10_000))
def test_pool_file_is_the_reduction(n, q, r, seed):
    r = min(r, n)
    g = nx.gnp_random_graph(n, q, seed=seed)
    case, instance = decide(g, r)
    rec = instance_record(case, instance)
    m, k = g.number_of_edges(), r * (r - 1) // 2
    # the construction of App. A.3, checked from the file alone
    assert sorted(tuple(sorted(e)) for e in rec["graph"]["edges"]) == \
        sorted(tuple(sorted(e)) for e in g.edges())
    assert rec["parents"] == [-1] * m
    assert rec["probs"] == pytest.approx([1 / (m + 1)] * m)
    assert rec["K"] == k and rec["num_experts"] == n and rec["has_clique"] == case.clique
    assert len(set(rec["b"])) == 1 and len(rec["b"]) >= k + 1
    bb, beta, p = rec["b"][0], rec["beta"], 1 / (m + 1)
    assert 0 < beta < bb * p / (n * (1 + (k - 1) * p))
    assert rec["theta"] == pytest.approx((1 + k * p) / (bb + beta * r), rel=1e-12)
    # the file rebuilds the same pool: same best ratio
    if m:
        pool = Pool.from_routes(rec["parents"], rec["probs"], np.zeros((1, 0), np.int64),
                                np.array(rec["node_routes"]), rec["num_experts"])
        sel = select_exact(pool, rec["K"], CostModel(rec["b"], rec["beta"]))
        assert sel.ratio == pytest.approx(rec["best_ratio"], rel=1e-12)


def test_subtree_count_of_a_star():
    assert subtree_count(5, 2) == 1 + 5 + 10
    assert subtree_count(3, 7) == 8
    assert subtree_count(0, 3) == 1


def test_has_clique_small_cases():
    assert has_clique(nx.cycle_graph(5), 2)
    assert not has_clique(nx.cycle_graph(5), 3)
    assert has_clique(nx.cycle_graph(3), 3)

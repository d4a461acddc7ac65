"""Proposition 2's CLIQUE reduction: θ is reached exactly when an r-clique exists."""

from __future__ import annotations

import networkx as nx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from solvers import InvalidInput, clique_instance, has_clique, reaches_threshold


@given(st.integers(3, 7), st.floats(0.2, 0.9), st.integers(0, 10**6), st.integers(2, 5))
def test_threshold_iff_clique(n, density, seed, r):
    g = nx.gnp_random_graph(n, density, seed=seed)
    if r > n:
        return
    inst = clique_instance(g, r)
    assert r * (r - 1) // 2 == inst.K
    assert inst.pool.n == g.number_of_edges()
    assert reaches_threshold(inst) == has_clique(g, r)


def test_known_graphs():
    k4 = nx.complete_graph(4)
    assert reaches_threshold(clique_instance(k4, 4))
    c5 = nx.cycle_graph(5)               # triangle-free
    assert not reaches_threshold(clique_instance(c5, 3))
    assert reaches_threshold(clique_instance(c5, 2))
    labelled = nx.relabel_nodes(k4, {0: "a", 1: "b", 2: "c", 3: "d"})
    assert reaches_threshold(clique_instance(labelled, 3))


@pytest.mark.parametrize("graph, r, words", [
    (nx.complete_graph(3), 1, "2 <= r"), (nx.complete_graph(3), 4, "2 <= r"),
    (nx.DiGraph([(0, 1)]), 2, "undirected"), (nx.Graph([(0, 0), (0, 1)]), 2, "self-loop"),
])
def test_bad_input(graph, r, words):
    with pytest.raises(InvalidInput, match=words):
        clique_instance(graph, r)

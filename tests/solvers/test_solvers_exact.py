"""Exact selection over A_K (Eq. 5, Algorithm 1) and the linear variant, against brute force."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from solvers_brute import brute_linear, brute_ratio
from solvers_strategies import instances, raw_pools

from solvers import CostModel, InvalidInput, Pool, select_exact, select_max_linear
from solvers.exact import (
    branch_and_bound_linear,
    branch_and_bound_ratio,
    enumerate_linear,
    enumerate_ratio,
)


def check_against_brute(raw, K, b, beta, sel):
    nodes, r, f, t, q = brute_ratio(raw, K, b, beta)
    assert sel.nodes == nodes
    assert (sel.reward, sel.union, sel.time, sel.ratio) == (r, f, t, q)


@given(st.data())
def test_exact_methods_equal_brute_force(data):
    raw, K, b, beta, pool, cost = data.draw(instances(raw_pools(max_nodes=9), 10))
    for method in (select_exact, branch_and_bound_ratio, enumerate_ratio):
        check_against_brute(raw, K, b, beta, method(pool, K, cost))


@given(st.data())
def test_max_linear_equals_brute_force(data):
    raw, K, b, beta, pool, cost = data.draw(instances(raw_pools(max_nodes=9), 10))
    lam = data.draw(st.one_of(st.sampled_from([0.0, 0.1, 0.25, 1.0]), st.floats(0.0, 2.0)))
    nodes, value = brute_linear(raw, K, b, beta, lam)
    for method in (select_max_linear, branch_and_bound_linear, enumerate_linear):
        sel = method(pool, K, cost, lam)
        assert sel.nodes == nodes
        assert sel.reward - lam * sel.time == value


@given(st.data())
def test_ties_follow_the_rule_of_section_3_3(data):
    # every node identical: many subtrees share the ratio; the rule must still pick one
    n = data.draw(st.integers(1, 7))
    parents = [data.draw(st.integers(-1, i - 1)) for i in range(n)]
    p = data.draw(st.sampled_from([0.0, 0.5, 1.0]))
    root = np.array([[0, 1]])
    routes = np.tile(np.array([[[0, 1]], [[2, 3]]])[data.draw(st.integers(0, 1))], (n, 1, 1))
    pool = Pool.from_routes(parents, [p] * n, root, routes, 4)
    K = data.draw(st.integers(0, n))
    cost = CostModel([1.0] * (K + 1), data.draw(st.sampled_from([0.0, 1.0])))
    from solvers_brute import RawPool
    check_against_brute(RawPool(parents, [p] * n, root, routes, 4), K, cost.b, cost.beta,
                        select_exact(pool, K, cost))


def test_tie_rule_by_hand():
    # two identical children of the root: the lexicographically smaller id wins
    root = np.array([[0]])
    routes = np.array([[[1]], [[1]]])
    pool = Pool.from_routes([-1, -1], [0.5, 0.5], root, routes, 2)
    cost = CostModel([1.0, 1.0, 1.0], 0.5)
    # {} : 1/1.5; {0}: 1.5/2 = 0.75; {0,1}: 2/2 = 1.0 -> both nodes
    assert select_exact(pool, 2, cost).nodes == (0, 1)
    assert select_exact(pool, 1, cost).nodes == (0,)
    # equal ratio, larger reward wins: p=0 children change nothing but size
    zero = Pool.from_routes([-1, -1], [0.0, 0.0], root, np.array([[[0]], [[0]]]), 2)
    assert select_exact(zero, 2, CostModel([1.0, 1.0, 1.0], 0.0)).nodes == ()


def test_paper_shaped_pools_agree_with_plain_enumeration():
    from solvers.random_pools import paper_shaped_pool
    rng = np.random.default_rng(7)
    cost = CostModel([142.214, 147.532, 150.522, 152.269, 152.743, 163.204, 155.175, 156.068],
                     0.210715513)
    for _ in range(15):
        pool = paper_shaped_pool(rng)
        assert select_exact(pool, 7, cost) == enumerate_ratio(pool, 7, cost)
        lam = 0.0065
        assert select_max_linear(pool, 7, cost, lam) == enumerate_linear(pool, 7, cost, lam)


@pytest.mark.parametrize("K, b, beta, lam, words", [
    (-1, [1.0], 1.0, 0.0, "K = -1"),
    (2, [1.0, 1.0], 1.0, 0.0, "K = 2 needs 3"), (5, [1.0] * 5, 1.0, 0.0, "K = 5 needs 6"),
    (1.5, [1.0, 1.0], 1.0, 0.0, "K must be an integer"),
    (1, [1.0, 1.0], 1.0, -1.0, "lam"),
    (1, [1.0, 1.0], 1.0, float("nan"), "lam"),
])
def test_bad_parameters_raise_invalid_input(K, b, beta, lam, words):
    pool = Pool.from_routes([-1, 0], [0.5, 0.5], np.array([[0]]), np.array([[[1]], [[1]]]), 2)
    cost = CostModel(b, beta)
    with pytest.raises(InvalidInput, match=words):
        if lam == 0.0:
            select_exact(pool, K, cost)
        select_max_linear(pool, K, cost, lam)


@pytest.mark.parametrize("b, beta, words", [
    ([1.0], -0.5, "beta"), ([], 1.0, "at least one"), ([1.0, 0.0], 1.0, r"b\[1\]"),
    ([1.0, float("inf")], 1.0, r"b\[1\]"), ([1.0], float("nan"), "beta"), ("ab", 1.0, "b must"),
])
def test_bad_cost_models(b, beta, words):
    with pytest.raises(InvalidInput, match=words):
        CostModel(b, beta)


@given(st.data())
def test_a_start_set_never_changes_the_answer(data):
    raw, K, b, beta, pool, cost = data.draw(instances(raw_pools(max_nodes=7), 7))
    from solvers_brute import legal_sets
    sets = [s for s in legal_sets(raw, K)]
    start = sets[data.draw(st.integers(0, len(sets) - 1))]
    assert select_exact(pool, K, cost, start=start) == select_exact(pool, K, cost)


def test_an_illegal_start_is_rejected():
    pool = Pool.from_routes([-1, 0], [0.5, 0.5], np.array([[0]]), np.array([[[1]], [[1]]]), 2)
    cost = CostModel([1.0, 1.0, 1.0], 1.0)
    with pytest.raises(InvalidInput, match="ancestor"):
        select_exact(pool, 2, cost, start=[1])
    with pytest.raises(InvalidInput, match="more than K"):
        select_exact(pool, 1, cost, start=[0, 1])

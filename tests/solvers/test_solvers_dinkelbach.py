"""Dinkelbach's λ* across cycle states (App. A.1) against brute force over all rules."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from solvers_brute import all_scores
from solvers_strategies import affine_costs, raw_pools

from solvers import (
    CostModel,
    InvalidInput,
    Pool,
    closure_oracle,
    dinkelbach,
    exact_oracle,
    select_exact,
)


def best_rule(per_state):
    """max over rules (one set per state) of ΣR/ΣT, by enumerating every combination."""
    best = -1.0
    for choice in itertools.product(*per_state):
        best = max(best, sum(c[0] for c in choice) / sum(c[1] for c in choice))
    return best


@given(st.data())
def test_lambda_star_is_the_best_ratio_of_expectations(data):
    m = data.draw(st.integers(1, 3))
    K = data.draw(st.integers(0, 3))
    b, beta = data.draw(affine_costs(K))
    cost = CostModel(b, beta)
    raws = [data.draw(raw_pools(max_nodes=5)) for _ in range(m)]
    states = [(Pool.from_routes(*raw.args()), K, cost) for raw in raws]
    per_state = [[(r, t) for _c, r, _f, t in all_scores(raw, K, b, beta)] for raw in raws]
    res = dinkelbach(states, exact_oracle)
    lam_star = best_rule(per_state)
    assert res.converged
    assert abs(res.lam - lam_star) <= 1e-9 * lam_star
    assert res.lam - 1e-12 <= lam_star <= res.lam + res.error_bound + 1e-12
    assert res.h_values[-1] <= 1e-9 and all(h >= -1e-12 for h in res.h_values)
    assert list(res.lams) == sorted(res.lams) and res.iterations == len(res.lams)
    # S* attains λ*, and per-cycle ratio selection cannot beat it (Prop. 1's lower bound)
    sel = res.selections
    assert abs(sum(s.reward for s in sel) / sum(s.time for s in sel) - lam_star) <= 1e-9 * lam_star
    hat = [select_exact(st_[0], K, cost) for st_ in states]
    assert sum(s.reward for s in hat) / sum(s.time for s in hat) <= lam_star * (1 + 1e-12)


def test_closure_oracle_without_size_limit():
    rng = np.random.default_rng(2)
    from solvers.random_pools import paper_shaped_pool
    cost = CostModel([10.0 + 0.5 * j for j in range(13)], 0.3)
    states = [(paper_shaped_pool(rng, nodes=12, depth=4, L=3, N=8, k=2), None, cost)
              for _ in range(4)]
    res = dinkelbach(states, closure_oracle)
    k_limited = dinkelbach([(p, 12, c) for p, _k, c in states], exact_oracle)
    # K = n is no limit: both oracles agree on λ*
    assert abs(res.lam - k_limited.lam) <= 1e-9 * res.lam


@pytest.mark.parametrize("states, kw, words", [
    ([], {}, "at least one"), ([(1, 2)], {}, "state 0"), ([("a", 1, "c")], {}, "state 0"),
    (None, {"tol": -1.0}, "tol"), (None, {"max_iter": 0}, "max_iter"),
])
def test_bad_input(states, kw, words):
    if states is None:
        pool = Pool.from_routes([], [], np.zeros((1, 1), int), np.zeros((0, 1, 1), int), 2)
        states = [(pool, 1, CostModel([1.0], 0.0))]
    with pytest.raises(InvalidInput, match=words):
        dinkelbach(states, exact_oracle, **kw)

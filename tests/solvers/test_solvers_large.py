"""The branch and bound on pools far beyond enumeration, against CP-SAT (an independent method)."""

from __future__ import annotations

import numpy as np
import pytest

from solvers import CostModel, Pool, select_exact, select_max_linear
from solvers.cpsat import select_exact_cpsat
from solvers.random_pools import random_pool_arrays


@pytest.mark.parametrize("seed, nodes, depth, K, beta, flat", [
    (0, 32, 6, 10, 0.4, False), (1, 48, 6, 12, 0.03, False), (2, 64, 8, 16, 0.02, False),
    (3, 32, 6, 10, 0.05, True), (4, 48, 6, 12, 0.05, True), (5, 64, 8, 16, 0.1, True),
])
def test_branch_and_bound_matches_cpsat(seed, nodes, depth, K, beta, flat):
    rng = np.random.default_rng(seed)
    parents, probs, root, routes, N = random_pool_arrays(rng, nodes=nodes, depth=depth,
                                                         L=6, N=16, k=2, overlap=0.5)
    if flat:   # high probabilities everywhere: the size limit binds, the search is hardest
        probs = rng.uniform(0.2, 1.0, len(parents))
    pool = Pool.from_routes(parents, probs, root, routes, N)
    cost = CostModel([8.0 + 0.4 * j + (0.3 if j % 3 == 1 else 0.0) for j in range(K + 1)], beta)
    bnb = select_exact(pool, K, cost)
    ref = select_exact_cpsat(pool, K, cost)
    assert pool.is_legal(bnb.nodes) and len(bnb.nodes) <= K
    if flat:
        assert len(bnb.nodes) == K
    # CP-SAT is exact up to its 1e-9 coefficient rounding; the branch and bound is exact
    assert bnb.ratio >= ref.ratio * (1 - 1e-12)
    assert bnb.ratio <= ref.ratio * (1 + 1e-7)
    # the linear variant at λ = the optimum ratio: the optimum has value 0 and nothing beats it
    lin = select_max_linear(pool, K, cost, bnb.ratio)
    assert abs(lin.reward - bnb.ratio * lin.time) <= 1e-9 * lin.reward

"""Adaptive drafting depth (§3.3, Lemma 2)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from solvers_strategies import instances, raw_pools

from solvers import CostModel, select_adaptive_depth, select_exact
from solvers.random_pools import paper_shaped_pool


def first_stop(pool, K, cost):
    """Reference loop written from the paper's text, with a brute-force-checked selector."""
    for d in range(1, pool.depth + 1):
        sub, ids = pool.upto_level(d)
        sel = select_exact(sub, K, cost)
        if d == pool.depth or all(sub.levels[v] < d for v in sel.nodes):
            return tuple(ids[v] for v in sel.nodes), d
    return (), 0


@given(st.data())
def test_lemma_2_on_random_pools(data):
    raw, K, b, beta, pool, cost = data.draw(instances(raw_pools(max_nodes=9), 7))
    sel, d = select_adaptive_depth(pool, K, cost)
    full = select_exact(pool, K, cost)
    assert 0 <= d <= pool.depth and (d > 0 or pool.n == 0)
    assert (sel.nodes, d) == first_stop(pool, K, cost)
    assert all(pool.levels[v] <= d for v in sel.nodes)
    # Lemma 2: equal to the full-pool selection unless that one goes deeper than d
    if all(pool.levels[v] <= d for v in full.nodes):
        assert sel == full
    else:
        assert d < pool.depth
    # the largest ratio is nondecreasing in d (nested families)
    ratios = [select_exact(pool.upto_level(x)[0], K, cost).ratio for x in range(pool.depth + 1)]
    assert all(a <= b_ for a, b_ in zip(ratios, ratios[1:], strict=False))


def test_adaptive_depth_on_paper_shaped_pools():
    rng = np.random.default_rng(11)
    cost = CostModel([142.214, 147.532, 150.522, 152.269, 152.743, 163.204, 155.175, 156.068],
                     0.210715513)
    stopped_early = 0
    for _ in range(10):
        pool = paper_shaped_pool(rng)
        sel, d = select_adaptive_depth(pool, 7, cost)
        full = select_exact(pool, 7, cost)
        if max((pool.levels[v] for v in full.nodes), default=0) <= d:
            assert sel == full
        stopped_early += d < pool.depth
    assert stopped_early > 0     # with β from App. B, some cycles stop before level 5

"""The fast paths of the exact search, the adaptive depth and the pool builder agree with
their plain references on synthetic SpecFit-shaped pools (every pool here is synthetic).

References: ``enumerate_ratio`` / ``enumerate_linear`` (Algorithm 1, no pruning), the
literal Lemma 2 loop with plain enumeration at every level, and pool bitmaps and
credits rebuilt from the raw routes with Python sets.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from solvers_strategies import APP_B, shaped_costs, shaped_pools

from solvers import CostModel, Pool, select_adaptive_depth, select_exact, select_max_linear
from solvers.exact import enumerate_linear, enumerate_ratio
from solvers.random_pools import random_routes


@settings(max_examples=40, deadline=None)
@given(shaped_pools(), st.data())
def test_branch_and_bound_equals_plain_enumeration(drawn, data):
    _, pool = drawn
    K = data.draw(st.integers(0, 8))
    cost = data.draw(shaped_costs(K))
    assert select_exact(pool, K, cost) == enumerate_ratio(pool, K, cost)
    best = enumerate_ratio(pool, K, cost).ratio
    lam = best * data.draw(st.sampled_from([0.0, 0.5, 1.0, 1.2]))
    assert select_max_linear(pool, K, cost, lam) == enumerate_linear(pool, K, cost, lam)


def literal_lemma_2_loop(pool: Pool, K: int, cost: CostModel):
    """The loop of §3.3 as written: plain enumeration over every V≤d until a stop."""
    if pool.n == 0:
        return enumerate_ratio(pool, K, cost), 0
    for d in range(1, pool.depth + 1):
        sub, ids = pool.upto_level(d)
        sel = enumerate_ratio(sub, min(K, sub.n), cost)
        if d == pool.depth or all(sub.levels[v] < d for v in sel.nodes):
            return (tuple(ids[v] for v in sel.nodes), sel.reward, sel.union, sel.time,
                    sel.ratio), d
    raise AssertionError("unreachable")


@settings(max_examples=40, deadline=None)
@given(shaped_pools(max_nodes=16), st.data())
def test_adaptive_depth_equals_the_literal_loop(drawn, data):
    _, pool = drawn
    K = data.draw(st.integers(0, 7))
    cost = data.draw(shaped_costs(K))
    sel, d = select_adaptive_depth(pool, K, cost)
    ref, d_ref = literal_lemma_2_loop(pool, K, cost)
    assert d == d_ref
    assert (sel.nodes, sel.reward, sel.union, sel.time, sel.ratio) == ref


def test_adaptive_depth_on_pools_not_listed_level_by_level():
    # depth-first ids: V≤d is not a prefix, so the level pools are renumbered
    rng = np.random.default_rng(5)
    parents = [-1, 0, 1, 2, -1, 4, 5, 0, 7, 4]
    cost = CostModel(APP_B, 0.210715513)
    for _ in range(20):
        probs = np.sort(rng.uniform(0.05, 1.0, len(parents)))[::-1]
        root, routes = random_routes(rng, parents)
        pool = Pool.from_routes(parents, probs, root, routes, 128)
        sel, d = select_adaptive_depth(pool, 7, cost)
        ref, d_ref = literal_lemma_2_loop(pool, 7, cost)
        assert (sel.nodes, sel.reward, sel.union, sel.time, sel.ratio, d) == (*ref, d_ref)


def reference_bitmaps(parents, probs, root, routes, N):
    """masks, credits, root_count from the definition (Python sets, no numpy tricks):
    pairs some node routes to and the root does not, numbered in (layer, expert) order."""
    root_pairs = {(layer, int(e)) for layer in range(root.shape[0]) for e in root[layer]}
    node_pairs = [{(layer, int(e)) for layer in range(routes.shape[1]) for e in routes[v, layer]}
                  for v in range(len(parents))]
    used = sorted(set().union(*node_pairs) - root_pairs) if node_pairs else []
    bit = {pair: i for i, pair in enumerate(used)}
    masks = tuple(sum(1 << bit[q] for q in pairs - root_pairs) for pairs in node_pairs)
    seen, credits = set(), []
    for pairs in node_pairs:
        fresh = pairs - root_pairs - seen
        credits.append(len(fresh))
        seen |= fresh
    return masks, tuple(credits), len(root_pairs)


@settings(max_examples=30, deadline=None)
@given(shaped_pools(max_nodes=12))
def test_pool_bitmaps_match_their_definition(drawn):
    arrays, pool = drawn
    masks, credits, root_count = reference_bitmaps(*arrays)
    assert pool.masks == masks
    assert pool.credits == credits
    assert pool.root_count == root_count
    levels = []
    for a in arrays[0].tolist():
        levels.append(1 if a < 0 else levels[a] + 1)
    assert pool.levels == tuple(levels)
    assert pool.probs == tuple(float(x) for x in arrays[1])

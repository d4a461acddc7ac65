"""Pool construction, validation and the union feature F (Eq. 1, 4)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from solvers_brute import legal_sets, score
from solvers_strategies import raw_pools

from solvers import CostModel, InvalidInput, Pool, evaluate
from solvers.random_pools import paper_shaped_pool, random_pool_arrays


def small_args(n=3):
    root = np.array([[0, 1], [2, 3]])
    nodes = np.array([[[0, 2], [2, 3]], [[1, 3], [0, 1]], [[4, 5], [4, 5]]])[:n]
    return [-1, 0, 0][:n], [0.5, 0.25, 0.1][:n], root, nodes, 6


def test_small_pool_by_hand():
    pool = Pool.from_routes(*small_args())
    assert pool.n == 3 and pool.levels == (1, 2, 2) and pool.depth == 2
    assert pool.root_count == 4
    cost = CostModel([1.0, 2.0, 3.0, 4.0], 0.5)
    # node 0 adds (0,2); node 1 adds (0,3) in layer 0 and (1,0),(1,1) in layer 1
    assert evaluate(pool, [0], cost).union == 5
    assert evaluate(pool, [0, 1], cost).union == 8
    sel = evaluate(pool, [0, 1, 2], cost)
    assert sel.union == 8 + 4 and sel.nodes == (0, 1, 2)
    assert sel.reward == 1.0 + 0.5 + 0.25 + 0.1
    assert sel.time == 4.0 + 0.5 * 12 and sel.ratio == sel.reward / sel.time


def test_empty_pool_and_any_int_dtype():
    pool = Pool.from_routes([], [], np.zeros((2, 3), np.uint8), np.zeros((0, 2, 3), np.uint8), 4)
    assert pool.n == 0 and pool.depth == 0 and pool.root_count == 2
    args = small_args()
    pool16 = Pool.from_routes(np.array(args[0], np.int16), args[1], args[2].astype(np.uint8),
                              args[3].astype(np.uint16), 6)
    assert pool16.masks == Pool.from_routes(*args).masks


@pytest.mark.parametrize("mutate, words", [
    (lambda a: ([-1, 2, 0], *a[1:]), "listed after"),
    (lambda a: ([-1, 1, 0], *a[1:]), "own parent"),
    (lambda a: ([-2, 0, 0], *a[1:]), "-1 for the root"),
    (lambda a: (a[0], [0.5, 1.5, 0.1], *a[2:]), "outside [0, 1]"),
    (lambda a: (a[0], [0.5, float("nan"), 0.1], *a[2:]), "outside [0, 1]"),
    (lambda a: (a[0], [-0.1, 0.5, 0.1], *a[2:]), "outside [0, 1]"),
    (lambda a: (a[0], [0.5, 0.1], *a[2:]), "probs has shape"),
    (lambda a: (*a[:3], np.where(a[3] == 5, 6, a[3]), 6), "outside [0, 6)"),
    (lambda a: (*a[:3], np.where(a[3] == 5, -1, a[3]), 6), "outside [0, 6)"),
    (lambda a: (*a[:2], np.array([[7, 1], [2, 3]]), a[3], 6), "root_routes: expert id 7"),
    (lambda a: (*a[:3], a[3][:2], 6), "node_routes has 2 nodes"),
    (lambda a: (*a[:3], a[3][:, :1], 6), "layers"),
    (lambda a: (*a[:3], a[3][0], 6), "3 dimension"),
    (lambda a: (*a[:4], 0), "num_experts"),
    (lambda a: (*a[:3], a[3].astype(float) + 0.5, 6), "integers"),
])
def test_illegal_pools_raise_invalid_input(mutate, words):
    with pytest.raises(InvalidInput, match=words.replace("[", r"\[").replace("(", r"\(")
                       .replace(")", r"\)")):
        Pool.from_routes(*mutate(small_args()))


def test_evaluate_rejects_illegal_sets():
    pool = Pool.from_routes(*small_args())
    cost = CostModel([1.0, 2.0, 3.0], 1.0)
    with pytest.raises(InvalidInput, match="ancestor"):
        evaluate(pool, [1], cost)
    with pytest.raises(InvalidInput, match="outside the pool"):
        evaluate(pool, [3], cost)
    with pytest.raises(InvalidInput, match="twice"):
        evaluate(pool, [0, 0], cost)
    with pytest.raises(InvalidInput, match=r"b\[3\]"):
        evaluate(pool, [0, 1, 2], cost)


@given(raw_pools(max_nodes=7), st.integers(0, 3))
def test_evaluate_matches_sets_on_every_legal_subset(raw, _):
    pool = Pool.from_routes(*raw.args())
    b, beta = [1.0 + j for j in range(raw.n + 1)], 0.5
    cost = CostModel(b, beta)
    for combo in legal_sets(raw, raw.n):
        r, f, t = score(raw, combo, b, beta)
        sel = evaluate(pool, combo, cost)
        assert (sel.nodes, sel.reward, sel.union, sel.time) == (combo, r, f, t)


@given(raw_pools(max_nodes=8), st.integers(0, 6))
def test_upto_level_keeps_the_prefix_of_levels(raw, d):
    pool = Pool.from_routes(*raw.args())
    sub, ids = pool.upto_level(d)
    assert list(ids) == [v for v in range(pool.n) if pool.levels[v] <= d]
    assert sub.n == len(ids) and sub.depth == min(d, pool.depth)
    cost = CostModel([1.0] * (pool.n + 1), 1.0)
    for i, v in enumerate(ids):
        assert sub.probs[i] == pool.probs[v] and sub.levels[i] == pool.levels[v]
        p = sub.parents[i]
        assert (p < 0 and pool.parents[v] < 0) or ids[p] == pool.parents[v]
    # the union of every node's chain is the same in both views
    for i, v in enumerate(ids):
        chain_sub = [j for j in range(sub.n) if sub.ancestors[i] >> j & 1]
        chain = [u for u in range(pool.n) if pool.ancestors[v] >> u & 1]
        assert evaluate(sub, chain_sub, cost).union == evaluate(pool, chain, cost).union


def test_upto_level_rejects_negative_level():
    with pytest.raises(InvalidInput, match="level"):
        Pool.from_routes(*small_args()).upto_level(-1)


def test_paper_shaped_pool_has_the_paper_shape():
    rng = np.random.default_rng(0)
    pool = paper_shaped_pool(rng)
    assert pool.n == 18 and pool.depth == 5 and pool.num_layers == 48 and pool.num_experts == 128
    assert pool.root_count == 48 * 8
    counts = np.bincount(pool.levels)
    assert counts[1] == 2 and counts.sum() == 18
    parents, probs, root, nodes, N = random_pool_arrays(rng)
    kids = np.bincount(np.asarray(parents) + 1)
    assert kids.max() <= 2                              # top-2 expansion
    for v, a in enumerate(parents):                     # path probabilities shrink
        assert a < 0 or probs[v] <= probs[a]
        assert len(set(nodes[v, 0])) == 8               # distinct top-8 experts


@given(raw_pools(max_nodes=8), st.integers(0, 6))
def test_credits_count_the_pairs_each_node_holds_first(raw, d):
    pool = Pool.from_routes(*raw.args())
    for p in (pool, pool.upto_level(d)[0]):
        seen, expected = 0, []
        for m in p.masks:
            expected.append((m & ~seen).bit_count())
            seen |= m
        assert list(p.credits) == expected
        assert sum(p.credits) + p.root_count == evaluate(
            p, range(p.n), CostModel([1.0] * (p.n + 1), 1.0)).union

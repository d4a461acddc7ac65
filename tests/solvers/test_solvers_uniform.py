"""Uniform pools (solvers.uniform: one probability, F a function of |S|) against brute force,
and the uniformity test against its definition (all pools synthetic)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from solvers_brute import RawPool, brute_linear, brute_ratio, legal_sets, score
from solvers_strategies import PROBS, instances, tie_pools

import solvers.exact as exact
from solvers import Pool, select_exact, select_marginal, select_max_linear
from solvers.uniform import is_uniform


@st.composite
def uniform_pools(draw, max_nodes: int = 14):
    """One probability for every node; routes distinct per node (k per layer, none shared),
    all one route (not the root's), or the root's; sometimes one node's probability one ulp
    off or one node sharing one expert with another (pools that are *not* uniform)."""
    n = draw(st.integers(1, max_nodes))
    L, k = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    shape = draw(st.sampled_from(["random", "star", "chain"]))
    if shape == "star":
        parents = [-1] * n
    elif shape == "chain":
        parents = [i - 1 for i in range(n)]
    else:
        parents = [draw(st.integers(-1, i - 1)) for i in range(n)]
    p = draw(PROBS)
    probs = [p] * n
    routes = draw(st.sampled_from(["distinct", "same", "root"]))
    N = k * (n + 2)
    root = np.tile(np.arange(k), (L, 1))
    if routes == "distinct":
        nodes = np.stack([np.tile(np.arange(k) + k * (v + 1), (L, 1)) for v in range(n)])
    elif routes == "same":
        nodes = np.tile(np.arange(k) + k * (n + 1), (n, L, 1))
    else:
        nodes = np.tile(root, (n, 1, 1))
    spoil = draw(st.sampled_from(["none", "none", "prob", "share", "overlap"]))
    v = draw(st.integers(0, n - 1))
    if spoil == "prob":
        probs[v] = float(np.nextafter(p, 2.0 if p < 1.0 else 0.0))
    elif spoil == "share" and n > 1 and routes == "distinct":
        nodes[v, 0, 0] = nodes[(v + 1) % n, 0, 0]      # one pair held by two nodes
    elif spoil == "overlap" and v > 0 and k == 2 and routes == "distinct":
        # every node one own expert per layer, node v also v − 1's: equal credits (pairs
        # first held), unequal bitmaps
        nodes[:, :, 1] = nodes[:, :, 0]
        nodes[v, :, 1] = nodes[v - 1, :, 0]
    return RawPool(parents, probs, root, nodes, N)


def _key(sel):
    return sel.nodes, sel.reward, sel.union, sel.time, sel.ratio


@settings(max_examples=150)
@given(st.data())
def test_uniform_pools_equal_brute_force(data):
    raw, K, b, beta, pool, cost = data.draw(instances(uniform_pools(), 9))
    want = brute_ratio(raw, K, b, beta)
    sel = select_exact(pool, K, cost)
    assert _key(sel) == want
    assert sel.exact and sel.upper_bound == sel.ratio
    lam = data.draw(st.sampled_from([0.0, 0.5, 1.0, 1.5])) * want[4]
    lin = select_max_linear(pool, K, cost, lam)
    want_lin = brute_linear(raw, K, b, beta, lam)
    assert lin.nodes == want_lin[0] and lin.reward - lam * lin.time == want_lin[1]
    if K > 0 and is_uniform(pool):
        # today's search finishes first on most small pools: without its budget the
        # uniform path answers
        saved, exact._FAST_WORK = exact._FAST_WORK, 0
        try:
            sel = select_exact(Pool.from_routes(*raw.args()), K, cost)
            lin = select_max_linear(Pool.from_routes(*raw.args()), K, cost, lam)
        finally:
            exact._FAST_WORK = saved
        assert sel.method == "uniform" and _key(sel) == want
        assert lin.method == "uniform" and lin.nodes == want_lin[0]
        assert lin.reward - lam * lin.time == want_lin[1]
    # a batched forward's free pairs: the marginal pool is uniform or not, the answer exact
    L = raw.root.shape[0]
    free_cells = data.draw(st.sets(st.tuples(st.integers(0, L - 1),
                                             st.integers(0, raw.N - 1)), max_size=4))
    free = np.zeros((L, raw.N), dtype=bool)
    for layer, e in free_cells:
        free[layer, e] = True
    marg = select_marginal(pool, K, cost, free)
    assert _key(marg) == brute_ratio(raw, K, b, beta, frozenset(free_cells))


def _sizes_tie(raw: RawPool, pool: Pool, K: int) -> bool:
    """Every legal set of a size has the same canonical R̂ and F (what uniformity claims);
    R̂ summed from 1.0 over ascending ids, F from the raw routes."""
    seen: dict[int, tuple] = {}
    for combo in legal_sets(raw, K):
        r, f, _ = score(raw, combo, [1.0] * (K + 1), 0.0)
        if seen.setdefault(len(combo), (r, f)) != (r, f):
            return False
    return True


@settings(max_examples=150)
@given(st.data())
def test_a_pool_called_uniform_ties_within_every_size(data):
    raw = data.draw(st.one_of(uniform_pools(max_nodes=10), tie_pools(max_nodes=10)))
    pool = Pool.from_routes(*raw.args())
    if is_uniform(pool):
        assert _sizes_tie(raw, pool, raw.n)


def test_pools_that_are_not_uniform_are_refused():
    parents = [-1, 0, 0, 1]
    root = np.array([[0]])
    distinct = np.array([[[1]], [[2]], [[3]], [[4]]])
    assert is_uniform(Pool.from_routes(parents, [0.25] * 4, root, distinct, 5))
    assert is_uniform(Pool.from_routes(parents, [0.25] * 4, root, np.full((4, 1, 1), 3), 5))
    off = [0.25, 0.25, float(np.nextafter(0.25, 1.0)), 0.25]
    assert not is_uniform(Pool.from_routes(parents, off, root, distinct, 5))
    shared = np.array([[[1, 2]], [[3, 4]], [[1, 3]], [[5, 6]]])     # equal popcounts, overlap
    assert not is_uniform(Pool.from_routes(parents, [0.25] * 4, root, shared, 7))
    # equal credits (1 pair first held each), but node 2 also holds node 0's pair
    overlap = np.array([[[1, 1]], [[2, 2]], [[1, 3]], [[4, 4]]])
    assert not is_uniform(Pool.from_routes(parents, [0.25] * 4, root, overlap, 5))
    uneven = np.array([[[1, 1]], [[2, 3]], [[4, 5]], [[6, 7]]])     # disjoint, popcounts 1, 2
    assert not is_uniform(Pool.from_routes(parents, [0.25] * 4, root, uneven, 8))
    assert not is_uniform(Pool.from_routes([], [], root, np.zeros((0, 1, 1), int), 5))

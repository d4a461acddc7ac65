"""The closure-bounded search (solvers.lagrangian) and the marginal selection, against brute
force, plain enumeration and today's branch and bound (every pool here is synthetic)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from solvers_brute import RawPool, brute_linear, brute_ratio
from solvers_strategies import instances, raw_pools, shaped_costs, shaped_pools

from solvers import CostModel, InvalidInput, Pool, select_exact, select_marginal, select_max_linear
from solvers.exact import (
    branch_and_bound_linear,
    branch_and_bound_ratio,
    enumerate_linear,
    enumerate_ratio,
)
from solvers.lagrangian import lagrangian_linear, lagrangian_ratio
from solvers.random_pools import paper_shaped_pool, random_pool_arrays

APP_B = [142.214, 147.532, 150.522, 152.269, 152.743, 163.204, 155.175, 156.068]


def resident(K):
    return CostModel([142.0 + 0.5 * j for j in range(K + 1)], 0.02)


def offload(K):
    return CostModel((APP_B + [APP_B[-1] + 2.0 * (j - 7) for j in range(8, K + 1)])[:K + 1],
                     0.210715513)


def same(sel, ref):
    """Same set and the same canonical numbers (the tie rule makes the winner unique)."""
    assert (sel.nodes, sel.reward, sel.union, sel.time, sel.ratio) == \
        (ref.nodes, ref.reward, ref.union, ref.time, ref.ratio)


@given(st.data())
def test_ratio_equals_brute_force(data):
    raw, K, b, beta, pool, cost = data.draw(instances(raw_pools(max_nodes=9), 10))
    sel = lagrangian_ratio(pool, K, cost)
    nodes, r, f, t, q = brute_ratio(raw, K, b, beta)
    assert (sel.nodes, sel.reward, sel.union, sel.time, sel.ratio) == (nodes, r, f, t, q)
    assert sel.exact and sel.upper_bound == sel.ratio


@given(st.data())
def test_linear_equals_brute_force(data):
    raw, K, b, beta, pool, cost = data.draw(instances(raw_pools(max_nodes=9), 10))
    lam = data.draw(st.one_of(st.sampled_from([0.0, 0.1, 0.25, 1.0]), st.floats(0.0, 2.0)))
    sel = lagrangian_linear(pool, K, cost, lam)
    nodes, value = brute_linear(raw, K, b, beta, lam)
    assert sel.nodes == nodes
    assert sel.reward - lam * sel.time == value == sel.upper_bound


@settings(max_examples=40, deadline=None)
@given(shaped_pools(max_nodes=18), st.data())
def test_equals_plain_enumeration_on_shaped_pools(drawn, data):
    _, pool = drawn
    K = data.draw(st.integers(0, 8))
    cost = data.draw(shaped_costs(K))
    ref = enumerate_ratio(pool, K, cost)
    same(lagrangian_ratio(pool, K, cost), ref)
    lam = ref.ratio * data.draw(st.sampled_from([0.0, 0.5, 1.0, 1.2]))
    same(lagrangian_linear(pool, K, cost, lam), enumerate_linear(pool, K, cost, lam))


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([16, 24, 40]), st.integers(4, 16),
       st.sampled_from(["resident", "offload", "flat"]))
def test_equals_todays_search_on_larger_pools(seed, nodes, K, kind):
    # pools where the size limit binds (flat probabilities) or not; today's search still
    # finishes on them
    rng = np.random.default_rng(seed)
    parents, probs, root, routes, N = random_pool_arrays(rng, nodes=nodes, depth=4, expand=4,
                                                         L=8, N=32, k=4)
    if kind == "flat":
        probs = rng.uniform(0.2, 1.0, len(parents))
    pool = Pool.from_routes(parents, probs, root, routes, N)
    cost = offload(K) if kind == "offload" else resident(K)
    ref = branch_and_bound_ratio(pool, K, cost)
    same(lagrangian_ratio(pool, K, cost), ref)
    same(select_exact(pool, K, cost), ref)
    lam = ref.ratio * 0.9
    ref_lin = branch_and_bound_linear(pool, K, cost, lam)
    same(lagrangian_linear(pool, K, cost, lam), ref_lin)
    same(select_max_linear(pool, K, cost, lam), ref_lin)


@pytest.mark.parametrize("seed, nodes, K, cost", [
    (0, 48, 32, resident(32)), (1, 64, 32, offload(32)), (2, 64, 16, resident(16)),
])
def test_evict_shaped_pools_agree_with_todays_search(seed, nodes, K, cost):
    # top-8 expansion, depth 4: the shape of the benchmark's EVICT pools, at a size where
    # today's search still finishes in a second or so
    rng = np.random.default_rng(seed)
    for _ in range(2):
        pool = paper_shaped_pool(rng, nodes, depth=4, expand=8)
        sel = select_exact(pool, K, cost)
        same(sel, branch_and_bound_ratio(pool, K, cost))
        assert sel.exact and sel.upper_bound == sel.ratio


def stress_pool(seed, nodes=64):
    rng = np.random.default_rng(seed)
    parents, _p, root, routes, N = random_pool_arrays(rng, nodes=nodes, depth=8)
    probs = rng.uniform(0.2, 1.0, len(parents))      # the size limit binds hard
    return Pool.from_routes(parents, probs, root, routes, N)


def test_a_time_limit_returns_a_certified_bound():
    pool = stress_pool(0)
    cost = CostModel(offload(16).b, 0.02)
    best = select_exact(pool, 16, cost)
    assert best.exact
    # a limit far below the time of the first flows: the selection stops before them or at
    # the search's first look at the clock (this pool needs thousands of states)
    for method in (select_exact, lagrangian_ratio):
        sel = method(pool, 16, cost, time_limit=1e-9)
        assert not sel.exact
        assert pool.is_legal(sel.nodes) and len(sel.nodes) <= 16
        assert sel.ratio <= best.ratio <= sel.upper_bound
    lam = best.ratio
    opt = select_max_linear(pool, 16, cost, lam)
    sel = select_max_linear(pool, 16, cost, lam, time_limit=1e-9)
    assert not sel.exact
    value = sel.reward - lam * sel.time
    assert value <= opt.reward - lam * opt.time <= sel.upper_bound


def test_time_limits_are_validated():
    pool = paper_shaped_pool(np.random.default_rng(0))
    cost = offload(7)
    for bad in (0, -1.0, float("nan"), float("inf"), "1", True):
        with pytest.raises(InvalidInput, match="time_limit"):
            select_exact(pool, 7, cost, time_limit=bad)
        with pytest.raises(InvalidInput, match="time_limit"):
            lagrangian_linear(pool, 7, cost, 0.01, time_limit=bad)
    assert select_exact(pool, 7, cost, time_limit=5.0) == select_exact(pool, 7, cost)


@st.composite
def free_sets(draw, raw: RawPool):
    """Free pairs as a bitmap or as per-layer sets (both input forms of select_marginal)."""
    L = raw.root.shape[0]
    bitmap = np.zeros((L, raw.N), dtype=bool)
    mode = draw(st.sampled_from(["none", "some", "root", "all"]))
    if mode == "all":
        bitmap[:] = True
    elif mode == "root":
        for layer in range(L):
            bitmap[layer, raw.root[layer]] = True
    elif mode == "some":
        bitmap = np.array([[draw(st.booleans()) for _ in range(raw.N)] for _ in range(L)],
                          dtype=bool).reshape(L, raw.N)
    pairs = frozenset((int(a), int(e)) for a, e in zip(*np.nonzero(bitmap), strict=True))
    if draw(st.booleans()):
        return bitmap, pairs
    return [set(np.flatnonzero(bitmap[layer]).tolist()) for layer in range(L)], pairs


@given(st.data())
def test_marginal_selection_equals_brute_force(data):
    raw, K, b, beta, pool, cost = data.draw(instances(raw_pools(max_nodes=8), 9))
    free, pairs = data.draw(free_sets(raw))
    sel = select_marginal(pool, K, cost, free)
    assert (sel.nodes, sel.reward, sel.union, sel.time, sel.ratio) == \
        brute_ratio(raw, K, b, beta, pairs)
    lam = data.draw(st.sampled_from([0.0, 0.1, 0.5]))
    lin = select_marginal(pool, K, cost, free, lam=lam)
    nodes, value = brute_linear(raw, K, b, beta, lam, pairs)
    assert lin.nodes == nodes and lin.reward - lam * lin.time == value
    # the closure-bounded search on the marginal pool agrees as well
    same(lagrangian_ratio(pool.with_free(free), K, cost), sel)


def test_marginal_selection_on_an_evict_shaped_pool():
    rng = np.random.default_rng(4)
    pool = paper_shaped_pool(rng, 64, depth=4, expand=8)
    cost = resident(32)
    other = select_exact(pool, 32, cost)
    # the experts of another request's selection (here: this pool's own) are free
    free = np.zeros((pool.num_layers, pool.num_experts), dtype=bool)
    flat = list(pool.root_pairs)
    for v in other.nodes:
        bits = pool.masks[v]
        flat += [int(pool.pair_ids[i]) for i in range(bits.bit_length()) if bits >> i & 1]
    free.reshape(-1)[flat] = True
    sel = select_marginal(pool, 32, cost, free)
    assert sel.union == _marginal_union(pool, sel.nodes, free)
    assert sel.ratio >= other.reward / cost.b[len(other.nodes)]      # those nodes are free now
    same(sel, branch_and_bound_ratio(pool.with_free(free), 32, cost))


def _marginal_union(pool, nodes, free):
    """|(root ∪ nodes) \\ free| from the pair ids (independent of with_free)."""
    flat = set(int(x) for x in pool.root_pairs)
    for v in nodes:
        bits = pool.masks[v]
        flat |= {int(pool.pair_ids[i]) for i in range(bits.bit_length()) if bits >> i & 1}
    return len(flat - set(np.flatnonzero(free.reshape(-1)).tolist()))


@pytest.mark.parametrize("free, words", [
    (np.zeros((2, 3), dtype=bool), r"shape \(1, 2\)"),
    ([{0}, {1}], "2 layers"),
    ([{5}], "outside"),
    ([{-1}], "outside"),
    ([{0.5}], "non-integer"),
    ([["a"]], "layer 0"),
    (3, "free must be"),
])
def test_bad_free_sets_raise_invalid_input(free, words):
    pool = Pool.from_routes([-1, 0], [0.5, 0.5], np.array([[0]]), np.array([[[1]], [[1]]]), 2)
    cost = CostModel([1.0, 1.0, 1.0], 0.5)
    with pytest.raises(InvalidInput, match=words):
        select_marginal(pool, 2, cost, free)


def test_with_free_needs_the_pair_map():
    base = Pool.from_routes([-1], [0.5], np.array([[0]]), np.array([[[1]]]), 2)
    bare = Pool(base.parents, base.probs, base.levels, 1, 2, base.root_count, base.masks)
    with pytest.raises(InvalidInput, match="from_routes"):
        bare.with_free([set()])
    with pytest.raises(InvalidInput, match="only used"):
        select_marginal(base, 1, CostModel([1.0, 1.0], 0.5), [set()], lam=0.1, start=[0])


class _solver_first:
    """Hand every selection to the MILP (or CP-SAT) after one search state."""

    def __init__(self, solver: str = "milp"):
        self.solver = solver

    def __enter__(self):
        import solvers.closure_search as cs
        import solvers.exact as ex
        self.saved = (ex._FAST_WORK, ex._SEARCH_STATES, ex._SOLVERS, ex._MILP_SECONDS,
                      cs._CLOCK_EVERY)
        ex._FAST_WORK, ex._SEARCH_STATES, cs._CLOCK_EVERY = 0, 0, 1
        ex._SOLVERS, ex._MILP_SECONDS = (self.solver,), 60.0
        return self

    def __exit__(self, *exc):
        import solvers.closure_search as cs
        import solvers.exact as ex
        (ex._FAST_WORK, ex._SEARCH_STATES, ex._SOLVERS, ex._MILP_SECONDS,
         cs._CLOCK_EVERY) = self.saved


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_the_milp_is_exact_under_the_tie_rule(data):
    raw, K, b, beta, pool, cost = data.draw(instances(raw_pools(max_nodes=8, min_nodes=1), 8, min_K=1))
    with _solver_first("milp"):
        sel = select_exact(pool, K, cost)
        lam = data.draw(st.sampled_from([0.0, 0.1, 0.5]))
        lin = select_max_linear(pool, K, cost, lam)
    assert (sel.nodes, sel.reward, sel.union, sel.time, sel.ratio) == brute_ratio(raw, K, b, beta)
    nodes, value = brute_linear(raw, K, b, beta, lam)
    assert lin.nodes == nodes and lin.reward - lam * lin.time == value


def test_cp_sat_on_a_clique_instance():
    # Prop. 2's pools: every r-clique ties; the closure search alone visits ~10^5 states
    # here, the MILP compares the tied sets one at a time, CP-SAT enumerates them at once
    import networkx as nx

    from solvers import clique_instance
    inst = clique_instance(nx.gnp_random_graph(11, 0.6, seed=3), 4)
    ref = branch_and_bound_ratio(inst.pool, inst.K, inst.cost)
    with _solver_first("cp-sat"):
        sel = select_exact(inst.pool, inst.K, inst.cost)
    same(sel, ref)
    assert sel.method == "cp-sat"
    same(select_exact(inst.pool, inst.K, inst.cost), ref)

"""Closure without the size limit by minimum cut (App. A.3) against brute force."""

from __future__ import annotations


import numpy as np
import pytest
from hypothesis import given, strategies as st

from solvers import CostModel, InvalidInput, Pool, affine_approximation, largest_ratio, max_closure
from solvers_brute import all_scores
from solvers_strategies import affine_costs, raw_pools


def rel_close(a, b, tol=1e-9):
    return abs(a - b) <= tol * max(1.0, abs(a), abs(b))


@given(st.data())
def test_max_closure_reaches_the_brute_force_optimum(data):
    raw = data.draw(raw_pools(max_nodes=8))
    b, beta = data.draw(affine_costs(raw.n))
    lam = data.draw(st.one_of(st.sampled_from([0.0, 0.05, 0.2, 1.0]), st.floats(0.0, 3.0)))
    pool = Pool.from_routes(*raw.args())
    cost = CostModel(b, beta)
    scores = all_scores(raw, raw.n, b, beta)
    best = max(r - lam * t for _c, r, _f, t in scores)
    sel = max_closure(pool, lam, cost)
    assert pool.is_legal(sel.nodes)
    assert rel_close(sel.reward - lam * sel.time, best)
    # the minimal optimal closure: no strictly smaller optimal closure exists (where the
    # weights are resolvable: a probability of 1e-175 vanishes next to R̂ = 1 in floats)
    slope = b[1] - b[0] if len(b) > 1 else 0.0
    resolvable = all(p == 0 or p > 1e-6 for p in raw.probs) and \
        all(abs(p - lam * slope) > 1e-9 for p in raw.probs)
    for combo, r, _f, t in scores if resolvable else []:
        if set(combo) < set(sel.nodes):
            assert not rel_close(r - lam * t, best) or r - lam * t < best


@given(st.data())
def test_largest_ratio_and_breakpoints(data):
    raw = data.draw(raw_pools(max_nodes=7))
    b, beta = data.draw(affine_costs(raw.n))
    pool = Pool.from_routes(*raw.args())
    cost = CostModel(b, beta)
    scores = all_scores(raw, raw.n, b, beta)
    sel, bps = largest_ratio(pool, cost)
    assert rel_close(sel.ratio, max(r / t for _c, r, _f, t in scores))
    assert len(bps) <= pool.n and bps == sorted(bps)

    def g(lam):
        return max(r - lam * t for _c, r, _f, t in scores)

    def slope(lam):   # -T of the optimal sets at lam (largest T among ties = left slope)
        best = g(lam)
        return -max(t for _c, r, _f, t in scores if rel_close(r - lam * t, best, 1e-12))

    # g is linear between consecutive breakpoints, and bends at each of them
    edges = [0.0, *bps, (bps[-1] * 2 + 1.0) if bps else 1.0]
    for lo, hi in zip(edges, edges[1:]):
        mid = (lo + hi) / 2
        assert rel_close(g(mid), (g(lo) + g(hi)) / 2, 1e-7)
    for x in bps:
        if x > 1e6:   # g ~ −λT̂ there: a bend of eps·ΔT̂ is below float resolution
            continue
        eps = 1e-6 * max(1.0, x)
        assert g(x - eps) + g(x + eps) - 2 * g(x) > 1e-12 * max(1.0, abs(g(x)))


def test_non_affine_intercepts_are_rejected_and_can_be_approximated():
    pool = Pool.from_routes([-1, 0], [0.5, 0.5], np.array([[0]]), np.array([[[1]], [[2]]]), 3)
    fitted = CostModel([142.214, 147.532, 150.522, 152.269], 0.21)
    with pytest.raises(InvalidInput, match="affine"):
        max_closure(pool, 0.01, fitted)
    with pytest.raises(InvalidInput, match="nondecreasing"):
        largest_ratio(pool, CostModel([3.0, 2.0, 1.0], 0.5))
    with pytest.raises(InvalidInput, match="lam"):
        max_closure(pool, -1.0, CostModel([1.0], 0.5))
    line = affine_approximation(fitted, 10)
    assert len(line.b) == 11 and line.beta == fitted.beta
    assert max_closure(pool, 0.01, line).nodes in {(), (0,), (0, 1)}


def test_integer_scaling_holds_for_tiny_and_huge_magnitudes():
    rng = np.random.default_rng(3)
    from solvers.random_pools import random_pool_arrays
    args = random_pool_arrays(rng, nodes=9, depth=3, L=3, N=8, k=2)
    pool = Pool.from_routes(*args)
    from solvers_brute import RawPool
    raw = RawPool(list(args[0]), list(args[1]), args[2], args[3], args[4])
    for scale in (1e-6, 1.0, 1e6):
        b = [scale * (2.0 + 0.1 * j) for j in range(10)]
        beta = scale * 0.05
        cost = CostModel(b, beta)
        scores = all_scores(raw, raw.n, b, beta)
        sel, _ = largest_ratio(pool, cost)
        assert rel_close(sel.ratio, max(r / t for _c, r, _f, t in scores))


def breakpoints_without_contraction(net):
    """Eisner–Severance with a full min cut per step (reference for the contracted version)."""
    unit = min([x for x in (net.slope, net.cost.beta) if x > 0], default=0.0)
    lam_hi = (1.0 + float(net.probs.sum())) / unit + 1.0
    lines = {}

    def line(lam):
        nodes = net.solve(lam)
        return lines.setdefault(nodes, net.selection(nodes))

    out, stack = [], [(line(0.0), line(lam_hi))]
    while stack:
        a, b = stack.pop()
        if a.nodes == b.nodes or a.time == b.time:
            continue
        x = (a.reward - b.reward) / (a.time - b.time)
        c = line(x)
        if c.nodes in (a.nodes, b.nodes) or \
                c.reward - x * c.time <= a.reward - x * a.time + 1e-12 * (1 + abs(a.reward)):
            out.append(x)
        else:
            stack += [(a, c), (c, b)]
    return sorted(out)


@pytest.mark.parametrize("seed, nodes", [(0, 40), (1, 80), (2, 120)])
def test_contracted_breakpoints_equal_full_cuts(seed, nodes):
    from solvers.closure import ClosureNetwork
    from solvers.random_pools import random_pool_arrays
    rng = np.random.default_rng(seed)
    pool = Pool.from_routes(*random_pool_arrays(rng, nodes=nodes, depth=8, L=8, N=32, k=4))
    cost = CostModel([20.0 + 0.5 * j for j in range(nodes + 1)], 0.2)
    _sel, bps = largest_ratio(pool, cost)
    ref = breakpoints_without_contraction(ClosureNetwork(pool, cost))
    assert len(bps) == len(ref) and len(bps) <= pool.n
    assert all(rel_close(x, y, 1e-9) for x, y in zip(bps, ref))

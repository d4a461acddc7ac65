"""Closure without the size limit by minimum cut (App. A.3) against brute force."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from solvers_brute import RawPool, all_scores
from solvers_strategies import affine_costs, raw_pools

from solvers import CostModel, InvalidInput, Pool, affine_approximation, largest_ratio, max_closure


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


@st.composite
def pools_with_affine_costs(draw):
    raw = draw(raw_pools(max_nodes=7))
    b, beta = draw(affine_costs(raw.n))
    return raw, b, beta


# a real breakpoint (λ ≈ 688,969) whose bend, a slope change of 5.7e-9, is tiny
TINY_BEND = (RawPool([-1], [0.00390625], np.array([[1]]), np.array([[[1]]]), 2),
             [1.0, 1.0000000056697034], 0.0)


@given(pools_with_affine_costs())
@example(TINY_BEND)
def test_largest_ratio_and_breakpoints(case):
    raw, b, beta = case
    pool = Pool.from_routes(*raw.args())
    cost = CostModel(b, beta)
    scores = all_scores(raw, raw.n, b, beta)
    sel, bps = largest_ratio(pool, cost)
    assert rel_close(sel.ratio, max(r / t for _c, r, _f, t in scores))
    assert len(bps) <= pool.n and bps == sorted(bps)

    def g(lam):
        return max(r - lam * t for _c, r, _f, t in scores)

    def optimal_time(lam, pick):
        # T̂ of the maximizers of R̂ − λT̂ at lam (exact ties: ``pick`` of their T̂)
        best = g(lam)
        return pick(t for _c, r, _f, t in scores if r - lam * t == best)

    # g is linear between consecutive breakpoints, and bends at each of them
    edges = [0.0, *bps, (bps[-1] * 2 + 1.0) if bps else 1.0]
    for lo, hi in zip(edges, edges[1:], strict=False):
        mid = (lo + hi) / 2
        assert rel_close(g(mid), (g(lo) + g(hi)) / 2, 1e-7)
    t_max = max(t for _c, _r, _f, t in scores)
    for x in bps:
        if x > 1e6:   # g ~ −λT̂ there: a bend of eps·ΔT̂ is below float resolution
            continue
        eps = 1e-6 * max(1.0, x)
        # the slope of g changes by `bend` across x: the second difference is eps·bend,
        # up to the rounding of the three values of g (a few ulps of λT̂ each)
        bend = optimal_time(x - eps, max) - optimal_time(x + eps, min)
        noise = 2.0 ** -49 * max(1.0, x * t_max)      # 8 ulps of λT̂
        if eps * bend <= 2 * noise:
            continue      # below what floating point resolves at this λ
        assert g(x - eps) + g(x + eps) - 2 * g(x) > 0.5 * eps * bend


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
    assert all(rel_close(x, y, 1e-9) for x, y in zip(bps, ref, strict=True))

"""Selection when experts are computed on the CPU (solvers.cpu_cost, solvers.cpu_exact),
against a brute force that prices every subtree from the raw routes."""

from __future__ import annotations

import itertools
import math
from contextlib import contextmanager

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from solvers_brute import RawPool, legal_sets
from solvers_strategies import raw_pools, tie_pools

from solvers import CostModel, InvalidInput, cpu_exact, evaluate, select_exact, select_max_linear
from solvers import cpu_cost as cpu_cost_module
from solvers.cpu_cost import CpuCostModel, RoutedPool, cpu_evaluate, cpu_view
from solvers.cpu_exact import (
    cpu_dinkelbach,
    select_exact_cpu,
    select_marginal_cpu,
    select_max_linear_cpu,
)
from solvers.cpu_relax import BranchBound, specfit_relaxation
from solvers.random_pools import random_routes, random_tree_shape


def priced(raw: RawPool, combo, b, read, compute, on_cpu, others=None):
    """(R̂, F, T) of a set from the raw routes: token counts per (layer, expert) with Python
    dicts, each pair max(r, g·n), summed with math.fsum (the canonical sum).  ``others``:
    the rest of the forward's tokens [L, N]: a pair then costs c(m + n) − c(m) and counts
    in F only when m = 0."""
    L = raw.root.shape[0]
    counts: dict = {}
    for route in [raw.root] + [raw.nodes[v] for v in combo]:
        for layer in range(L):
            for e in set(int(x) for x in route[layer]):
                counts[layer, e] = counts.get((layer, e), 0) + 1
    m = (lambda pair: 0) if others is None else (lambda pair: int(others[pair]))

    def c(pair, n):
        return max(read[pair], compute[pair] * n) if n else 0.0

    f = sum(1 for pair in counts if on_cpu[pair] and m(pair) == 0)
    cpu = math.fsum(c(pair, m(pair) + n) - c(pair, m(pair)) for pair, n in counts.items()
                    if read[pair] > 0 or compute[pair] > 0)
    r = 1.0
    for v in combo:
        r += float(raw.probs[v])
    return r, f, float(b[len(combo)]) + cpu


def brute(raw: RawPool, K: int, b, read, compute, on_cpu, lam=None, others=None):
    """(nodes, R̂, F, T) of the tie-rule winner of Eq. 5 (or of R̂ − λT) over A_K."""
    best = None
    for combo in legal_sets(raw, K):
        r, f, t = priced(raw, combo, b, read, compute, on_cpu, others)
        key = (r / t if lam is None else r - lam * t, r, -f, -len(combo))
        if best is None or key > best[0] or (key == best[0] and combo < best[1]):
            best = (key, combo, r, f, t)
    return best[1:]


@st.composite
def cpu_costs(draw, L: int, N: int, K: int):
    """(b, read, compute, on_cpu as [L, N] arrays for the brute force, the CpuCostModel):
    rates as one number, one per layer or one per expert, small values that tie often,
    read-bound, compute-bound or mixed; the experts all on the CPU, by layer or by expert,
    the GPU's free or priced."""
    if draw(st.booleans()):
        b = [float(draw(st.integers(1, 4))) for _ in range(K + 1)]
    else:
        b = [draw(st.floats(0.1, 10.0)) for _ in range(K + 1)]
    rate = st.one_of(st.sampled_from([0.0, 0.25, 0.5, 1.0]), st.floats(0.0, 2.0))

    def rates():
        kind = draw(st.sampled_from(["one", "layer", "expert"]))
        if kind == "one":
            x = draw(rate)
            return x, np.full((L, N), x)
        if kind == "layer":
            v = np.array([draw(rate) for _ in range(L)])
            return v, np.repeat(v[:, None], N, axis=1)
        v = np.array([[draw(rate) for _ in range(N)] for _ in range(L)])
        return v, v

    read, read_full = rates()
    compute, compute_full = rates()
    place = draw(st.sampled_from(["all", "layer", "expert"]))
    if place == "all":
        on_cpu, cpu_full = None, np.ones((L, N), dtype=bool)
    elif place == "layer":
        on_cpu = np.array([draw(st.booleans()) for _ in range(L)])
        cpu_full = np.repeat(on_cpu[:, None], N, axis=1)
    else:
        on_cpu = np.array([[draw(st.booleans()) for _ in range(N)] for _ in range(L)])
        cpu_full = on_cpu
    gpu = draw(st.sampled_from([0.0, 0.125]))
    cost = CpuCostModel(b, read, compute, on_cpu=on_cpu, gpu_read=gpu, gpu_compute=gpu / 4)
    r_eff = np.where(cpu_full, read_full, gpu)
    g_eff = np.where(cpu_full, compute_full, gpu / 4)
    return b, r_eff, g_eff, cpu_full, cost


def routed(raw: RawPool) -> RoutedPool:
    return RoutedPool.from_routes(*raw.args())


def check(sel, ref):
    nodes, r, f, t = ref
    assert sel.nodes == nodes
    assert (sel.reward, sel.union, sel.time, sel.ratio) == (r, f, t, r / t)


@contextmanager
def way(mode):
    """Every way to the answer: the Eq. 4 relaxation where it applies (True), the search alone
    (False), and the search alone counting tokens per pair where the cost is flat too ("counts":
    no ``FlatCost``)."""
    saved = cpu_exact._SPECFIT_PATH, cpu_cost_module._FLAT
    cpu_exact._SPECFIT_PATH = mode is True
    cpu_cost_module._FLAT = mode != "counts"
    try:
        yield
    finally:
        cpu_exact._SPECFIT_PATH, cpu_cost_module._FLAT = saved


BOTH = pytest.mark.parametrize("relax", [True, False, "counts"], ids=["relaxation", "search-only", "counts"])


@BOTH
@settings(deadline=None)
@given(st.data())
def test_ratio_equals_brute_force(relax, data):
    raw = data.draw(raw_pools(max_nodes=8))
    K = data.draw(st.integers(0, 8))
    L, N = raw.root.shape[0], raw.N
    b, r, g, cpu, cost = data.draw(cpu_costs(L, N, K))
    with way(relax):
        sel = select_exact_cpu(routed(raw), K, cost)
    check(sel, brute(raw, K, b, r, g, cpu))


@BOTH
@settings(deadline=None)
@given(st.data())
def test_ties_on_pools_of_up_to_14_nodes(relax, data):
    # pools built to tie (one probability, shared or distinct experts, twins): the tie
    # rule of §3.3 (ratio, larger R̂, smaller F, fewer nodes, smaller ids) picks one
    raw = data.draw(tie_pools(max_nodes=14))
    K = data.draw(st.integers(0, 4))
    L, N = raw.root.shape[0], raw.N
    b, r, g, cpu, cost = data.draw(cpu_costs(L, N, K))
    with way(relax):
        sel = select_exact_cpu(routed(raw), K, cost)
    check(sel, brute(raw, K, b, r, g, cpu))


@BOTH
@settings(deadline=None)
@given(st.data())
def test_linear_equals_brute_force(relax, data):
    raw = data.draw(st.one_of(raw_pools(max_nodes=8), tie_pools(max_nodes=10)))
    K = data.draw(st.integers(0, 5))
    L, N = raw.root.shape[0], raw.N
    b, r, g, cpu, cost = data.draw(cpu_costs(L, N, K))
    lam = data.draw(st.one_of(st.sampled_from([0.0, 0.25, 1.0]), st.floats(0.0, 3.0)))
    nodes, rr, f, t = brute(raw, K, b, r, g, cpu, lam)
    with way(relax):
        sel = select_max_linear_cpu(routed(raw), K, cost, lam)
    assert sel.nodes == nodes
    assert sel.reward - lam * sel.time == rr - lam * t


@BOTH
@settings(deadline=None)
@given(st.data())
def test_marginal_equals_brute_force(relax, data):
    # the rest of a batched forward routes m tokens to some experts: this request pays
    # c(m + n) − c(m) for them, and they do not count in F
    raw = data.draw(st.one_of(raw_pools(max_nodes=8), tie_pools(max_nodes=10)))
    K = data.draw(st.integers(0, 5))
    L, N = raw.root.shape[0], raw.N
    b, r, g, cpu, cost = data.draw(cpu_costs(L, N, K))
    others = np.array([[data.draw(st.sampled_from([0, 0, 1, 2, 5])) for _ in range(N)]
                       for _ in range(L)])
    lam = data.draw(st.one_of(st.none(), st.floats(0.0, 3.0)))
    with way(relax):
        sel = select_marginal_cpu(routed(raw), K, cost, others, lam=lam)
    ref = brute(raw, K, b, r, g, cpu, lam, others)
    if lam is None:
        check(sel, ref)
    else:
        assert sel.nodes == ref[0]
        assert sel.reward - lam * sel.time == ref[1] - lam * ref[3]


@st.composite
def flat_costs(draw, L: int, N: int, K: int):
    """Costs that stay read-bound (g·n <= r up to K + 1 tokens and more) with a few read times per
    layer, per expert or one, on the CPU and on the GPU: the weighted union of ``FlatCost``."""
    b = [draw(st.floats(0.1, 10.0)) for _ in range(K + 1)]
    values = draw(st.lists(st.sampled_from([0.25, 0.5, 0.75, 1.0, 0.3125, 0.1]), min_size=1, max_size=3))
    kind = draw(st.sampled_from(["one", "layer", "expert"]))
    if kind == "one":
        read = values[0]
        read_full = np.full((L, N), read)
    elif kind == "layer":
        read = np.array([draw(st.sampled_from(values)) for _ in range(L)])
        read_full = np.repeat(read[:, None], N, axis=1)
    else:
        read = np.array([[draw(st.sampled_from(values)) for _ in range(N)] for _ in range(L)])
        read_full = read
    g = min(values) / draw(st.sampled_from([16, 64]))
    on_cpu = None if draw(st.booleans()) else np.array([draw(st.booleans()) for _ in range(L)])
    cpu_full = np.ones((L, N), dtype=bool) if on_cpu is None else np.repeat(on_cpu[:, None], N, axis=1)
    gpu = draw(st.sampled_from([0.0, 0.0625]))
    cost = CpuCostModel(b, read, g, on_cpu=on_cpu, gpu_read=gpu, gpu_compute=gpu / 64)
    return b, np.where(cpu_full, read_full, gpu), np.where(cpu_full, g, gpu / 64), cpu_full, cost


@settings(deadline=None)
@given(st.data())
def test_flat_costs_equal_brute_force(data):
    # the weighted union of FlatCost (bitmaps, sums in integers) against the brute force, alone
    # and in a batched forward, for the ratio, the linear objective and every subtree's price
    raw = data.draw(st.one_of(raw_pools(max_nodes=8), tie_pools(max_nodes=10)))
    K = data.draw(st.integers(0, 6))
    L, N = raw.root.shape[0], raw.N
    b, r, g, cpu, cost = data.draw(flat_costs(L, N, K))
    others = None
    if data.draw(st.booleans()):
        others = np.array([[data.draw(st.sampled_from([0, 0, 1, 2])) for _ in range(N)] for _ in range(L)])
    rp = routed(raw)
    view = cpu_view(rp, cost, None if others is None else others.reshape(-1).astype(np.int64))
    assert view.flat is not None and view.flat.k_max >= min(K, rp.n)
    if others is None:
        check(select_exact_cpu(rp, K, cost), brute(raw, K, b, r, g, cpu))
        for combo in itertools.islice(legal_sets(raw, K), 40):
            sel = cpu_evaluate(rp, combo, cost)
            assert (sel.reward, sel.union, sel.time) == priced(raw, combo, b, r, g, cpu)
    else:
        check(select_marginal_cpu(rp, K, cost, others), brute(raw, K, b, r, g, cpu, others=others))
    lam = data.draw(st.floats(0.0, 3.0))
    nodes, rr, _f, t = brute(raw, K, b, r, g, cpu, lam, others)
    sel = select_max_linear_cpu(rp, K, cost, lam) if others is None else \
        select_marginal_cpu(rp, K, cost, others, lam=lam)
    assert sel.nodes == nodes and sel.reward - lam * sel.time == rr - lam * t


@settings(deadline=None)
@given(st.data())
def test_a_level_prefix_selects_as_a_pool_built_anew(data):
    # RoutedPool.upto_level slices the pool and the views already built for it (ids listed level by
    # level) or builds V≤d anew (other orders): the same answers as V≤d from its routes
    raw = data.draw(raw_pools(max_nodes=9, min_nodes=1))
    K = data.draw(st.integers(0, 6))
    L, N = raw.root.shape[0], raw.N
    _b, _r, _g, _cpu, cost = data.draw(st.one_of(cpu_costs(L, N, K), flat_costs(L, N, K)))
    rp = routed(raw)
    select_exact_cpu(rp, K, cost)                      # builds and caches the whole pool's view
    d = data.draw(st.integers(0, rp.pool.depth))
    sub, keep = rp.upto_level(d)
    assert keep == tuple(v for v in range(rp.n) if rp.pool.levels[v] <= d)
    new_id = {v: i for i, v in enumerate(keep)}
    fresh = RoutedPool.from_routes([new_id.get(raw.parents[v], -1) for v in keep], [raw.probs[v] for v in keep],
                                   raw.root, raw.nodes[list(keep)], N)
    assert select_exact_cpu(sub, K, cost) == select_exact_cpu(fresh, K, cost)
    for combo in itertools.islice(legal_sets(RawPool(list(fresh.pool.parents), list(fresh.pool.probs),
                                                     raw.root, raw.nodes[list(keep)], N), K), 30):
        assert cpu_evaluate(sub, combo, cost) == cpu_evaluate(fresh, combo, cost)


def test_marginal_without_other_tokens_is_the_plain_selection():
    rp = _shaped(2, 40)
    cost = CpuCostModel([5.0 + 0.2 * j for j in range(17)], 0.05, 0.03,
                        on_cpu=np.arange(8) < 5)
    zeros = np.zeros((8, 32), dtype=np.int64)
    assert select_marginal_cpu(rp, 16, cost, zeros) == select_exact_cpu(rp, 16, cost)
    assert select_marginal_cpu(rp, 16, cost, zeros, lam=0.1) == \
        select_max_linear_cpu(rp, 16, cost, 0.1)


@settings(deadline=None)
@given(st.data())
def test_evaluate_prices_every_subtree_like_the_brute_force(data):
    raw = data.draw(raw_pools(max_nodes=6))
    K = raw.n
    L, N = raw.root.shape[0], raw.N
    b, r, g, cpu, cost = data.draw(cpu_costs(L, N, K))
    rp = routed(raw)
    for combo in legal_sets(raw, K):
        sel = cpu_evaluate(rp, combo, cost)
        assert (sel.reward, sel.union, sel.time) == priced(raw, combo, b, r, g, cpu)


@BOTH
@settings(deadline=None)
@given(st.data())
def test_limit_g0_r_beta_is_specfit(relax, data):
    # g = 0 and r = β on every expert: T = b_k + β·F exactly, and the same selection
    raw = data.draw(st.one_of(raw_pools(max_nodes=9), tie_pools(max_nodes=12)))
    K = data.draw(st.integers(0, 6))
    beta = data.draw(st.one_of(st.sampled_from([0.0, 0.5, 1.0, 0.210715513]),
                               st.floats(0.0, 3.0)))
    b = [data.draw(st.floats(0.1, 10.0)) for _ in range(K + 1)]
    rp, spec = routed(raw), CostModel(b, beta)
    cost = CpuCostModel(b, beta, 0.0)
    for combo in itertools.islice(legal_sets(raw, K), 50):
        mine, theirs = cpu_evaluate(rp, combo, cost), evaluate(rp.pool, combo, spec)
        assert (mine.reward, mine.union, mine.time, mine.ratio) == \
            (theirs.reward, theirs.union, theirs.time, theirs.ratio)
    lam = data.draw(st.floats(0.0, 2.0))
    with way(relax):
        assert select_exact_cpu(rp, K, cost) == select_exact(rp.pool, K, spec)
        assert select_max_linear_cpu(rp, K, cost, lam) == select_max_linear(rp.pool, K, spec, lam)


@settings(deadline=None)
@given(st.data())
def test_branches_bounded_by_the_relaxation(data):
    # Eq. 4's bound on every branch (the search uses it on branches of 16 nodes and more):
    # one read time, experts compute-bound from three tokens on, so the relaxation is a
    # bound that is not always tight
    raw = data.draw(st.one_of(raw_pools(max_nodes=8, min_nodes=3), tie_pools(max_nodes=12)))
    K = data.draw(st.integers(1, 6))
    L, N = raw.root.shape[0], raw.N
    b = [data.draw(st.floats(0.5, 4.0)) for _ in range(K + 1)]
    r = data.draw(st.sampled_from([0.25, 1.0, (0.5, 0.25)]))    # one read time, or per layer
    g = min(np.atleast_1d(r)) * data.draw(st.sampled_from([0.3, 0.4, 0.5]))
    if isinstance(r, tuple):
        r = np.resize(np.array(r), L)
    on_cpu = None if data.draw(st.booleans()) else np.arange(L) % 2 == 0
    cpu = np.ones((L, N), dtype=bool) if on_cpu is None else np.repeat(on_cpu[:, None], N, 1)
    cost = CpuCostModel(b, r, g, on_cpu=on_cpu)
    others = None       # or a batch's other tokens, paid in the relaxation
    if data.draw(st.booleans()):
        others = np.array([[data.draw(st.sampled_from([0, 0, 1, 3])) for _ in range(N)]
                           for _ in range(L)])
    saved = BranchBound.MIN_NODES
    BranchBound.MIN_NODES = 1
    try:
        sel = select_exact_cpu(routed(raw), K, cost) if others is None else \
            select_marginal_cpu(routed(raw), K, cost, others)
    finally:
        BranchBound.MIN_NODES = saved
    r_full = np.broadcast_to(np.asarray(r, dtype=float).reshape(-1, 1), (L, N)) \
        if np.ndim(r) else np.full((L, N), r)
    check(sel, brute(raw, K, b, np.where(cpu, r_full, 0.0), np.where(cpu, g, 0.0), cpu,
                     others=others))


def test_relaxation_is_a_lower_bound_and_says_where_it_is_exact():
    rng = np.random.default_rng(3)
    parents, probs = random_tree_shape(rng, 12, 3, 4)
    root, routes = random_routes(rng, parents, 2, 8, 2, 0.9)
    raw = RawPool(parents.tolist(), probs.tolist(), root, routes, 8)
    rp = routed(raw)
    b = [1.0 + 0.1 * j for j in range(13)]
    cases = [(CpuCostModel(b, 1.0, 0.01), True),             # 13 tokens · 0.01 <= 1
             (CpuCostModel(b, 1.0, 0.5), False),             # two tokens bind
             (CpuCostModel(b, [1.0, 2.0], 0.0), False),      # two read times: β the smaller
             (CpuCostModel(b, 1.0, 0.0, on_cpu=[True, False], gpu_read=0.5), False)]
    for cost, exact in cases:
        relax = specfit_relaxation(rp, 12, cost)
        pool, spec, equivalent = relax.pool, relax.cost, relax.equivalent
        assert equivalent == exact
        for combo in itertools.islice(legal_sets(raw, 12), 200):
            lower, full = evaluate(pool, combo, spec).time, cpu_evaluate(rp, combo, cost).time
            assert lower <= full and (lower == full or not exact)
    free_cpu = CpuCostModel(b, [1.0, 0.0], 0.0)                # an expert on the CPU for free
    assert specfit_relaxation(rp, 12, free_cpu) is None


def _shaped(seed: int, n: int):
    rng = np.random.default_rng(seed)
    parents, probs = random_tree_shape(rng, n, 4, 8)
    root, routes = random_routes(rng, parents, 8, 32, 4, 0.6)
    return RoutedPool.from_routes(parents, probs, root, routes, 32)


def test_a_stopped_search_is_legal_and_certifies_a_bound(monkeypatch):
    # a deadline already past at the first look: the incumbent, with a certified bound
    monkeypatch.setattr(cpu_exact, "_CHECK_EVERY", 0)
    monkeypatch.setattr(cpu_exact, "_SPECFIT_PATH", False)
    rng = np.random.default_rng(5)
    for _ in range(6):
        parents, probs = random_tree_shape(rng, 12, 3, 4)
        root, routes = random_routes(rng, parents, 2, 8, 2, 0.6)
        raw = RawPool(parents.tolist(), probs.tolist(), root, routes, 8)
        K = 5
        b = [2.0 + 0.1 * j for j in range(K + 1)]
        cost = CpuCostModel(b, 0.3, 0.2)
        ones = np.ones((2, 8))
        best = brute(raw, K, b, 0.3 * ones, 0.2 * ones, ones.astype(bool))
        sel = select_exact_cpu(routed(raw), K, cost, time_limit=1e-9)
        assert routed(raw).pool.is_legal(sel.nodes) and sel.size <= K
        assert sel.upper_bound >= best[1] / best[3]
        lam = 0.4
        lin = select_max_linear_cpu(routed(raw), K, cost, lam, time_limit=1e-9)
        assert lin.upper_bound >= brute(raw, K, b, 0.3 * ones, 0.2 * ones, ones.astype(bool),
                                        lam)[1] - lam * brute(raw, K, b, 0.3 * ones, 0.2 * ones,
                                                              ones.astype(bool), lam)[3]
        if not sel.exact:
            assert sel.upper_bound >= sel.ratio


@pytest.mark.parametrize("read, compute", [(0.05, 0.03), (np.resize([0.05, 0.0625], 8), 0.006),
                                           (0.05, 0.006)], ids=["mixed", "layers", "read"])
def test_time_limit_on_a_larger_pool_keeps_its_word(read, compute):
    # the search alone (mixed), and after the relaxation (weighted, or one read time)
    rp = _shaped(0, 64)
    cost = CpuCostModel([5.0 + 0.2 * j for j in range(33)], read, compute)
    full = select_exact_cpu(rp, 32, cost)
    assert full.exact and full.upper_bound == full.ratio
    for limit in (1e-4, 3e-3):
        quick = select_exact_cpu(routed_again(rp), 32, cost, time_limit=limit)
        assert rp.pool.is_legal(quick.nodes) and quick.size <= 32
        assert quick.ratio <= full.ratio <= quick.upper_bound
        if quick.exact:         # finished within the limit: the same answer
            assert quick == full


def routed_again(rp: RoutedPool) -> RoutedPool:
    """The same pool without its cached views (a time-limited call then pays for them)."""
    return RoutedPool(rp.pool, rp.pairs, rp.start, rp.root_pairs, rp.routes)


def test_dinkelbach_equals_the_best_ratio_of_expectations():
    rng = np.random.default_rng(11)
    states, raws = [], []
    for _ in range(3):
        parents, probs = random_tree_shape(rng, 5, 3, 2)
        root, routes = random_routes(rng, parents, 2, 6, 2, 0.5)
        raws.append(RawPool(parents.tolist(), probs.tolist(), root, routes, 6))
    b = [1.0, 1.3, 1.5, 1.9]
    cost = CpuCostModel(b, [0.2, 0.1], 0.15)
    ones = np.ones((2, 6))
    r_full, g_full = np.repeat(np.array([[0.2], [0.1]]), 6, axis=1), 0.15 * ones
    per_state = [[priced(raw, c, b, r_full, g_full, ones.astype(bool))
                  for c in legal_sets(raw, 3)] for raw in raws]
    best = max(sum(x[0] for x in pick) / sum(x[2] for x in pick)
               for pick in itertools.product(*per_state))
    states = [(routed(raw), 3, cost) for raw in raws]
    res = cpu_dinkelbach(states)
    assert res.converged
    assert res.lam == pytest.approx(best, rel=1e-12)
    assert res.lam + res.error_bound >= best * (1 - 1e-12)


@pytest.mark.parametrize("make, words", [
    (lambda b: CpuCostModel(b, -1.0), "finite and >= 0"),
    (lambda b: CpuCostModel(b, 1.0, float("nan")), "finite and >= 0"),
    (lambda b: CpuCostModel(b, "fast"), "read must be a number"),
    (lambda b: CpuCostModel([], 1.0), "at least one intercept"),
    (lambda b: CpuCostModel(b, 1.0, on_cpu=[1, 0]), "on_cpu must be booleans"),
])
def test_bad_cost_models_are_refused(make, words):
    with pytest.raises(InvalidInput, match=words):
        make([1.0, 1.0])


def test_bad_shapes_and_arguments_are_refused():
    rp = _shaped(1, 10)          # 8 layers × 32 experts
    with pytest.raises(InvalidInput, match="shape"):
        select_exact_cpu(rp, 1, CpuCostModel([1.0, 1.0], [1.0, 2.0]))
    with pytest.raises(InvalidInput, match="on_cpu has shape"):
        select_exact_cpu(rp, 1, CpuCostModel([1.0, 1.0], 1.0, on_cpu=[True] * 3))
    cost = CpuCostModel([1.0, 1.0], 1.0)
    with pytest.raises(InvalidInput, match="intercepts"):
        select_exact_cpu(rp, 2, cost)
    with pytest.raises(InvalidInput, match="K must be an integer"):
        select_exact_cpu(rp, 1.5, cost)
    with pytest.raises(InvalidInput, match="RoutedPool"):
        select_exact_cpu(rp.pool, 1, cost)
    with pytest.raises(InvalidInput, match="CpuCostModel"):
        select_exact_cpu(rp, 1, CostModel([1.0, 1.0], 1.0))
    with pytest.raises(InvalidInput, match="ancestor-closed"):
        cpu_evaluate(rp, [9], CpuCostModel([1.0] * 11, 1.0))
    with pytest.raises(InvalidInput, match="more than K"):
        select_exact_cpu(rp, 1, CpuCostModel([1.0] * 11, 1.0), start=[0, 1])
    with pytest.raises(InvalidInput, match="lam"):
        select_max_linear_cpu(rp, 1, cost, -1.0)
    with pytest.raises(InvalidInput, match="time_limit"):
        select_exact_cpu(rp, 1, cost, time_limit=0)
    with pytest.raises(InvalidInput, match="state 0"):
        cpu_dinkelbach([(rp, 1)])
    with pytest.raises(InvalidInput, match="tokens has shape"):
        select_marginal_cpu(rp, 1, cost, np.zeros((2, 2), dtype=int))
    with pytest.raises(InvalidInput, match="whole counts"):
        select_marginal_cpu(rp, 1, cost, np.full((8, 32), -1))
    with pytest.raises(InvalidInput, match="whole counts"):
        select_marginal_cpu(rp, 1, cost, np.full((8, 32), 0.5))
    with pytest.raises(InvalidInput, match="start is only used"):
        select_marginal_cpu(rp, 1, cost, np.zeros((8, 32), dtype=int), lam=0.5, start=[0])

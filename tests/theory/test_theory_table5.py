"""Table 5 (simmoe.theory.table5) and λ* (simmoe.theory.optimal) against brute force."""

from __future__ import annotations

import numpy as np
import pytest
from factories import random_routes, random_trace, random_tree
from hypothesis import given, settings
from hypothesis import strategies as st
from theory_brute import (
    accepted,
    best,
    brute_pool,
    envelope_breakpoints,
    lambda_by_bisection,
    lambda_by_rules,
    least_squares_line,
    stats,
    walk,
)

from simmoe.errors import CheckFailed
from simmoe.theory import lambda_star
from simmoe.theory import table5 as t5
from simmoe.theory.cycles import specfit_cycles
from solvers import CostModel, Pool

# β is 0 or not tiny: with β near 1e-16 the breakpoints in λ sit where T̂
# differs only in its last bits, and their count is float noise.
costs = st.tuples(
    st.lists(st.floats(0.5, 6.0), min_size=8, max_size=8),
    st.one_of(st.just(0.0), st.floats(0.01, 0.6)),
)


def _line_has_positive_intercept(cost) -> bool:
    """Table 5's closure rows use the least-squares line through b (slope clipped at 0); a line with
    its intercept at or below 0 is refused (InvalidInput), as any cost model without a positive
    fixed cost per cycle."""
    b = cost[0]
    slope, b0 = np.polyfit(np.arange(len(b), dtype=float), b, 1)
    return (b0 if slope >= 0 else float(np.mean(b))) > 0


table5_costs = costs.filter(_line_has_positive_intercept)   # what compute_table5 accepts


def tiny_state(rng, n):
    parents, _ = random_tree(rng, n)
    n = len(parents)
    p = np.empty(n)
    for j, a in enumerate(parents):
        p[j] = rng.uniform(0.05, 1.0) * (1.0 if a < 0 else p[a])
    root = random_routes(rng, 1, 2, 6, 2)[0]
    nodes = random_routes(rng, n, 2, 6, 2)
    return (Pool.from_routes(parents.astype(np.int64), p, root, nodes, 6),
            brute_pool(parents, p, root, nodes))


@settings(max_examples=30)
@given(seed=st.integers(0, 10_000), states=st.integers(2, 3), cost=costs,
       K=st.integers(1, 4))
def test_lambda_star_is_the_best_rule_combination(seed, states, cost, K):
    rng = np.random.default_rng(seed)
    pairs = [tiny_state(rng, int(rng.integers(0, 5))) for _ in range(states)]
    b, beta = cost
    got = lambda_star([p for p, _ in pairs], K, CostModel(b, beta))
    want = lambda_by_rules([bp for _, bp in pairs], K, b, beta)
    assert got == pytest.approx(want, rel=1e-12)


def brute_table(trace, b, beta):
    """Every Table 5 row from the brute-force walk, at the module's λ* where S* is needed."""
    K = trace.pool_shape.K
    cyc = walk(trace, K, b, beta)
    pools = [c["pool"] for c in cyc]
    lam = lambda_by_bisection(pools, K, b, beta)
    hat = [stats(c["pool"], c["s_hat"], b, beta) for c in cyc]
    return K, cyc, pools, lam, hat


@settings(max_examples=15)
@given(seed=st.integers(0, 10_000), cost=table5_costs, agree=st.floats(0.3, 0.95))
def test_every_row_matches_brute_force(seed, cost, agree):
    b, beta = cost
    trace = random_trace(seed, num_requests=2, output_len=(4, 9), pool_nodes=5,
                         agree_rate=agree)
    K, cyc, pools, lam_bisect, hat = brute_table(trace, b, beta)
    cm = CostModel(b, beta)
    table = t5.compute_table5(specfit_cycles(trace, cm, K), K, cm, synthetic=True)
    lam = table.lambda_star
    assert lam == pytest.approx(lam_bisect, rel=1e-9)

    R = np.array([x[0] for x in hat])
    F = np.array([x[1] for x in hat])
    T = np.array([x[2] for x in hat])
    rho = R / T
    star = [best(c["pool"], K, b, beta, lam=lam) for c in cyc]
    st_ = [stats(c["pool"], s, b, beta) for c, s in zip(cyc, star)]
    Ts = np.array([x[2] for x in st_])
    theta = R.sum() / T.sum()
    assert table.cycles == len(cyc)
    assert table.theta == pytest.approx(theta, rel=1e-12)
    assert table.lambda_star_minus_theta_pct == pytest.approx(100 * (lam - theta) / lam,
                                                              rel=1e-6, abs=1e-9)
    bound = ((rho - lam) * (Ts - T)).sum() / T.sum()
    assert table.eq7_bound_pct == pytest.approx(100 * bound / lam, rel=1e-6, abs=1e-9)
    differ = np.mean([s != c["s_hat"] for s, c in zip(star, cyc)])
    assert table.cycles_s_star_differs_pct == pytest.approx(100 * differ)
    assert table.cv_rho == pytest.approx(rho.std() / rho.mean(), rel=1e-9, abs=1e-12)
    A_hat = np.array([c["committed"] for c in cyc])
    A_star = np.array([min(1 + accepted(c["pool"], s), c["remaining"]) for c, s in zip(cyc, star)])
    gain = (A_star.sum() / Ts.sum()) / (A_hat.sum() / T.sum()) - 1
    assert table.gain_s_star_recorded_acceptance_pct == pytest.approx(100 * gain, abs=1e-9)
    hat2 = [best(c["pool"], K, b, 2 * beta) for c in cyc]
    s2 = [stats(c["pool"], s, b, 2 * beta) for c, s in zip(cyc, hat2)]
    assert table.mean_F_over_R_beta == pytest.approx(np.mean(F / R), rel=1e-12)
    assert table.mean_F_over_R_2beta == pytest.approx(np.mean([x[1] / x[0] for x in s2]), rel=1e-12)
    assert table.mean_selected_nodes_beta == pytest.approx(np.mean([len(c["s_hat"]) for c in cyc]))
    assert table.mean_selected_nodes_2beta == pytest.approx(np.mean([len(s) for s in hat2]))
    assert table.mean_drafted_levels == pytest.approx(np.mean([c["d"] for c in cyc]))
    assert table.stopped_before_last_level_pct == pytest.approx(
        100 * np.mean([c["d"] < c["depth"] for c in cyc]))
    # App. A.3: both ratios with the least-squares line of b (random b are not affine)
    line = least_squares_line(b, max(c["pool"].n for c in cyc) + K)
    rho_K = np.array([stats(c["pool"], best(c["pool"], K, line, beta), line, beta)[3] for c in cyc])
    rho_u = np.array([stats(c["pool"], best(c["pool"], None, line, beta), line, beta)[3]
                      for c in cyc])
    affine = np.allclose(line[:len(b)], b, rtol=1e-9, atol=0)
    assert table.unconstrained_intercepts == ("profile" if affine else "least-squares line")
    assert table.mean_rho_K == pytest.approx(rho_K.mean(), rel=1e-9)
    assert table.mean_rho_unconstrained == pytest.approx(rho_u.mean(), rel=1e-9)
    assert table.unconstrained_ratio_gap_pct == pytest.approx(
        100 * np.mean((rho_u - rho_K) / rho_K), abs=1e-6)
    assert table.mean_breakpoints == pytest.approx(
        np.mean([envelope_breakpoints(c["pool"], line, beta) for c in cyc]))


def test_affine_intercepts_are_used_as_given():
    trace = random_trace(2, num_requests=2, output_len=(5, 8), pool_nodes=6)
    cm = CostModel([2.0 + 0.25 * j for j in range(7)], 0.1)
    cycles = specfit_cycles(trace, cm)
    table = t5.compute_table5(cycles, 6, cm, synthetic=True)
    assert table.unconstrained_intercepts == "profile"
    # with the profile's own intercepts, the size-limited ratio is Eq. 5's ρ
    assert table.mean_rho_K == pytest.approx(np.mean([c.selection.ratio for c in cycles]),
                                             rel=1e-12)


@settings(max_examples=30)
@given(seed=st.integers(0, 10_000), cost=table5_costs, nodes=st.integers(0, 7),
       agree=st.floats(0.1, 0.95))
def test_proposition_1_holds_on_random_traces(seed, cost, nodes, agree):
    b, beta = cost
    trace = random_trace(seed, num_requests=2, output_len=(3, 10), pool_nodes=nodes,
                         agree_rate=agree)
    cm = CostModel(b, beta)
    table = t5.compute_table5(specfit_cycles(trace, cm), trace.pool_shape.K, cm, synthetic=True)
    slack = 1e-7
    assert table.lambda_star >= table.theta * (1 - 1e-12)
    assert -slack <= table.lambda_star_minus_theta_pct <= table.eq7_bound_pct + slack
    assert table.mean_F_over_R_2beta <= table.mean_F_over_R_beta * (1 + 1e-12)
    assert table.cycles_s_star_differs_pct > 0 or table.lambda_star_minus_theta_pct <= slack


def test_equal_largest_ratios_make_the_margin_vanish():
    # Proposition 1: if ρ is the same in every cycle, λ* = ρ = Θ.  The same pool
    # repeated gives equal states, hence equal ρ.
    trace = random_trace(11, num_requests=1, output_len=(6, 6), pool_nodes=4)
    cm = CostModel([2.0, 2.1, 2.2, 2.3, 2.4], 0.2)
    cycles = specfit_cycles(trace, cm)
    same = [cycles[0]] * 5
    table = t5.compute_table5(same, 4, cm, synthetic=True)
    assert table.lambda_star == pytest.approx(table.theta, rel=1e-12)
    assert table.cv_rho == pytest.approx(0.0, abs=1e-12)
    assert table.eq7_bound_pct == pytest.approx(0.0, abs=1e-9)
    assert table.cycles_s_star_differs_pct == 0.0


def _ok_arrays():
    n = 3
    return dict(lam=1.0, theta=0.99, bound=0.02, terms=np.zeros(n), T_hat=np.ones(n),
                R_star=np.ones(n), T_star=np.ones(n), f_over_r=np.full(n, 5.0),
                f_over_r2=np.full(n, 4.0), rho=np.full(n, 0.9), rho_unc=np.full(n, 0.95),
                cycles=[type("C", (), {"row": i})() for i in range(n)])


@pytest.mark.parametrize("change, message", [
    (dict(R_star=np.full(3, 0.9)), "attains"),
    (dict(theta=1.01), "< Θ"),
    (dict(theta=0.9, bound=0.05), "exceeds the Eq. 7 bound"),
    (dict(terms=np.array([0.0, -1e-3, 0.0])), "Lemma 1 fails at trace row 1"),
    (dict(f_over_r2=np.array([4.0, 4.0, 5.5])), "doubling β raised F/R̂ at trace row 2"),
    (dict(rho_unc=np.array([0.95, 0.8, 0.95])), "unconstrained largest ratio"),
])
def test_each_self_check_can_fail(change, message):
    t5._check(**_ok_arrays())  # the baseline passes
    with pytest.raises(CheckFailed, match=message):
        t5._check(**{**_ok_arrays(), **change})


def test_a_wrong_lambda_is_caught(monkeypatch):
    trace = random_trace(5, num_requests=2, output_len=(5, 9))
    cm = CostModel([2.0, 2.2, 2.3, 2.5, 2.6, 2.8, 2.9], 0.2)
    cycles = specfit_cycles(trace, cm)
    real = t5.optimal_rule

    def off_by_a_little(states, K, cost):
        import dataclasses

        res = real(states, K, cost)
        return dataclasses.replace(res, lam=res.lam * (1 + 1e-6))

    monkeypatch.setattr(t5, "optimal_rule", off_by_a_little)
    with pytest.raises(CheckFailed):
        t5.compute_table5(cycles, 6, cm, synthetic=True)


def test_rows_name_every_field():
    fields = set(t5.Table5.__dataclass_fields__) - {"synthetic"}
    assert {key for key, _, _ in t5.ROWS} == fields

"""Table 5 of SpecFit on recorded pools: how far Eq. 5 is from the throughput optimum (App. A).

Inputs are the cycles SpecFit ran (``cycles.specfit_cycles``): each cycle's
drafted pool V≤d with its legal family A_K, and its selection Ŝ (Eq. 5).
Expectations are means over those cycles with the trajectory held fixed
(App. A.4).  Every row is defined in ``docs/theory.md``; in short:

- λ*: root of h(λ) (Eq. 9) by Dinkelbach's iteration; S* = argmax R̂ − λ*T̂.
- Θ = ΣR̂(Ŝ)/ΣT̂(Ŝ), the predicted throughput of Eq. 5.
- Eq. 7 bound = Σ(ρ − λ*)(T̂(S*) − T̂(Ŝ)) / ΣT̂(Ŝ), ρ = R̂(Ŝ)/T̂(Ŝ) per cycle.
- recorded gain: committed tokens from node agreement in place of R̂,
  (ΣA(S*)/ΣT̂(S*)) / (ΣA(Ŝ)/ΣT̂(Ŝ)) − 1.
- F(Ŝ)/R̂(Ŝ) and |Ŝ| at β and at 2β (same pools, same intercepts).
- the largest ratio without the size limit (parametric minimum cut, App. A.3)
  beside the one over A_K, both with the same intercepts: the profile's
  when they are affine in |S| (Prop. 2 needs it), else their least-squares
  line, so that the difference is the size limit alone.

The self-checks of Proposition 1, Lemma 1 and App. A.1 are asserted here:
a violation raises ``CheckFailed`` (a bug, not bad input).
Cost: Dinkelbach iterations × cycles max-linear searches, plus one exact
search at 2β and one parametric minimum cut per cycle.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from simmoe.errors import CheckFailed
from simmoe.theory.cycles import Cycle, committed_tokens
from simmoe.theory.optimal import optimal_rule
from solvers import CostModel, affine_approximation, largest_ratio, select_exact

# Relative slack for the self-checks: far above float rounding over
# thousands of cycles, far below any real violation.
CHECK_RTOL = 1e-9


@dataclass(frozen=True)
class Table5:
    """The rows of SpecFit's Table 5 (key names as in ``published.json``), plus App. A.3."""

    synthetic: bool
    cycles: int
    lambda_star: float                          # tokens per ms of predicted time
    theta: float                                # tokens per ms
    lambda_star_minus_theta_pct: float          # % of λ*
    eq7_bound_pct: float                        # % of λ*
    cycles_s_star_differs_pct: float
    cv_rho: float
    gain_s_star_recorded_acceptance_pct: float
    mean_F_over_R_beta: float
    mean_F_over_R_2beta: float
    mean_selected_nodes_beta: float
    mean_selected_nodes_2beta: float
    mean_drafted_levels: float
    stopped_before_last_level_pct: float
    dinkelbach_iterations: int
    # App. A.3: the same pools without the size limit K, same (affine) intercepts
    unconstrained_intercepts: str               # "profile" or "least-squares line"
    mean_rho_K: float                           # mean largest ratio over A_K
    mean_rho_unconstrained: float               # mean largest ratio, no size limit
    unconstrained_ratio_gap_pct: float          # mean of (ρ_unc − ρ)/ρ, %
    cycles_size_limit_binds_pct: float          # cycles where ρ_unc > ρ
    mean_nodes_unconstrained: float
    mean_breakpoints: float                     # parametric min-cut breakpoints per cycle

    def to_dict(self) -> dict:
        return asdict(self)


# (key, label, display scale) in the order of the paper's Table 5, then App. A.3.
# Cost coefficients are in ms, so predicted throughputs (tokens per ms) are
# shown ×1000 as tokens/s; the JSON keeps the unscaled values.
ROWS = [
    ("cycles", "Cycles", 1),
    ("lambda_star", "λ* (tokens/s, predicted)", 1000),
    ("theta", "Θ of Eq. 5 (tokens/s, predicted)", 1000),
    ("lambda_star_minus_theta_pct", "λ* − Θ (% of λ*)", 1),
    ("eq7_bound_pct", "Bound of Eq. 7 (% of λ*)", 1),
    ("cycles_s_star_differs_pct", "Cycles with S* ≠ Ŝ (%)", 1),
    ("cv_rho", "Coefficient of variation of ρ", 1),
    ("gain_s_star_recorded_acceptance_pct", "Gain of S* with recorded acceptances (%)", 1),
    ("mean_F_over_R_beta", "Mean F(Ŝ)/R̂(Ŝ) at β", 1),
    ("mean_F_over_R_2beta", "Mean F(Ŝ)/R̂(Ŝ) at 2β", 1),
    ("mean_selected_nodes_beta", "Mean selected nodes at β", 1),
    ("mean_selected_nodes_2beta", "Mean selected nodes at 2β", 1),
    ("mean_drafted_levels", "Mean drafted levels", 1),
    ("stopped_before_last_level_pct", "Cycles stopped before the last level (%)", 1),
    ("dinkelbach_iterations", "Dinkelbach iterations", 1),
    ("unconstrained_intercepts", "Intercepts for the size-limit comparison", 1),
    ("mean_rho_K", "Mean largest ratio over A_K (tokens/s)", 1000),
    ("mean_rho_unconstrained", "Mean largest ratio without size limit (tokens/s)", 1000),
    ("unconstrained_ratio_gap_pct", "Ratio gain without size limit (mean %)", 1),
    ("cycles_size_limit_binds_pct", "Cycles where the size limit binds (%)", 1),
    ("mean_nodes_unconstrained", "Mean nodes of the unconstrained selection", 1),
    ("mean_breakpoints", "Mean min-cut breakpoints per cycle", 1),
]


def compute_table5(cycles: Sequence[Cycle], K: int, cost: CostModel, *,
                   synthetic: bool) -> Table5:
    """Every row of Table 5 for ``cycles``; raises ``CheckFailed`` if a proved inequality fails."""
    if not cycles:
        raise ValueError("Table 5 needs at least one cycle")
    n = len(cycles)
    hat = [c.selection for c in cycles]
    R_hat = np.array([s.reward for s in hat], dtype=float)
    T_hat = np.array([s.time for s in hat], dtype=float)
    F_hat = np.array([s.union for s in hat], dtype=float)
    rho = R_hat / T_hat

    result = optimal_rule([c.pool for c in cycles], K, cost)
    lam = float(result.lam)
    star = list(result.selections)
    R_star = np.array([s.reward for s in star], dtype=float)
    T_star = np.array([s.time for s in star], dtype=float)

    theta = R_hat.sum() / T_hat.sum()
    terms = (rho - lam) * (T_star - T_hat)          # Eq. 7, per cycle
    bound = terms.sum() / T_hat.sum()
    differs = np.array([s.nodes != h.nodes for s, h in zip(star, hat)])

    A_hat = np.array([c.committed for c in cycles], dtype=float)
    A_star = np.array([committed_tokens(c, s.nodes) for c, s in zip(cycles, star)], dtype=float)
    gain = (A_star.sum() / T_star.sum()) / (A_hat.sum() / T_hat.sum()) - 1.0

    cost2 = CostModel(cost.b, 2.0 * cost.beta)
    hat2 = [select_exact(c.pool, K, cost2) for c in cycles]
    f_over_r = F_hat / R_hat
    f_over_r2 = np.array([s.union / s.reward for s in hat2], dtype=float)

    cost_line, intercepts = _affine(cost, max(K, max(c.pool.n for c in cycles)))
    rho_K = rho if cost_line is cost else np.array(
        [select_exact(c.pool, K, cost_line).ratio for c in cycles], dtype=float)
    unc = [largest_ratio(c.pool, cost_line) for c in cycles]
    rho_unc = np.array([u[0].ratio for u in unc], dtype=float)

    if not result.converged:
        raise CheckFailed(f"Dinkelbach's iteration did not converge in {result.iterations} "
                          f"iterations (h = {result.h_values[-1]!r})")
    _check(lam=lam, theta=theta, bound=bound, terms=terms, T_hat=T_hat,
           R_star=R_star, T_star=T_star, f_over_r=f_over_r, f_over_r2=f_over_r2,
           rho=rho_K, rho_unc=rho_unc, cycles=cycles)

    pct = 100.0 / lam
    return Table5(
        synthetic=synthetic,
        cycles=n,
        lambda_star=lam,
        theta=float(theta),
        lambda_star_minus_theta_pct=float((lam - theta) * pct),
        eq7_bound_pct=float(bound * pct),
        cycles_s_star_differs_pct=float(100.0 * differs.mean()),
        cv_rho=float(rho.std() / rho.mean()),
        gain_s_star_recorded_acceptance_pct=float(100.0 * gain),
        mean_F_over_R_beta=float(f_over_r.mean()),
        mean_F_over_R_2beta=float(f_over_r2.mean()),
        mean_selected_nodes_beta=float(np.mean([len(s.nodes) for s in hat])),
        mean_selected_nodes_2beta=float(np.mean([len(s.nodes) for s in hat2])),
        mean_drafted_levels=float(np.mean([c.drafted_levels for c in cycles])),
        stopped_before_last_level_pct=float(100.0 * np.mean([c.stopped_early for c in cycles])),
        dinkelbach_iterations=int(result.iterations),
        unconstrained_intercepts=intercepts,
        mean_rho_K=float(rho_K.mean()),
        mean_rho_unconstrained=float(rho_unc.mean()),
        unconstrained_ratio_gap_pct=float(100.0 * np.mean((rho_unc - rho_K) / rho_K)),
        cycles_size_limit_binds_pct=float(100.0 * np.mean(rho_unc > rho_K * (1 + CHECK_RTOL))),
        mean_nodes_unconstrained=float(np.mean([len(u[0].nodes) for u in unc])),
        mean_breakpoints=float(np.mean([len(u[1]) for u in unc])),
    )


def _affine(cost: CostModel, size: int) -> tuple[CostModel, str]:
    """Intercepts affine in |S| for the minimum cut: ``cost`` itself when its b
    already lie on a nondecreasing line, else the least-squares line (slope
    clipped at 0) through them, extended to ``size`` nodes."""
    line = affine_approximation(cost, size)
    if all(abs(x - y) <= 1e-9 * max(1.0, abs(x)) for x, y in zip(cost.b, line.b)):
        return cost, "profile"
    return line, "least-squares line"


def check_proposition1(*, lam, theta, bound, terms, T_hat, R_star, T_star, cycles, cost: str = "",
                       time: str = "T̂") -> None:
    """Assert that S* attains λ*, Θ ≤ λ* ≤ Θ + Eq. 7's bound, and Lemma 1's terms (ρ − λ*)(T(S*) − T(Ŝ)) ≥ 0
    per cycle (within ``CHECK_RTOL``); ``cost``: a phrase naming the cost for the messages (" under …")."""
    tol = CHECK_RTOL * lam
    attained = R_star.sum() / T_star.sum()
    if abs(attained - lam) > tol:
        raise CheckFailed(f"S* attains {attained!r}, not λ* = {lam!r}{cost} (Dinkelbach did not converge)")
    if lam < theta - tol:
        raise CheckFailed(f"λ* = {lam!r} < Θ = {theta!r}{cost}")
    if lam - theta > bound + tol:
        raise CheckFailed(f"λ* − Θ = {lam - theta!r} exceeds the Eq. 7 bound {bound!r}{cost}")
    bad = np.flatnonzero(terms < -tol * T_hat)
    if bad.size:
        i = int(bad[0])
        raise CheckFailed(f"Lemma 1 fails{cost} at trace row {cycles[i].row}: "
                          f"(ρ − λ*)({time}(S*) − {time}(Ŝ)) = {terms[i]!r} < 0 (Ŝ is not the largest ratio)")


def _check(*, lam, theta, bound, terms, T_hat, R_star, T_star, f_over_r, f_over_r2,
           rho, rho_unc, cycles) -> None:
    """Assert Proposition 1, Lemma 1, App. A.1 (β) and App. A.3 on the computed values."""
    check_proposition1(lam=lam, theta=theta, bound=bound, terms=terms, T_hat=T_hat, R_star=R_star,
                       T_star=T_star, cycles=cycles)
    bad = np.flatnonzero(f_over_r2 > f_over_r * (1 + CHECK_RTOL))
    if bad.size:
        i = int(bad[0])
        raise CheckFailed(f"doubling β raised F/R̂ at trace row {cycles[i].row}: "
                          f"{f_over_r[i]!r} → {f_over_r2[i]!r}")
    bad = np.flatnonzero(rho_unc < rho * (1 - CHECK_RTOL))
    if bad.size:
        i = int(bad[0])
        raise CheckFailed(f"the unconstrained largest ratio {rho_unc[i]!r} is below the "
                          f"size-limited one {rho[i]!r} at trace row {cycles[i].row}")

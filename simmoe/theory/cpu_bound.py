"""Proposition 1's margins under the exact CPU-expert cost (docs/cpu-experts.md, "Proposition 1's margins").

With a static placement (``cpu-layers:N``, ``cpu-all``) SpecFit selects with

    T(S) = b_|S| + Σ over the union's (layer, expert) pairs of max(r, g·n_e(S))

(``solvers.CpuCostModel``), not with Eq. 4.  This module takes the cycles
SpecFit runs under that cost and the cost, and gives the margins of
Proposition 1 for it:

- λ* = max over rules of E[R̂]/E[T], by ``solvers.cpu_dinkelbach`` over the
  cycle states (each V≤d as a ``solvers.RoutedPool``, legal family A_K);
- Θ = ΣR̂(Ŝ)/ΣT(Ŝ) of SpecFit's selections under the same cost;
- Eq. 7's bound, which needs only that Ŝ maximises R̂/T and S* maximises
  R̂ − λ*T over the same family, so it holds under any positive cost (the
  derivation is in the doc);
- the share of cycles where S* ≠ Ŝ, Dinkelbach's iterations and error bound.

The walk (:func:`walk_cpu_cycles`) is handed the selection as a callable: the
selection of this regime lives in the replay (``simmoe.replay.selection_cpu.select_cpu``),
a layer above this one.  The self-checks (S* attains λ*, λ* ≥ Θ, Eq. 7,
Lemma 1) raise ``CheckFailed``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, cast

import numpy as np

from simmoe.api import PoolView, Undeclared
from simmoe.errors import CheckFailed
from simmoe.theory.cycles import accepted_length
from simmoe.theory.table5 import check_proposition1
from simmoe.trace.schema import Trace
from solvers import CpuCostModel, DinkelbachResult, RoutedPool, cpu_dinkelbach, cpu_evaluate

# the walk's selection reads no verdicts (SpecFit's does not)
NO_VERDICTS = Undeclared("view.agree", "reads_verdicts")

# select(view, K) -> (Ŝ's node ids in the view's pool, levels drafted): SpecFit's rule with adaptive depth
SelectRule = Callable[[PoolView, int], tuple[Sequence[int], int]]


@dataclass(frozen=True)
class CpuCycle:
    """One SpecFit cycle under the exact cost; node ids index ``rpool`` (V≤d at the stop level)."""

    row: int
    request: int
    rpool: RoutedPool            # the drafted pool V≤d
    nodes: tuple[int, ...]       # Ŝ
    parents: np.ndarray          # int64 [n] within ``rpool``
    levels: np.ndarray           # int64 [n]
    agree: np.ndarray            # bool [n]: the recorded verdicts
    drafted_levels: int
    pool_depth: int
    remaining: int
    committed: int

    def committed_with(self, nodes) -> int:
        """Tokens the cycle would commit had it verified ``nodes`` (recorded verdicts)."""
        return min(1 + accepted_length(self.parents, self.levels, self.agree, nodes), self.remaining)


def exact_view(trace: Trace, row: int) -> PoolView:
    """The pool at ``row`` as a selector with exact routes sees it (no verdicts, no cost)."""
    s = trace.pool_slice(row)
    return PoolView(row=row, parents=trace.node_parent[s], levels=trace.node_level[s], p=trace.node_p[s],
                    q=trace.node_q[s], agree=cast(Any, NO_VERDICTS), root_routes=trace.root_routes[row],
                    node_routes=trace.node_routes[s], num_experts=int(trace.geometry.num_experts))


def routed_pool(view: PoolView) -> RoutedPool:
    """The view's pool as a ``solvers.RoutedPool`` (the root's pairs kept)."""
    return RoutedPool.from_routes(np.asarray(view.parents, dtype=np.int64), np.asarray(view.p, dtype=np.float64),
                                  view.root_routes, np.asarray(view.node_routes), view.num_experts)


def walk_cpu_cycles(trace: Trace, K: int, select: SelectRule, *,
                    view_at: Callable[[int], PoolView] | None = None,
                    num_requests: int | None = None) -> list[CpuCycle]:
    """The cycles SpecFit runs on ``trace`` with ``select`` (first ``num_requests`` requests).

    As :func:`simmoe.theory.cycles.specfit_cycles`: cursor t → pool(t) → Ŝ and the stop level d
    → commit 1 + the longest agreeing path inside Ŝ → advance.  ``view_at(row)``: the pool as the
    selector sees it (default: exact routes).
    """
    view_at = view_at or (lambda row: exact_view(trace, row))
    R = len(trace.requests) if num_requests is None else min(int(num_requests), len(trace.requests))
    out: list[CpuCycle] = []
    for r in range(R):
        lo, hi = trace.request_positions(r)
        row = lo
        while row < hi:
            out.append(_cycle(trace, r, row, hi, view_at(row), K, select))
            row += out[-1].committed
    return out


def _cycle(trace: Trace, request: int, row: int, hi: int, view: PoolView, K: int, select: SelectRule) -> CpuCycle:
    full = routed_pool(view)
    chosen, drafted = ((), 0) if full.n == 0 else select(view, min(K, full.n))
    drafted = int(drafted)
    rpool, keep = full.upto_level(drafted) if drafted < full.pool.depth else (full, tuple(range(full.n)))
    local = {int(o): j for j, o in enumerate(keep)}
    try:
        nodes = tuple(sorted(local[int(v)] for v in chosen))
    except KeyError as exc:
        raise CheckFailed(f"row {row}: the selection holds node {exc}, deeper than its stop level {drafted}") from None
    agree = np.asarray(trace.node_agree[trace.pool_slice(row)], dtype=bool)[np.asarray(keep, dtype=np.int64)]
    parents = np.asarray(rpool.pool.parents, dtype=np.int64)
    levels = np.asarray(rpool.pool.levels, dtype=np.int64)
    committed = min(1 + accepted_length(parents, levels, agree, nodes), hi - row)
    return CpuCycle(row=row, request=request, rpool=rpool, nodes=nodes, parents=parents, levels=levels,
                    agree=agree, drafted_levels=drafted, pool_depth=int(full.pool.depth), remaining=hi - row,
                    committed=committed)


def cpu_optimal_rule(cycles: Sequence[CpuCycle], K: int, cost: CpuCostModel) -> DinkelbachResult:
    """λ* and S* per cycle under the exact cost: ``solvers.cpu_dinkelbach`` over the cycles' V≤d."""
    return cpu_dinkelbach([(c.rpool, K, cost) for c in cycles])


@dataclass(frozen=True)
class CpuMargins:
    """Proposition 1's margins under the exact cost (keys as Table 5's where the row carries over)."""

    cycles: int
    lambda_star: float                      # tokens per ms of predicted time
    theta: float
    lambda_star_minus_theta_pct: float      # % of λ*
    eq7_bound_pct: float                    # % of λ*
    cycles_s_star_differs_pct: float
    cv_rho: float
    gain_s_star_recorded_acceptance_pct: float
    mean_selected_nodes: float              # |Ŝ|
    mean_selected_nodes_s_star: float       # |S*|
    mean_drafted_levels: float
    stopped_before_last_level_pct: float
    dinkelbach_iterations: int
    dinkelbach_error_bound: float           # λ* − λ_k ≤ this, tokens per ms

    def to_dict(self) -> dict:
        return asdict(self)


# (key, label, display scale): tokens per ms shown ×1000 as tokens/s, as Table 5's rows
ROWS = [
    ("cycles", "Cycles (SpecFit under the exact cost)", 1),
    ("lambda_star", "λ* (tokens/s, predicted)", 1000),
    ("theta", "Θ of SpecFit (tokens/s, predicted)", 1000),
    ("lambda_star_minus_theta_pct", "λ* − Θ (% of λ*)", 1),
    ("eq7_bound_pct", "Bound of Eq. 7 (% of λ*)", 1),
    ("cycles_s_star_differs_pct", "Cycles with S* ≠ Ŝ (%)", 1),
    ("cv_rho", "Coefficient of variation of ρ", 1),
    ("gain_s_star_recorded_acceptance_pct", "Gain of S* with recorded acceptances (%)", 1),
    ("mean_selected_nodes", "Mean selected nodes, Ŝ", 1),
    ("mean_selected_nodes_s_star", "Mean selected nodes, S*", 1),
    ("mean_drafted_levels", "Mean drafted levels", 1),
    ("stopped_before_last_level_pct", "Cycles stopped before the last level (%)", 1),
    ("dinkelbach_iterations", "Dinkelbach iterations", 1),
    ("dinkelbach_error_bound", "Dinkelbach's error bound on λ* (tokens/s)", 1000),
]


def cpu_margins(cycles: Sequence[CpuCycle], K: int, cost: CpuCostModel,
                result: DinkelbachResult | None = None) -> CpuMargins:
    """Every margin for ``cycles`` under ``cost`` (``result``: :func:`cpu_optimal_rule`'s, if already run)."""
    if not cycles:
        raise ValueError("the margins need at least one cycle")
    hat = [cpu_evaluate(c.rpool, c.nodes, cost) for c in cycles]
    result = cpu_optimal_rule(cycles, K, cost) if result is None else result
    star = list(result.selections)
    R_hat, T_hat = (np.array([getattr(s, a) for s in hat], dtype=float) for a in ("reward", "time"))
    R_star, T_star = (np.array([getattr(s, a) for s in star], dtype=float) for a in ("reward", "time"))
    rho = R_hat / T_hat
    lam = float(result.lam)
    theta = float(R_hat.sum() / T_hat.sum())
    terms = (rho - lam) * (T_star - T_hat)
    bound = float(terms.sum() / T_hat.sum())
    _check(result, lam, theta, bound, terms, T_hat, R_star, T_star, cycles)
    A_hat = np.array([c.committed for c in cycles], dtype=float)
    A_star = np.array([c.committed_with(s.nodes) for c, s in zip(cycles, star)], dtype=float)
    gain = (A_star.sum() / T_star.sum()) / (A_hat.sum() / T_hat.sum()) - 1.0
    pct = 100.0 / lam
    return CpuMargins(
        cycles=len(cycles), lambda_star=lam, theta=theta,
        lambda_star_minus_theta_pct=(lam - theta) * pct, eq7_bound_pct=bound * pct,
        cycles_s_star_differs_pct=float(100.0 * np.mean([s.nodes != c.nodes for s, c in zip(star, cycles)])),
        cv_rho=float(rho.std() / rho.mean()),
        gain_s_star_recorded_acceptance_pct=float(100.0 * gain),
        mean_selected_nodes=float(np.mean([len(c.nodes) for c in cycles])),
        mean_selected_nodes_s_star=float(np.mean([len(s.nodes) for s in star])),
        mean_drafted_levels=float(np.mean([c.drafted_levels for c in cycles])),
        stopped_before_last_level_pct=float(100.0 * np.mean([c.drafted_levels < c.pool_depth for c in cycles])),
        dinkelbach_iterations=int(result.iterations), dinkelbach_error_bound=float(result.error_bound))


def _check(result, lam, theta, bound, terms, T_hat, R_star, T_star, cycles) -> None:
    """Proposition 1, Eq. 7 and Lemma 1 under this cost (they need only Ŝ's and S*'s optimality)."""
    if not result.converged:
        raise CheckFailed(f"Dinkelbach's iteration under the CPU-expert cost did not converge in "
                          f"{result.iterations} iterations")
    check_proposition1(lam=lam, theta=theta, bound=bound, terms=terms, T_hat=T_hat, R_star=R_star,
                       T_star=T_star, cycles=cycles, cost=" under the CPU-expert cost", time="T")

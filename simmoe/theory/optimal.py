"""The throughput-optimal rule over many cycle states (SpecFit §3.3, App. A.1, Eq. 9).

λ* = max over rules π of Θ(π) = E[R̂(S_π)]/E[T̂(S_π)] is the root of
h(λ) = E[max_{S∈A_K} R̂(S) − λT̂(S)]; the rule attaining it selects
S* = argmax R̂ − λ*T̂ in every cycle.  Dinkelbach's iteration finds the root
exactly (h is piecewise linear, so it stops after finitely many steps): each
step costs one ``select_max_linear`` per state.
"""

from __future__ import annotations

from collections.abc import Sequence

from solvers import CostModel, DinkelbachResult, Pool, dinkelbach, exact_oracle


def optimal_rule(states: Sequence[Pool], K: int, cost: CostModel) -> DinkelbachResult:
    """Dinkelbach's iteration over ``states`` with the exact oracle over A_K.

    Returns the solvers' result: ``lam`` (λ*), ``selections`` (S* per state),
    ``iterations``, ``h_values``, ``converged``.  Raises ``solvers.InvalidInput``
    for an empty list of states.
    """
    return dinkelbach([(pool, K, cost) for pool in states], exact_oracle)


def lambda_star(states: Sequence[Pool], K: int, cost: CostModel) -> float:
    """λ* of Eq. 9: the largest predicted throughput any selection rule reaches on ``states``.

    ``states`` are the cycle pools (each with legal family A_K), ``cost`` the
    frozen coefficients of Eq. 4.  The ``optimal`` selector then picks
    ``solvers.select_max_linear(pool, K, cost, λ*)`` in each cycle.
    """
    return float(optimal_rule(states, K, cost).lam)

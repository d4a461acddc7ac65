"""λ* = max over selection rules of E[R̂]/E[T̂] across cycle states (SpecFit App. A.1, Eq. 9).

h(λ) = mean over states of max_S R̂(S) − λT̂(S) is convex and strictly
decreasing with root λ* (Dinkelbach 1967).  Iteration: λ_0 = ratio of
expectations of the root-only choice; S_i = oracle(state, λ_i) per state;
h(λ_i) = mean(R̂ − λ_iT̂); λ_{i+1} = ΣR̂/ΣT̂ over the S_i.  λ rises strictly
while h > 0 and the number of distinct selections is finite, so the loop ends.

States are ``(pool, K, cost)`` tuples (K may be None for an oracle without a
size limit).  ``oracle(state, lam) -> Selection`` must return a maximizer of
R̂ − λT̂ for that state: :func:`exact_oracle` (over A_K, branch and bound) or
:func:`closure_oracle` (no size limit, min cut).

Stopping rule and error bound: stop at the first λ_k with h(λ_k) <= tol.
Every rule π has E[R̂_π] − λ_k E[T̂_π] <= h(λ_k), so
λ_k <= λ* <= λ_k + h(λ_k) / T_floor, where T_floor is the mean over states of
min_j b_j + β·F(∅) (no selection is faster); ``error_bound`` reports
h(λ_k)/T_floor.  Cost: iterations × (one oracle call per state).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from solvers.closure import max_closure
from solvers.cost import CostModel, Selection, evaluate
from solvers.errors import InvalidInput
from solvers.exact import select_max_linear
from solvers.pool import Pool

__all__ = ["DinkelbachResult", "dinkelbach", "exact_oracle", "closure_oracle"]


@dataclass(frozen=True)
class DinkelbachResult:
    """λ* (``lam``), S* per state at λ*, the λ_i and h(λ_i) of every iteration, the bound."""

    lam: float
    selections: tuple[Selection, ...]
    iterations: int
    lams: tuple[float, ...]
    h_values: tuple[float, ...]
    error_bound: float
    converged: bool


def exact_oracle(state, lam: float) -> Selection:
    """argmax over A_K of R̂ − λT̂ for a ``(pool, K, cost)`` state."""
    pool, K, cost = state
    return select_max_linear(pool, K, cost, lam)


def closure_oracle(state, lam: float) -> Selection:
    """argmax over all ancestor-closed sets (affine intercepts) for a ``(pool, K, cost)`` state;
    K ignored."""
    pool, _K, cost = state
    return max_closure(pool, lam, cost)


def _unpack(state, i: int):
    try:
        pool, K, cost = state
    except (TypeError, ValueError):
        raise InvalidInput(f"state {i} must be a (pool, K, cost) tuple") from None
    if not isinstance(pool, Pool) or not isinstance(cost, CostModel):
        raise InvalidInput(f"state {i} must be a (Pool, K, CostModel) tuple")
    return pool, K, cost


def check_iteration(tol: float, max_iter: int) -> None:
    """Refuse a tolerance or an iteration count the iteration cannot use."""
    if not math.isfinite(tol) or tol < 0:
        raise InvalidInput(f"tol = {tol!r}: must be finite and >= 0")
    if isinstance(max_iter, bool) or not isinstance(max_iter, int) or max_iter < 1:
        raise InvalidInput(f"max_iter must be a positive integer, got {max_iter!r}")


def iterate(start: Sequence[Selection], solve: Callable[[float], list], t_floor: float, *, tol: float,
            max_iter: int) -> DinkelbachResult:
    """App. A.1's iteration from the selections ``start`` (λ_0 their ratio): ``solve(λ)`` gives each
    state's maximiser of R̂ − λT̂; stop when h(λ) ≤ ``tol`` or λ stops rising.  Shared by every cost model."""
    lam = sum(s.reward for s in start) / sum(s.time for s in start)
    lams: list[float] = []
    hs: list[float] = []
    sels: list = list(start)
    converged = False
    for _ in range(max_iter):
        sels = solve(lam)
        h = sum(s.reward - lam * s.time for s in sels) / len(sels)
        lams.append(lam)
        hs.append(h)
        if h <= tol:
            converged = True
            break
        new_lam = sum(s.reward for s in sels) / sum(s.time for s in sels)
        if new_lam <= lam:          # rounding: no further progress is representable
            converged = True
            break
        lam = new_lam
    return DinkelbachResult(lam, tuple(sels), len(lams), tuple(lams), tuple(hs),
                            max(hs[-1], 0.0) / t_floor, converged)


def dinkelbach(states: Sequence, oracle: Callable = exact_oracle, *, tol: float = 1e-12,
               max_iter: int = 100) -> DinkelbachResult:
    """λ* across ``states`` with the per-state ``oracle`` (module docstring for the rule)."""
    check_iteration(tol, max_iter)
    states = list(states)
    if not states:
        raise InvalidInput("dinkelbach needs at least one state")
    unpacked = [_unpack(s, i) for i, s in enumerate(states)]
    t_floor = sum(min(c.b) + c.beta * p.root_count for p, _K, c in unpacked) / len(states)
    start = [evaluate(p, (), c) for p, _K, c in unpacked]
    return iterate(start, lambda lam: [oracle(st, lam) for st in states], t_floor, tol=tol, max_iter=max_iter)

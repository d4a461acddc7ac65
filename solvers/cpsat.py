"""CP-SAT (OR-Tools) for Eq. 5 and max R̂ − λT̂ over A_K: an independent check, and the member
of :func:`solvers.select_exact`'s portfolio that enumerates many near-ties at once.

Model for a fixed λ: booleans x_v (node selected) with x_v <= x_parent(v); one
boolean y_c per class c of (layer, expert) pairs outside the root's that are
routed to by exactly the same nodes (weight w_c = class size), with
y_c = OR of its holders' x_v; a one-hot z_j with Σ_j j·z_j = Σ_v x_v <= K.
Objective (integer, CP-SAT needs integer coefficients):

    round(s·p)·x − round(s·λb_j)·z − round(s·λβw_c)·y,   s = 10⁹ / (1 + Σp),

which is s·(R̂ − λT̂) less the constant s·(1 − λβF_0), up to a rounding error of
at most E = (n + 1 + #classes)/2 for every subtree (one half per coefficient).

* :func:`select_exact_cpsat` — Dinkelbach's loop on this model (λ_0 = root-only
  ratio, λ_{i+1} = ratio of the returned set in floating point, until it stops
  rising).  Shares no search code with the branch and bound; optimal up to the
  coefficient rounding (relative error about (n + classes + K)·10⁻⁹), not
  tie-broken.  Used by the tests as an independent reference.
* :func:`finish_exact` — exact under §3.3's tie rule, from an incumbent: the
  same loop while it raises the incumbent, then one enumeration of every subtree
  whose integer objective is within 2E + (margin) of the incumbent's.  Every
  subtree that could tie with or beat the incumbent in floating point is among
  them; each is evaluated canonically (:mod:`solvers.cost`) and compared under
  the full tie rule.  The portfolio calls it where the MILP of
  :mod:`solvers.milp` meets more near-ties than it compares one by one (Prop. 2's
  CLIQUE pools, where every r-clique ties: a fraction of a second), on models of
  at most 400 pair classes (larger ones take CP-SAT tens of seconds).

Exponential worst case (Prop. 2); model building costs O(n·U) numpy work plus
O(n + classes + holder entries) Python calls.
"""

from __future__ import annotations

import math
import time

import numpy as np
from ortools.sat.python import cp_model

from solvers.cost import CostModel, Selection, check_K, evaluate
from solvers.pool import Pool, holder_classes

__all__ = ["select_exact_cpsat", "finish_exact"]

_ENUMERATION_CAP = 20_000      # subtrees one enumeration may return before it gives up


def _pair_classes(pool: Pool) -> list[tuple[tuple[int, ...], int]]:
    """(holders, size) of every class of mask bits routed to by the same nodes."""
    if not pool.n:
        return []
    patterns, counts = holder_classes(pool)
    return [(tuple(int(v) for v in np.flatnonzero(row)), int(c))
            for row, c in zip(patterns, counts, strict=True)]


class _Model:
    """The model of the module docstring; the objective is set per λ."""

    def __init__(self, pool: Pool, K: int, cost: CostModel):
        n = pool.n
        self.pool, self.K, self.cost = pool, K, cost
        self.classes = _pair_classes(pool)
        self.scale = 1e9 / (1.0 + sum(pool.probs))
        model = cp_model.CpModel()
        x = [model.new_bool_var(f"x{v}") for v in range(n)]
        for v, a in enumerate(pool.parents):
            if a >= 0:
                model.add_implication(x[v], x[a])
        y = []
        for ci, (holders, _w) in enumerate(self.classes):
            yc = model.new_bool_var(f"y{ci}")
            for v in holders:
                model.add_implication(x[v], yc)
            model.add_bool_or([x[v] for v in holders]).only_enforce_if(yc)
            y.append(yc)
        z = [model.new_bool_var(f"z{j}") for j in range(K + 1)]
        model.add_exactly_one(z)
        model.add(sum(j * z[j] for j in range(K + 1)) == sum(x))
        self.model, self.x, self.y, self.z = model, x, y, z
        self.error = (n + 1 + len(self.classes)) / 2.0 + 1.0    # E, with a unit to spare
        self.coef: tuple[list[int], list[int], list[int]] = ([], [], [])

    def set_lambda(self, lam: float) -> None:
        s, pool, cost = self.scale, self.pool, self.cost
        cx = [int(round(s * p)) for p in pool.probs]
        cz = [int(round(s * lam * cost.b[j])) for j in range(self.K + 1)]
        cy = [int(round(s * lam * cost.beta * w)) for _h, w in self.classes]
        self.coef = (cx, cz, cy)
        self.objective = (sum(c * xv for c, xv in zip(cx, self.x, strict=True))
                          - sum(c * zv for c, zv in zip(cz, self.z, strict=True))
                          - sum(c * yv for c, yv in zip(cy, self.y, strict=True)))

    def int_value(self, nodes: tuple[int, ...]) -> int:
        """The integer objective of a subtree (exactly what CP-SAT computes for it)."""
        cx, cz, cy = self.coef
        chosen = set(nodes)
        covered = sum(c for c, (holders, _w) in zip(cy, self.classes, strict=True)
                      if any(v in chosen for v in holders))
        return sum(cx[v] for v in nodes) - cz[len(nodes)] - covered

    def _solver(self, seconds: float | None) -> cp_model.CpSolver:
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = 1
        if seconds is not None:
            solver.parameters.max_time_in_seconds = max(seconds, 1e-3)
        return solver

    def maximize(self, seconds: float | None, hint: tuple[int, ...]):
        """(proved, nodes of the best solution, proven upper bound on the objective)."""
        model = self.model.clone()
        chosen = set(hint)
        for v, xv in enumerate(self.x):
            model.add_hint(xv, v in chosen)
        model.maximize(self.objective)
        solver = self._solver(seconds)
        status = solver.solve(model)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return False, None, math.inf
        nodes = tuple(v for v, xv in enumerate(self.x) if solver.boolean_value(xv))
        return status == cp_model.OPTIMAL, nodes, solver.best_objective_bound

    def enumerate(self, threshold: int, seconds: float | None):
        """Every subtree with integer objective >= threshold, or None (time, or too many)."""
        model = self.model.clone()
        model.add(self.objective >= threshold)
        found: list[tuple[int, ...]] = []
        xs = self.x

        class Collect(cp_model.CpSolverSolutionCallback):
            def on_solution_callback(self) -> None:
                found.append(tuple(v for v, xv in enumerate(xs) if self.boolean_value(xv)))
                if len(found) > _ENUMERATION_CAP:
                    self.stop_search()

        solver = self._solver(seconds)
        solver.parameters.enumerate_all_solutions = True
        status = solver.solve(model, Collect())
        complete = status in (cp_model.OPTIMAL, cp_model.INFEASIBLE)
        if not complete or len(found) > _ENUMERATION_CAP:
            return None
        return found


def select_exact_cpsat(pool: Pool, K: int, cost: CostModel, *, time_limit: float = 60.0,
                       max_iter: int = 50) -> Selection:
    """Eq. 5 over A_K by CP-SAT + Dinkelbach (module docstring).  Not tie-broken."""
    K = check_K(pool, K, cost)
    best = evaluate(pool, (), cost)
    if K == 0 or pool.n == 0:
        return best
    model = _Model(pool, K, cost)
    for _ in range(max_iter):
        model.set_lambda(best.ratio)
        proved, nodes, _bound = model.maximize(time_limit, best.nodes)
        if not proved or nodes is None:
            raise RuntimeError("CP-SAT did not prove optimality within the time limit")
        cand = evaluate(pool, nodes, cost)
        if cand.ratio <= best.ratio:
            break
        best = cand
    return best


def finish_exact(pool: Pool, K: int, cost: CostModel, lam: float | None, offer,
                 incumbent, deadline: float | None):
    """Complete an exact selection from an incumbent (module docstring).

    ``offer(nodes) -> bool`` compares a legal subtree canonically with the incumbent
    and keeps the winner; ``incumbent()`` returns [score, R̂, F, nodes].  ``lam``
    None: Eq. 5, else R̂ − λT̂.  Returns ("exact", None) when every subtree that could
    beat the incumbent was offered; ("stopped", bound) when the deadline came first,
    with a proven upper bound on the objective (the ratio, or R̂ − λT̂); ("gave up",
    None) when an enumeration returned more than 20,000 subtrees (the caller then
    needs another method).
    """
    model = _Model(pool, K, cost)
    ratio_mode = lam is None
    beta, F0 = cost.beta, pool.root_count
    t_floor = min(cost.b[:K + 1]) + beta * F0

    def left() -> float | None:
        return None if deadline is None else deadline - time.perf_counter()

    def bound_from(lam_now: float, int_bound: float) -> float:
        # R̂ − λT̂ <= (integer bound + E)/s + 1 − λβF_0 for every subtree
        value = (int_bound + model.error) / model.scale + 1.0 - lam_now * beta * F0
        return lam_now + max(value, 0.0) / t_floor if ratio_mode else value

    while True:
        lam_now: float = incumbent()[0] if lam is None else lam
        model.set_lambda(lam_now)
        seconds = left()
        if seconds is not None and seconds <= 0:
            return "stopped", bound_from(lam_now, math.inf)
        proved, nodes, int_bound = model.maximize(seconds, incumbent()[3])
        if nodes is not None:
            raised = offer(nodes)
            if ratio_mode and raised and incumbent()[0] > lam_now:
                continue                        # Dinkelbach: linearise at the new ratio
        if not proved:
            return "stopped", bound_from(lam_now, int_bound)
        break
    inc = incumbent()
    # value(S) >= value(inc) − δ implies int(S) >= int(inc) − sδ − 2E
    margin = 1e-9 * (2.0 + inc[1] + abs(inc[0]))
    threshold = math.floor(model.int_value(inc[3]) - model.scale * margin - 2 * model.error)
    seconds = left()
    if seconds is not None and seconds <= 0:
        return "stopped", bound_from(lam_now, int_bound)
    found = model.enumerate(threshold, seconds)
    if found is None:
        if seconds is not None and time.perf_counter() >= deadline:  # type: ignore[operator]
            return "stopped", bound_from(lam_now, int_bound)
        return "gave up", None
    for nodes in found:
        if nodes:
            offer(nodes)
    return "exact", None

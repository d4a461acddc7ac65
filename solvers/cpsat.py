"""An independent exact method for Eq. 5: CP-SAT (OR-Tools) inside Dinkelbach's loop.

Used to cross-check the branch and bound on pools too large for brute force;
it shares no search code with it.  Model for a fixed λ: booleans x_v (node
selected) with x_v <= x_parent(v); one boolean y_c per class c of
(layer, expert) pairs outside the root's that are routed to by exactly the
same nodes (weight w_c = class size), y_c >= x_v for v in c; a one-hot z_j
with Σ_j j·z_j = Σ_v x_v <= K.  Maximize
round(s·p)·x − round(s·λb_j)·z − round(s·λβw_c)·y with scale s = 10^9 / (1 + Σp)
(CP-SAT needs integer coefficients).  Dinkelbach: λ_0 = root-only ratio,
λ_{i+1} = ratio of the returned set (evaluated in floating point) until it
stops rising.  The result is optimal up to the rounding of the coefficients
(relative error about (n + classes + K)·10^-9); it is not tie-broken.
Exponential worst case; seconds on 60-node pools with small geometries.
"""

from __future__ import annotations

import numpy as np
from ortools.sat.python import cp_model

from solvers.cost import CostModel, Selection, check_K, evaluate
from solvers.pool import Pool

__all__ = ["select_exact_cpsat"]


def _pair_classes(pool: Pool) -> list[tuple[tuple[int, ...], int]]:
    n = pool.n
    nb = max(1, (max((m.bit_length() for m in pool.masks), default=0) + 7) // 8)
    raw = b"".join(m.to_bytes(nb, "little") for m in pool.masks)
    member = np.unpackbits(np.frombuffer(raw, dtype=np.uint8).reshape(n, nb), axis=1,
                           bitorder="little").astype(bool)
    member = member[:, member.any(axis=0)]
    patterns, counts = np.unique(member.T, axis=0, return_counts=True)
    return [(tuple(int(v) for v in np.flatnonzero(row)), int(c)) for row, c in zip(patterns, counts)]


def _argmax_linear(pool: Pool, K: int, cost: CostModel, lam: float, classes,
                   time_limit: float) -> tuple[int, ...]:
    n = pool.n
    s = 1e9 / (1.0 + sum(pool.probs))
    model = cp_model.CpModel()
    x = [model.NewBoolVar(f"x{v}") for v in range(n)]
    for v, a in enumerate(pool.parents):
        if a >= 0:
            model.Add(x[v] <= x[a])
    y = []
    for ci, (holders, _w) in enumerate(classes):
        yc = model.NewBoolVar(f"y{ci}")
        for v in holders:
            model.AddImplication(x[v], yc)
        y.append(yc)
    z = [model.NewBoolVar(f"z{j}") for j in range(K + 1)]
    model.AddExactlyOne(z)
    model.Add(sum(j * z[j] for j in range(K + 1)) == sum(x))
    objective = (sum(int(round(s * pool.probs[v])) * x[v] for v in range(n))
                 - sum(int(round(s * lam * cost.b[j])) * z[j] for j in range(K + 1))
                 - sum(int(round(s * lam * cost.beta * w)) * y[ci]
                       for ci, (_h, w) in enumerate(classes)))
    model.Maximize(objective)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.max_time_in_seconds = time_limit
    status = solver.Solve(model)
    if status != cp_model.OPTIMAL:
        raise RuntimeError(f"CP-SAT did not prove optimality (status {solver.StatusName(status)})")
    return tuple(v for v in range(n) if solver.Value(x[v]))


def select_exact_cpsat(pool: Pool, K: int, cost: CostModel, *, time_limit: float = 60.0,
                       max_iter: int = 50) -> Selection:
    """Eq. 5 over A_K by CP-SAT + Dinkelbach (module docstring).  Not tie-broken."""
    K = check_K(pool, K, cost)
    best = evaluate(pool, (), cost)
    if K == 0 or pool.n == 0:
        return best
    classes = _pair_classes(pool)
    for _ in range(max_iter):
        cand = evaluate(pool, _argmax_linear(pool, K, cost, best.ratio, classes, time_limit), cost)
        if cand.ratio <= best.ratio:
            break
        best = cand
    return best

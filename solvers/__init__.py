"""Exact subtree selection for speculative decoding on MoE models (pure computation).

No I/O, no import of simmoe or torch.  See the SpecFit paper (§3, App. A) and
docs/solvers.md.

* :class:`Pool` — root, nodes (parents first), path probabilities, expert bitmaps.
* :class:`CostModel`, :class:`Selection`, :func:`evaluate` — R̂, F, T̂ (Eq. 3, 4).
* :func:`select_exact` (Eq. 5 over A_K, tie rule of §3.3),
  :func:`select_max_linear` (argmax R̂ − λT̂ over A_K),
  :func:`select_marginal` (either, with some experts already in the forward),
  :func:`select_adaptive_depth` (Lemma 2); at scale through the closure bounds
  of :mod:`solvers.lagrangian`.
* :func:`max_closure`, :func:`largest_ratio` — no size limit, by min cut (App. A.3).
* :func:`dinkelbach` — λ* across cycle states (App. A.1).
* :class:`RoutedPool`, :class:`CpuCostModel`, :func:`select_exact_cpu`,
  :func:`select_max_linear_cpu`, :func:`select_marginal_cpu`, :func:`cpu_dinkelbach` — the same with experts
  computed on the CPU (T = b_|S| + Σ over the union of max(r, g·n)).
* :func:`clique_instance` — Proposition 2's reduction.
* :func:`preload` — import now what the exact methods import on first use (before a
  time-limited selection's clock matters).
"""

from solvers.adaptive import select_adaptive_depth
from solvers.canonical import preload
from solvers.closure import affine_approximation, largest_ratio, max_closure
from solvers.cost import CostModel, Selection, evaluate
from solvers.cpu_cost import CpuCostModel, RoutedPool, cpu_evaluate
from solvers.cpu_exact import (
    cpu_dinkelbach,
    select_exact_cpu,
    select_marginal_cpu,
    select_max_linear_cpu,
)
from solvers.dinkelbach import DinkelbachResult, closure_oracle, dinkelbach, exact_oracle
from solvers.errors import InvalidInput
from solvers.exact import select_exact, select_marginal, select_max_linear
from solvers.hardness import CliqueInstance, clique_instance, has_clique, reaches_threshold
from solvers.pool import Pool

__all__ = [
    "InvalidInput", "Pool", "CostModel", "Selection", "evaluate",
    "select_exact", "select_max_linear", "select_marginal", "select_adaptive_depth",
    "max_closure", "largest_ratio", "affine_approximation",
    "DinkelbachResult", "dinkelbach", "exact_oracle", "closure_oracle",
    "CliqueInstance", "clique_instance", "reaches_threshold", "has_clique", "preload",
    "RoutedPool", "CpuCostModel", "cpu_evaluate", "select_exact_cpu", "select_max_linear_cpu",
    "select_marginal_cpu", "cpu_dinkelbach",
]

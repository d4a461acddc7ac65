"""Selection theory of SpecFit on traces and instances (§3.3, App. A).

- :mod:`simmoe.theory.cycles`: the cycles SpecFit runs on a trace, with the
  pools it drafted (adaptive depth).
- :mod:`simmoe.theory.optimal`: λ* by Dinkelbach's iteration (Eq. 9).
- :mod:`simmoe.theory.table5`: Table 5 (Proposition 1, Eq. 7) with its self-checks.
- :mod:`simmoe.theory.hardness`: Proposition 2's CLIQUE reduction, decided both ways.
"""

from simmoe.theory.optimal import lambda_star, optimal_rule

__all__ = ["lambda_star", "optimal_rule"]

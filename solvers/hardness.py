"""The CLIQUE reduction of SpecFit Proposition 2 (App. A.3) as an instance generator.

Graph with n vertices, m edges and 2 <= r <= n; k = r(r−1)/2, p = 1/(m+1).
The pool has one node per edge, each a child of the root; one MoE layer with
one expert per vertex; the node of edge {u, w} routes to {u, w}; the root
routes to no expert.  p_v = p, b_j = b for every j, K = k,
β = β_factor·bp/(n(1+(k−1)p)) with 0 < β_factor < 1, and
θ = (1+kp)/(b+βr).  Some S ∈ A_K reaches θ exactly when the graph has an
r-clique.  :func:`reaches_threshold` decides it with the exact selector
(exponential in the worst case: the problem is NP-complete).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from solvers.cost import CostModel
from solvers.errors import InvalidInput
from solvers.exact import select_exact
from solvers.pool import Pool

if TYPE_CHECKING:   # networkx takes ~85 ms to import: only the reduction's callers pay it
    import networkx as nx

__all__ = ["CliqueInstance", "clique_instance", "reaches_threshold", "has_clique"]


@dataclass(frozen=True)
class CliqueInstance:
    pool: Pool
    K: int
    cost: CostModel
    theta: float
    vertices: tuple            # vertex label of expert id e
    edges: tuple               # edge (u, w) of pool node v


def clique_instance(graph: nx.Graph, r: int, *, b: float = 1.0,
                    beta_factor: float = 0.5) -> CliqueInstance:
    """Pool, K, cost and threshold θ of Prop. 2's reduction for ``graph`` and ``r``."""
    import networkx as nx

    if not isinstance(graph, nx.Graph) or graph.is_directed() or graph.is_multigraph():
        raise InvalidInput("graph must be a simple undirected networkx.Graph")
    if isinstance(r, bool) or not isinstance(r, (int, np.integer)):
        raise InvalidInput(f"r must be an integer, got {r!r}")
    n, m = graph.number_of_nodes(), graph.number_of_edges()
    if not 2 <= r <= n:
        raise InvalidInput(f"r = {r}: the reduction needs 2 <= r <= n = {n}")
    if nx.number_of_selfloops(graph):
        raise InvalidInput("graph has a self-loop; the reduction needs a simple graph")
    if not (b > 0 and np.isfinite(b)):
        raise InvalidInput(f"b = {b!r}: must be finite and > 0")
    if not 0 < beta_factor < 1:
        raise InvalidInput(f"beta_factor = {beta_factor!r}: must lie in (0, 1)")
    r = int(r)
    k = r * (r - 1) // 2
    p = 1.0 / (m + 1)
    vertices = tuple(graph.nodes)
    index = {u: i for i, u in enumerate(vertices)}
    edges = tuple(graph.edges)
    routes = np.array([[sorted((index[u], index[w]))] for u, w in edges],
                      dtype=np.int64).reshape(m, 1, 2)
    pool = Pool.from_routes([-1] * m, [p] * m, np.zeros((1, 0), dtype=np.int64), routes, n)
    beta = beta_factor * b * p / (n * (1 + (k - 1) * p))
    cost = CostModel([b] * (k + 1), beta)
    theta = (1 + k * p) / (b + beta * r)
    return CliqueInstance(pool, k, cost, theta, vertices, edges)


def reaches_threshold(inst: CliqueInstance) -> bool:
    """Whether some S ∈ A_K has R̂/T̂ >= θ (the exact optimum, compared with a 1e-9 margin)."""
    best = select_exact(inst.pool, inst.K, inst.cost)
    return best.ratio >= inst.theta * (1 - 1e-9)


def has_clique(graph: nx.Graph, r: int) -> bool:
    """Whether ``graph`` has r pairwise adjacent vertices (networkx maximal cliques)."""
    import networkx as nx

    return any(len(c) >= r for c in nx.find_cliques(graph))

"""Proposition 2 of SpecFit, checked on instances: the CLIQUE reduction (App. A.3).

A graph with n vertices and m edges and a clique size r become a pool of
depth one (one node per edge, one expert per vertex in a single MoE layer,
p = 1/(m+1), equal intercepts b, K = r(r−1)/2, β below bp/(n(1+(K−1)p)))
and a threshold θ = (1+Kp)/(b+βr); some legal subtree reaches θ exactly
when the graph has an r-clique.  ``decide`` answers the pool question with
the exact selector (Eq. 5) and the graph question with networkx;
``simmoe hardness`` checks that the two agree.

Cost: the exact search is exponential in K in the worst case (that is the
point); the clique search is networkx's maximal-clique enumeration, stopped
at the first clique of size r.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import networkx as nx

from solvers import CliqueInstance, clique_instance, select_exact

# A subtree reaches θ when its ratio is at least θ up to float rounding; the
# construction keeps every non-reaching ratio a relative margin of order
# β/(b+β(r+1)) below θ, many orders of magnitude above this.
REACH_RTOL = 1e-12


@dataclass(frozen=True)
class HardnessCase:
    """One decided instance.  Times in seconds."""

    index: int
    seed: int                 # networkx seed of the G(n, q) graph
    vertices: int
    edges: int
    r: int
    K: int
    theta: float
    best_ratio: float         # largest ratio over A_K (Eq. 5)
    reaches: bool             # the exact selector's answer: some S in A_K has ratio ≥ θ
    clique: bool              # networkx's answer: the graph has an r-clique
    selected_vertices: tuple[int, ...]  # vertices covered by the selected edges
    select_s: float
    clique_s: float

    @property
    def agree(self) -> bool:
        return self.reaches == self.clique


def subtree_count(m: int, K: int) -> int:
    """|A_K| of a depth-one pool with m nodes: Σ_{j≤K} C(m, j)."""
    return sum(math.comb(m, j) for j in range(min(K, m) + 1))


def random_graph(n: int, q: float, seed: int) -> nx.Graph:
    """The Erdős–Rényi graph G(n, q) that networkx draws with ``seed``."""
    return nx.gnp_random_graph(n, q, seed=seed)


def has_clique(graph: nx.Graph, r: int) -> bool:
    """Whether ``graph`` has r pairwise adjacent vertices (maximal-clique enumeration).

    Written here rather than taken from ``solvers`` so that the cross-check
    shares no code with the reduction it checks.
    """
    if r <= 1:
        return graph.number_of_nodes() >= r
    return any(len(c) >= r for c in nx.find_cliques(graph))


def expert_routes(instance: CliqueInstance) -> list[tuple[int, int]]:
    """The two experts (vertex indices) each pool node routes to, in pool order."""
    index = {u: e for e, u in enumerate(instance.vertices)}
    pairs = ((index[u], index[w]) for u, w in instance.edges)
    return [(min(a, b), max(a, b)) for a, b in pairs]


def decide(graph: nx.Graph, r: int, *, index: int = 0,
           seed: int = -1) -> tuple[HardnessCase, CliqueInstance]:
    """Decide one instance both ways; returns the case and the solvers instance."""
    instance = clique_instance(graph, r)
    t0 = time.perf_counter()
    sel = select_exact(instance.pool, instance.K, instance.cost)
    t1 = time.perf_counter()
    clique = has_clique(graph, r)
    t2 = time.perf_counter()
    covered = tuple(sorted({x for v in sel.nodes for x in instance.edges[v]}))
    theta = float(instance.theta)
    return HardnessCase(
        index=index, seed=seed, vertices=graph.number_of_nodes(), edges=len(instance.edges), r=r,
        K=int(instance.K), theta=theta, best_ratio=float(sel.ratio),
        reaches=bool(sel.ratio >= theta * (1.0 - REACH_RTOL)), clique=clique,
        selected_vertices=covered, select_s=t1 - t0, clique_s=t2 - t1,
    ), instance


def selected_is_clique(case: HardnessCase, graph: nx.Graph) -> bool:
    """A reaching selection must be the K edges of an r-clique (the proof's converse)."""
    vs = case.selected_vertices
    return len(vs) == case.r and all(graph.has_edge(u, w) for i, u in enumerate(vs)
                                     for w in vs[i + 1:])


def instance_record(case: HardnessCase, instance: CliqueInstance) -> dict:
    """A self-contained JSON-able pool file of one instance (format in docs/theory.md).

    Graph vertices are written as given (integers for ``random_graph``);
    routes use expert ids, the vertices' positions in ``instance.vertices``.
    """
    pool = instance.pool
    return {
        "format": "simmoe-pool",
        "version": 1,
        "kind": "clique-reduction",
        "synthetic": True,
        "graph": {"vertices": case.vertices, "edges": [list(e) for e in instance.edges],
                  "seed": case.seed},
        "r": case.r,
        "has_clique": case.clique,
        "num_layers": 1,
        "num_experts": case.vertices,
        "parents": [int(a) for a in pool.parents],
        "probs": [float(p) for p in pool.probs],
        "root_routes": [[]],
        "node_routes": [[list(e)] for e in expert_routes(instance)],
        "K": case.K,
        "b": [float(x) for x in instance.cost.b],
        "beta": float(instance.cost.beta),
        "theta": case.theta,
        "best_ratio": case.best_ratio,
    }


def instance_seeds(seed: int, count: int) -> list[int]:
    """Graph seeds of a batch: instance i uses seed + i, so any one is reproducible alone."""
    return [seed + i for i in range(count)]


__all__ = ["HardnessCase", "decide", "expert_routes", "has_clique", "instance_record",
           "instance_seeds", "random_graph", "selected_is_clique", "subtree_count", "REACH_RTOL"]

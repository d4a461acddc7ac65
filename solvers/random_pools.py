"""Synthetic candidate pools shaped like SpecFit's (§3.1, App. B), for tests and benchmarks.

Everything produced here is synthetic.  Tree: the root expands into its top
``expand`` children; every later level expands the ``beam`` most probable
nodes of the previous level into ``expand`` children each, until ``depth``
levels or ``nodes`` nodes (EAGLE-3 style).  Draft conditionals: the first
child of a node draws q ~ U(0.3, 0.95), the next ones share what is left.
Routes: top-``k`` of ``N`` experts in each of ``L`` layers; the root's are
uniform; a node keeps each of its parent's experts with probability
``overlap`` and fills the rest uniformly from the others (parent–child
locality).  With ``overlap=0.6`` a 7-node subtree plus root touches about 29
experts per layer, close to the figure derived from SpecFit's Table 3
(docs/solvers.md).
"""

from __future__ import annotations

import numpy as np

from solvers.cost import CostModel
from solvers.pool import Pool

__all__ = ["random_tree_shape", "random_routes", "random_pool_arrays", "paper_shaped_pool",
           "FAMILIES", "HELD_OUT", "family_pool", "family_cost", "bf16", "topological_relabel",
           "eagle_correlated_arrays"]


def random_tree_shape(rng: np.random.Generator, nodes: int = 18, depth: int = 5,
                      expand: int = 2, beam: int | None = None):
    """Parents (-1 = root) and path probabilities of a beam-expanded draft tree."""
    if beam is None:
        # enough beam for `nodes` to fit in `depth` levels
        per_level = max(expand, -(-(nodes - expand) // max(depth - 1, 1)))
        beam = max(1, -(-per_level // expand))
    parents: list[int] = []
    probs: list[float] = []
    frontier = [(-1, 1.0)]
    for level in range(1, depth + 1):
        new = []
        for par, pp in frontier:
            rest = 1.0
            for c in range(expand):
                if len(parents) >= nodes:
                    break
                q = rng.uniform(0.3, 0.95) * rest if c == 0 else rng.uniform(0.0, 1.0) * rest
                rest -= q
                parents.append(par)
                probs.append(pp * q)
                new.append((len(parents) - 1, pp * q))
        if not new or len(parents) >= nodes:
            break
        width = expand if level == 0 else beam
        frontier = sorted(new, key=lambda t: -t[1])[:width]
    return np.array(parents, dtype=np.int64), np.array(probs, dtype=np.float64)


def random_routes(rng: np.random.Generator, parents, L: int = 48, N: int = 128, k: int = 8,
                  overlap: float = 0.6):
    """Root routes ``[L, k]`` and node routes ``[n, L, k]`` with parent–child overlap."""
    def top_k(keys):
        return np.sort(np.argpartition(-keys, k - 1, axis=-1)[..., :k], axis=-1)

    root = top_k(rng.random((L, N)))
    n = len(parents)
    nodes = np.empty((n, L, k), dtype=np.int64)
    rows = np.arange(L)[:, None]
    for v, a in enumerate(parents):
        base = root if a < 0 else nodes[a]
        keys = rng.random((L, N))
        keep = rng.random((L, k)) < overlap
        keys[rows, base] = np.where(keep, 2.0, -1.0)  # keep these, never redraw dropped ones
        nodes[v] = top_k(keys)
    return root, nodes


def random_pool_arrays(rng: np.random.Generator, nodes: int = 18, depth: int = 5, expand: int = 2,
                       L: int = 48, N: int = 128, k: int = 8, overlap: float = 0.6,
                       beam: int | None = None):
    """(parents, probs, root_routes, node_routes, N): the inputs of ``Pool.from_routes``."""
    parents, probs = random_tree_shape(rng, nodes, depth, expand, beam)
    root, routes = random_routes(rng, parents, L, N, k, overlap)
    return parents, probs, root, routes, N


def paper_shaped_pool(rng: np.random.Generator, nodes: int = 18, depth: int = 5, expand: int = 2,
                      L: int = 48, N: int = 128, k: int = 8, overlap: float = 0.6,
                      beam: int | None = None) -> Pool:
    """A synthetic pool: top-2 expansion, depth 5, 18 nodes, 48 layers × 128 experts, top-8."""
    return Pool.from_routes(*random_pool_arrays(rng, nodes, depth, expand, L, N, k, overlap, beam))


#: the pool families of ``benchmarks/bench_solvers.py`` and the tests (all synthetic)
FAMILIES = ("offload", "resident", "resident-loose", "identical-siblings", "flat-distinct",
            "flat-shared", "bf16", "wide-star")

#: families kept out of ``FAMILIES`` (the solvers were not tuned on them): EAGLE-shaped
#: pools with correlated routes, relabelled, bf16, a convex resident cost (:func:`family_pool`)
HELD_OUT = ("eagle-correlated",)

_APP_B = (142.214, 147.532, 150.522, 152.269, 152.743, 163.204, 155.175, 156.068)


def family_cost(family: str, K: int) -> CostModel:
    """The cost of a family (:data:`FAMILIES`): ``offload``, SpecFit App. B (A100 with
    cache, b_j = b_7 + 2(j − 7) ms beyond 7); ``resident-loose``, b_j = 142 + 0.25 j ms and
    β = 0.01 ms (K = 32 does not bind on most pools); every other family the resident
    cost b_j = 142 + 0.5 j ms, β = 0.02 ms; ``eagle-correlated`` (held out), the convex
    resident cost b_j = 100 + 0.4 j + 0.006 j² ms, β = 0.01 ms, where K = 32 does not bind."""
    if family not in FAMILIES + HELD_OUT:
        raise ValueError(f"unknown family {family!r}; one of {', '.join(FAMILIES + HELD_OUT)}")
    if family == "offload":
        b = list(_APP_B) + [_APP_B[-1] + 2.0 * (j - 7) for j in range(8, K + 1)]
        return CostModel(b[:K + 1], 0.210715513)
    if family == "resident-loose":
        return CostModel([142.0 + 0.25 * j for j in range(K + 1)], 0.01)
    if family == "eagle-correlated":
        return CostModel([100.0 + 0.4 * j + 0.006 * j * j for j in range(K + 1)], 0.01)
    return CostModel([142.0 + 0.5 * j for j in range(K + 1)], 0.02)


def bf16(x) -> np.ndarray:
    """Round to bfloat16 (nearest, ties to even), returned as float64."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return rounded.astype(np.uint32).view(np.float32).astype(np.float64)


def family_pool(rng: np.random.Generator, family: str, nodes: int = 200) -> Pool:
    """A pool of a family (:data:`FAMILIES`), EVICT-shaped unless said otherwise: top-8
    expansion, depth 4 (200 nodes: 8 + 64 + 64 + 64), 48 layers × 128 experts, top-8 routes
    with parent–child overlap 0.6.

    * ``offload``, ``resident``, ``resident-loose``: that pool (the costs differ);
    * ``bf16``: its path probabilities rounded to bfloat16;
    * ``identical-siblings``: runs of 2–4 consecutive siblings share their mean
      conditional probability and the first one's routes;
    * ``flat-distinct``: one probability for every node (U(0.05, 0.5) per pool), and
      every node routes to 8 experts per layer that no other node, nor the root, uses
      (8·(n + 1) experts per layer): every subtree of a size ties;
    * ``flat-shared``: one probability, every node routes to the root's experts;
    * ``wide-star``: ``nodes`` children of the root, one probability, overlap 0.6;
    * ``eagle-correlated`` (:data:`HELD_OUT`): that tree with correlated routes (a node
      keeps each of its parent's experts with probability o, o ~ U(0.6, 0.9) per pool: a
      draft path shares most of its parent's experts), bf16-rounded probabilities, and the
      nodes relabelled in a random topological order (parents still first; levels
      interleave).
    """
    family_cost(family, 0)              # validates the name
    if family == "eagle-correlated":
        return Pool.from_routes(*eagle_correlated_arrays(rng, nodes))
    if family == "wide-star":
        parents = np.full(nodes, -1, dtype=np.int64)
    else:
        parents, probs = random_tree_shape(rng, nodes, 4, 8)
    n = len(parents)
    if family == "flat-distinct":
        k, L = 8, 48
        root = np.tile(np.arange(k), (L, 1))
        routes = np.tile(np.arange(k), (n, L, 1)) + k * (np.arange(n) + 1)[:, None, None]
        return Pool.from_routes(parents.tolist(), [rng.uniform(0.05, 0.5)] * n, root, routes,
                                k * (n + 1))
    root, routes = random_routes(rng, parents, 48, 128, 8, 0.6)
    if family in ("flat-shared", "wide-star"):
        probs = np.full(n, rng.uniform(0.05, 0.5))
        if family == "flat-shared":
            routes[:] = root
    elif family == "bf16":
        probs = bf16(probs)
    elif family == "identical-siblings":
        probs, routes = _twins(rng, parents, probs, routes)
    return Pool.from_routes(parents.tolist(), probs.tolist(), root, routes, 128)


def _twins(rng: np.random.Generator, parents: np.ndarray, probs: np.ndarray,
           routes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Runs of 2–4 consecutive siblings with one conditional probability and one route."""
    par = parents.tolist()
    q = np.array([p / (1.0 if a < 0 else probs[a]) for p, a in zip(probs, par, strict=True)])
    routes = routes.copy()
    i = 0
    while i < len(par):
        j = i
        size = int(rng.integers(2, 5))
        while j + 1 < len(par) and par[j + 1] == par[i] and j + 1 - i < size:
            j += 1
        q[i:j + 1] = q[i:j + 1].mean()
        routes[i:j + 1] = routes[i]
        i = j + 1
    out = np.empty(len(par))
    for v, a in enumerate(par):
        out[v] = q[v] * (1.0 if a < 0 else out[a])
    return out, routes


def topological_relabel(rng: np.random.Generator, parents) -> np.ndarray:
    """A uniformly drawn node among those whose parent is placed, repeatedly: ``order[i]`` is
    the old id of new node i (parents keep coming before their children)."""
    par = np.asarray(parents, dtype=np.int64)
    kids: list[list[int]] = [[] for _ in range(par.size)]
    ready: list[int] = []
    for v, a in enumerate(par.tolist()):
        (ready if a < 0 else kids[a]).append(v)
    order = []
    while ready:
        v = ready.pop(int(rng.integers(len(ready))))
        order.append(v)
        ready += kids[v]
    return np.asarray(order, dtype=np.int64)


def eagle_correlated_arrays(rng: np.random.Generator, nodes: int = 200, L: int = 48,
                            N: int = 128, k: int = 8):
    """The ``from_routes`` arguments of an ``eagle-correlated`` pool (:func:`family_pool`):
    top-8 expansion, depth 4; each node keeps each of its parent's experts with probability
    o ~ U(0.6, 0.9) (one o per pool); bf16-rounded path probabilities; the nodes
    relabelled in a random topological order."""
    parents, probs = random_tree_shape(rng, nodes, 4, 8)
    root, routes = random_routes(rng, parents, L, N, k, rng.uniform(0.6, 0.9))
    order = topological_relabel(rng, parents)
    new = np.empty_like(order)
    new[order] = np.arange(order.size)
    old_par = parents[order]
    relabelled = np.where(old_par < 0, -1, new[np.maximum(old_par, 0)])
    return relabelled.tolist(), bf16(probs[order]).tolist(), root, routes[order], N

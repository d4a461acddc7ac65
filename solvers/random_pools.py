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

from solvers.pool import Pool

__all__ = ["random_tree_shape", "random_routes", "random_pool_arrays", "paper_shaped_pool"]


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

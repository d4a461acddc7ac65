"""Hypothesis strategies: small random pools with ties and degenerate cases."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from solvers_brute import RawPool

from solvers import CostModel, Pool
from solvers.random_pools import random_pool_arrays

APP_B = [142.214, 147.532, 150.522, 152.269, 152.743, 163.204, 155.175, 156.068]

PROBS = st.one_of(st.sampled_from([0.0, 0.25, 0.5, 1.0]),
                  st.floats(0.0, 1.0, allow_nan=False))


@st.composite
def raw_pools(draw, max_nodes: int = 8, min_nodes: int = 0):
    n = draw(st.integers(min_nodes, max_nodes))
    L = draw(st.integers(1, 3))
    N = draw(st.integers(2, 6))
    k = draw(st.integers(1, min(3, N)))
    parents = [draw(st.integers(-1, i - 1)) for i in range(n)]
    mode = draw(st.sampled_from(["random", "probs01", "same_probs"]))
    if mode == "probs01":
        probs = [draw(st.sampled_from([0.0, 1.0])) for _ in range(n)]
    elif mode == "same_probs":
        x = draw(PROBS)
        probs = [x] * n
    else:
        probs = [draw(PROBS) for _ in range(n)]
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    identical = draw(st.booleans())

    def route():
        return np.sort(np.argsort(rng.random((L, N)), axis=1)[:, :k], axis=1)

    root = route()
    nodes = np.empty((n, L, k), dtype=np.int64)
    for v, a in enumerate(parents):
        if identical or draw(st.integers(0, 3)) == 0:
            nodes[v] = root if a < 0 else nodes[a]     # identical routes: ties in F
        else:
            nodes[v] = route()
    return RawPool(parents, probs, root, nodes, N)


@st.composite
def costs(draw, K: int):
    """(b, beta) with b of length K+1; small integers make exact ties likely."""
    ints = draw(st.booleans())
    if ints:
        b = [float(draw(st.integers(1, 4))) for _ in range(K + 1)]
        beta = float(draw(st.sampled_from([0, 1, 2])))
    else:
        b = [draw(st.floats(0.1, 10.0)) for _ in range(K + 1)]
        beta = draw(st.floats(0.0, 3.0))
    return b, beta


@st.composite
def instances(draw, pools, max_K: int, min_K: int = 0):
    """(raw, K, b, beta, pool, cost): a pool drawn from ``pools``, a budget K and a cost model of length K + 1."""
    raw = draw(pools)
    K = draw(st.integers(min_K, max_K))
    b, beta = draw(costs(K))
    return raw, K, b, beta, Pool.from_routes(*raw.args()), CostModel(b, beta)


@st.composite
def affine_costs(draw, size: int):
    b0 = draw(st.one_of(st.sampled_from([1.0, 2.0]), st.floats(0.1, 10.0)))
    a = draw(st.one_of(st.sampled_from([0.0, 0.5, 1.0]), st.floats(0.0, 2.0)))
    beta = draw(st.one_of(st.sampled_from([0.0, 0.5, 1.0]), st.floats(0.0, 3.0)))
    return [b0 + a * j for j in range(size + 1)], beta


@st.composite
def shaped_pools(draw, max_nodes: int = 18):
    """(arrays, pool): beam-expanded trees with parent–child route overlap, small or paper-sized
    geometry, sometimes flat probabilities so that the size limit binds."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    nodes = draw(st.integers(1, max_nodes))
    depth = draw(st.integers(1, 6))
    expand = draw(st.integers(1, 3))
    L, N, k = draw(st.sampled_from([(48, 128, 8), (4, 16, 3), (2, 6, 2), (1, 3, 1)]))
    overlap = draw(st.sampled_from([0.0, 0.6, 1.0]))
    parents, probs, root, routes, N = random_pool_arrays(rng, nodes, depth, expand, L, N, k,
                                                         overlap)
    if draw(st.booleans()):
        probs = rng.uniform(0.2, 1.0, len(parents))
    return (parents, probs, root, routes, N), Pool.from_routes(parents, probs, root, routes, N)


@st.composite
def shaped_costs(draw, K: int):
    """App. B's intercepts (non-monotone at b_5), perturbed or replaced, and a β that makes
    the union matter (large) or not (small)."""
    kind = draw(st.sampled_from(["app_b", "random", "flat"]))
    if kind == "app_b":
        b = (APP_B + [APP_B[-1] + 2.0 * (j - 7) for j in range(8, K + 1)])[:K + 1]
    elif kind == "random":
        b = [draw(st.floats(1.0, 200.0)) for _ in range(K + 1)]
    else:
        b = [100.0] * (K + 1)
    beta = draw(st.sampled_from([0.0, 0.02, 0.210715513, 1.0, 20.0]))
    return CostModel(b, beta)


def _bf16(x: float) -> float:
    u = int(np.float32(x).view(np.uint32))
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return float(np.uint32(u).view(np.float32))


@st.composite
def tie_pools(draw, max_nodes: int = 14, min_nodes: int = 0):
    """Small pools built to tie: one probability for all nodes, a few values, or bf16-rounded
    ones; every node with the root's experts, with experts no other node has, siblings
    copying each other's, or random ones."""
    n = draw(st.integers(min_nodes, max_nodes))
    L = draw(st.integers(1, 2))
    k = draw(st.integers(1, 2))
    shape = draw(st.sampled_from(["random", "star", "chain", "broom"]))
    if shape == "star":
        parents = [-1] * n
    elif shape == "chain":
        parents = [i - 1 for i in range(n)]
    elif shape == "broom":          # a few root children, the rest under the first ones
        parents = [-1 if i < 3 else draw(st.integers(0, min(i - 1, 2))) for i in range(n)]
    else:
        parents = [draw(st.integers(-1, i - 1)) for i in range(n)]
    probs_mode = draw(st.sampled_from(["equal", "few", "bf16", "twins"]))
    if probs_mode == "equal":
        probs = [draw(PROBS)] * n
    elif probs_mode == "few":
        values = draw(st.lists(PROBS, min_size=1, max_size=3))
        probs = [draw(st.sampled_from(values)) for _ in range(n)]
    else:
        probs = [_bf16(draw(st.floats(0.0, 1.0))) for _ in range(n)]
    routes_mode = draw(st.sampled_from(["shared", "distinct", "twins", "random"]))
    N = k * (n + 1) if routes_mode == "distinct" else draw(st.integers(max(k, 2), 5))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))

    def route():
        return np.sort(np.argsort(rng.random((L, N)), axis=1)[:, :k], axis=1)

    root = np.tile(np.arange(k), (L, 1)) if routes_mode == "distinct" else route()
    nodes = np.empty((n, L, k), dtype=np.int64)
    for v, a in enumerate(parents):
        if routes_mode == "shared":
            nodes[v] = root
        elif routes_mode == "distinct":
            nodes[v] = np.tile(np.arange(k) + k * (v + 1), (L, 1))
        elif routes_mode == "twins" and v and parents[v - 1] == a and draw(st.booleans()):
            nodes[v] = nodes[v - 1]
            if probs_mode == "twins":
                probs[v] = probs[v - 1]
        else:
            nodes[v] = route()
    return RawPool(parents, probs, root, nodes, N)

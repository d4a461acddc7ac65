"""EVICT's profiled prefix unions (simmoe.hardware.union_profile) against a brute-force union of bool masks."""

from __future__ import annotations

import numpy as np
from factories import random_trace
from hypothesis import given, settings
from hypothesis import strategies as st

from simmoe.api import PoolView
from simmoe.hardware.union_profile import prefix_unions


def reference_masks(trace, row: int, K: int) -> np.ndarray:
    """bool [K + 1, L, N]: the union of the root's routes and those of the k most probable nodes, k = 0..K."""
    g = trace.geometry
    L, N = g.num_layers, g.num_experts
    s = trace.pool_slice(row)
    view = PoolView(row=row, parents=trace.node_parent[s], levels=trace.node_level[s], p=trace.node_p[s],
                    q=trace.node_q[s], agree=trace.node_agree[s], root_routes=trace.root_routes[row],
                    node_routes=trace.node_routes[s], num_experts=N)
    order = list(view.probability_order()) if s.stop > s.start else []
    masks = np.zeros((K + 1, L, N), dtype=bool)
    for k in range(K + 1):
        for layer in range(L):
            masks[k, layer, trace.root_routes[row][layer]] = True
            for node in order[:k]:
                masks[k, layer, trace.node_routes[s][node][layer]] = True
    return masks


def reference_unions(trace, K: int, picks) -> np.ndarray:
    out = np.zeros((len(picks), K + 1, trace.geometry.num_layers))
    for i, rows in enumerate(picks):
        acc = np.zeros((K + 1, trace.geometry.num_layers, trace.geometry.num_experts), dtype=bool)
        for row in rows:
            acc |= reference_masks(trace, row, K)
        out[i] = acc.sum(axis=2)
    return out


@settings(max_examples=25)
@given(seed=st.integers(0, 10_000), K=st.integers(0, 12), pool=st.integers(0, 9))
def test_batch_one_unions_equal_the_brute_force_union(seed, K, pool):
    trace = random_trace(seed, num_requests=2, output_len=(2, 4), L=3, N=8, k=2, pool_nodes=pool)
    P = trace.num_positions
    unions, _ = prefix_unions(trace, K, samples=P)
    rows = np.unique(np.linspace(0, P - 1, min(P, P)).round().astype(np.int64))
    assert np.array_equal(unions, reference_unions(trace, K, [[int(r)] for r in rows]))


@settings(max_examples=15)
@given(seed=st.integers(0, 10_000), K=st.integers(1, 10), batch=st.integers(2, 3))
def test_batch_unions_equal_the_brute_force_union_of_each_step(seed, K, batch):
    trace = random_trace(seed, num_requests=3, output_len=(2, 4), L=2, N=6, k=2, pool_nodes=7)
    unions, _ = prefix_unions(trace, K, samples=4, batch=batch, seed=seed)
    # the same draws as prefix_unions makes (module docstring: default_rng(seed), requests then positions)
    rng = np.random.default_rng(seed)
    starts = [trace.request_positions(r)[0] for r in range(len(trace.requests))]
    out_len = np.asarray(trace.requests.output_len, dtype=np.int64)
    picks = []
    for _ in range(4):
        reqs = rng.choice(len(trace.requests), size=min(batch, len(trace.requests)), replace=False)
        picks.append([int(starts[r] + rng.integers(0, out_len[r])) for r in reqs])
    assert np.array_equal(unions, reference_unions(trace, K, picks))

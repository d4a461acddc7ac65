"""EVICT's C(k) with experts on the CPU: profiled with the placement's own forward, checked by hand."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from cpu_toy import ATTN, BW_CPU, BW_GPU, E_BYTES, HEAD, P_E, PEAK_GPU, ROUTER, H, toy_forward
from factories import random_trace

from simmoe.replay.selection import evict_table

KV = 2 * 1 * 32 * 2          # K and V of one KV head of 32 dims in BF16, bytes per token per layer
PAIR = 4 * 2 * 32            # attention flops per (query, context) pair per layer: 2 heads of 32 dims


def hand_forward_us(n: int, unions: list[set], ctx: float) -> float:
    """The toy's cpu-all forward over n tokens by hand: each layer's u experts serve n·k/u tokens each."""
    t = 0.0
    for u in (len(s) for s in unions):
        per = n * 2 / u
        c = max(E_BYTES / BW_CPU, 2 * per * P_E / (0.5 * 16e9)) * 1e6
        side = 10.0 + n * 2 * H * 4 / 10e9 * 1e6 + u * c          # sync + F32 round trip + the experts
        gpu = max(((ATTN + ROUTER) * 2 + ctx * KV) / BW_GPU,
                  (n * 2 * (ATTN + ROUTER) + n * ctx * PAIR) / PEAK_GPU) * 1e6
        t += gpu + side
    return t + max(HEAD * 2 / BW_GPU, n * 2 * HEAD / PEAK_GPU) * 1e6


def hand_table(trace, fwd) -> list[float]:
    K = int(trace.pool_shape.max_nodes)
    sums = np.zeros(K)
    P = len(trace.pos_request)
    for row in range(P):
        s = trace.pool_slice(row)
        p, lev = trace.node_p[s].astype(np.float64), trace.node_level[s]
        order = sorted(range(len(p)), key=lambda j: (-p[j], lev[j], j))
        req = int(trace.pos_request[row])
        ctx = float(trace.requests.prompt_len[req] + trace.pos_index[row])
        for k in range(1, K + 1):
            unions = [set(trace.root_routes[row][layer].tolist()) for layer in range(2)]
            for j in order[:k]:
                for layer in range(2):
                    unions[layer] |= set(trace.node_routes[s][j][layer].tolist())
            sums[k - 1] += hand_forward_us(1 + k, unions, ctx) / 1e3 + fwd.o.forward_ms
    return list(fwd.draft_ms(int(trace.pool_shape.depth), served=False) + sums / P)


def test_evict_cost_with_cpu_experts_is_the_placements_forward_by_hand():
    trace = random_trace(3, num_requests=2, output_len=(4, 6), L=2, N=4, k=2, pool_nodes=5)
    fwd = toy_forward("cpu-all")
    profile = SimpleNamespace(physical=fwd, resident=False, name="toy-cpu-all",
                              cost_b_no_cache=(1.0,) * 8, cost_beta_no_cache=1.0)
    got = evict_table(trace, profile)
    assert len(got) == trace.pool_shape.max_nodes
    assert got == pytest.approx(hand_table(trace, fwd), rel=1e-9)
    # the linear b_k + β·F table is what a copy-regime profile gets: not this one
    assert got[0] != pytest.approx(1.0 + 8.0, rel=1e-3)

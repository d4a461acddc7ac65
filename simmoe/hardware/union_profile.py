"""Per-layer expert unions of probability-ordered prefixes, sampled from a trace (EVICT §3.2.3 profiling).

EVICT ranks a pool's nodes by path probability and verifies a prefix of k of
them (EVICT Eq. 10); its cost table C(k) is profiled per k on the running
system.  :func:`prefix_unions` draws the states such a profiling run sees: a
position (or, for a batch, one position in each of ``batch`` distinct
requests), and for every k = 0..K the per-layer union of the experts of the
roots and of each request's k most probable nodes (a pool smaller than k
contributes all its nodes).
"""

from __future__ import annotations

import numpy as np


def _first_ranks(trace, row: int, K: int) -> np.ndarray:
    """``int [L, N]``: the smallest k whose prefix brings expert (ℓ, e) — 0 for the root's experts, k for the
    k-th most probable node's — or K + 1 where no prefix of at most K nodes does.

    The union of the prefix of k nodes is {(ℓ, e): rank ≤ k}, so one [L, N] array stands for all K + 1
    unions (O(m·L·k + L·N) instead of O(K·L·N)).
    """
    from simmoe.api import PoolView

    g = trace.geometry
    L, N = g.num_layers, g.num_experts
    s = trace.pool_slice(row)
    first = np.full((L, N), K + 1, dtype=np.int64)
    n = s.stop - s.start
    if n and K > 0:
        view = PoolView(row=row, parents=trace.node_parent[s], levels=trace.node_level[s], p=trace.node_p[s],
                        q=trace.node_q[s], agree=trace.node_agree[s], root_routes=trace.root_routes[row],
                        node_routes=trace.node_routes[s], num_experts=N)
        order = view.probability_order()[:K]
        routes = np.asarray(trace.node_routes[s][order], dtype=np.int64)     # [m, L, k], rank j + 1 at row j
        keys = (routes + (np.arange(L) * N)[None, :, None]).reshape(-1)
        ranks = np.repeat(np.arange(1, len(order) + 1), L * routes.shape[2])
        np.minimum.at(first.reshape(-1), keys, ranks)                          # each expert's first rank
    lay = np.arange(L)[:, None]
    first[lay, trace.root_routes[row]] = 0
    return first


def prefix_unions(trace, K: int, *, samples: int = 256, batch: int = 1, seed: int = 0,
                  requests: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(unions [S, K + 1, L], contexts [S])`` of ``samples`` profiled steps (module docstring).

    With ``batch = 1`` the positions are spread evenly over the trace
    (deterministic); with ``batch > 1`` each step draws ``batch`` distinct
    requests (all of them if the trace has fewer) and one position in each,
    from ``numpy.random.default_rng(seed)``.  ``contexts`` is the number of
    context tokens (prompt + position) the step's attention reads, summed over
    its requests.  O(S · batch · K · L · N).
    """
    R = len(trace.requests) if requests is None else min(int(requests), len(trace.requests))
    starts = np.array([trace.request_positions(r)[0] for r in range(R)], dtype=np.int64)
    out_len = np.asarray(trace.requests.output_len[:R], dtype=np.int64)
    prompt = np.asarray(trace.requests.prompt_len[:R], dtype=np.int64)
    P = int(out_len.sum())
    L = trace.geometry.num_layers
    if batch <= 1:
        S = min(int(samples), P)
        rows_all = np.unique(np.linspace(0, P - 1, S).round().astype(np.int64))
        picks = [[int(i)] for i in rows_all]
    else:
        rng = np.random.default_rng(seed)
        picks = []
        for _ in range(int(samples)):
            reqs = rng.choice(R, size=min(batch, R), replace=False)
            picks.append([int(starts[r] + rng.integers(0, out_len[r])) for r in reqs])
    pos_req = np.asarray(trace.pos_request)
    pos_idx = np.asarray(trace.pos_index)
    unions = np.zeros((len(picks), K + 1, L), dtype=np.float64)
    contexts = np.zeros(len(picks), dtype=np.float64)
    offsets = (np.arange(L) * (K + 2))[:, None]
    for i, rows in enumerate(picks):
        first: np.ndarray | None = None        # over the batch: an expert is in the union from its first rank
        for row in rows:
            f = _first_ranks(trace, row, K)
            first = f if first is None else np.minimum(first, f)
            contexts[i] += prompt[pos_req[row]] + pos_idx[row]
        assert first is not None   # every pick holds at least one row
        counts = np.bincount((first + offsets).reshape(-1), minlength=L * (K + 2)).reshape(L, K + 2)
        unions[i] = np.cumsum(counts[:, :K + 1], axis=1).T
    return unions, contexts

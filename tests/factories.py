"""Small random objects for tests: valid traces and pools built from a seed.

Kept independent of ``simmoe synth`` so that tests of the trace format, the
caches and the replay do not depend on the synthetic generator.
"""

from __future__ import annotations

import numpy as np

from simmoe.api import PoolView
from simmoe.trace.schema import SCHEMA_VERSION, ModelGeometry, PoolShape, Requests, Trace


def random_routes(rng: np.random.Generator, n: int, L: int, N: int, k: int) -> np.ndarray:
    """``n`` random route sets ``[n, L, k]``: k distinct sorted experts per layer."""
    keys = rng.random((n, L, N))
    routes = np.sort(np.argpartition(keys, k - 1, axis=-1)[..., :k], axis=-1)
    dtype = np.uint8 if N <= 256 else np.uint16
    return routes.astype(dtype)


def random_tree(rng: np.random.Generator, n: int, expand: int = 2, depth: int = 5):
    """Parents (-1 = root) and levels of a random tree, parents listed first."""
    parents, levels, children = [], [], {-1: 0}
    for _ in range(n):
        candidates = [v for v in [-1, *range(len(parents))]
                      if children.get(v, 0) < expand and (v == -1 or levels[v] < depth)]
        if not candidates:
            break
        v = int(rng.choice(candidates))
        parents.append(v)
        levels.append(1 if v == -1 else levels[v] + 1)
        children[v] = children.get(v, 0) + 1
        children[len(parents) - 1] = 0
    return np.array(parents, dtype=np.int16), np.array(levels, dtype=np.int8)


def random_trace(seed: int = 0, *, num_requests: int = 2, output_len=(5, 9),
                 L: int = 3, N: int = 8, k: int = 2, pool_nodes: int = 6,
                 agree_rate: float = 0.6, dataset: str = "test") -> Trace:
    """A valid trace with random pools; ``pool_nodes=0`` gives an AR-only trace."""
    rng = np.random.default_rng(seed)
    lens = rng.integers(output_len[0], output_len[1] + 1, size=num_requests).astype(np.int32)
    P = int(lens.sum())
    pos_request = np.repeat(np.arange(num_requests, dtype=np.int32), lens)
    pos_index = np.concatenate([np.arange(n, dtype=np.int32) for n in lens])
    parents, levels, qs, ps, agree, ptr = [], [], [], [], [], [0]
    for _ in range(P):
        par, lev = random_tree(rng, pool_nodes)
        q = rng.uniform(0.05, 1.0, size=len(par)).astype(np.float32)
        p = np.empty_like(q)
        for j, a in enumerate(par):
            p[j] = q[j] if a < 0 else p[a] * q[j]
        parents.append(par)
        levels.append(lev)
        qs.append(q)
        ps.append(p)
        agree.append(rng.random(len(par)) < agree_rate)
        ptr.append(ptr[-1] + len(par))
    M = ptr[-1]

    def cat(xs, dt):
        return np.concatenate(xs).astype(dt) if xs and M else np.zeros(0, dt)

    geometry = ModelGeometry(L, N, k, expert_bytes=1024, name="random")
    meta = {
        "schema_version": SCHEMA_VERSION,
        "provenance": {"kind": "synthetic", "generator": "tests.factories.random_trace", "seed": seed},
        "geometry": geometry.to_dict(),
        "pool_shape": PoolShape(2, 5, max(pool_nodes, 1), min(7, max(pool_nodes, 1))).to_dict(),
        "hardware": None,
    }
    prefill = rng.random((num_requests, L, N)) < 0.5
    requests = Requests(
        request_id=np.array([f"r{i}" for i in range(num_requests)], dtype=object),
        dataset=np.array([dataset] * num_requests, dtype=object),
        prompt_len=rng.integers(4, 20, size=num_requests).astype(np.int32),
        output_len=lens,
        prefill_union=prefill,
        prefill_time_ms=np.full(num_requests, np.nan),
    )
    return Trace(
        meta=meta, requests=requests, pos_request=pos_request, pos_index=pos_index,
        root_token=rng.integers(0, 100, size=P).astype(np.int32),
        root_routes=random_routes(rng, P, L, N, k),
        node_ptr=np.array(ptr, dtype=np.int64),
        node_parent=cat(parents, np.int16), node_level=cat(levels, np.int8),
        node_token=rng.integers(0, 100, size=M).astype(np.int32),
        node_q=cat(qs, np.float32), node_p=cat(ps, np.float32),
        node_agree=cat(agree, bool), node_routes=random_routes(rng, M, L, N, k),
    )


def views_of(trace):
    """Every position's pool of ``trace`` as a :class:`simmoe.api.PoolView` (true routes, no prediction)."""
    N = trace.geometry.num_experts
    for i in range(trace.num_positions):
        s = trace.pool_slice(i)
        yield PoolView(row=i, parents=trace.node_parent[s], levels=trace.node_level[s],
                       p=trace.node_p[s], q=trace.node_q[s], agree=trace.node_agree[s],
                       root_routes=trace.root_routes[i], node_routes=trace.node_routes[s],
                       num_experts=N)

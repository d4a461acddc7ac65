"""Traces with target distributions (schema version 2, ``meta["sampling"]``) for tests.

Independent of ``simmoe synth``: each parent of a pool gets a random target
distribution over a small vocabulary (Dirichlet), its children distinct
tokens of that vocabulary, and the node fields follow from it exactly:
p = the distribution at the child's token, cdf = the mass below it, agree =
the token is the distribution's argmax.
"""

from __future__ import annotations

import numpy as np
from factories import random_trace

from simmoe.trace.schema import Trace

VOCAB = 12


def attach_distributions(trace: Trace, *, temperature: float = 1.0, seed: int = 0,
                         concentration: float = 0.6, text: str = "greedy",
                         sampling_seed: int | None = None) -> Trace:
    """``trace`` with fresh sibling-distinct tokens and consistent target fields (in place, returned)."""
    rng = np.random.default_rng(seed)
    ptr = np.asarray(trace.node_ptr, np.int64)
    M = int(ptr[-1])
    token = np.zeros(M, np.int32)
    p = np.zeros(M, np.float32)
    cdf = np.zeros(M, np.float32)
    agree = np.zeros(M, bool)
    for i in range(len(ptr) - 1):
        lo, hi = int(ptr[i]), int(ptr[i + 1])
        par = np.asarray(trace.node_parent[lo:hi], np.int64)
        for a in np.unique(par):
            kids = lo + np.flatnonzero(par == a)
            dist = rng.dirichlet(np.full(VOCAB, concentration))
            dist = np.maximum(dist, 1e-9)
            dist /= dist.sum()
            toks = rng.choice(VOCAB, size=len(kids), replace=False)
            below = np.concatenate([[0.0], np.cumsum(dist)])[:-1]
            token[kids] = toks
            p[kids] = dist[toks]
            cdf[kids] = below[toks]
            agree[kids] = toks == int(np.argmax(dist))
    trace.node_token = token
    trace.node_target_prob = p
    trace.node_target_cdf = cdf
    trace.node_agree = agree
    trace.meta["sampling"] = {"temperature": float(temperature), "seed": sampling_seed, "text": text}
    return trace


def sampled_trace(seed: int = 0, *, temperature: float = 1.0, **kwargs) -> Trace:
    """A :func:`factories.random_trace` with target distributions attached."""
    return attach_distributions(random_trace(seed, **kwargs), temperature=temperature, seed=seed + 1000)


def repeated_pool_trace(parents, levels, q, probs, cdf, tokens, *, positions: int,
                        temperature: float = 1.0, depth: int | None = None) -> Trace:
    """One request of ``positions`` positions whose every pool is the same small pool.

    The last ``depth`` positions' pools are cut to the levels that fit, as a
    recorder does, so that the trace is valid; cycles away from the end all
    see the full pool and each draws with fresh uniforms.
    """
    from factories import random_routes

    from simmoe.trace.schema import SCHEMA_VERSION, ModelGeometry, PoolShape, Requests

    parents = np.asarray(parents, np.int16)
    levels = np.asarray(levels, np.int8)
    q = np.asarray(q, np.float32)
    pp = np.empty_like(q)
    for j, a in enumerate(parents):
        pp[j] = q[j] if a < 0 else pp[a] * q[j]
    L, N, k = 2, 8, 2
    rng = np.random.default_rng(0)
    depth = int(levels.max()) if depth is None else depth
    P = positions
    cols = {"parent": [], "level": [], "q": [], "p": [], "tp": [], "cdf": [], "tok": [], "agree": []}
    ptr = [0]
    best = {}
    for j, a in enumerate(parents):
        best.setdefault(int(a), []).append(j)
    agree = np.zeros(len(parents), bool)
    for kids in best.values():
        # greedy agreement: the child whose p is the largest, if it beats the rest mass
        top = max(kids, key=lambda v: probs[v])
        agree[top] = probs[top] >= 1.0 - sum(probs[v] for v in kids)
    for t in range(P):
        keep = levels <= min(depth, P - 1 - t)
        for name, a in (("parent", parents), ("level", levels), ("q", q), ("p", pp), ("tp", probs),
                        ("cdf", cdf), ("tok", tokens), ("agree", agree)):
            cols[name].append(np.asarray(a)[keep])
        ptr.append(ptr[-1] + int(keep.sum()))
    M = ptr[-1]
    def cat(name, dt):
        return np.concatenate(cols[name]).astype(dt)
    meta = {"schema_version": SCHEMA_VERSION,
            "provenance": {"kind": "synthetic", "generator": "tests.sampling_factories", "seed": 0},
            "geometry": ModelGeometry(L, N, k, expert_bytes=1024, name="tiny").to_dict(),
            "pool_shape": PoolShape(4, depth, max(len(parents), 1), len(parents)).to_dict(),
            "hardware": None,
            "sampling": {"temperature": float(temperature), "seed": None, "text": "greedy"}}
    req = Requests(request_id=np.array(["q0"], object), dataset=np.array(["test"], object),
                   prompt_len=np.array([4], np.int32), output_len=np.array([P], np.int32),
                   prefill_union=np.zeros((1, L, N), bool), prefill_time_ms=np.full(1, np.nan))
    return Trace(meta=meta, requests=req, pos_request=np.zeros(P, np.int32),
                 pos_index=np.arange(P, dtype=np.int32), root_token=np.zeros(P, np.int32),
                 root_routes=random_routes(rng, P, L, N, k), node_ptr=np.array(ptr, np.int64),
                 node_parent=cat("parent", np.int16), node_level=cat("level", np.int8),
                 node_token=cat("tok", np.int32), node_q=cat("q", np.float32), node_p=cat("p", np.float32),
                 node_agree=cat("agree", bool), node_routes=random_routes(rng, M, L, N, k),
                 node_target_prob=cat("tp", np.float32), node_target_cdf=cat("cdf", np.float32))

"""Synthetic drafter: predictability stretches, EAGLE-style pools, calibrated agreement.

Generative model (docs/synthetic-traces.md, "Draft pools"):

* Stretches: the output positions of a request alternate between easy and
  hard stretches (a two-state Markov chain; stationary easy share
  ``easy_share``; mean stretch lengths ``2·stretch_tokens·share``).  Position
  u gets a latent predictability ``z_u ~ Beta`` with mean ``easy_confidence``
  or ``hard_confidence``.
* Pool of position t (SpecFit §3.1, EAGLE-3): level 1 holds the root's
  ``expand_topk`` best children; each next level expands the ``expand_topk``
  nodes of the previous level with the largest path probability p into their
  ``expand_topk`` best children; depth ≤ ``depth``, and at most
  ``output_len - 1 - t`` (the pool shrinks near the generation limit).  When
  the drafted pool exceeds ``max_nodes``, the ``max_nodes`` nodes of largest p
  are kept (ancestor-closed, since p never grows along a path).
* Draft probabilities of the children of a node at level j-1 (they predict
  position u = t + j): top-1 ``q_1 ~ Beta`` with mean ``z_u · depth_decay^(j-1)``;
  each next child takes a ``Beta``-distributed share (mean
  ``runner_up_share``) of the remaining mass, never more than its elder
  sibling.  ``p = p_parent · q`` in float32, exactly.
* Agreement, calibrated to q: the target's greedy token after a node is its
  i-th child with probability ``q_i`` and none of them with the rest, so
  P(agree | q) = q and at most one child of a node agrees.  On the true text
  (the root and agreeing descendants) the agreeing child is the true token
  of position u; elsewhere agreement is drawn the same way but can never be
  accepted, because acceptance needs the whole path to agree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from simmoe.trace.schema import PoolShape


def level_sizes(pool: PoolShape) -> list[int]:
    """Nodes drafted at each level of a full-depth pool (before the max_nodes cap)."""
    sizes: list[int] = []
    for j in range(pool.depth):
        expanded = 1 if j == 0 else min(pool.expand_topk, sizes[-1])
        sizes.append(expanded * pool.expand_topk)
    return sizes


def expansion_plan(pool: PoolShape) -> list[tuple[int, int]]:
    """EAGLE's expansion as (parents expanded, children per parent) per level (:func:`level_sizes`)."""
    k = pool.expand_topk
    return [(size // k, k) for size in level_sizes(pool)]


def stretches(n: int, easy_share: float, stretch_tokens: float,
              rng: np.random.Generator) -> np.ndarray:
    """Easy (True) / hard (False) state of ``n`` positions: a two-state Markov chain.

    Mean easy stretch ``2·S·π``, mean hard stretch ``2·S·(1-π)`` (S =
    ``stretch_tokens``, π = ``easy_share``), so the stationary easy share is π.
    The first state is drawn from the stationary law.  O(n) with a Python
    loop over stretches only.
    """
    if easy_share >= 1.0:
        return np.ones(n, dtype=bool)
    if easy_share <= 0.0:
        return np.zeros(n, dtype=bool)
    mean_len = {True: max(1.0, 2 * stretch_tokens * easy_share),
                False: max(1.0, 2 * stretch_tokens * (1 - easy_share))}
    state = bool(rng.random() < easy_share)
    out = np.empty(n, dtype=bool)
    t = 0
    while t < n:
        length = int(rng.geometric(1.0 / mean_len[state]))
        out[t:t + length] = state
        t += length
        state = not state
    return out


def _beta_mean(mean: np.ndarray, concentration: float, rng: np.random.Generator) -> np.ndarray:
    m = np.clip(mean, 1e-3, 1 - 1e-3)
    return rng.beta(concentration * m, concentration * (1 - m))


def predictability(easy: np.ndarray, params, rng: np.random.Generator) -> np.ndarray:
    """Latent predictability ``z_u`` of each position (Beta around the stretch's mean)."""
    mean = np.where(easy, params.easy_confidence, params.hard_confidence)
    return _beta_mean(mean, params.confidence_concentration, rng)


@dataclass
class Pools:
    """Padded pools of one request: ``[n, M]`` arrays, ``valid`` marks real nodes.

    Node order in a pool: level by level; within a level, expanded parents in
    decreasing p, then children in decreasing q.  ``chain`` marks nodes on the
    true text (every node of the path agrees); ``u`` is the output position
    the node predicts (t + level).
    """

    valid: np.ndarray    # bool [n, M]
    parent: np.ndarray   # int16 [n, M], -1 = root
    level: np.ndarray    # int8 [n, M]
    q: np.ndarray        # float32 [n, M]
    p: np.ndarray        # float32 [n, M]
    agree: np.ndarray    # bool [n, M]
    chain: np.ndarray    # bool [n, M]
    token: np.ndarray    # int32 [n, M]


def draft_pools(true_tokens: np.ndarray, z: np.ndarray, params,
                rng: np.random.Generator, level_mean: Callable[[np.ndarray, int], np.ndarray] | None = None,
                plan: list[tuple[int, int]] | None = None, runner_up: float | None = None) -> Pools:
    """Pools of every position of one request (vectorised over positions; loops over levels).

    ``true_tokens[u]`` is the output text, ``z[u]`` its predictability.
    ``level_mean(z_u, j)``: another drafter's acceptance model, the mean top-1
    q of level j (:class:`simmoe.api.Drafter`); None: EAGLE-3's,
    ``z_u · depth_decay^(j-1)`` (the same random draws either way).
    ``plan``: per level, (parents expanded, children per parent), the most
    probable parents first; None: EAGLE's expansion (:func:`expansion_plan`).
    ``runner_up``: the drafter's mean share of the remaining mass per next
    sibling (None: the workload's ``runner_up_share``).
    Complexity O(n · M · k) for n positions and M nodes per pool.
    """
    pool: PoolShape = params.pool
    n = len(true_tokens)
    plan = expansion_plan(pool) if plan is None else plan
    sizes = [b * k for b, k in plan]
    M = sum(sizes)
    t = np.arange(n)
    depth_t = np.minimum(pool.depth, n - 1 - t)          # pools shrink near the end
    valid = np.zeros((n, M), dtype=bool)
    parent = np.full((n, M), -1, dtype=np.int16)
    level = np.zeros((n, M), dtype=np.int8)
    q = np.zeros((n, M), dtype=np.float32)
    p = np.zeros((n, M), dtype=np.float32)
    agree = np.zeros((n, M), dtype=bool)
    chain = np.zeros((n, M), dtype=bool)
    token = np.zeros((n, M), dtype=np.int32)
    V = params.vocab_size
    start = 0
    prev = (0, 0)                                         # column range of the previous level (none at level 1)
    for j, (b, k) in enumerate(plan, start=1):       # b parents expanded at this level, k children each
        size = b * k
        if j == 1:
            par = np.full((n, 1), -1, dtype=np.int64)
            p_par = np.ones((n, 1), dtype=np.float32)
            chain_par = np.ones((n, 1), dtype=bool)
        else:
            lo, hi = prev
            # the b most probable nodes of the previous level (ties: lower index)
            order = np.argsort(-p[:, lo:hi], axis=1, kind="stable")[:, :b]
            par = lo + order
            p_par = np.take_along_axis(p, par, axis=1)
            chain_par = np.take_along_axis(chain, par, axis=1)
        live = (j <= depth_t)[:, None]                      # [n, 1]
        u = np.minimum(t + j, n - 1)                        # position the children predict
        top1 = z[u] * params.depth_decay ** (j - 1) if level_mean is None else level_mean(z[u], j)
        mean1 = top1[:, None] * np.ones((1, b))
        qs = np.empty((n, b, k), dtype=np.float64)
        qs[:, :, 0] = _beta_mean(mean1, params.draft_concentration, rng)
        rest = 1.0 - qs[:, :, 0]
        for i in range(1, k):
            share = _beta_mean(np.full((n, b), params.runner_up_share if runner_up is None else runner_up), 4.0, rng)
            qs[:, :, i] = np.minimum(qs[:, :, i - 1], rest * share)
            rest = rest - qs[:, :, i]
        qs = np.clip(qs, 1e-6, 1.0).astype(np.float32)
        # target's greedy choice: child i with probability q_i, none with the rest
        cum = np.cumsum(qs.astype(np.float64), axis=2)
        pick = (rng.random((n, b, 1)) >= cum).sum(axis=2)   # k = none of them
        is_pick = np.arange(k)[None, None, :] == pick[:, :, None]
        on_chain = is_pick & chain_par[:, :, None]
        # tokens: the true one on the chain; otherwise distinct ids != true token
        base = rng.integers(0, V - k, size=(n, b, 1))
        other = (true_tokens[u][:, None, None] + 1 + base + np.arange(k)) % V
        tok = np.where(on_chain, true_tokens[u][:, None, None], other)
        cols = slice(start, start + size)
        valid[:, cols] = live
        parent[:, cols] = np.repeat(par, k, axis=1).astype(np.int16)
        level[:, cols] = j
        q[:, cols] = qs.reshape(n, size)
        p[:, cols] = (p_par[:, :, None] * qs).reshape(n, size)   # float32 product
        agree[:, cols] = is_pick.reshape(n, size)
        chain[:, cols] = on_chain.reshape(n, size)
        token[:, cols] = tok.reshape(n, size)
        prev = (start, start + size)
        start += size
    pools = Pools(valid, parent, level, q, p, agree, chain & valid, token)
    if M > pool.max_nodes:
        pools = _cap_nodes(pools, pool.max_nodes)
    return pools


def _cap_nodes(pools: Pools, max_nodes: int) -> Pools:
    """Keep the ``max_nodes`` nodes of largest p per pool (stable), compacting to the front."""
    n, M = pools.valid.shape
    key = np.where(pools.valid, pools.p, -1.0)
    rank = np.empty((n, M), dtype=np.int64)
    order = np.argsort(-key, axis=1, kind="stable")
    np.put_along_axis(rank, order, np.arange(M)[None, :].repeat(n, 0), axis=1)
    keep = pools.valid & (rank < max_nodes)
    # new index of every kept node: its rank in original (parents-first) order
    new_index = np.cumsum(keep, axis=1) - 1
    par = pools.parent.astype(np.int64)
    new_par = np.where(par >= 0, np.take_along_axis(new_index, np.maximum(par, 0), axis=1), -1)
    out_cols = max_nodes
    dest = np.where(keep, new_index, out_cols)           # dropped nodes go to a spill column
    def compact(a, fill):
        out = np.full((n, out_cols + 1), fill, dtype=a.dtype)
        np.put_along_axis(out, dest, a, axis=1)
        return out[:, :out_cols]
    return Pools(
        valid=compact(keep, False),
        parent=compact(new_par.astype(np.int16), np.int16(-1)),
        level=compact(pools.level, np.int8(0)),
        q=compact(pools.q, np.float32(0)),
        p=compact(pools.p, np.float32(0)),
        agree=compact(pools.agree, False),
        chain=compact(pools.chain & keep, False),
        token=compact(pools.token, np.int32(0)),
    )

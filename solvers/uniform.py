"""Pools on which every subtree of a size has the same canonical numbers: Eq. 5 in O(n + K).

A pool is *uniform* when every node has the same path probability p (the same
float) and F(S) depends only on |S|, which holds in two cases:

* the node bitmaps are pairwise disjoint and have one popcount m (every node
  routes to m pairs beyond the root's that no other node holds):
  F(S) = F_0 + m·|S|;
* every node has the same bitmap m: F(S) = F_0 + popcount(m) for S ≠ ∅.

(All-zero bitmaps, every node on the root's experts, are both.)  Then R̂(S),
summed from 1.0 over ascending ids, adds |S| copies of the same float and is
the same float for every S of a size; so are F, T̂ and the score (R̂/T̂ or
R̂ − λT̂).  §3.3's tie rule (score, larger R̂, smaller F, fewer nodes, smaller
ids) therefore compares two sets of one size by their ids alone, and the
lexicographically smallest t-tuple of ids, (0, …, t − 1), is ancestor-closed
because parents precede children.  The exact winner over A_K is the best of
these K + 1 prefixes (the empty one is the root alone) under the tie rule.

Flat probabilities with distinct or shared experts are the tie families where
a search must visit every tied set (SpecFit §3.3's rule wants the smallest
ids); bf16-rounded draft probabilities produce them.  The test costs
O(n) comparisons and popcounts and fails at the first node on other pools.
"""

from __future__ import annotations

from solvers.canonical import beats
from solvers.cost import CostModel
from solvers.pool import Pool

__all__ = ["is_uniform", "uniform_best"]


def is_uniform(pool: Pool) -> bool:
    """Whether ``pool`` is uniform (module docstring)."""
    n, probs, masks = pool.n, pool.probs, pool.masks
    if n == 0 or probs.count(probs[0]) != n:
        return False
    if masks.count(masks[0]) == n:
        return True
    credits = pool.credits
    if credits.count(credits[0]) != n:
        return False
    # credit_v = popcount(m_v minus the earlier nodes' bits) <= popcount(m_v): equal
    # totals mean no bit is held twice, i.e. the bitmaps are pairwise disjoint
    return sum(credits) == sum([m.bit_count() for m in masks])


def uniform_best(pool: Pool, K: int, cost: CostModel, lam: float | None) -> list:
    """[score, R̂, F, nodes] of the tie-rule winner over A_K of a uniform pool (``K`` the
    effective limit, at most n): the best prefix (0, …, t − 1), t = 0..K, in the canonical
    arithmetic (``lam`` None: R̂/T̂, else R̂ − λT̂).  O(K) bitmap ORs."""
    b, beta, F0, probs, masks = cost.b, cost.beta, pool.root_count, pool.probs, pool.masks
    t0 = b[0] + beta * F0
    best = [1.0 / t0 if lam is None else 1.0 - lam * t0, 1.0, F0, ()]
    r, union = 1.0, 0
    for t in range(1, K + 1):
        r += probs[t - 1]
        union |= masks[t - 1]
        f = F0 + union.bit_count()
        time_t = b[t] + beta * f
        q = r / time_t if lam is None else r - lam * time_t
        nodes = tuple(range(t))
        if beats(q, r, f, nodes, best):
            best = [q, r, f, nodes]
    return best

"""Exchange dominance: which subtrees §3.3's tie rule can never select (for the exact searches).

Ties are the exact searches' worst case: sets whose canonical R̂, F and T̂ are
equal (identical siblings, flat probabilities, bf16-rounded ones) all reach the
same bound, and no bound computed in floating point can separate them, so a
search that prunes on bounds alone visits every one of them.  An exchange
argument removes them without any bound, and it holds in the canonical
arithmetic of :mod:`solvers.cost` itself.

Exchange.  Let S be a legal set with a leaf j (no child of j in S), and u ∉ S
a node with u < j whose parent is in S (or the root).  S' = S − j + u is legal,
has |S'| = |S|, and its ascending id tuple is smaller (the symmetric difference
is {u, j}, its least element u lies in S').  If moreover

  (R) R̂(S') >= R̂(S) in the canonical arithmetic, and
  (F) F(S') <= F(S),

then T̂(S') <= T̂(S) (T̂ = b[|S|] + β·F rounds monotonically in F), the ratio
R̂/T̂ rounds to no less, and the tie rule (ratio, R̂, −F, −|S|, then ids) puts S'
strictly ahead of S: S is not the answer.  The same holds for R̂ − λT̂.

(F) holds for every S with u and j as above when |fresh(u) \\ B_j| <= alone(j),
fresh(u) being u's pairs that no ancestor of u holds and alone(j) the number of
pairs that j holds and no other node holds freshly (``Cover.alone``).  Proof:
with A = S − j and D = B_j \\ ⋃_A B (what j adds), F(S) = |⋃_A B| + |D|.  The
alone(j) pairs lie in D and in no bitmap of A nor of u (any other holder of
one descends from j; j is a leaf of S, and u is not below j), and u's pairs
outside ⋃_A B are fresh in u (its ancestors are in A), so
F(S') <= |⋃_A B| + (|D| − alone(j)) + |fresh(u) \\ B_j| <= F(S).  This module
tests two cheap sufficient forms: |fresh(u)| <= alone(j), and B_u == B_j.

(R) is about rounding: the canonical R̂ sums in ascending id order, and S and
S' order their summands differently.  It holds

* when no node of S lies between u and j: the partial sums agree up to u's
  place, where fl(r + p_u) >= fl(r + p_j) for p_u >= p_j, and adding the same
  later summands preserves >= (``local``);
* wherever u and j lie when p_u >= p_j and every partial sum is exact
  (:func:`sums_are_exact`: all p_v are multiples of one power of two 2^−k with
  (1 + Σp)·2^k < 2^53, as bf16-rounded probabilities are), or all p_v are
  equal; when p_u = p_w = p_j for every id w between u and j (S and S' then
  add the same sequence of summands); and when p_u − p_j exceeds twice the
  worst rounding of a sum of n + 1 terms, 2(n + 1)·2^−52·(1 + Σp)
  (``anywhere``).

In the searches (ids added in increasing order), the nodes u skipped at a
search state are exactly the u < j (j: the node being added) whose parent is
in S and that the branch never adds: ``local`` applies to the nodes skipped at
the current state (nothing was added after them), ``anywhere`` to all of them.
A branch whose new node j is a leaf of the pool and is dominated so is pruned
whole (every set in it holds j as a leaf and no u).  A dominated inner node j
is pruned when a skipped node dominates every descendant of j anywhere
(``below``: every set of the branch then has a dominated leaf at or below j);
otherwise the branch keeps j with a *need* — its sets are dominated until one
holds a child of j, so none is offered before, and the branch ends once the
search passes j's last child without one.  Pruning a set that another set
beats never removes the answer, which beats every set.

Cost: O(n²) numpy work on n-vectors (the n × n comparisons of p, |fresh| and
alone(j), packed into one Python int per node), built once per pool.
"""

from __future__ import annotations

import numpy as np

from solvers.flowbound import cover
from solvers.pool import Pool

__all__ = ["Dominance", "dominance", "sums_are_exact", "bound_pool"]


class Dominance:
    """Per-pool exchange data (module docstring), cached on the pool.

    ``local[j]``, ``anywhere[j]``: bitmasks over node ids u < j (bit u) that dominate
    j when skipped at the current search state, or at any state; ``leaf[j]``: j has
    no child in the pool; ``below[j]``: the nodes that dominate every descendant of
    j anywhere; ``sweep``: the nodes that dominate every later leaf locally
    (``last_inner``: the last inner node); ``any`` is False when no node dominates
    any other.
    """

    __slots__ = ("local", "anywhere", "leaf", "any", "below", "sweep", "last_inner")

    def __init__(self, pool: Pool):
        n = pool.n
        kids = np.zeros(n, dtype=np.int64)
        par = np.asarray(pool.parents, dtype=np.int64)
        if n:
            np.add.at(kids, par[par >= 0], 1)
        self.leaf = (kids == 0).tolist()
        self.local: list[int] = [0] * n
        self.anywhere: list[int] = [0] * n
        self.below: list[int] = [0] * n
        self.sweep = 0                  # nodes that dominate, locally, every later leaf
        self.last_inner = max((v for v in range(n) if not self.leaf[v]), default=-1)
        self.any = False
        if n < 2:
            return
        cov = cover(pool)
        fresh = np.diff(cov.starts)                  # |fresh(u)|
        alone = cov.alone                            # alone(j)
        # (F): |fresh(u)| <= alone(j), or identical bitmaps
        twins = _twins(pool)
        if twins is None and not (np.minimum.accumulate(fresh)[:-1] <= alone[1:]).any():
            return                      # no pair u < j meets (F): O(n) to see
        p = np.asarray(pool.probs, dtype=np.float64)
        upper = np.tri(n, k=-1, dtype=bool).T                     # u < j: rows u, columns j
        ok = (fresh[:, None] <= alone[None, :]) & upper
        if twins is not None:
            ok |= twins
        if not ok.any():
            return
        local = ok & (p[:, None] >= p[None, :])
        eps = 2.0 * (n + 1) * 2.0 ** -52 * (1.0 + float(p.sum()))
        if sums_are_exact(pool.probs):
            anywhere = local
        else:
            # a run of equal probabilities from u to j: every summand between is equal too
            start = np.arange(n)
            for v in range(1, n):
                if p[v] == p[v - 1]:
                    start[v] = start[v - 1]
            run = np.arange(n)[:, None] >= start[None, :]
            anywhere = ok & ((p[:, None] - p[None, :] > eps) | run)
        later_leaves = np.asarray(self.leaf)[None, :] & np.tri(n, k=-1, dtype=bool).T
        sweeps = np.flatnonzero(np.all(local | ~later_leaves, axis=1)).tolist()
        self.sweep = sum(1 << u for u in sweeps)
        self.local = _columns_as_ints(local)
        self.anywhere = _columns_as_ints(anywhere)
        self.any = bool(local.any())
        # below[j]: the nodes that dominate every descendant of j anywhere; once one is
        # skipped, every set of the branch holds a dominated leaf at or below j
        below = [-1] * n
        for c in range(n - 1, -1, -1):      # children after parents: one backward pass
            a = pool.parents[c]
            if a >= 0:
                below[a] &= self.anywhere[c] & below[c]
        self.below = [0 if x < 0 else x for x in below]


def dominance(pool: Pool) -> Dominance:
    dom = pool._cache.get("dominance")
    if dom is None:
        dom = pool._cache["dominance"] = Dominance(pool)
    return dom


def sums_are_exact(probs) -> bool:
    """Whether every canonical R̂ is the exact sum, whatever the order: all p_v equal, or
    all multiples of one 2^−k with (1 + Σp)·2^k < 2^53 (module docstring, (R))."""
    if not probs or min(probs) == max(probs):
        return True
    ratios = [x.as_integer_ratio() for x in probs]
    k = max(den.bit_length() - 1 for _num, den in ratios)      # every den is a power of 2
    total = (1 << k) + sum(num << (k - (den.bit_length() - 1)) for num, den in ratios)
    return total < (1 << 53)


def _twins(pool: Pool) -> np.ndarray | None:
    """n × n: u < j with the same bitmap (rows u, columns j), or None where there is none.
    B_u == B_j with u < j needs credit_j = 0 (j holds no pair first), so only those
    columns are looked at: exact int comparisons, at C speed (``tuple.index``)."""
    masks = pool.masks
    out: np.ndarray | None = None
    for j, c in enumerate(pool.credits):
        if c:
            continue
        x, u = masks[j], 0
        while True:
            try:
                u = masks.index(x, u, j)
            except ValueError:
                break
            if out is None:
                out = np.zeros((pool.n, pool.n), dtype=bool)
            out[u, j] = True
            u += 1
    return out


def _columns_as_ints(mat: np.ndarray) -> list[int]:
    """Column j of a boolean n × n matrix as an int with bit u set where mat[u, j]."""
    packed = np.packbits(mat.T, axis=1, bitorder="little")
    from_bytes = int.from_bytes
    return [from_bytes(row.tobytes(), "little") for row in packed]


def bound_pool(pool: Pool) -> Pool:
    """The pool with each leaf j hung below its nearest sibling u < j that dominates it
    anywhere (cached; ``pool`` itself when there is none).

    The searches never accept a set holding such a j without u (j is pruned when u
    was skipped), and the answer is never dominated, so the bounds may assume
    x_j <= x_u: in this tree, j's pairs that u holds are no longer fresh (for
    identical siblings, none is), which tightens the flow bound of
    :mod:`solvers.flowbound` and the MILP of :mod:`solvers.milp`.  Every set closed
    in this tree is closed in the pool's.  Ids, probabilities and bitmaps are the
    pool's.
    """
    bp = pool._cache.get("bound")
    if bp is not None:
        return bp
    dom = dominance(pool)
    parents = list(pool.parents)
    if dom.any:
        kids: dict[int, int] = {}
        for v, a in enumerate(pool.parents):
            kids[a] = kids.get(a, 0) | (1 << v)
        for j, a in enumerate(pool.parents):
            near = dom.anywhere[j] & kids[a] if dom.leaf[j] else 0
            if near:
                parents[j] = near.bit_length() - 1
    if parents == list(pool.parents):
        bp = pool
    else:
        levels: list[int] = []
        for a in parents:
            levels.append(1 if a < 0 else levels[a] + 1)
        bp = Pool(tuple(parents), pool.probs, tuple(levels), pool.num_layers, pool.num_experts,
                  pool.root_count, pool.masks, pool.credits, packed=pool.packed,
                  pair_ids=pool.pair_ids, root_pairs=pool._root_pairs)
        bp._cache["cover"] = cover(pool).rehung(pool, bp)
    pool._cache["bound"] = bp
    return bp

"""Brute-force references for the solver tests (independent of solvers' search code).

F is computed from the raw routes with Python sets, not from the bitmaps.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np


@dataclass
class RawPool:
    parents: list
    probs: list
    root: np.ndarray      # [L, k]
    nodes: np.ndarray     # [n, L, k]
    N: int

    @property
    def n(self):
        return len(self.parents)

    def args(self):
        return self.parents, self.probs, self.root, self.nodes, self.N


def legal_sets(raw: RawPool, K: int):
    """Every ancestor-closed subset with at most K nodes, as ascending tuples."""
    n = raw.n
    for s in range(min(K, n) + 1):
        for combo in itertools.combinations(range(n), s):
            chosen = set(combo)
            if all(raw.parents[v] < 0 or raw.parents[v] in chosen for v in combo):
                yield combo


def union_size(raw: RawPool, combo, free=frozenset()) -> int:
    """F of Eq. 1 from the raw routes; ``free``: (layer, expert) pairs that do not count."""
    L = raw.root.shape[0]
    total = 0
    for layer in range(L):
        experts = set(int(e) for e in raw.root[layer])
        for v in combo:
            experts |= set(int(e) for e in raw.nodes[v][layer])
        total += len({e for e in experts if (layer, e) not in free})
    return total


def score(raw: RawPool, combo, b, beta, free=frozenset()):
    r = 1.0
    for v in combo:
        r += float(raw.probs[v])
    f = union_size(raw, combo, free)
    t = float(b[len(combo)]) + float(beta) * f
    return r, f, t


def _wins(key_a, ids_a, key_b, ids_b):
    return key_a > key_b or (key_a == key_b and ids_a < ids_b)


def brute_ratio(raw: RawPool, K: int, b, beta, free=frozenset()):
    """(nodes, R, F, T, ratio) of the tie-rule winner of Eq. 5 over A_K (``free``: pairs
    that do not count in F)."""
    best = None
    for combo in legal_sets(raw, K):
        r, f, t = score(raw, combo, b, beta, free)
        key = (r / t, r, -f, -len(combo))
        if best is None or _wins(key, combo, best[0], best[1]):
            best = (key, combo, r, f, t)
    key, combo, r, f, t = best
    return combo, r, f, t, r / t


def brute_linear(raw: RawPool, K: int, b, beta, lam, free=frozenset()):
    best = None
    for combo in legal_sets(raw, K):
        r, f, t = score(raw, combo, b, beta, free)
        key = (r - lam * t, r, -f, -len(combo))
        if best is None or _wins(key, combo, best[0], best[1]):
            best = (key, combo, r, f, t)
    return best[1], best[0][0]


def all_scores(raw: RawPool, K: int, b, beta):
    return [(combo, *score(raw, combo, b, beta)) for combo in legal_sets(raw, K)]

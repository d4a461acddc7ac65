"""Brute-force references for the theory tests: enumerate every ancestor-closed subset.

Deliberately naive and independent of ``solvers``: plain Python sets of
(layer, expert) pairs, all subsets listed, the tie rule of SpecFit §3.3
written out.  Only for pools of a handful of nodes.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np


@dataclass
class BrutePool:
    parents: list[int]
    levels: list[int]
    probs: list[float]
    root_pairs: set
    node_pairs: list[set]
    agree: list[bool]

    @property
    def n(self) -> int:
        return len(self.parents)

    def sub(self, d: int) -> tuple[BrutePool, list[int]]:
        keep = [v for v in range(self.n) if self.levels[v] <= d]
        new = {v: i for i, v in enumerate(keep)}
        return BrutePool([-1 if self.parents[v] < 0 else new[self.parents[v]] for v in keep],
                         [self.levels[v] for v in keep], [self.probs[v] for v in keep],
                         self.root_pairs, [self.node_pairs[v] for v in keep],
                         [self.agree[v] for v in keep]), keep


def pairs(routes) -> set:
    routes = np.asarray(routes)
    return {(layer, int(e)) for layer in range(routes.shape[0]) for e in routes[layer]}


def brute_pool(parents, probs, root_routes, node_routes, agree=None) -> BrutePool:
    parents = [int(a) for a in parents]
    levels = []
    for a in parents:
        levels.append(1 if a < 0 else levels[a] + 1)
    agree = [False] * len(parents) if agree is None else [bool(x) for x in agree]
    return BrutePool(parents, levels, [float(p) for p in probs], pairs(root_routes),
                     [pairs(r) for r in node_routes], agree)


def trace_pool(trace, row: int) -> BrutePool:
    s = trace.pool_slice(row)
    return brute_pool(trace.node_parent[s], trace.node_p[s].astype(np.float64),
                      trace.root_routes[row], trace.node_routes[s], trace.node_agree[s])


def subtrees(pool: BrutePool, K: int | None = None):
    """Every ancestor-closed subset with at most K nodes, as ascending tuples."""
    K = pool.n if K is None else K
    for size in range(0, min(K, pool.n) + 1):
        for combo in itertools.combinations(range(pool.n), size):
            s = set(combo)
            if all(pool.parents[v] < 0 or pool.parents[v] in s for v in combo):
                yield combo


def stats(pool: BrutePool, nodes, b, beta):
    """(R̂, F, T̂, ratio) with R̂ summed from 1.0 in ascending id order (Eq. 3, 4)."""
    r = 1.0
    for v in sorted(nodes):
        r += pool.probs[v]
    u = set(pool.root_pairs)
    for v in nodes:
        u |= pool.node_pairs[v]
    t = b[len(nodes)] + beta * len(u)
    return r, len(u), t, r / t


def best(pool, K, b, beta, lam=None):
    """Eq. 5 (lam None) or argmax R̂ − λT̂, with the §3.3 tie rule, by enumeration."""
    best_key, best_nodes = None, None
    for s in subtrees(pool, K):
        r, f, t, ratio = stats(pool, s, b, beta)
        head = ratio if lam is None else r - lam * t
        key = (head, r, -f, -len(s))
        if best_key is None or key > best_key or (key == best_key and s < best_nodes):
            best_key, best_nodes = key, s
    return best_nodes


def accepted(pool: BrutePool, nodes) -> int:
    """Longest root path inside ``nodes`` whose nodes all agree."""
    longest = 0
    for v in nodes:
        path, u = [], v
        while u >= 0:
            path.append(u)
            u = pool.parents[u]
        if all(pool.agree[x] for x in path):
            longest = max(longest, len(path))
    return longest


def adaptive(pool: BrutePool, K, b, beta):
    """Lemma 2's stop rule: (stop level d, V≤d, ids of V≤d, Ŝ in V≤d ids)."""
    depth = max(pool.levels, default=0)
    if depth == 0:
        return 0, pool, [], ()
    for d in range(1, depth + 1):
        sub, keep = pool.sub(d)
        s = best(sub, K, b, beta)
        if d == depth or all(sub.levels[v] < d for v in s):
            return d, sub, keep, s


def walk(trace, K, b, beta):
    """SpecFit's cycles on ``trace``: dicts with row, d, depth, pool (V≤d), s_hat, committed."""
    out = []
    for r in range(len(trace.requests)):
        lo, hi = trace.request_positions(r)
        row = lo
        while row < hi:
            full = trace_pool(trace, row)
            d, sub, keep, s = adaptive(full, K, b, beta)
            committed = min(1 + accepted(sub, s), hi - row)
            out.append(dict(row=row, d=d, depth=max(full.levels, default=0), pool=sub,
                            keep=keep, s_hat=s, committed=committed, remaining=hi - row))
            row += committed
    return out


def h(pools, K, b, beta, lam) -> float:
    """Eq. 9: mean over states of max R̂ − λT̂ (brute force)."""
    tot = 0.0
    for p in pools:
        tot += max(stats(p, s, b, beta)[0] - lam * stats(p, s, b, beta)[2] for s in subtrees(p, K))
    return tot / len(pools)


def lambda_by_bisection(pools, K, b, beta, iters: int = 80) -> float:
    lo, hi = 0.0, max(max(stats(p, s, b, beta)[3] for s in subtrees(p, K)) for p in pools)
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        if h(pools, K, b, beta, mid) > 0:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def lambda_by_rules(pools, K, b, beta) -> float:
    """max over every combination of one subtree per state of ΣR̂/ΣT̂ (the definition)."""
    families = [[stats(p, s, b, beta) for s in subtrees(p, K)] for p in pools]
    return max(sum(x[0] for x in combo) / sum(x[2] for x in combo)
               for combo in itertools.product(*families))


def least_squares_line(b, size):
    """b_j on the least-squares line through ``b`` (slope clipped at 0), j = 0..size.

    Intercepts already on a nondecreasing line are extended exactly (no fit noise).
    """
    a = b[1] - b[0] if len(b) > 1 else 0.0
    if a >= 0 and all(abs(x - (b[0] + a * k)) <= 1e-9 * max(1.0, abs(x)) for k, x in enumerate(b)):
        return [b[0] + a * k for k in range(size + 1)]
    j = np.arange(len(b), dtype=float)
    slope, b0 = np.polyfit(j, np.asarray(b, float), 1) if len(b) > 1 else (0.0, float(b[0]))
    if slope < 0:
        slope, b0 = 0.0, float(np.mean(b))
    return [b0 + slope * k for k in range(size + 1)]


def envelope_breakpoints(pool: BrutePool, b, beta) -> int:
    """Number of λ > 0 where the maximiser of R̂ − λT̂ over all subtrees changes line."""
    lines = {}
    for s in subtrees(pool):
        r, _f, t, _ = stats(pool, s, b, beta)
        lines[t] = max(lines.get(t, -1.0), r)
    pts = sorted(lines.items())               # (T, best R) by T ascending
    cur_t = max(pts, key=lambda x: (x[1], -x[0]))[0]   # best at λ = 0
    lam, count = 0.0, 0
    while True:
        cur_r = lines[cur_t]
        nxt = [((cur_r - r) / (cur_t - t), t) for t, r in pts if t < cur_t]
        nxt = [(x, t) for x, t in nxt if x > lam]
        if not nxt:
            return count
        x, t = min(nxt, key=lambda z: (z[0], z[1]))
        lam, cur_t, count = x, t, count + 1

"""Plain-Python references for the expert caches of the papers and for the one-budget keep rule (tests only).

Each reference cache processes a forward the way docs/caches.md states it,
with dicts and sets: hits = demand ∩ resident, the policy observes, then the
candidates resident ∪ demand of largest score are kept — at most ``slots``
per layer, or ``budget`` in all — ties to the smaller (layer, id).  Under
forced admission the forward's demanded experts rank before every other
candidate; under bypass they compete on score alone.  The optima enumerate
every choice a cache could make after each forward (dynamic programming over
cache states), under either admission rule.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from hypothesis import strategies as st


def keep(cands, score, slots=None, budget=None, first=frozenset()):
    """The kept set: per layer the ``slots`` best, or the ``budget`` best overall; -inf is never kept.

    ``first`` (the forward's demand, under forced admission) ranks before every other candidate.
    """
    cands = [c for c in cands if score[c] != -math.inf]
    order = sorted(cands, key=lambda c: (c not in first, -score[c], c))
    if budget is not None:
        return set(order[:budget])
    out, per = set(), {}
    for c in order:
        if per.get(c[0], 0) < slots:
            out.add(c)
            per[c[0]] = per.get(c[0], 0) + 1
    return out


def run_reference(policy, L, N, stream, slots=None, budget=None, admission="bypass"):
    """(hits per layer, misses per layer) per forward of a reference policy object."""
    resident: set = set()
    out = []
    for t, d in enumerate(stream):
        demand = {(layer, int(e)) for layer in range(L) for e in np.flatnonzero(d[layer])}
        hits = demand & resident
        policy.observe(t, demand, hits)
        resident = keep(resident | demand, policy.score(L, N), slots, budget,
                        demand if admission == "forced" else frozenset())
        out.append(([sum(1 for c in hits if c[0] == layer) for layer in range(L)],
                    [sum(1 for c in demand - hits if c[0] == layer) for layer in range(L)]))
    return out


class RefLRU:
    """Recency at forward granularity: hits before misses, each ascending id (simmoe's lru stamps)."""

    def __init__(self):
        self.stamp = {}

    def observe(self, t, demand, hits):
        for c in demand:
            self.stamp[c] = (t, 0 if c in hits else 1, c[1])

    def score(self, L, N):
        # the engine's integer stamp: 2N per forward, misses N later than hits, then the id
        return {(layer, e): float(self.stamp[(layer, e)][0] * 2 * N + self.stamp[(layer, e)][1] * N + e)
                if (layer, e) in self.stamp else -1.0 for layer in range(L) for e in range(N)}


class RefLeastStale:
    """Staleness = (now - last) / max(EWMA reuse interval, 1); keep the least stale."""

    def __init__(self):
        self.last, self.interval = {}, {}
        self.now = -1

    def observe(self, t, demand, hits):
        self.now = t
        for c in demand:
            if c in self.last:
                gap = t - self.last[c]
                self.interval[c] = gap if c not in self.interval else 0.75 * self.interval[c] + 0.25 * gap
            self.last[c] = t

    def score(self, L, N):
        return {(layer, e): -(self.now - self.last.get((layer, e), -1.0)) / max(self.interval.get((layer, e), 0.0), 1.0)
                for layer in range(L) for e in range(N)}


class RefLFRU:
    """f / (clock - last + 1); each layer's clock ticks per access (hits, then misses, ascending id)."""

    def __init__(self):
        self.freq, self.last, self.clock = {}, {}, {}

    def observe(self, t, demand, hits):
        layers = sorted({c[0] for c in demand})
        for layer in layers:
            order = sorted(c for c in hits if c[0] == layer) + sorted(c for c in demand - hits if c[0] == layer)
            for c in order:
                self.clock[layer] = self.clock.get(layer, 0) + 1
                self.last[c] = self.clock[layer]
                self.freq[c] = self.freq.get(c, 0) + 1 if c in hits else 1

    def score(self, L, N):
        return {(layer, e): self.freq.get((layer, e), 0) / (self.clock.get(layer, 0) - self.last.get((layer, e), 0)
                                                             + 1.0)
                for layer in range(L) for e in range(N)}


def optimum_copies_global(L, N, budget, stream, admission="bypass"):
    """Fewest copies of any on-demand policy with one budget across layers (DP over cache states).

    After each forward every choice of kept experts is enumerated: under
    bypass any subset of resident ∪ demand within the budget; under forced
    admission the forward's demand must stay (all of it, or when it is more
    than the budget, any ``budget`` of it), any subset of the other residents
    beside it.
    """
    items = [(layer, e) for layer in range(L) for e in range(N)]
    best = {frozenset(): 0}
    for d in stream:
        need = frozenset(c for c in items if d[c[0]][c[1]])
        nxt: dict = {}
        for state, cost in best.items():
            c = cost + len(need - state)
            for k in _choices(state, need, budget, admission):
                if nxt.get(k, 1 << 30) > c:
                    nxt[k] = c
        best = nxt
    return min(best.values())


def _choices(state, need, cap, admission):
    """Every set a cache of ``cap`` may keep after a forward that demanded ``need`` from ``state``."""
    if admission == "bypass":
        pool = sorted(state | need)
        return [frozenset(k) for r in range(min(cap, len(pool)) + 1) for k in itertools.combinations(pool, r)]
    if len(need) >= cap:
        return [frozenset(k) for k in itertools.combinations(sorted(need), cap)]
    rest = sorted(state - need)
    return [need | frozenset(k) for r in range(min(cap - len(need), len(rest)) + 1)
            for k in itertools.combinations(rest, r)]


def optimum_copies_per_layer(L, N, slots, stream, admission="bypass"):
    """Fewest copies with ``slots`` per layer: layers are independent, so the sum of one-layer optima."""
    return sum(optimum_copies_global(1, N, min(slots, N), [[d[layer]] for d in stream], admission)
               for layer in range(L))


class RefLFU(RefLRU):
    """Uses over the whole history, ties to the more recent (simmoe's lfu: count, then the lru stamp)."""

    def __init__(self):
        super().__init__()
        self.count = {}

    def observe(self, t, demand, hits):
        super().observe(t, demand, hits)
        for c in demand:
            self.count[c] = self.count.get(c, 0) + 1

    def score(self, L, N):
        rec = super().score(L, N)
        return {c: self.count.get(c, 0) * 2.0**40 + max(rec[c], 0.0) for c in rec}


def textbook_lfu(L, N, slots, stream):
    """Textbook LFU with forced admission, one access at a time (hits, then misses, each ascending id).

    A miss takes a slot; a full layer evicts, among the residents this forward
    has not demanded, the one of fewest uses (over the whole history), ties to
    the least recently used.  Only when every resident is this forward's (its
    demand is more than the slots) does the lowest of those go, which may be
    the one just loaded.  Returns (hits per layer, misses per layer) per forward.
    """
    freq = [dict() for _ in range(L)]
    last = [dict() for _ in range(L)]
    resident = [set() for _ in range(L)]
    clock, out = 0, []
    for d in stream:
        hs, ms = [], []
        for layer in range(L):
            need = set(np.flatnonzero(d[layer]).tolist())
            hits = sorted(need & resident[layer])
            misses = sorted(need - resident[layer])
            hs.append(len(hits))
            ms.append(len(misses))
            for e in hits + misses:
                clock += 1
                freq[layer][e] = freq[layer].get(e, 0) + 1
                last[layer][e] = clock
                resident[layer].add(e)
                if len(resident[layer]) > slots:
                    pool = (resident[layer] - need) or resident[layer]
                    resident[layer].remove(min(pool, key=lambda x: (freq[layer][x], last[layer][x])))
        out.append((hs, ms))
    return out


@st.composite
def demand_streams(draw, max_layers=3, max_experts=9, max_forwards=25, min_size=0, budget=False):
    """(L, N, size, demand matrices): size is slots per layer in [min_size, N + 1], or with ``budget``
    experts across layers in [1, L·N + 1]; a skewed popularity per layer makes caching matter."""
    L = draw(st.integers(1, max_layers))
    N = draw(st.integers(1, max_experts))
    T = draw(st.integers(0, max_forwards))
    size = draw(st.integers(1, L * N + 1)) if budget else draw(st.integers(min_size, N + 1))
    seed = draw(st.integers(0, 2**32 - 1))
    density = draw(st.sampled_from([0.1, 0.3, 0.6]))
    rng = np.random.default_rng(seed)
    weights = rng.dirichlet(np.full(N, 0.5), size=L)
    demand = rng.random((T, L, N)) < np.minimum(1.0, weights * N * density)
    return L, N, size, list(demand)

"""The candidate pool and its level-by-level growth (SpecFit §2, §3.1; EAGLE-2/3 shape).

Level 1 holds the root's top-``expand_topk`` children; at every later level
the ``expand_nodes`` most probable nodes (by path probability, ties by node
id) of the previous level are each expanded into their top-``expand_topk``
children, until ``depth`` levels or ``max_nodes`` nodes.  With the defaults
(2, 2, depth 5) that is 2 + 4·4 = 18 nodes.  Node ids list parents before
children.  :func:`grow_pool` yields after every level so a selector can stop
drafting early (adaptive depth, Lemma 2).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass(frozen=True)
class PoolSpec:
    expand_topk: int = 2     # children per expanded node
    expand_nodes: int = 2    # nodes expanded per level after level 1
    depth: int = 5
    max_nodes: int = 18


@dataclass
class Pool:
    """A candidate pool; index j is node j, parent -1 is the root."""

    parent: list[int] = field(default_factory=list)
    level: list[int] = field(default_factory=list)
    token: list[int] = field(default_factory=list)
    q: list[float] = field(default_factory=list)
    p: list[float] = field(default_factory=list)
    level_ms: list[float] = field(default_factory=list)   # drafting time of each level

    def __len__(self) -> int:
        return len(self.parent)

    def add(self, parent: int, token: int, q: float) -> int:
        self.parent.append(int(parent))
        self.level.append(1 if parent < 0 else self.level[parent] + 1)
        self.token.append(int(token))
        self.q.append(float(q))
        self.p.append(float(q) * (1.0 if parent < 0 else self.p[parent]))
        return len(self.parent) - 1

    def path_tokens(self, j: int) -> list[int]:
        """Tokens from the root's first child down to node j (inclusive)."""
        out = []
        while j >= 0:
            out.append(self.token[j])
            j = self.parent[j]
        return out[::-1]

    def subset(self, keep) -> Pool:
        """The sub-pool of the ancestor-closed node set ``keep`` (ids renumbered, order kept)."""
        keep = sorted(int(j) for j in keep)
        remap = {old: new for new, old in enumerate(keep)}
        sub = Pool(level_ms=list(self.level_ms))
        for old in keep:
            par = self.parent[old]
            if par >= 0 and par not in remap:
                raise ValueError(f"node {old} selected without its parent {par}")
            sub.parent.append(remap[par] if par >= 0 else -1)
            sub.level.append(self.level[old])
            sub.token.append(self.token[old])
            sub.q.append(self.q[old])
            sub.p.append(self.p[old])
        return sub

    def upto_level(self, d: int) -> Pool:
        return self.subset([j for j in range(len(self)) if self.level[j] <= d])


def grow_pool(drafter, context: list[int], spec: PoolSpec = PoolSpec(), sync=None):
    """Grow the pool level by level; yields the (same, growing) :class:`Pool` after each level.

    ``drafter.children(context, pool, frontier, k)`` returns, for each node of
    ``frontier`` (-1 = the root), its top-k ``(tokens, probabilities)``.
    Cost: ``depth`` drafter calls.
    """
    pool = Pool()
    frontier = [-1]
    for _level in range(1, spec.depth + 1):
        if len(pool) >= spec.max_nodes or not frontier:
            break
        if sync is not None:
            sync()
        t0 = time.perf_counter()
        kids = drafter.children(context, pool, frontier, spec.expand_topk)
        new = []
        for f, (toks, probs) in zip(frontier, kids):
            for t, q in list(zip(toks, probs))[: spec.expand_topk]:
                if len(pool) >= spec.max_nodes:
                    break
                new.append(pool.add(f, int(t), float(q)))
        if sync is not None:
            sync()
        pool.level_ms.append((time.perf_counter() - t0) * 1e3)
        if not new:
            break
        yield pool
        ranked = sorted(new, key=lambda j: (-pool.p[j], j))
        frontier = ranked[: spec.expand_nodes]


def build_pool(drafter, context: list[int], spec: PoolSpec = PoolSpec(), sync=None) -> Pool:
    """The full-depth pool."""
    pool = Pool()
    for grown in grow_pool(drafter, context, spec, sync):
        pool = grown
    return pool

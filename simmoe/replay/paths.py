"""Accepted paths: what greedy (or already decided) verdicts accept of a verified subtree (SpecFit §2).

The accepted path is the longest root-to-node path inside the verified
subtree S whose nodes all agree with the target.  Pure functions over a
pool's parents and verdicts, shared by the verification stage and by
selectors that know the verdicts (the oracle).
"""

from __future__ import annotations

import numpy as np

_EMPTY = np.zeros(0, dtype=np.int64)


def longest_agreeing_prefix(parents: list, agree: list, nodes) -> tuple[dict, int]:
    """Nodes (of ``nodes``, ascending) whose root path lies in ``nodes`` and all agree: node -> depth."""
    depth: dict[int, int] = {}
    for v in nodes:  # ascending ids: a parent is decided before its children
        a = parents[v]
        if agree[v]:
            if a < 0:
                depth[v] = 1
            elif a in depth:
                depth[v] = depth[a] + 1
    return depth, max(depth.values(), default=0)


def accepted_length(parents: np.ndarray, agree: np.ndarray, nodes: np.ndarray) -> int:
    """Length of the accepted path when ``nodes`` are verified.  O(|S|)."""
    if not len(nodes):
        return 0
    return longest_agreeing_prefix(parents.tolist(), agree.tolist(), sorted(np.asarray(nodes).tolist()))[1]



def longest_agreeing_path(parents: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """Ascending ids of the longest root-to-node path whose nodes all have ``ok``.

    Ties go to the path ending at the smallest node id.  One pass over the
    nodes in id order (parents first): O(n).
    """
    n = len(parents)
    if not n:
        return _EMPTY
    par = parents.tolist()
    depth, best = longest_agreeing_prefix(par, ok.tolist(), range(n))
    if not best:
        return _EMPTY
    end = min(v for v, d in depth.items() if d == best)
    path = []
    while end >= 0:
        path.append(end)
        end = par[end]
    return np.array(path[::-1], dtype=np.int64)

"""Workload statistics computed directly on a trace (no simulator needed).

These are the quantities the presets are fitted to (CALIBRATION.md) and the
statistics the generator's tests check:

* EAGLE-3 replay (SpecFit §3.1, Table 1): at cursor t select the K nodes of
  pool(t) with the largest path probability p (all when fewer; ties: lower
  node index), commit 1 + the length of the longest all-agreeing root path
  inside the selection, advance the cursor.  AR commits one token per forward.
* Expert demand of a forward: per layer, the union of the routes of the root
  and the selected nodes (Eq. 1); a prefill forward demands the request's
  prefill union.
* H2D copies per output token (SpecFit App. B: including prefill; the cache
  starts empty and carries over between requests): without a cache every
  forward loads its whole union; with an LRU of ``slots`` experts per layer a
  forward loads the experts it demands that are not resident.  This small
  counter stands in for the simulator's cache until that is wired in.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simmoe.trace.schema import Trace


def padded_pools(trace: Trace):
    """Pools as ``[P, M]`` arrays (valid, parent, level, p, agree), M = the largest pool."""
    counts = np.diff(trace.node_ptr)
    P = trace.num_positions
    M = int(counts.max()) if P and counts.size else 0
    col = np.arange(trace.num_nodes) - np.repeat(trace.node_ptr[:-1], counts)
    row = np.repeat(np.arange(P), counts)
    valid = np.zeros((P, M), dtype=bool)
    valid[row, col] = True
    def pad(a, fill, dtype):
        out = np.full((P, M), fill, dtype=dtype)
        out[row, col] = a
        return out
    return (valid, pad(trace.node_parent, -1, np.int64), pad(trace.node_level, 0, np.int64),
            pad(trace.node_p, -np.inf, np.float64), pad(trace.node_agree, False, bool))


def topk_by_p(p: np.ndarray, valid: np.ndarray, K: int) -> np.ndarray:
    """Selection mask ``[P, M]``: the K valid nodes of largest p per row (ties: lower index)."""
    P, M = p.shape
    if M == 0:
        return np.zeros((P, 0), dtype=bool)
    order = np.argsort(-np.where(valid, p, -np.inf), axis=1, kind="stable")
    sel = np.zeros((P, M), dtype=bool)
    np.put_along_axis(sel, order[:, :K], True, axis=1)
    return sel & valid


def accepted_length(selected: np.ndarray, parent: np.ndarray, level: np.ndarray,
                    agree: np.ndarray) -> np.ndarray:
    """Length of the longest root path inside ``selected`` whose nodes all agree, per row.

    Parents precede children, so one pass over node columns suffices: O(P·M).
    """
    P, M = selected.shape
    ok = np.zeros((P, M), dtype=bool)
    rows = np.arange(P)
    for m in range(M):
        par = parent[:, m]
        par_ok = np.where(par < 0, True, ok[rows, np.maximum(par, 0)])
        ok[:, m] = selected[:, m] & agree[:, m] & par_ok
    return np.where(ok, level, 0).max(axis=1, initial=0)


def cursor_cycles(trace: Trace, committed: np.ndarray) -> np.ndarray:
    """Position rows where cycles start when every cycle at row i commits ``committed[i]``."""
    starts = []
    for r in range(len(trace.requests)):
        lo, hi = trace.request_positions(r)
        i = lo
        while i < hi:
            starts.append(i)
            i += int(committed[i])
    return np.array(starts, dtype=np.int64)


@dataclass
class Replay:
    """One method's forwards over a trace."""

    method: str
    cycles: np.ndarray          # position rows where a forward verifies
    committed: np.ndarray       # tokens committed by each cycle
    selected: np.ndarray | None  # [cycles, M] selection of each cycle (None for AR)

    def forward_tokens(self) -> np.ndarray:
        """Tokens each cycle's forward verifies: the root and the selected nodes (the root alone for AR)."""
        if self.selected is None:
            return np.ones(len(self.cycles), dtype=np.int64)
        return 1 + self.selected.sum(axis=1)

    @property
    def committed_per_cycle(self) -> float:
        return float(self.committed.mean()) if self.committed.size else 0.0


def replay_eagle3(trace: Trace, K: int | None = None) -> Replay:
    """EAGLE-3's cursor replay: top-K by p, K = the pool shape's K by default."""
    K = trace.pool_shape.K if K is None else K
    valid, parent, level, p, agree = padded_pools(trace)
    sel = topk_by_p(p, valid, K)
    committed = 1 + accepted_length(sel, parent, level, agree)
    cycles = cursor_cycles(trace, committed)
    return Replay("eagle3", cycles, committed[cycles], sel[cycles])


def replay_ar(trace: Trace) -> Replay:
    P = trace.num_positions
    return Replay("ar", np.arange(P), np.ones(P, dtype=np.int64), None)


def _mask(routes: np.ndarray, L: int, N: int) -> np.ndarray:
    """Union mask ``[L, N]`` of routes ``[n, L, k]``."""
    m = np.zeros((L, N), dtype=bool)
    n, _, k = routes.shape
    m[np.repeat(np.tile(np.arange(L), n), k), routes.reshape(-1)] = True
    return m


def forward_demands(trace: Trace, replay: Replay):
    """Yield ``(request, is_prefill, demand mask [L, N])`` for every forward in order.

    Each request starts with its prefill forward, then one forward per cycle.
    """
    g = trace.geometry
    L, N = g.num_layers, g.num_experts
    starts = trace._request_starts()
    req_of_cycle = np.searchsorted(starts, replay.cycles, side="right") - 1
    c = 0
    for r in range(len(trace.requests)):
        yield r, True, trace.requests.prefill_union[r]
        while c < len(replay.cycles) and req_of_cycle[c] == r:
            i = int(replay.cycles[c])
            rows = [trace.root_routes[i:i + 1]]
            if replay.selected is not None:
                picked = np.flatnonzero(replay.selected[c])
                if picked.size:
                    rows.append(trace.node_routes[trace.node_ptr[i] + picked])
            yield r, False, _mask(np.concatenate(rows), L, N)
            c += 1


def union_sizes(trace: Trace, replay: Replay) -> np.ndarray:
    """Per-layer union size of every decode forward ``[cycles, L]`` (prefill excluded)."""
    sizes = [d.sum(axis=1) for _, pre, d in forward_demands(trace, replay) if not pre]
    return np.array(sizes).reshape(-1, trace.geometry.num_layers)


class LRUCounter:
    """Per-layer LRU of ``slots`` experts; counts copies (misses) of whole forwards.

    Within a forward, resident experts that are demanded are touched first,
    then missing ones are loaded in expert-id order, each evicting the least
    recently used; an expert demanded twice in one forward loads once.
    ``slots = 0`` means no cache: every forward loads its whole demand.
    O(L·N) per forward.
    """

    def __init__(self, num_layers: int, num_experts: int, slots: int):
        self.slots, self.N = slots, num_experts
        self.resident = np.zeros((num_layers, num_experts), dtype=bool)
        self.stamp = np.zeros((num_layers, num_experts), dtype=np.int64)
        self.clock = 0
        self.copies = 0

    def forward(self, demand: np.ndarray) -> int:
        if self.slots == 0:
            n = int(demand.sum())
            self.copies += n
            return n
        miss = demand & ~self.resident
        n = int(miss.sum())
        self.copies += n
        ids = np.arange(self.N)[None, :]
        base = self.clock
        hit = demand & self.resident
        self.stamp = np.where(hit, base + ids, self.stamp)
        self.stamp = np.where(miss, base + self.N + ids, self.stamp)
        self.clock += 2 * self.N
        self.resident |= demand
        over = self.resident.sum(axis=1) > self.slots
        if over.any():
            st = np.where(self.resident[over], self.stamp[over], -1)
            kth = np.partition(st, self.N - self.slots, axis=1)[:, self.N - self.slots]
            self.resident[over] = st >= kth[:, None]
        return n


def h2d_per_token(trace: Trace, replay: Replay, slots: int) -> float:
    """Expert copies per output token, prefill included (SpecFit App. B 'H2D/token')."""
    g = trace.geometry
    cache = LRUCounter(g.num_layers, g.num_experts, slots)
    for _, _, demand in forward_demands(trace, replay):
        cache.forward(demand)
    return cache.copies / max(int(trace.requests.output_len.sum()), 1)


def prefill_union_mean(trace: Trace) -> float:
    """Mean per-layer size of the prefill union."""
    return float(trace.requests.prefill_union.sum(axis=2).mean())


_CALIBRATION_EDGES = np.linspace(0, 1, 11)


def calibration_curve(trace: Trace, edges=_CALIBRATION_EDGES):
    """Agreement rate of nodes binned by draft confidence q (cf. EVICT Table 3).

    Returns ``(mean q, agreement rate, count)`` per bin.
    """
    q = trace.node_q.astype(np.float64)
    b = np.clip(np.digitize(q, edges[1:-1]), 0, len(edges) - 2)
    cnt = np.bincount(b, minlength=len(edges) - 1)
    with np.errstate(invalid="ignore"):
        mq = np.bincount(b, q, minlength=len(edges) - 1) / cnt
        acc = np.bincount(b, trace.node_agree.astype(float), minlength=len(edges) - 1) / cnt
    return mq, acc, cnt


def sharing(trace: Trace, max_pairs: int = 20000, seed: int = 0) -> dict[str, float]:
    """Mean experts shared per layer by parent–child, sibling and consecutive-root pairs."""
    rng = np.random.default_rng(seed)
    k = trace.geometry.top_k
    def shared(a, b):
        return float((a[..., :, None] == b[..., None, :]).any(-1).sum(-1).mean()) if len(a) else float("nan")
    counts = np.diff(trace.node_ptr)
    pos_of_node = np.repeat(np.arange(trace.num_positions), counts)
    nodes = np.arange(trace.num_nodes)
    par = trace.node_parent.astype(np.int64)
    child = nodes[par >= 0]
    child = rng.choice(child, size=min(max_pairs, child.size), replace=False) if child.size else child
    parent_rows = trace.node_ptr[pos_of_node[child]] + par[child]
    # siblings: consecutive nodes with the same parent in the same pool
    same = (pos_of_node[1:] == pos_of_node[:-1]) & (par[1:] == par[:-1])
    sib = np.flatnonzero(same)
    sib = rng.choice(sib, size=min(max_pairs, sib.size), replace=False) if sib.size else sib
    nxt = np.flatnonzero(trace.pos_request[1:] == trace.pos_request[:-1])
    nxt = rng.choice(nxt, size=min(max_pairs, nxt.size), replace=False) if nxt.size else nxt
    return {
        "parent_child": (shared(trace.node_routes[child], trace.node_routes[parent_rows])
                         if child.size else float("nan")),
        "siblings": shared(trace.node_routes[sib], trace.node_routes[sib + 1]) if sib.size else float("nan"),
        "consecutive_roots": shared(trace.root_routes[nxt], trace.root_routes[nxt + 1]) if nxt.size else float("nan"),
        "top_k": float(k),
    }

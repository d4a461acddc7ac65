"""Statistics of a trace: what ``simmoe inspect`` shows and what synthetic traces are calibrated to.

All statistics are computed with vectorised numpy over the flat arrays of
:class:`~simmoe.trace.schema.Trace`; expert sets are handled as per-layer
bitmaps (``ceil(N/64)`` uint64 words per layer, popcount for sizes).
Cost: O((P + M)·L·(k + N/64)) time; memory bounded by processing rows in
chunks.

Definitions (the docs page ``docs/trace-format.md`` repeats them):

* acceptance of a node: ``node_agree`` (the target's greedy prediction after
  the node's path equals its token); *path acceptance*: the node and all
  its ancestors agree, i.e. the node would be committed if the whole pool
  were verified (SpecFit Eq. 3's commit event).
* calibration (EVICT App. C.1, Table 3): nodes binned by draft confidence q
  into equal-width bins on [0, 1]; per bin the mean q and the acceptance
  rate; ECE = Σ_b (n_b/n)·|acc_b − conf_b|; Brier = mean (q − agree)².
  The same table for path probability p against path acceptance.
* expert reuse: |E_l(t) ∩ E_l(t+1)| / k between the roots of consecutive
  positions of a request (committed tokens), averaged over pairs and layers;
  independent uniform routing gives k/N.  Also node against parent.
* popularity skew per layer, over the roots' routes: share of routings that
  go to the top 10% of experts, Gini coefficient, entropy / log N, unused
  experts.
* expert union per layer against tree size t (root + the t−1 pool nodes of
  highest path probability, EAGLE-3's selection — ancestor-closed since
  p never grows along a path): mean over pools with at least t−1 nodes and
  over layers, next to the independent-routing curve N[1 − (1 − k/N)^t].
  And the union over windows of t consecutive committed tokens.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from simmoe.trace.schema import Trace

# Rows per chunk when building bitmaps: bounds memory to about this many uint64 words.
_CHUNK_WORDS = 1 << 22
WINDOW_SIZES = 8


# The parts of :func:`trace_statistics`, in the order they are computed (progress reports name them).
STAGES = ("counts", "acceptance", "calibration", "expert reuse", "popularity", "union vs tree size",
          "union vs window")


def trace_statistics(trace: Trace, *, bins: int = 10,
                     progress: Callable[[str, int, int], None] | None = None) -> dict[str, Any]:
    """All statistics of ``trace`` as a JSON-serialisable dict (NaN → None).

    ``progress(stage, done, total)`` is called before each of :data:`STAGES`.
    """
    if bins < 1:
        raise ValueError("bins must be at least 1")
    step = iter(range(len(STAGES)))

    def stage(name: str) -> None:
        if progress is not None:
            progress(name, next(step), len(STAGES))

    g = trace.geometry
    node_pos = np.repeat(np.arange(trace.num_positions), np.diff(trace.node_ptr))
    stage("counts")
    out: dict[str, Any] = {
        "synthetic": trace.is_synthetic,
        "provenance": trace.meta.get("provenance"),
        "geometry": g.to_dict(),
        "pool_shape": trace.meta.get("pool_shape"),
        "hardware": trace.meta.get("hardware"),
        "counts": _counts(trace),
    }
    stage("acceptance")
    path_ok = path_acceptance(trace, node_pos)
    out["acceptance"] = _acceptance(trace, node_pos, path_ok)
    stage("calibration")
    out["calibration"] = calibration_table(trace.node_q, trace.node_agree, bins)
    out["path_calibration"] = calibration_table(trace.node_p, path_ok, bins)
    stage("expert reuse")
    out["reuse"] = _reuse(trace, node_pos)
    stage("popularity")
    out["popularity"] = _popularity(trace)
    stage("union vs tree size")
    out["union_vs_tree_size"] = union_vs_tree_size(trace, node_pos)
    stage("union vs window")
    out["union_vs_window"] = union_vs_window(trace)
    out["prefill"] = {"mean_union_per_layer": _mean(trace.requests.prefill_union.sum(axis=2))}
    return _clean(out)


# ------------------------------------------------------------------ counts ---

def _counts(trace: Trace) -> dict[str, Any]:
    sizes = np.diff(trace.node_ptr)
    req = trace.requests
    datasets: dict[str, int] = {}
    for d in req.dataset:
        datasets[str(d)] = datasets.get(str(d), 0) + 1
    return {
        "requests": len(req),
        "positions": trace.num_positions,
        "nodes": trace.num_nodes,
        "autoregressive_only": trace.num_nodes == 0,
        "datasets": datasets,
        "prompt_tokens": int(np.sum(req.prompt_len)),
        "output_tokens": int(np.sum(req.output_len)),
        "mean_pool_size": _mean(sizes),
        "max_pool_size": int(sizes.max(initial=0)),
        "pool_size_histogram": {int(s): int(c) for s, c in zip(*np.unique(sizes, return_counts=True))},
        "nodes_per_level": {int(v): int(c) for v, c in zip(*np.unique(trace.node_level, return_counts=True))},
    }


# -------------------------------------------------------------- acceptance ---

def path_acceptance(trace: Trace, node_pos: np.ndarray | None = None) -> np.ndarray:
    """bool [M]: the node and all its ancestors agree with the target.  O(M·depth)."""
    if node_pos is None:
        node_pos = np.repeat(np.arange(trace.num_positions), np.diff(trace.node_ptr))
    ok = np.asarray(trace.node_agree, dtype=bool).copy()
    parent = trace.node_parent.astype(np.int64)
    gparent = trace.node_ptr[node_pos] + parent
    for level in range(2, int(trace.node_level.max(initial=0)) + 1):
        rows = np.flatnonzero(trace.node_level == level)
        ok[rows] &= ok[gparent[rows]]
    return ok


def accepted_length(trace: Trace, path_ok: np.ndarray, node_pos: np.ndarray) -> np.ndarray:
    """int [P]: length of the longest accepted path when the whole pool is verified."""
    acc = np.zeros(trace.num_positions, dtype=np.int64)
    np.maximum.at(acc, node_pos[path_ok], trace.node_level[path_ok].astype(np.int64))
    return acc


def _acceptance(trace: Trace, node_pos, path_ok) -> dict[str, Any]:
    levels = []
    for level in range(1, int(trace.node_level.max(initial=0)) + 1):
        sel = trace.node_level == level
        levels.append({
            "level": level, "nodes": int(sel.sum()),
            "mean_q": _mean(trace.node_q[sel]), "accept_rate": _mean(trace.node_agree[sel]),
            "mean_p": _mean(trace.node_p[sel]), "path_accept_rate": _mean(path_ok[sel]),
        })
    has_pool = np.diff(trace.node_ptr) > 0
    acc = accepted_length(trace, path_ok, node_pos)
    expected = np.bincount(node_pos, weights=trace.node_p.astype(np.float64), minlength=trace.num_positions)
    return {
        "by_level": levels,
        "full_pool_accepted_mean": _mean(acc[has_pool]),
        "full_pool_expected_mean": _mean(expected[has_pool]),
        "positions_with_pool": int(has_pool.sum()),
    }


def calibration_table(confidence: np.ndarray, outcome: np.ndarray, bins: int = 10) -> dict[str, Any]:
    """Equal-width confidence bins on [0, 1] (last bin closed): counts, mean confidence, acceptance; ECE, Brier."""
    conf = np.asarray(confidence, dtype=np.float64)
    hit = np.asarray(outcome, dtype=np.float64)
    idx = np.minimum((conf * bins).astype(np.int64), bins - 1)
    n = np.bincount(idx, minlength=bins)
    s_conf = np.bincount(idx, weights=conf, minlength=bins)
    s_hit = np.bincount(idx, weights=hit, minlength=bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_conf, rate = s_conf / n, s_hit / n
    rows = [{"lo": i / bins, "hi": (i + 1) / bins, "nodes": int(n[i]),
             "mean_confidence": float(mean_conf[i]), "accept_rate": float(rate[i])} for i in range(bins)]
    total = int(n.sum())
    ece = float(np.sum(n[n > 0] * np.abs(rate[n > 0] - mean_conf[n > 0])) / total) if total else math.nan
    brier = float(np.mean((conf - hit) ** 2)) if total else math.nan
    return {"bins": rows, "nodes": total, "ece": ece, "brier": brier}


# ------------------------------------------------------------------ routes ---

def route_bitmaps(routes: np.ndarray, num_experts: int) -> np.ndarray:
    """uint64 [n, L, ceil(N/64)]: bit e of a layer's words set when the row routes to expert e."""
    n, L, k = routes.shape
    W = (num_experts + 63) // 64
    out = np.zeros((n, L, W), dtype=np.uint64)
    r = routes.astype(np.int64)
    rows = np.arange(n)[:, None]
    layers = np.arange(L)[None, :]
    for j in range(k):
        ids = r[:, :, j]
        # Within one slot a (row, layer) has a single id, so the fancy |= has no duplicates.
        out[rows, layers, ids >> 6] |= np.left_shift(np.uint64(1), (ids & 63).astype(np.uint64))
    return out


def _popcount(words: np.ndarray) -> np.ndarray:
    """Set bits per (row, layer): sum over the last axis."""
    return np.bitwise_count(words).sum(axis=-1, dtype=np.int64)


def _chunk_rows(L: int, N: int) -> int:
    return max(1, _CHUNK_WORDS // (L * ((N + 63) // 64)))


def _reuse(trace: Trace, node_pos) -> dict[str, Any]:
    g = trace.geometry
    L, N, k = g.num_layers, g.num_experts, g.top_k
    # Consecutive committed tokens: root t and root t+1 of the same request.
    same = np.flatnonzero(trace.pos_request[1:] == trace.pos_request[:-1])
    inter_sum = np.zeros(L, dtype=np.int64)
    step = _chunk_rows(L, N)
    for s in range(0, len(same), step):
        i = same[s:s + step]
        inter_sum += _popcount(
            route_bitmaps(trace.root_routes[i], N) & route_bitmaps(trace.root_routes[i + 1], N)).sum(axis=0)
    pairs = len(same)
    per_layer = inter_sum / (pairs * k) if pairs else np.full(L, math.nan)
    # Node against its parent (the root for level-1 nodes).
    parent = trace.node_parent.astype(np.int64)
    pc_sum, M = 0, trace.num_nodes
    for s in range(0, M, step):
        m = np.arange(s, min(M, s + step))
        ref = np.where((parent[m] < 0)[:, None, None], trace.root_routes[node_pos[m]],
                       trace.node_routes[np.maximum(trace.node_ptr[node_pos[m]] + parent[m], 0)])
        pc_sum += int(_popcount(route_bitmaps(trace.node_routes[m], N) & route_bitmaps(ref, N)).sum())
    return {
        "consecutive_overlap": float(per_layer.mean()) if pairs else math.nan,
        "consecutive_overlap_per_layer": per_layer.tolist(),
        "consecutive_pairs": pairs,
        "parent_child_overlap": pc_sum / (M * L * k) if M else math.nan,
        "independent_overlap": k / N,
    }


def _popularity(trace: Trace) -> dict[str, Any]:
    g = trace.geometry
    L, N = g.num_layers, g.num_experts
    layer_of = np.broadcast_to(np.arange(L)[None, :, None], trace.root_routes.shape)
    counts = np.bincount((layer_of * N + trace.root_routes.astype(np.int64)).ravel(),
                         minlength=L * N).reshape(L, N).astype(np.float64)
    top = max(1, math.ceil(N / 10))
    desc = -np.sort(-counts, axis=1)
    totals = counts.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        top_share = desc[:, :top].sum(axis=1) / totals
        share = counts / totals[:, None]
        ent = -np.nansum(np.where(share > 0, share * np.log(np.where(share > 0, share, 1)), 0), axis=1)
        norm_entropy = ent / math.log(N) if N > 1 else np.zeros(L)
        asc = np.sort(counts, axis=1)
        ranks = np.arange(1, N + 1)
        gini = (2 * (asc * ranks).sum(axis=1) / (N * totals)) - (N + 1) / N
    unused = (counts == 0).sum(axis=1)
    per_layer = [{"layer": ell, "top10pct_share": float(top_share[ell]), "gini": float(gini[ell]),
                  "normalized_entropy": float(norm_entropy[ell]), "unused_experts": int(unused[ell])}
                 for ell in range(L)]
    return {
        "routings_per_layer": int(totals[0]) if L else 0,
        "top_experts": top,
        "uniform_top10pct_share": top / N,
        "top10pct_share": _summary(top_share), "gini": _summary(gini),
        "normalized_entropy": _summary(norm_entropy),
        "per_layer": per_layer,
    }


def union_vs_tree_size(trace: Trace, node_pos: np.ndarray | None = None) -> dict[str, Any]:
    """Mean experts per layer in trees of t tokens (root + t−1 highest-p nodes) for every t."""
    g = trace.geometry
    L, N, k = g.num_layers, g.num_experts, g.top_k
    P = trace.num_positions
    sizes = np.diff(trace.node_ptr)
    max_t = int(sizes.max(initial=0)) + 1
    if node_pos is None:
        node_pos = np.repeat(np.arange(P), sizes)
    # Rank of each node in its pool by path probability (descending), ties by pool order.
    order = np.lexsort((np.arange(trace.num_nodes), -trace.node_p.astype(np.float64), node_pos))
    totals = np.zeros(max_t, dtype=np.float64)
    pools = np.zeros(max_t, dtype=np.int64)
    step = _chunk_rows(L, N)
    for s in range(0, P, step):
        pos = np.arange(s, min(P, s + step))
        acc = route_bitmaps(trace.root_routes[pos], N)
        totals[0] += _popcount(acc).sum()
        pools[0] += len(pos)
        lo, hi = int(trace.node_ptr[pos[0]]), int(trace.node_ptr[pos[-1] + 1])
        chunk_order = order[lo:hi]                         # nodes of these positions, ranked
        rank = np.arange(lo, hi) - trace.node_ptr[node_pos[chunk_order]]
        for r in range(max_t - 1):
            m = chunk_order[rank == r]
            if not len(m):
                break
            local = node_pos[m] - s
            acc[local] |= route_bitmaps(trace.node_routes[m], N)
            totals[r + 1] += _popcount(acc[local]).sum()
            pools[r + 1] += len(m)
    t = np.arange(1, max_t + 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = totals / (pools * L)
    return {"tree_size": t.tolist(), "mean_union": mean.tolist(), "pools": pools.tolist(),
            "independent": independent_union(N, k, t).tolist()}


def union_vs_window(trace: Trace, max_window: int = WINDOW_SIZES) -> dict[str, Any]:
    """Mean experts per layer over windows of w consecutive committed tokens (roots), w = 1..max_window."""
    g = trace.geometry
    L, N, k = g.num_layers, g.num_experts, g.top_k
    totals = np.zeros(max_window)
    windows = np.zeros(max_window, dtype=np.int64)
    for r in range(len(trace.requests)):
        a, b = trace.request_positions(r)
        step = _chunk_rows(L, N)
        for s in range(a, b, step):
            e = min(b, s + step + max_window - 1)   # overlap so windows crossing chunks are counted once
            bm = route_bitmaps(trace.root_routes[s:e], N)
            acc = bm.copy()
            starts = min(step, b - s)
            for w in range(1, max_window + 1):
                n = min(starts, (e - s) - w + 1)
                if n <= 0:
                    break
                if w > 1:
                    acc[:n] |= bm[w - 1:w - 1 + n]
                totals[w - 1] += _popcount(acc[:n]).sum()
                windows[w - 1] += n
    widths = np.arange(1, max_window + 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = totals / (windows * L)
    return {"window": widths.tolist(), "mean_union": mean.tolist(), "windows": windows.tolist(),
            "independent": independent_union(N, k, widths).tolist()}


def independent_union(N: int, k: int, t) -> np.ndarray:
    """Expected distinct experts of t tokens routed independently and uniformly: N[1 − (1 − k/N)^t]."""
    return N * (1.0 - (1.0 - k / N) ** np.asarray(t, dtype=np.float64))


# ----------------------------------------------------------------- helpers ---

def _mean(a) -> float:
    a = np.asarray(a, dtype=np.float64)
    return float(a.mean()) if a.size else math.nan


def _summary(a: np.ndarray) -> dict[str, float]:
    a = np.asarray(a, dtype=np.float64)
    a = a[np.isfinite(a)]
    if not a.size:
        return {"mean": math.nan, "min": math.nan, "max": math.nan}
    return {"mean": float(a.mean()), "min": float(a.min()), "max": float(a.max())}


def _clean(x):
    """Replace non-finite floats by None and numpy scalars by Python ones, recursively."""
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, (np.floating, float)):
        return float(x) if math.isfinite(float(x)) else None
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.bool_):
        return bool(x)
    return x

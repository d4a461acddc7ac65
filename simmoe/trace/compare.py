"""Routing statistics that two traces are compared by (``simmoe inspect A B``).

Every statistic is computed per request from the committed tokens' routes
(``root_routes``) and is a number comparable across models (docs/synthetic-traces.md,
"Comparing traces"):

* next-token overlap: |E_ℓ(t) ∩ E_ℓ(t+1)| / k over consecutive tokens of the
  request, averaged over pairs and layers;
* reuse distance: for every routing of expert e in layer ℓ at token t that e
  had already served in this layer and request, t − t' (t' its last use), in
  units of N/k tokens (the mean gap of independent uniform routing); the
  request's 25th, 50th and 90th percentiles over every layer's reuses;
* top-10% share (popularity concentration): the share of the request's
  routings in a layer that go to its h = ceil(N/10) most-routed experts,
  averaged over layers;
* hot-set stability: the overlap |H₁ ∩ H₂| / h of the hot sets (the h
  most-routed experts) of the first ⌊n/2⌋ tokens and of the rest, per layer,
  averaged over layers;
* hot set shared with the other requests (drift across requests; lower means
  more drift): the overlap of the request's hot set with the hot set of all
  the trace's other requests together, per layer, averaged over layers.

Hot sets break ties at random: an expert tied at the h-th count is in the set
with probability (places left) / (experts tied), and an overlap is its
expectation Σ_e w₁(e)·w₂(e) / h (:func:`hot_weights`), so no expert id is
favoured.  A trace's value of a statistic is the mean over its requests; its
range is the 5th to 95th percentile of its requests' values.  Requests too
short for a statistic (one token; no reuse) are left out of it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from simmoe.trace.schema import Trace
from simmoe.trace.stats import route_bitmaps

REUSE_QUANTILES = (0.25, 0.5, 0.9)
RANGE = (0.05, 0.95)
# Rows per chunk of the overlap bitmaps: bounds memory to about this many uint64 words.
_CHUNK_WORDS = 1 << 22

# (key, label) of each statistic, in table order.
STATISTICS: tuple[tuple[str, str], ...] = (
    ("next_token_overlap", "next-token overlap"),
    *((f"reuse_distance_p{round(q * 100)}", f"reuse distance p{round(q * 100)}") for q in REUSE_QUANTILES),
    ("top10pct_share", "top-10% share"),
    ("hot_set_stability", "hot-set stability"),
    ("hot_set_vs_others", "hot set vs other requests"),
)
UNITS = ("overlap: share of k; reuse distance: tokens × k/N (1 = independent uniform routing's mean gap); "
         "top-10% share: of the request's routings; hot sets: share of h in common")


def hot_count(num_experts: int) -> int:
    """h: the experts in a hot set, the top 10% (at least one)."""
    return max(1, math.ceil(num_experts / 10))


def request_bounds(trace: Trace) -> np.ndarray:
    """int [R + 1]: request r's positions are rows bounds[r]:bounds[r + 1]."""
    counts = np.bincount(trace.pos_request, minlength=len(trace.requests))
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)


def next_token_overlap(trace: Trace) -> np.ndarray:
    """float [R]: mean |E_ℓ(t) ∩ E_ℓ(t+1)| / k per request (NaN for a one-token request).  O(P·L·(k + N/64))."""
    g = trace.geometry
    L, N, k = g.num_layers, g.num_experts, g.top_k
    R = len(trace.requests)
    same = np.flatnonzero(trace.pos_request[1:] == trace.pos_request[:-1])
    inter = np.zeros(R, dtype=np.int64)
    step = max(1, _CHUNK_WORDS // (L * ((N + 63) // 64)))
    for s in range(0, len(same), step):
        i = same[s:s + step]
        both = route_bitmaps(trace.root_routes[i], N) & route_bitmaps(trace.root_routes[i + 1], N)
        per_pair = np.bitwise_count(both).sum(axis=(1, 2), dtype=np.int64)
        inter += np.bincount(trace.pos_request[i], weights=per_pair, minlength=R).astype(np.int64)
    pairs = np.bincount(trace.pos_request[same], minlength=R)
    with np.errstate(invalid="ignore", divide="ignore"):
        return inter / (pairs * L * k)


def reuse_distances(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """Every reuse's distance in tokens and its request: (int64 [U], int64 [U]).

    Routings are grouped by (request, layer, expert) with a stable sort, so
    each group stays in token order and a reuse's distance is the difference
    to the previous member.  O(P·L·k·log(P·L·k)).
    """
    g = trace.geometry
    L, N, k = g.num_layers, g.num_experts, g.top_k
    P = trace.num_positions
    bounds = request_bounds(trace)
    req = trace.pos_request.astype(np.int64)
    t = np.arange(P, dtype=np.int64) - bounds[req]                   # token index within its request
    group = ((req[:, None, None] * L + np.arange(L)[None, :, None]) * N
             + trace.root_routes.astype(np.int64)).reshape(-1)
    tok = np.broadcast_to(t[:, None, None], (P, L, k)).reshape(-1)
    order = np.argsort(group, kind="stable")
    group, tok = group[order], tok[order]
    again = group[1:] == group[:-1]
    return (tok[1:] - tok[:-1])[again], group[1:][again] // (L * N)


def reuse_distance_quantiles(trace: Trace, quantiles=REUSE_QUANTILES) -> np.ndarray:
    """float [R, len(quantiles)]: each request's reuse-distance percentiles in units of N/k tokens (NaN: no reuse)."""
    g = trace.geometry
    dist, req = reuse_distances(trace)
    R = len(trace.requests)
    out = np.full((R, len(quantiles)), math.nan)
    order = np.argsort(req, kind="stable")
    dist, req = dist[order], req[order]
    cuts = np.searchsorted(req, np.arange(R + 1))
    for r in range(R):
        d = dist[cuts[r]:cuts[r + 1]]
        if d.size:
            out[r] = np.quantile(d, quantiles) * g.top_k / g.num_experts
    return out


def routing_counts(trace: Trace, halves: bool = False) -> np.ndarray:
    """Routings per (request, layer, expert): int64 [R, L, N].

    ``halves``: [R, 2, L, N], the first ⌊n/2⌋ tokens of each request, then the rest.
    """
    g = trace.geometry
    L, N = g.num_layers, g.num_experts
    R = len(trace.requests)
    req = trace.pos_request.astype(np.int64)
    row = req
    parts = 1
    if halves:
        bounds = request_bounds(trace)
        t = np.arange(trace.num_positions) - bounds[req]
        row = req * 2 + (t >= (bounds[req + 1] - bounds[req]) // 2)
        parts = 2
    idx = (row[:, None, None] * L + np.arange(L)[None, :, None]) * N + trace.root_routes.astype(np.int64)
    counts = np.bincount(idx.reshape(-1), minlength=R * parts * L * N)
    return counts.reshape((R, 2, L, N) if halves else (R, L, N))


def hot_weights(counts: np.ndarray, h: int) -> np.ndarray:
    """P(expert in the hot set) along the last axis: the h largest counts, ties broken uniformly at random.

    Experts above the h-th largest count get 1, those tied with it share the
    places left equally, the rest 0; every row sums to h.
    """
    c = np.asarray(counts)
    kth = -np.sort(-c, axis=-1)[..., h - 1:h]                       # the h-th largest count
    above = c > kth
    tied = c == kth
    left = h - above.sum(axis=-1, keepdims=True)
    return above + tied * (left / tied.sum(axis=-1, keepdims=True))


def hot_overlap(counts_a: np.ndarray, counts_b: np.ndarray, h: int) -> np.ndarray:
    """Expected |H_a ∩ H_b| / h of the hot sets of two count arrays (last axis: experts)."""
    return (hot_weights(counts_a, h) * hot_weights(counts_b, h)).sum(axis=-1) / h


def top_share(trace: Trace, counts: np.ndarray | None = None) -> np.ndarray:
    """float [R]: share of a request's routings going to its h most-routed experts, mean over layers."""
    c = routing_counts(trace) if counts is None else counts
    h = hot_count(trace.geometry.num_experts)
    top = -np.sort(-c, axis=-1)[..., :h].sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (top / c.sum(axis=-1)).mean(axis=-1)


def hot_set_stability(trace: Trace) -> np.ndarray:
    """float [R]: overlap of the first half's and the second half's hot sets, mean over layers (NaN: one token)."""
    c = routing_counts(trace, halves=True)
    out = hot_overlap(c[:, 0], c[:, 1], hot_count(trace.geometry.num_experts)).mean(axis=-1)
    out[np.diff(request_bounds(trace)) < 2] = math.nan
    return out


def hot_set_vs_others(trace: Trace, counts: np.ndarray | None = None) -> np.ndarray:
    """float [R]: overlap of a request's hot set with that of the other requests together (NaN: one request)."""
    c = routing_counts(trace) if counts is None else counts
    if len(c) < 2:
        return np.full(len(c), math.nan)
    others = c.sum(axis=0, keepdims=True) - c
    return hot_overlap(c, others, hot_count(trace.geometry.num_experts)).mean(axis=-1)


def per_request_statistics(trace: Trace) -> dict[str, np.ndarray]:
    """Every statistic of :data:`STATISTICS`, one value per request (NaN where undefined)."""
    counts = routing_counts(trace)
    out = {"next_token_overlap": next_token_overlap(trace)}
    rq = reuse_distance_quantiles(trace)
    for j, q in enumerate(REUSE_QUANTILES):
        out[f"reuse_distance_p{round(q * 100)}"] = rq[:, j]
    out["top10pct_share"] = top_share(trace, counts)
    out["hot_set_stability"] = hot_set_stability(trace)
    out["hot_set_vs_others"] = hot_set_vs_others(trace, counts)
    return out


def summarise(values: np.ndarray) -> dict[str, Any]:
    """Mean over the requests where defined, the 5–95% range of their values, and how many."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if not v.size:
        return {"mean": None, "lo": None, "hi": None, "requests": 0}
    lo, hi = np.quantile(v, RANGE)
    return {"mean": float(v.mean()), "lo": float(lo), "hi": float(hi), "requests": int(v.size)}


def routing_statistics(trace: Trace) -> dict[str, Any]:
    """The trace's summary of every statistic (JSON-serialisable), with what identifies the trace."""
    g = trace.geometry
    per = per_request_statistics(trace)
    return {
        "synthetic": trace.is_synthetic,
        "provenance": trace.meta.get("provenance"),
        "geometry": {"name": g.name, "num_layers": g.num_layers, "num_experts": g.num_experts, "top_k": g.top_k},
        "requests": len(trace.requests),
        "positions": trace.num_positions,
        "hot_set_size": hot_count(g.num_experts),
        "statistics": {key: summarise(per[key]) for key, _ in STATISTICS},
    }


def position(value: float | None, summary: dict[str, Any]) -> str:
    """Where ``value`` lies against a summary's range: "below", "above", "in", or "–" where undefined."""
    lo, hi = summary["lo"], summary["hi"]
    if value is None or lo is None:
        return "–"
    return "below" if value < lo else "above" if value > hi else "in"


def compare(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Rows of A against B (each from :func:`routing_statistics`): values, ranges, which lie outside the other's."""
    rows = []
    for key, label in STATISTICS:
        sa, sb = a["statistics"][key], b["statistics"][key]
        rows.append({"statistic": key, "label": label, "a": sa, "b": sb,
                     "a_vs_b_range": position(sa["mean"], sb), "b_vs_a_range": position(sb["mean"], sa)})
    return {"range": list(RANGE), "units": UNITS, "a": a, "b": b, "rows": rows,
            "a_out_of_b_range": [r["statistic"] for r in rows if r["a_vs_b_range"] in ("below", "above")]}


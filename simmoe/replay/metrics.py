"""The paper's counters from a replay's per-cycle and per-request records.

SpecFit Eq. 10 (App. B): with output count N_i, request time t_i^req and
prefill time t_i^pre,

    TPS_dec = Σ_i (N_i − 1) / Σ_i (t_i^req − t_i^pre)      (the first token is prefill's)
    TPS_req = Σ_i N_i / Σ_i t_i^req

Draft nodes, committed tokens and ms per cycle are means over verification
cycles (an AR cycle is one decode forward committing one token); H2D per
token counts expert copies per output token *including prefill*; the hit
rate is over every forward, prefill included.  ``mat`` is EVICT's mean
accepted tokens (Table 2): 1 + accepted draft tokens per cycle, not capped
at the end of a request as ``committed`` is.
"""

from __future__ import annotations

import numpy as np

# Column order of every table this module feeds (terminal, CSV, JSON, sweep).
COUNTERS = (
    "decode_tps", "request_tps", "draft_nodes", "committed", "mat", "cycles", "ms_per_cycle",
    "h2d_per_token", "hit_rate", "stopped_early_pct", "drafted_levels",
    "selector_ms", "selector_ms_median", "output_tokens", "requests", "decode_s",
)


def summarize(cycles: dict[str, np.ndarray], requests: dict[str, np.ndarray]) -> dict[str, float]:
    """Counters of one replay (see the module docstring).  O(cycles + requests)."""
    n_out = np.asarray(requests["output_len"], dtype=np.int64)
    t_req = np.asarray(requests["request_ms"], dtype=np.float64)
    t_pre = np.asarray(requests["prefill_ms"], dtype=np.float64)
    tokens = int(n_out.sum())
    decode_ms = float(np.sum(t_req - t_pre))
    ncyc = len(cycles["committed"])
    hits = int(np.sum(cycles["hits"], dtype=np.int64)) + int(np.sum(requests["prefill_hits"], dtype=np.int64))
    misses = int(np.sum(cycles["misses"], dtype=np.int64)) + int(np.sum(requests["prefill_misses"], dtype=np.int64))

    def mean(a) -> float:
        return float(np.mean(a)) if ncyc else float("nan")

    drafted = np.asarray(cycles["drafted_levels"])
    pool_levels = np.asarray(cycles["pool_levels"])
    return {
        "decode_tps": 1e3 * (tokens - len(n_out)) / decode_ms if decode_ms > 0 else float("nan"),
        "request_tps": 1e3 * tokens / float(t_req.sum()) if t_req.sum() > 0 else float("nan"),
        "draft_nodes": mean(cycles["draft_nodes"]),
        "committed": mean(cycles["committed"]),
        # EVICT's Mat: accepted draft tokens + 1 per cycle, not capped at the end of a request
        "mat": 1.0 + mean(cycles["accepted"]),
        "cycles": ncyc,
        "ms_per_cycle": mean(cycles["cycle_ms"]),
        "h2d_per_token": misses / tokens if tokens else float("nan"),
        "hit_rate": hits / (hits + misses) if hits + misses else float("nan"),
        # a cycle stopped early drafted fewer levels than its recorded pool holds
        "stopped_early_pct": 100.0 * mean(drafted < pool_levels),
        "drafted_levels": mean(drafted),
        "selector_ms": mean(cycles["selector_ms"]),
        "selector_ms_median": float(np.median(cycles["selector_ms"])) if ncyc else float("nan"),
        "output_tokens": tokens,
        "requests": len(n_out),
        "decode_s": decode_ms / 1e3,
    }


def speedup(summary: dict[str, float], baseline: dict[str, float]) -> float:
    """Decode throughput over a baseline's (the paper's: AR without cache)."""
    b = baseline.get("decode_tps", float("nan"))
    return summary["decode_tps"] / b if b and np.isfinite(b) and b > 0 else float("nan")

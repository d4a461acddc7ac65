"""What a replay returns: per-step, per-request-cycle and per-request records, and their counters.

Metrics (SpecFit Eq. 10 at batch 1; aggregate over the batch otherwise):
decode throughput Σ(N_i − 1) / (makespan − prefill time) and Σ N_i / makespan;
the steady-state throughput ``decode_tps_full``, tokens committed per second
over the steps with every slot busy (a finite trace ends with a draining
batch); per-request latency (admission to last token) and time per output
token, with percentiles.  With prefetching: prefetched, useful and wasted
copies per token and the decode time saved against the same replay without
prefetch.  In the resident regime there is no cache: the counters are the
experts each token reads from HBM, not copies and hits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

PERCENTILES = (50, 90, 99)
# per-cycle columns the copy engine adds to a replay's cycle records
PREFETCH_CYCLE_COLUMNS = ("prefetched", "useful", "wasted")
# per-token counters it adds to a summary
PREFETCH_COUNTERS = ("prefetched_per_token", "useful_per_token", "wasted_per_token",
                     "saved_ms_per_token", "saved_pct")
# counters of a cache that the resident regime does not have, and the ones it has instead
CACHE_COUNTERS = ("h2d_per_token", "hit_rate")
RESIDENT_COUNTERS = ("expert_reads_per_token", "expert_mb_per_token")


@dataclass
class ReplayResult:
    """Per-step, per-request-cycle and per-request records of one replay, with the summary counters.

    ``regime``: ``"offload"`` or ``"resident"``; ``counted_prefetch``: the cycle
    records carry ``prefetched``, ``useful`` and ``wasted`` (a prefetch policy
    ran, or a selector that reads the cache); ``baseline_decode_ms``: decode
    time of the same replay without prefetch (None when not computed), from
    which ``saved_ms_per_token`` follows; ``timeline``: the recorded events,
    when asked for.
    """

    config: Any
    steps: dict[str, np.ndarray]
    cycles: dict[str, np.ndarray]
    requests: dict[str, np.ndarray]
    synthetic: bool
    plan_wall_s: float
    simulate_wall_s: float
    lambda_star: float | None = None
    regime: str = "offload"
    expert_bytes: int = 0
    counted_prefetch: bool = False
    baseline_decode_ms: float | None = None
    timeline: list | None = None
    cpu: dict | None = None        # the CPU-expert regime's totals (simmoe.replay.residency_cpu)

    @property
    def batch(self) -> int:
        return int(self.config.batch)

    @property
    def policy(self) -> str:
        return str(self.config.prefetch)

    def summary(self) -> dict[str, float]:
        """The replay's counters (module docstring)."""
        s = summarize_batched(self.steps, self.cycles, self.requests, self.batch)
        if self.counted_prefetch:
            s.update(prefetch_counters(self.cycles, self.requests, self.baseline_decode_ms))
        if self.cpu is not None:
            s.update(cpu_counters(self.cpu, s["output_tokens"]))
        if self.regime == "resident":
            tokens = s["output_tokens"]
            reads = int(np.sum(self.cycles["hits"], dtype=np.int64)) \
                + int(np.sum(self.requests["prefill_hits"], dtype=np.int64))
            for key in CACHE_COUNTERS:
                s.pop(key, None)
            s["expert_reads_per_token"] = reads / tokens if tokens else float("nan")
            s["expert_mb_per_token"] = (reads * self.expert_bytes / 1e6 / tokens
                                        if tokens and self.expert_bytes else float("nan"))
        return s

    def cycles_frame(self):
        """Every request-cycle (with its step and batch size) as a DataFrame."""
        import pandas as pd

        df = pd.DataFrame(self.cycles)
        for key in ("selector", "cache", "slots", "hardware", "route_accuracy"):
            df.insert(0, key, getattr(self.config, key))
        df["batch"] = self.batch
        df["prefetch"] = self.policy
        df["synthetic"] = self.synthetic
        return df


def summarize_batched(steps, cycles, requests, batch: int) -> dict[str, float]:
    """Aggregate throughput, per-request-cycle counters and latency percentiles.  O(cycles + requests)."""
    from simmoe.replay.metrics import summarize

    # per request-cycle counters as at batch 1 (cycle_ms there is the step's time)
    s = summarize(cycles, requests)
    n_out = np.asarray(requests["output_len"], dtype=np.int64)
    pre = np.asarray(requests["prefill_ms"], dtype=np.float64)
    makespan = float(np.sum(steps["step_ms"])) + float(pre.sum())
    decode_ms = makespan - float(pre.sum())
    tokens = int(n_out.sum())
    if batch > 1:  # at batch 1 summarize's per-request sums are these, bit for bit
        s["decode_tps"] = 1e3 * (tokens - len(n_out)) / decode_ms if decode_ms > 0 else float("nan")
        s["request_tps"] = 1e3 * tokens / makespan if makespan > 0 else float("nan")
        s["decode_s"] = decode_ms / 1e3
    s["ms_per_cycle"] = float(np.mean(steps["step_ms"])) if len(steps["step_ms"]) else float("nan")
    s["steps"] = int(len(steps["step_ms"]))
    s["batch"] = int(batch)
    # steady state: the steps with every slot busy (a finite trace ends with a draining batch)
    full = np.asarray(steps["requests"]) == batch
    cyc_step = np.asarray(cycles["step"])
    t_full = float(np.sum(np.asarray(steps["step_ms"])[full]))
    tok_full = float(np.sum(np.asarray(cycles["committed"])[full[cyc_step]])) if len(cyc_step) else 0.0
    s["full_steps"] = int(full.sum())
    s["ms_per_step_full"] = t_full / s["full_steps"] if s["full_steps"] else float("nan")
    s["decode_tps_full"] = 1e3 * tok_full / t_full if t_full > 0 else float("nan")
    s["mean_batch"] = float(np.mean(steps["requests"])) if len(steps["requests"]) else float("nan")
    lat = np.asarray(requests["latency_ms"], dtype=np.float64)
    tpot = np.asarray(requests["tpot_ms"], dtype=np.float64)
    for q in PERCENTILES:
        s[f"latency_p{q}_ms"] = float(np.percentile(lat, q)) if len(lat) else float("nan")
    for q in (50, 90):
        s[f"tpot_p{q}_ms"] = float(np.nanpercentile(tpot, q)) if np.isfinite(tpot).any() else float("nan")
    return s


def prefetch_counters(cycles: dict, requests: dict, baseline_decode_ms: float | None = None) -> dict:
    """Prefetched, useful and wasted copies per output token; time saved per decoded token.

    Time saved = (decode time without prefetch − with) / Σ(N_i − 1), the
    decode tokens of SpecFit Eq. 10; ``saved_pct`` relative to the decode
    time without prefetch.  Both are None (JSON null, never NaN) when the
    replay without prefetch was skipped or their denominator is 0.
    """
    tokens = int(np.sum(requests["output_len"], dtype=np.int64))
    decode_tokens = tokens - len(requests["output_len"])
    out: dict[str, float | None] = {}
    for key in PREFETCH_CYCLE_COLUMNS:
        total = int(np.sum(cycles.get(key, ()), dtype=np.int64))
        out[f"{key}_per_token"] = total / tokens if tokens else float("nan")
    decode_ms = float(np.sum(requests["decode_ms"]))
    # None (JSON null), never NaN, where there is no figure: the baseline was not replayed, or nothing decoded
    out["saved_ms_per_token"] = out["saved_pct"] = None
    if baseline_decode_ms is not None:
        saved = float(baseline_decode_ms) - decode_ms
        if decode_tokens > 0:
            out["saved_ms_per_token"] = saved / decode_tokens
        if baseline_decode_ms > 0:
            out["saved_pct"] = 100.0 * saved / baseline_decode_ms
    return out


CPU_COUNTERS = ("cpu_reads_per_token", "dram_gb_per_token", "gpu_share", "gpu_ms_per_token", "cpu_ms_per_token")


def cpu_counters(totals: dict, tokens: float) -> dict:
    """The CPU-expert regime's counters per output token (prefill included), from the residency's totals.

    ``h2d_per_token`` becomes the experts copied (Fiddler's rule) and ``hit_rate``
    the share of demanded experts served on the GPU.
    """
    nan = float("nan")
    served = totals["gpu_served"] + totals["cpu_reads"]
    per = (lambda x: x / tokens) if tokens else (lambda x: nan)
    share = totals["gpu_served"] / served if served else nan
    return {"cpu_reads_per_token": per(totals["cpu_reads"]), "dram_gb_per_token": per(totals["dram_bytes"] / 1e9),
            "gpu_share": share, "hit_rate": share, "h2d_per_token": per(totals["copies"]),
            "gpu_ms_per_token": per(totals["gpu_ms"]), "cpu_ms_per_token": per(totals["cpu_ms"])}

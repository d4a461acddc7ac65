"""``simmoe report``'s table "selector × regime × batch": each selector with experts offloaded or resident.

For a trace of Qwen3-30B-A3B (the geometry of the shipped traces) every
selector of :data:`SELECTORS` is replayed

* offloaded: the report's base profile (SpecFit's A100 PCIe 40GB), its LRU
  slots, and EVICT's C(k) derived from the profile's cached App. B model;
* resident: the physical cost model ``qwen3-30b-a3b@a100-sxm4-80gb`` (every
  expert in HBM; SpecFit's b_k and β derived from the model, EVICT's C(k)
  profiled on the trace, docs/models-and-gpus.md),

at each batch size of ``batches`` (continuous batching,
:mod:`simmoe.replay.batch`; batch 1 is the per-request engine).  Throughput
is aggregate decode tokens/s; the speedup is over AR in the same regime and
batch without a cache.  Selector time is fixed as in every report table
(SpecFit: the paper's median; the top-k rules 0).
"""

from __future__ import annotations

from dataclasses import replace

SELECTORS = ("ar", "eagle3", "evict", "specfit")
RESIDENT = "qwen3-30b-a3b@a100-sxm4-80gb"
BATCHES = (1, 4, 16)
MODEL = "Qwen3-30B-A3B"


def applies(trace) -> bool:
    """The table is for traces with Qwen3-30B-A3B's geometry (48 MoE layers × 128 experts, top-8)."""
    g = trace.geometry
    return (g.num_layers, g.num_experts, g.top_k) == (48, 128, 8)


def regime_rows(trace, path: str, settings, *, workers: int = 1, batches=BATCHES):
    """One row per (regime, batch, selector): a pandas DataFrame (empty when the table does not apply)."""
    import pandas as pd

    from simmoe.hardware.profile import load_profile
    from simmoe.replay.batch import replay_all_batched
    from simmoe.replay.engine import ReplayConfig, ar_baseline, replay_all
    from simmoe.replay.metrics import speedup
    from simmoe.replay.selectors import SELECTORS as ALL
    from simmoe.report.experiments import dataset_of, search_ms

    if not applies(trace):
        return pd.DataFrame()
    dataset = dataset_of(trace, path)
    base = load_profile(settings.hardware)
    resident = load_profile(RESIDENT)
    profiles = {base.name: base, resident.name: resident}
    fixed = search_ms(settings, dataset, base)
    R = len(trace.requests) if settings.requests is None else min(settings.requests, len(trace.requests))
    rows = []
    for regime, prof, slots in (("offload", base, settings.slots), ("resident", resident, 0)):
        for batch in batches:
            if batch > R:
                continue
            configs = []
            for sel in SELECTORS:
                configs.append(ReplayConfig(selector=sel, slots=slots, cache="lru" if slots else "none",
                                            hardware=prof.name, selector_ms=fixed if ALL[sel].uses_cost else 0.0,
                                            timing=settings.timing, seed=settings.seed,
                                            requests=settings.requests).validate())
            ar0 = ar_baseline(configs[0])
            ar0 = replace(ar0, selector_ms=0.0)
            allc = [ar0] + configs
            if batch == 1:
                res = replay_all(trace, allc, profiles, workers=workers)
            else:
                res = replay_all_batched(trace, allc, profiles, batch, workers=workers)
            sums = [r.summary() for r in res]
            for c, s in zip(configs, sums[1:], strict=True):
                rows.append({"trace": path, "dataset": dataset, "synthetic": bool(trace.is_synthetic),
                             "regime": regime, "hardware": prof.name, "slots": slots, "batch": batch,
                             "selector": c.selector, "decode_tps": s["decode_tps"],
                             "speedup": speedup(s, sums[0]), "committed": s["committed"],
                             "draft_nodes": s["draft_nodes"], "ms_per_step": s["ms_per_cycle"],
                             "h2d_per_token": s["h2d_per_token"] if regime == "offload" else 0.0,
                             "latency_p50_ms": s.get("latency_p50_ms", float("nan")),
                             "requests_limit": settings.requests})
    return pd.DataFrame(rows)


def regime_table(df) -> str:
    """Markdown: rows (regime, batch), columns the selectors' tokens/s (speedup)."""
    from simmoe.report.tables import md_table

    if df is None or len(df) == 0:
        return ""
    header = ["regime", "batch"] + [f"{s} tok/s (speedup)" for s in SELECTORS] + ["best"]
    rows = []
    for (regime, batch), g in df.groupby(["regime", "batch"], sort=False):
        cells, best = [], max(g.itertuples(), key=lambda r: r.decode_tps)
        for sel in SELECTORS:
            r = g[g["selector"] == sel].iloc[0]
            cells.append(f"{r['decode_tps']:.1f} ({r['speedup']:.2f}×)")
        rows.append([regime, str(batch), *cells, best.selector])
    return md_table(header, rows)

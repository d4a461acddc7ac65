"""``simmoe report``'s table "selector × regime × batch": each selector with experts offloaded or resident.

For a trace of Qwen3-30B-A3B (the geometry of the shipped traces) every
selector of :data:`SELECTORS` is replayed

* offloaded: the report's base profile (SpecFit's A100 PCIe 40GB), its LRU
  slots, and EVICT's C(k) derived from the profile's cached App. B model;
* resident: the physical cost model ``qwen3-30b-a3b@a100-sxm4-80gb`` (every
  expert in HBM; SpecFit's b_k and β derived from the model, EVICT's C(k)
  profiled on the trace, docs/models-and-gpus.md),

at each batch size of ``batches`` (continuous batching,
:mod:`simmoe.replay.admission`; batch 1 is one request at a time).  Throughput
is aggregate decode tokens/s; the speedup is over AR in the same regime and
batch without a cache.  Selector time is fixed as in every report table: the
cost-model selectors (SpecFit) are charged the SpecFit paper's median selector
time for the dataset (§4.6, measured with experts offloaded on the A100; 2.82 ms
on GSM8K, 1.43 ms on CNN/DM) per cycle, and per step at batch > 1 (the batch's
selections run in parallel), in both regimes, the resident one included; the
top-k rules are charged 0.  The table's last column states what was charged,
so the resident rows' SpecFit figures are read with it (a resident forward
takes about 7 ms).  A batch larger than the trace's requests cannot run and
is left out, and the table says so below it (the shipped traces have 21 and 24
requests, so batch 64 needs a larger trace, e.g. ``simmoe synth --preset gsm8k``).
"""

from __future__ import annotations

from dataclasses import replace

SELECTORS = ("ar", "eagle3", "evict", "specfit")
RESIDENT = "qwen3-30b-a3b@a100-sxm4-80gb"
BATCHES = (1, 4, 16, 64)
MODEL = "Qwen3-30B-A3B"


def applies(trace) -> bool:
    """The table is for traces with Qwen3-30B-A3B's geometry (48 MoE layers × 128 experts, top-8)."""
    g = trace.geometry
    return (g.num_layers, g.num_experts, g.top_k) == (48, 128, 8)


def regime_rows(trace, path: str, settings, *, workers: int = 1, batches=None):
    """One row per (regime, batch, selector): a pandas DataFrame (empty when the table does not apply).

    ``batches`` None: ``settings.batches`` (:data:`BATCHES`, fewer with ``--quick``).
    """
    import pandas as pd

    from simmoe.hardware.profile import load_profile
    from simmoe.replay.engine import ReplayConfig, ar_baseline, replay_all
    from simmoe.replay.metrics import speedup
    from simmoe.replay.selectors import SELECTORS as ALL
    from simmoe.report.experiments import check_model, dataset_of, search_ms

    if not applies(trace):
        return pd.DataFrame()
    batches = settings.batches if batches is None else batches
    dataset = dataset_of(trace, path)
    base = load_profile(settings.hardware)
    resident = load_profile(RESIDENT)
    check_model(trace, path, base, "--hardware")
    check_model(trace, path, resident, "the resident regime")
    profiles = {base.name: base, resident.name: resident}
    fixed = search_ms(settings, dataset, base)
    R = len(trace.requests) if settings.requests is None else min(settings.requests, len(trace.requests))
    rows = []
    skipped = sorted({int(b) for b in batches if b > R})
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
            allc = [replace(c, batch=batch) for c in allc]
            sums = [r.summary() for r in replay_all(trace, allc, profiles, workers=workers)]
            for c, s in zip(configs, sums[1:], strict=True):
                rows.append({"trace": path, "dataset": dataset, "synthetic": bool(trace.is_synthetic),
                             "regime": regime, "hardware": prof.name, "slots": slots, "batch": batch,
                             "selector": c.selector, "decode_tps": s["decode_tps"],
                             "speedup": speedup(s, sums[0]), "committed": s["committed"],
                             "draft_nodes": s["draft_nodes"], "ms_per_step": s["ms_per_cycle"],
                             "h2d_per_token": s["h2d_per_token"] if regime == "offload" else 0.0,
                             "latency_p50_ms": s.get("latency_p50_ms", float("nan")),
                             "selector_ms": c.selector_ms, "requests_limit": settings.requests})
    df = pd.DataFrame(rows)
    df.attrs.update(skipped_batches=skipped, requests=R)
    return df


def regime_table(df) -> str:
    """Markdown: rows (regime, batch), columns the selectors' tokens/s (speedup) and the selector time charged.

    Batches the trace was too small for are named in a line below the table.
    """
    from simmoe.report.tables import md_table

    if df is None or len(df) == 0:
        return ""
    header = ["regime", "batch"] + [f"{s} tok/s (speedup)" for s in SELECTORS] + ["best",
                                                                                  "selector time charged"]
    rows = []
    for (regime, batch), g in df.groupby(["regime", "batch"], sort=False):
        cells, best = [], max(g.itertuples(), key=lambda r: r.decode_tps)
        for sel in SELECTORS:
            r = g[g["selector"] == sel].iloc[0]
            cells.append(f"{r['decode_tps']:.1f} ({r['speedup']:.2f}×)")
        rows.append([regime, str(batch), *cells, best.selector, _charged(g, int(batch))])
    text = md_table(header, rows)
    skipped = df.attrs.get("skipped_batches") or []
    if skipped:
        n = df.attrs.get("requests")
        text += (f"\n\nBatch {', '.join(map(str, skipped))} not run: the trace has {n} requests "
                 "(continuous batching needs at least as many requests as slots).")
    return text


def _charged(g, batch: int) -> str:
    """The selector time charged in one (regime, batch) group: per cycle at batch 1, per step above."""
    if "selector_ms" not in g:
        return "–"
    per = "cycle" if batch == 1 else "step"
    paid = [(r.selector, float(r.selector_ms)) for r in g.itertuples() if float(r.selector_ms or 0.0) > 0]
    if not paid:
        return "0 ms"
    return ", ".join(f"{name} {ms:g} ms/{per}" for name, ms in paid) + "; others 0"

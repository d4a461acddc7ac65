"""Markdown tables of one trace's replays, with the published figure beside each simulated one.

Each cell shows the simulated value, then the published one in parentheses
where the paper has it (SpecFit Tables 2–5, Figures 2–4, §4.6).  A table's
heading says whether its published figures were used to fit the shipped
traces and profiles (``fit``) or are predictions (``validate``), as in
``shared/design/CALIBRATION.md`` and ``published.json``; single fitted cells
inside a validation table are marked ``fit``, and SpecFit's adaptive-depth
figures (validation) inside GSM8K's fit table are marked ``validate``.  Everything computed from a
synthetic trace is labelled SYNTHETIC.  Formats are fixed, so the same
numbers always give the same text.
"""

from __future__ import annotations

import math

from simmoe.published import PUBLISHED

NAMES = {"ar": "AR", "eagle3": "EAGLE-3", "specfit": "SpecFit"}
SPEC = PUBLISHED["specfit"]

# published table for the main experiment: dataset -> (key, figure of its decode TPS)
MAIN_TABLE = {"gsm8k": ("table3_gsm8k_a100", "Table 3", "Figure 3"),
              "cnndm": ("table2_cnndm_a100", "Table 2", "Figure 2")}
# cells of a validation table that were fitted (CALIBRATION.md): (method, cache, column)
FITTED_CELLS = {("cnndm", "eagle3", True, "committed"), ("cnndm", "eagle3", False, "committed"),
                ("cnndm", "ar", True, "h2d_per_token")}
COLUMNS = [("decode_tps", "decode TPS", "{:.2f}"), ("speedup", "× AR no cache", "{:.2f}"),
           ("draft_nodes", "draft nodes", "{:.2f}"), ("committed", "committed", "{:.2f}"),
           ("cycles", "cycles", "{:.0f}"), ("ms_per_cycle", "ms/cycle", "{:.1f}"),
           ("h2d_per_token", "H2D/token", "{:.1f}"), ("hit_rate", "hit rate", "{:.3f}"),
           ("stopped_early_pct", "stopped early %", "{:.1f}"),
           ("drafted_levels", "drafted levels", "{:.2f}")]


def fmt(value, spec: str = "{:.2f}") -> str:
    """A number in a fixed format; '—' for missing."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    return spec.format(value)


def cell(sim, pub=None, spec: str = "{:.2f}", mark: str = "") -> str:
    """``sim (pub)``, or ``sim`` alone when nothing is published."""
    text = fmt(sim, spec)
    if pub is None:
        return text
    return f"{text} ({fmt(pub, spec)}{' ' + mark if mark else ''})"


def md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def label(synthetic: bool) -> str:
    return "SYNTHETIC trace" if synthetic else "recorded trace"


def _published_rows(key: str | None) -> dict:
    if key is None:
        return {}
    t = SPEC[key]
    cols = t["columns"]
    return {(r[0], bool(r[1])): dict(zip(cols, r)) for r in t["rows"]}


def pick(df, **eq):
    m = df
    for k, v in eq.items():
        m = m[m[k] == v]
    return m


def _adaptive_depth(dataset: str, selector: str, cached: bool, key: str):
    """SpecFit's published adaptive-depth figures (with the cache, §4.4 / Table 5), with their role."""
    block = SPEC["adaptive_depth"]
    if selector != "specfit" or not cached:
        return None, None
    src = {"stopped_early_pct": "stopped_before_level5_pct", "drafted_levels": "mean_drafted_levels"}.get(key)
    if src is None or dataset not in block[src]:
        return None, None
    return block[src][dataset], block["role"]


def main_table(df, dataset: str, *, full: bool, experiment: str = "main",
               published_key: str | None = None) -> tuple[str, str | None]:
    """Tables 2–3 (or 4): per method, with and without the cache.  Returns (markdown, role)."""
    if published_key is None and experiment == "main" and dataset in MAIN_TABLE:
        published_key = MAIN_TABLE[dataset][0]
    pub = _published_rows(published_key)
    role = SPEC[published_key]["role"] if published_key else None
    sub = pick(df, experiment=experiment)
    rows = []
    for _, r in sub.iterrows():
        cached = r["cache"] != "none"
        p = pub.get((r["selector"], cached), {})
        line = [NAMES.get(r["selector"], r["selector"]),
                f"{r['slots']} {r['cache']}" if cached else "none"]
        for key, _, spec in COLUMNS:
            value = r[key]
            if key == "draft_nodes" and r["selector"] == "ar":
                value = None
            pv = p.get(key)
            if key == "cycles" and not full:
                pv = None  # published cycles count every request; this run replays a slice
            mark = "fit" if (dataset, r["selector"], cached, key) in FITTED_CELLS else ""
            if pv is None and published_key == MAIN_TABLE.get(dataset, ("",))[0]:
                pv, depth_role = _adaptive_depth(dataset, r["selector"], cached, key)
                mark = depth_role if pv is not None and depth_role != role else mark
            line.append(cell(value, pv, spec, mark))
        rows.append(line)
    header = ["method", "cache"] + [c[1] for c in COLUMNS]
    return md_table(header, rows), role


def slot_table(df, dataset: str) -> tuple[str, str | None]:
    """Figure 4: decode TPS, ms/cycle, H2D per token over the slot sweep; SpecFit's gain."""
    fig = SPEC["figure4_slot_sweep_cnndm_a100"] if dataset == "cnndm" else None
    sub = pick(df, experiment="slots")
    rows = []
    for slots in sorted(set(sub["slots"]), reverse=True):
        s = pick(sub, slots=slots, selector="specfit").iloc[0]
        e = pick(sub, slots=slots, selector="eagle3").iloc[0]
        i = fig["slots"].index(slots) if fig and slots in fig["slots"] else None

        def pub(block, sel, i=i):
            return fig[block][sel][i] if i is not None else None

        gain = 100.0 * (s["decode_tps"] / e["decode_tps"] - 1.0)
        rows.append([str(slots),
                     cell(s["decode_tps"], pub("decode_tps", "specfit")),
                     cell(e["decode_tps"], pub("decode_tps", "eagle3")),
                     cell(gain, fig["gain_specfit_over_eagle3_pct"][i] if fig and i is not None else None,
                          "{:.1f}"),
                     cell(s["ms_per_cycle"], pub("ms_per_cycle", "specfit"), "{:.1f}"),
                     cell(e["ms_per_cycle"], pub("ms_per_cycle", "eagle3"), "{:.1f}"),
                     cell(s["h2d_per_token"], pub("h2d_per_token", "specfit"), "{:.1f}"),
                     cell(e["h2d_per_token"], pub("h2d_per_token", "eagle3"), "{:.1f}")])
    header = ["slots", "SpecFit TPS", "EAGLE-3 TPS", "SpecFit gain %", "SpecFit ms/cycle",
              "EAGLE-3 ms/cycle", "SpecFit H2D/token", "EAGLE-3 H2D/token"]
    return md_table(header, rows), (fig["role"] if fig else None)


def table5_table(t5: dict, dataset: str, *, full: bool) -> tuple[str, str | None]:
    """Table 5 (App. A) beside the published column of the same dataset (cycles only when ``full``)."""
    from simmoe.theory.table5 import ROWS

    pub_t = SPEC["table5_theory"]
    col = pub_t["columns"].index(dataset) if dataset in pub_t["columns"] else None
    pub = {r[0]: r[col] for r in pub_t["rows"]} if col is not None else {}
    pub.setdefault("stopped_before_last_level_pct", pub.get("stopped_before_level5_pct"))
    if not full:
        pub.pop("cycles", None)  # the paper counts every request; this run replays a slice
    rows = []
    for key, text, scale in ROWS:
        v = t5[key]
        if isinstance(v, str):
            rows.append([text, v, "—"])
            continue
        spec = "{:.0f}" if key in ("cycles", "dinkelbach_iterations") else "{:.2f}"
        p = pub.get(key)
        rows.append([text, fmt(v * scale, spec), fmt(p, spec) if p is not None else "—"])
    role = pub_t["role"] if col is not None else None
    return md_table(["quantity", "simulated", "published"], rows), role


def link_table(df) -> str:
    """What-if: decode TPS against the host-to-device link."""
    sub = pick(df, experiment="link")
    rows = []
    for gbps in sorted(set(sub["link_gbps"])):
        for sel in ("ar", "eagle3", "specfit"):
            on = pick(sub, link_gbps=gbps, selector=sel)
            c = on[on["cache"] != "none"].iloc[0]
            n = on[on["cache"] == "none"].iloc[0]
            rows.append([f"{gbps:g}", NAMES[sel], fmt(c["decode_tps"]), fmt(n["decode_tps"]),
                         fmt(c["speedup"]), fmt(n["speedup"]), fmt(c["ms_per_cycle"], "{:.1f}"),
                         fmt(n["ms_per_cycle"], "{:.1f}")])
    header = ["link GB/s", "method", "TPS cache", "TPS no cache", "× AR no cache (cache)",
              "× AR no cache (no cache)", "ms/cycle cache", "ms/cycle no cache"]
    return md_table(header, rows)


def route_table(df, dataset: str) -> tuple[str, str | None]:
    """What-if: SpecFit with a route predictor of accuracy a (§4.6)."""
    pub = SPEC["route_predictor"] if dataset == SPEC["route_predictor"]["dataset"] else None
    sub = pick(df, experiment="routes")
    rows = []
    for acc in sorted(set(sub["route_accuracy"]), reverse=True):
        on = pick(sub, route_accuracy=acc)
        c = on[on["cache"] != "none"].iloc[0]
        n = on[on["cache"] == "none"].iloc[0]
        p = None
        if pub is not None:
            p = (pub["speedup_vs_ar_no_cache"] if math.isclose(acc, pub["accuracy"])
                 else pub["exact_routes_speedup"] if acc == 1.0 else None)
        rows.append([f"{acc:g}", fmt(c["decode_tps"]), cell(c["speedup"], p),
                     fmt(n["decode_tps"]), fmt(n["speedup"]), fmt(c["draft_nodes"]),
                     fmt(c["h2d_per_token"], "{:.1f}")])
    header = ["accuracy", "SpecFit TPS cache", "× AR no cache (cache)", "SpecFit TPS no cache",
              "× AR no cache (no cache)", "draft nodes (cache)", "H2D/token (cache)"]
    return md_table(header, rows), (pub["role"] if pub else None)


def policy_table(df) -> str:
    """What-if: cache policies over a few slot counts."""
    sub = pick(df, experiment="policy")
    rows = []
    for policy in dict.fromkeys(sub["cache"]):
        for slots in sorted(set(sub["slots"])):
            line = [policy, str(slots)]
            for sel in ("eagle3", "specfit"):
                r = pick(sub, cache=policy, slots=slots, selector=sel).iloc[0]
                line += [fmt(r["decode_tps"]), fmt(r["h2d_per_token"], "{:.1f}"), fmt(r["hit_rate"], "{:.3f}")]
            rows.append(line)
    header = ["policy", "slots", "EAGLE-3 TPS", "EAGLE-3 H2D/token", "EAGLE-3 hit rate",
              "SpecFit TPS", "SpecFit H2D/token", "SpecFit hit rate"]
    return md_table(header, rows)

"""The report as markdown (``render_markdown``), section by section.

Header (command, versions, selector times, profiles, traces), goals, the
validation set table by table, the misses with the counters behind them
(and ``analysis``), the fit set apart, and the counters of every replay.
Deterministic: the same settings give the same text.
"""

from __future__ import annotations

from simmoe.validation.published.analysis import render_analysis
from simmoe.validation.published.evict_consistency import render_consistency
from simmoe.validation.published.formatting import error_text, md_table, num
from simmoe.validation.published.pipeline import Predictions
from simmoe.validation.published.rows import Row
from simmoe.validation.published.settings import GOALS, SLOTS_A100, SPECFIT_SELECTOR_MS, published

MARKS = "¹²³⁴⁵⁶⁷⁸⁹"


def _rows_table(rows: list[Row], *, goals: bool) -> str:
    header = ["quantity", "published", "simulated (SYNTHETIC)", "error"]
    if goals:
        header += ["goal", "status"]
    header += ["source (published.json)", "role"]
    notes = list(dict.fromkeys(r.note for r in rows if r.note))
    mark = {n: MARKS[i % len(MARKS)] for i, n in enumerate(notes)}
    body = []
    for r in rows:
        line = [r.quantity + (f" {mark[r.note]}" if r.note else ""), num(r.published), num(r.simulated),
                error_text(r)]
        if goals:
            line += [r.goal or "", r.status]
        line += [f"`{r.figure}`", r.role]
        body.append(line)
    text = md_table(header, body)
    if notes:
        text += "\n\n" + "\n".join(f"{mark[n]} {n}." for n in notes)
    return text


def _explain(row: Row, pred: Predictions, pub: dict) -> str:
    """Counters behind a missed row: where its simulated value departs from the paper's."""
    if row.run is None or row.run not in pred.runs:
        return ""
    rr = pred.runs[row.run]
    s, x = rr.summary, rr.extra
    parts = [f"committed/cycle {s['committed']:.2f}", f"draft nodes {s['draft_nodes']:.2f}",
             f"drafted levels {s['drafted_levels']:.2f}",
             f"expert union {x['union_per_layer']:.1f}/layer/forward",
             f"copies {x['misses_per_cycle']:.0f}/cycle",
             f"cycle = draft {x['draft_ms']:.1f} + selector {x['selector_ms']:.2f} + forward "
             f"{x['forward_ms']:.1f} ms"]
    pubrow = _published_counters(row, pub)
    if pubrow:
        ref = []
        if pubrow.get("committed") is not None:
            ref.append(f"committed/cycle {pubrow['committed']:.2f}")
        if pubrow.get("draft_nodes") is not None:
            ref.append(f"draft nodes {pubrow['draft_nodes']:.2f}")
        if pubrow.get("h2d_per_token") is not None and pubrow.get("committed") is not None:
            ref.append(f"≈{pubrow['h2d_per_token'] * pubrow['committed']:.0f} copies/cycle "
                       f"(H2D/token × committed, prefill included)")
        if pubrow.get("ms_per_cycle") is not None:
            ref.append(f"{pubrow['ms_per_cycle']:.1f} ms/cycle")
        return f"simulated: {'; '.join(parts)}. Published: {'; '.join(ref)}."
    return f"simulated: {'; '.join(parts)}."


def _published_counters(row: Row, pub: dict) -> dict | None:
    """The published counters row of the configuration behind ``row`` (Tables 2–4), if any."""
    if row.run is None:
        return None
    parts: list[str | None] = [*row.run.split("/"), None]
    prefix, hw, method, slots = parts[:4]
    table = {"cnndm": pub["specfit"]["table2_cnndm_a100"], "gsm8k": pub["specfit"]["table3_gsm8k_a100"],
             "gsm8k-odd": pub["specfit"]["table4_gsm8k_rtx4090"] if hw == "4090" else None}.get(prefix or "")
    if table is None or slots is None:
        return None
    cache = slots != "0"
    if prefix == "cnndm" and slots not in ("0", str(SLOTS_A100)):
        # Figure 4's intermediate cache sizes: no committed tokens or draft nodes are published
        f4 = pub["specfit"]["figure4_slot_sweep_cnndm_a100"]
        i = f4["slots"].index(int(slots))
        return {"ms_per_cycle": f4["ms_per_cycle"][method][i],
                "h2d_per_token": f4["h2d_per_token"][method][i], "committed": None, "draft_nodes": None}
    for prow in table["rows"]:
        if prow[0] == method and bool(prow[1]) == cache:
            return dict(zip(table["columns"], prow, strict=True))
    return None


def _diagnostics(pred: Predictions) -> str:
    body = []
    for key, rr in pred.runs.items():
        s, x = rr.summary, rr.extra
        body.append([f"`{key}`", num(s["decode_tps"]), num(s["committed"]), num(s["draft_nodes"]),
                     num(s["drafted_levels"]), num(s["cycles"], 0), num(s["ms_per_cycle"]),
                     num(x["draft_ms"]), num(x["selector_ms"]), num(x["forward_ms"]),
                     num(x["union_per_layer"], 1), num(x["misses_per_cycle"], 1),
                     num(s.get("h2d_per_token")), num(s.get("hit_rate"))])   # none in the resident regime
    return md_table(["run (trace/profile/selector/slots)", "decode TPS", "committed", "draft nodes",
                     "drafted levels", "cycles", "ms/cycle", "draft ms", "selector ms", "forward ms",
                     "union/layer", "copies/cycle", "H2D/token", "hit rate"], body)


def _subset_text(sub: list[int]) -> str:
    if len(sub) > 2 and all(b - a == 2 for a, b in zip(sub, sub[1:], strict=False)):
        return f"{sub[0]}, {sub[1]}, …, {sub[-1]} (0-based: the odd-numbered questions)"
    return ", ".join(map(str, sub))


def _header(pred: Predictions, command: str) -> list[str]:
    """Title, SYNTHETIC banner, command, versions, selector times, profiles and traces."""
    from simmoe import __version__
    from simmoe.synth import GENERATOR

    st = pred.settings
    out = ["# Validation: simulated predictions of the published figures (SYNTHETIC traces)", ""]
    out.append("> **SYNTHETIC.** Every simulated number below is a replay of *synthetic* traces "
               "(`simmoe synth`), not a measurement on hardware. Published numbers are from the SpecFit "
               "and EVICT papers (`shared/data/published.json`).")
    out.append("")
    if st.quick:
        out.append("> **QUICK RUN**: a few requests per trace, for testing the pipeline; the numbers "
                   "are not meaningful predictions.")
        out.append("")
    out.append(f"Regenerate: `{command}`")
    out.append("")
    out.append(f"- simmoe {__version__}; trace generator `{GENERATOR}`; seed {st.seed} for every trace "
               "and every replay (route-predictor draws included).")
    out.append("- Selector time fixed, not measured: SpecFit is charged the paper's median "
               f"(§4.6: {SPECFIT_SELECTOR_MS['gsm8k']} ms per cycle on GSM8K, "
               f"{SPECFIT_SELECTOR_MS['cnndm']} ms on CNN/DM); EAGLE-3, DDD and EVICT's top-k rules 0 ms; "
               "AR has no selector. Timing model `event`, fixed copy times; caches LRU "
               "(state carried across requests, starting empty), `none` at 0 slots.")
    out.append("- Hardware profiles (unchanged, as shipped):")
    for name, src in pred.profiles.items():
        out.append(f"  - `{name}`: {src}")
    out += _trace_lines(pred)
    out.append("")
    return out


def _trace_lines(pred: Predictions) -> list[str]:
    """The header's trace list, and where the traces came from."""
    st = pred.settings
    out = ["- Traces (all SYNTHETIC):"]
    for name, d in pred.traces.items():
        sub = ""
        if d.get("subset") is not None:
            sub = f", requests {_subset_text(d['subset'])} of the preset"
        out.append(f"  - `{name}`: preset `{d['preset']}`, {d['requests']} of {d['requests_full']} requests"
                   f"{sub}, {d['positions']:,} positions, {d['output_tokens']:,} output tokens, "
                   f"pool {d['pool']}")
    if st.traces_dir is None and not st.quick:
        ev = st.evict_requests
        out.append(f"- EVICT regime on a subset: the first {ev['gsm8k']} GSM8K and {ev['cnndm']} CNN/DM "
                   "requests, regenerated with EVICT's pool shape (steps 4, top-8, 32 draft tokens, "
                   "K = 32); its 200-candidate pools make full-size traces too slow for this command.")
    if st.traces_dir is not None:
        out.append(f"- Traces read from `{st.traces_dir}` (`--traces`), not regenerated.")
    return out


def _goals_section(val: list[Row]) -> list[str]:
    """How many validation rows each goal covers and how many pass."""
    out = ["## Goals", ""]
    body = []
    for gid, (text, _) in GOALS.items():
        mine = [r for r in val if r.goal == gid]
        npass = sum(r.status == "PASS" for r in mine)
        body.append([gid, text, str(len(mine)), str(npass), str(len(mine) - npass)])
    out.append(md_table(["goal", "what", "rows", "PASS", "MISS"], body))
    out.append("")
    out.append("Errors are relative (% of the published value) or, for quantities that are "
               "themselves percentages, in percentage points (pp). Rows without a goal are shown "
               "for comparison only.")
    out.append("")
    return out


def _section_tables(rows: list[Row], *, goals: bool, pred: Predictions | None = None) -> list[str]:
    """One table per report section, in the order their first row appears.

    With ``pred``, a section with missed goals is followed by the reasons the
    run's numbers give for them (:func:`~simmoe.validation.published.why.section_why`).
    """
    from simmoe.validation.published.why import section_why

    out = []
    for sec in dict.fromkeys(r.section for r in rows):
        mine = [r for r in rows if r.section == sec]
        out.append(f"### {sec}")
        out.append("")
        out.append(_rows_table(mine, goals=goals))
        out.append("")
        why = section_why(sec, mine, pred) if pred is not None else []
        if why:
            out.append("**Why the misses** (computed from this run):")
            out.append("")
            out += [f"- {w}" for w in why]
            out.append("")
    return out


def _misses_section(pred: Predictions, val: list[Row], pub: dict) -> list[str]:
    """Every missed goal with the counters behind it, then the analysis."""
    misses = [r for r in val if r.status == "MISS"]
    out = ["## Misses and the counters behind them", ""]
    if not misses:
        out.append("No goal missed.")
    for r in misses:
        why = _explain(r, pred, pub)
        out.append(f"- **{r.section} — {r.quantity}**: published {num(r.published)}, simulated "
                   f"{num(r.simulated)} ({error_text(r)}). {why}")
    out.append("")
    out.append(render_analysis(pred))
    out.append("")
    consistency = render_consistency(pub)
    if consistency:
        out += [consistency, ""]
    return out


def _fit_section(fit: list[Row]) -> list[str]:
    out = ["## Fit set (shown for the fit; not validation)", ""]
    out.append("The presets (`simmoe/synth/params.py`) and the `a100-pcie-40gb` profile were fitted to "
               "these figures; agreement here shows the fit, not the simulator's predictive power. "
               "EVICT's Table 4 step latencies enter the `a100-sxm-resident` profile as its C(k) "
               "table verbatim, and EVICT's Table 3 calibration holds by construction of the "
               "generator (P(agree | q) = q); neither is re-derived here.")
    out.append("")
    return out + _section_tables(fit, goals=False)


def _counters_section(pred: Predictions) -> list[str]:
    """The counters of every replay, and Table 5 with all its rows."""
    out = ["## Counters of every replay (SYNTHETIC)", ""]
    out.append("Means per cycle; `union/layer` is the per-layer expert union of a verification forward "
               "(hits + copies), `copies/cycle` its misses. Run keys: trace / profile / selector / slots "
               "(0 = no cache) [/ route accuracy].")
    out.append("")
    out.append(_diagnostics(pred))
    out.append("")
    out.append("### Table 5 on the synthetic traces (all rows, `simmoe bound --slots 48`)")
    out.append("")
    keys = list(next(iter(pred.table5.values())).keys())
    out.append(md_table(["quantity"] + list(pred.table5),
                        [[k] + [num(v) if not isinstance(v, bool) else str(v)
                                for v in (pred.table5[d][k] for d in pred.table5)] for k in keys]))
    out.append("")
    return out


def render_markdown(pred: Predictions, command: str) -> str:
    """The report (deterministic: the same settings give the same text)."""
    pub = published()
    val = [r for r in pred.rows if r.role == "validate"]
    fit = [r for r in pred.rows if r.role == "fit"]
    out = _header(pred, command) + _goals_section(val)
    out += ["## Validation set (predicted, never fitted)", ""] + _section_tables(val, goals=True, pred=pred)
    out += _misses_section(pred, val, pub) + _fit_section(fit) + _counters_section(pred)
    return "\n".join(out)

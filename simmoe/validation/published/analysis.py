"""What explains the misses: expert unions the published counters imply, computed findings, Eq. 6's split.

Part of the report's "Misses" section: per-layer unions without a cache
beside those implied by SpecFit Tables 2–4, sentences on the CNN/DM misses,
the route predictor (§4.6) and EVICT's regime, and SpecFit's gains split into
committed-tokens and cycle-time ratios (Eq. 6).
"""

from __future__ import annotations

from simmoe.validation.published.formatting import md_table, num
from simmoe.validation.published.pipeline import Predictions
from simmoe.validation.published.rows import decode_gain
from simmoe.validation.published.settings import (
    ROUTE_ACCURACY,
    SLOTS_4090,
    SLOTS_A100,
    SWEEP_SLOTS,
    published,
)


def implied_union(h2d: float, committed: float, ar_h2d: float, layers: int, top_k: int) -> float:
    """Per-layer expert union of a verification forward implied by no-cache counters.

    Without a cache every demanded expert is copied, so H2D/token =
    prefill copies/token + union · L / committed; AR's row gives the prefill
    share (AR demands exactly top-k experts per layer per token).
    """
    prefill_per_token = ar_h2d - layers * top_k
    return (h2d - prefill_per_token) * committed / layers


def _union_table(pred: Predictions) -> str:
    """Simulated per-layer unions without cache beside those the published counters imply."""
    pub = published()["specfit"]
    st = pub["setting"]
    L, k = st["layers"], st["top_k"]
    body = []
    for label, table, prefix in (("CNN/DM A100", pub["table2_cnndm_a100"], "cnndm/a100"),
                                 ("GSM8K A100", pub["table3_gsm8k_a100"], "gsm8k/a100"),
                                 ("GSM8K RTX 4090", pub["table4_gsm8k_rtx4090"], "gsm8k-odd/4090")):
        rows = {(r[0], bool(r[1])): dict(zip(table["columns"], r, strict=True)) for r in table["rows"]}
        ar = rows[("ar", False)]["h2d_per_token"]
        for m in ("eagle3", "specfit"):
            key = f"{prefix}/{m}/0"
            if key not in pred.runs:
                continue
            r = rows[(m, False)]
            want = implied_union(r["h2d_per_token"], r["committed"], ar, L, k)
            got = pred.runs[key].extra["union_per_layer"]
            body.append([label, m, num(r["draft_nodes"]), num(pred.runs[key].summary["draft_nodes"]),
                         num(want, 1), num(got, 1), f"{100 * (got / want - 1):+.1f}%"])
    return md_table(["workload", "selector", "draft nodes (published)", "draft nodes (simulated)",
                     "union/layer implied by published", "union/layer simulated", "difference"], body)


def _cnndm_table2() -> dict:
    """SpecFit Table 2's rows as dicts, keyed by (method, cache)."""
    table = published()["specfit"]["table2_cnndm_a100"]
    return {(r[0], bool(r[1])): dict(zip(table["columns"], r, strict=True)) for r in table["rows"]}


def _eagle3_union_finding(runs: dict) -> str | None:
    if "cnndm/a100/eagle3/0" not in runs:
        return None
    st = published()["specfit"]["setting"]
    t2 = _cnndm_table2()
    want = implied_union(t2[("eagle3", False)]["h2d_per_token"], t2[("eagle3", False)]["committed"],
                         t2[("ar", False)]["h2d_per_token"], st["layers"], st["top_k"])
    got = runs["cnndm/a100/eagle3/0"].extra["union_per_layer"]
    if got < want:
        return (f"EAGLE-3's 7-node trees on the synthetic CNN/DM trace demand {got:.1f} experts per "
                f"layer per forward; the published counters imply about {want:.1f}. The synthetic "
                "trees share experts more than the measured ones (the CNN/DM preset's routing "
                "locality was fitted to AR's copies per token alone), so EAGLE-3's unverified "
                "branches cost less here and its cycles are shorter than published; SpecFit, whose "
                "advantage is leaving such branches out, gains less.")
    return None


def _specfit_nodes_finding(runs: dict) -> str | None:
    if "cnndm/a100/specfit/48" not in runs:
        return None
    got = runs["cnndm/a100/specfit/48"].summary["draft_nodes"]
    want = _cnndm_table2()[("specfit", True)]["draft_nodes"]
    if got > want * 1.1:
        return (f"SpecFit verifies {got:.2f} draft nodes per cycle with the cache against "
                f"{want:.2f} published: with cheaper unions, larger subtrees win the ratio "
                "R̂/T̂ of Eq. 5 more often, so its cycles are not shortened as much as measured.")
    return None


def _sweep_finding(runs: dict) -> str | None:
    sweep = [k for k in (f"cnndm/a100/specfit/{s}" for s in SWEEP_SLOTS) if k in runs]
    if len(sweep) != len(SWEEP_SLOTS):
        return None
    specfit = [runs[f"cnndm/a100/specfit/{s}"].summary for s in SWEEP_SLOTS]
    eagle3 = [runs[f"cnndm/a100/eagle3/{s}"].summary for s in SWEEP_SLOTS]
    g = [decode_gain(a, b) for a, b in zip(specfit, eagle3, strict=True)]
    c = [a["committed"] / b["committed"] for a, b in zip(specfit, eagle3, strict=True)]
    broken = [f"{a} → {b}" for a, b, x, y in zip(SWEEP_SLOTS, SWEEP_SLOTS[1:], g, g[1:], strict=False)
              if y <= x]
    if not broken:
        return None
    return ("The slot-sweep trend breaks at " + ", ".join(broken) + " slots (simulated gains "
            + ", ".join(f"{x:.1f}%" for x in g) + "). Without a cache SpecFit uses the "
            "no-cache coefficients and commits " + f"{100 * (1 - c[-1]):.1f}% fewer tokens per "
            f"cycle than EAGLE-3, against {100 * (1 - c[0]):.1f}% with the cache.")


def _route_predictor_finding(runs: dict) -> str | None:
    exact, noisy = "gsm8k-odd/a100/specfit/48", f"gsm8k-odd/a100/specfit/48/a{ROUTE_ACCURACY}"
    if exact not in runs or noisy not in runs:
        return None
    a, b = runs[exact].summary, runs[noisy].summary
    return (f"Route predictor: with {ROUTE_ACCURACY:.0%}-accurate routes SpecFit selects "
            f"{b['draft_nodes']:.2f} draft nodes per cycle against {a['draft_nodes']:.2f} with exact "
            f"routes, commits {b['committed']:.2f} against {a['committed']:.2f} tokens per cycle, and "
            f"its cycles take {b['ms_per_cycle']:.1f} against {a['ms_per_cycle']:.1f} ms: wrong "
            "predictions rarely coincide across nodes, so each node looks more expensive and fewer "
            "are verified; the replay always executes the true routes.")


def _evict_finding(runs: dict) -> str | None:
    ev = [(ds, runs[f"{ds}-evict/resident/evict"].summary["draft_nodes"],
           runs[f"{ds}-evict/resident/eagle3"].summary["draft_nodes"])
          for ds in ("gsm8k", "cnndm") if f"{ds}-evict/resident/evict" in runs]
    if not ev:
        return None
    qa = published()["evict"]["table4_step_latency_ms"]
    c16, c32 = qa["qa"][qa["k"].index(16)], qa["qa"][qa["k"].index(32)]
    return ("EVICT regime: EVICT verifies " + "; ".join(
        f"{e:.1f} of EAGLE-3's {a:.1f} draft tokens on {ds} ({100 * (1 - e / a):.1f}% fewer)"
        for ds, e, a in ev) + f". Its C(k) (EVICT Table 4, QA row) rises only "
        f"{100 * (c32 / c16 - 1):.1f}% from k = 16 to 32, so wherever the pool's path "
        "probabilities are spread thin the utility ratio keeps improving with k. Absolute "
        "tokens/s differ from Table 1 because the resident profile is anchored at C(1) only "
        "(compare vanilla tokens/s above, and its 32-token EAGLE-3 step against C(32) in the fit set).")


def _findings(pred: Predictions) -> list[str]:
    """Computed sentences on the CNN/DM misses (only those whose conditions hold)."""
    found = (f(pred.runs) for f in (_eagle3_union_finding, _specfit_nodes_finding, _sweep_finding,
                                    _route_predictor_finding, _evict_finding))
    return [f for f in found if f is not None]


def _gain_split_table(pred: Predictions) -> str:
    """SpecFit's decode gain over EAGLE-3 as committed ratio × cycle-time ratio (Eq. 6), per workload."""
    body = []
    pairs = [(f"cnndm/a100/specfit/{s}", f"cnndm/a100/eagle3/{s}", "CNN/DM A100", s) for s in SWEEP_SLOTS]
    pairs += [(f"gsm8k/a100/specfit/{s}", f"gsm8k/a100/eagle3/{s}", "GSM8K A100", s) for s in (SLOTS_A100, 0)]
    pairs += [(f"gsm8k-odd/4090/specfit/{s}", f"gsm8k-odd/4090/eagle3/{s}", "GSM8K RTX 4090", s)
              for s in (SLOTS_4090, 0)]
    for a, b, label, slots in pairs:
        if a not in pred.runs or b not in pred.runs:
            continue
        sa, sb = pred.runs[a].summary, pred.runs[b].summary
        com = sa["committed"] / sb["committed"]
        ms = sb["ms_per_cycle"] / sa["ms_per_cycle"]
        body.append([label, str(slots), f"{100 * (com - 1):+.1f}%", f"{100 * (1 / ms - 1):+.1f}%",
                     f"{100 * (com * ms - 1):+.1f}%"])
    return md_table(["workload", "slots", "SpecFit committed/cycle vs EAGLE-3",
                     "SpecFit ms/cycle vs EAGLE-3", "decode gain"], body)


def render_analysis(pred: Predictions) -> str:
    """Sentences comparing what drives the gains: committed tokens vs cycle time (Eq. 6)."""
    lines = ["### Expert unions without a cache: simulated vs implied by the published counters", ""]
    lines.append(_union_table(pred))
    lines.append("")
    lines.append("Implied union = (H2D/token − AR's prefill copies per token) × committed / 48, with "
                 "AR's prefill copies per token = AR's no-cache H2D/token − 48 · 8.")
    lines.append("")
    for f in _findings(pred):
        lines.append(f"- {f}")
    lines.append("")
    lines += ["### What drives the simulated gains (SpecFit Eq. 6: committed ratio × cycle-time ratio)", ""]
    lines.append(_gain_split_table(pred))
    lines.append("")
    lines.append("Published (CNN/DM, §4.2/§4.4): SpecFit commits 13.1% fewer tokens per cycle than EAGLE-3 "
                 "at every cache size, with cycles 28.5%, 30.1%, 32.7% shorter at 48, 24, 12 slots; on "
                 "GSM8K (§4.3) 7.8% fewer tokens per cycle and 13.8% less time per cycle.")
    return "\n".join(lines)

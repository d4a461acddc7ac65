"""Why the served speculative tokens/s still miss: what the served-iteration term explains.

The physical cost model's setting ``sglang-a100`` charges every speculative
iteration ``a + b · tokens`` (``spec_iteration_ms`` + ``spec_token_ms`` per
verified token), fitted to two figures (Table 1's EAGLE-3 and EVICT on QA at
temperature 0, Qwen3-30B-A3B; docs/models-and-gpus.md).  For each method and
benchmark of a section this module reads, from the run and the published
tables, the serving time the published iteration leaves beyond the simulated
drafting, verification forward and ``step_ms``:

    need = 1000 · Mat_published / tokens/s_published − (simulated iteration − charge)

and sets it beside the charge of that method's iterations; the slope the
published needs imply between EAGLE-3 (32 draft tokens) and EVICT (5–8) is
set beside the fitted ``b``.  The tokens/s error of a row then splits into its
Mat ratio and its iteration-time ratio: tokens/s_sim / tokens/s_pub =
(Mat_sim / Mat_pub) · (t_pub / t_sim).
"""

from __future__ import annotations

import numpy as np

METHODS = (("eagle3", "EAGLE-3"), ("evict", "EVICT"))


def _term(pred, bench) -> tuple[float, float] | None:
    """The served-iteration terms (a, b) of the profile behind the section's EAGLE-3 run (None without them)."""
    from simmoe.errors import ProfileError
    from simmoe.hardware.profile import load_profile

    run = pred.runs.get(bench.keys["eagle3"])
    if run is None:
        return None
    try:
        phys = load_profile(run.run.hardware).physical
    except ProfileError:
        return None
    if phys is None:
        return None
    a, b = float(phys.o.spec_iteration_ms), float(phys.o.spec_token_ms)
    return (a, b) if a > 0 or b > 0 else None


def _per_method(pred, benches, term: tuple[float, float], sel: str, skip: set) -> list[dict]:
    """Per benchmark: published and simulated iteration, the serving time needed, the tokens/s error's factors."""
    out = []
    for b in benches:
        run = pred.runs.get(b.keys[sel])
        if run is None or b.mat is None or sel not in b.tps or (sel, b.name) in skip:
            continue
        s = run.summary
        mat_pub = b.mat[0] if sel == "eagle3" else b.mat[1]
        t_pub = 1000.0 * mat_pub / b.tps[sel]
        t_sim = float(s["ms_per_cycle"])
        verified = float(s["draft_nodes"]) + 1.0           # root + selected, batch 1
        charge = term[0] + term[1] * verified
        out.append({"bench": b.name, "need": t_pub - (t_sim - charge), "t_pub": t_pub, "t_sim": t_sim,
                    "charge": charge, "verified": verified,
                    "mat": float(s["mat"]) / mat_pub, "cyc": t_pub / t_sim, "nodes": float(s["draft_nodes"]),
                    "err": float(s["decode_tps"]) / b.tps[sel] - 1.0})
    return out


def _span(xs, fmt: str = "{:.1f}") -> str:
    lo, hi = min(xs), max(xs)
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else f"{fmt.format(lo)} to {fmt.format(hi)}"


def served_sentences(pred, benches, predicted_for: str | None, label=str) -> list[str]:
    """The served-iteration finding of one physical section (empty without a serving term or runs).

    ``predicted_for``: what the terms are a prediction for here (a model, a
    temperature), or None in the section whose QA EAGLE-3 and EVICT rows they
    were fitted to (those rows are then left out of the counts); ``label``
    names a benchmark.
    """
    if not benches:
        return []
    term = _term(pred, benches[0])
    if term is None:
        return []
    skip = {("eagle3", "qa"), ("evict", "qa")} if predicted_for is None else set()
    per = {sel: _per_method(pred, benches, term, sel, skip) for sel, _ in METHODS}
    if not per["eagle3"] or not per["evict"]:
        return []
    a, b = term
    where = ("fitted here, to QA's EAGLE-3 and EVICT rows, which the counts leave out" if predicted_for is None
             else "fitted to Table 1's EAGLE-3 and EVICT QA rows on Qwen3-30B-A3B at temperature 0, "
                  f"a prediction for {predicted_for}")
    within = "; ".join(f"{label} {sum(abs(x['err']) <= 0.10 for x in per[sel])} of {len(per[sel])} "
                       f"({_span([100 * x['err'] for x in per[sel]], '{:+.0f}')} %)" for sel, label in METHODS)
    need_e, need_v = (np.array([x["need"] for x in per[sel]]) for sel, _ in METHODS)
    tok_e, tok_v = (float(np.median([x["verified"] for x in per[sel]])) for sel, _ in METHODS)
    charge_e, charge_v = a + b * tok_e, a + b * tok_v
    text = (f"Served iteration: every speculative iteration pays {a:.2f} ms + {b:.4f} ms per verified token "
            f"({where}), i.e. {charge_e:.2f} ms for an EAGLE-3 iteration ({tok_e:.0f} tokens) and "
            f"{charge_v:.2f} ms for EVICT's ({tok_v:.1f}). Tokens/s within 10 %: {within}. Beyond the simulated "
            f"drafting, forward and step_ms, the published iterations (Mat / tokens/s) need {_span(need_e)} ms "
            f"per EAGLE-3 iteration and {_span(need_v)} ms per EVICT iteration")
    gap = float(np.median(need_e) - np.median(need_v))
    if tok_e - tok_v > 1.0:
        slope = gap / (tok_e - tok_v)
        text += (f": medians {np.median(need_e):.1f} and {np.median(need_v):.1f} ms, a slope of {slope:.3f} ms per "
                 f"verified token against the fitted {b:.4f}")
        if abs(np.median(need_v) - charge_v) > 0.5:
            text += (f", and an intercept {np.median(need_v) - charge_v:+.1f} ms off the fitted {a:.2f} ms at "
                     "EVICT's size")
    text += "."
    short = [x for x in per["eagle3"] if x["need"] > x["charge"] + 0.5 and x["err"] > 0.10]
    if len(short) * 2 > len(per["eagle3"]):
        text += (f" The served term falls short of EAGLE-3's iterations here (median need {np.median(need_e):.1f} "
                 f"ms against {charge_e:.2f} ms), so EAGLE-3's tokens/s stay high on {len(short)} of "
                 f"{len(per['eagle3'])} benchmarks ({_span([100 * x['err'] for x in short], '{:+.0f}')} %).")
    return [text + _evict_split(per["evict"], label)]


def _evict_split(evict: list[dict], label) -> str:
    """Where EVICT's tokens/s rows miss, their error split into Mat ratio × iteration-time ratio."""
    miss = [x for x in evict if abs(x["err"]) > 0.10]
    if not miss:
        return ""
    over = [x for x in miss if x["need"] < x["charge"]]
    parts = "; ".join(f"{label(x['bench'])} {100 * x['err']:+.0f} % = Mat ×{x['mat']:.2f} · time ×{x['cyc']:.2f}"
                      for x in miss)
    text = f" EVICT's misses as Mat ratio × published over simulated iteration time: {parts}."
    if over and len(over) * 2 >= len(miss):
        text += (f" On {len(over)} of them the served term overshoots: EVICT's short iteration needs "
                 f"{_span([x['need'] for x in over])} ms of the {_span([x['charge'] for x in over], '{:.2f}')} ms "
                 "it pays.")
    elif miss:
        under = [x for x in miss if x["need"] >= x["charge"]]
        if under:
            text += (f" On {len(under)} of them the served term falls short: EVICT's iteration needs "
                     f"{_span([x['need'] for x in under])} ms beyond the forward, more than the "
                     f"{_span([x['charge'] for x in under], '{:.2f}')} ms it pays.")
    return text

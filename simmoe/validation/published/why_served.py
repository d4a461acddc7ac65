"""Why the served speculative tokens/s still miss: what one constant serving term per iteration explains.

The physical cost model's setting ``sglang-a100`` charges every speculative
iteration one ``spec_iteration_ms``, fitted to a single figure (Table 1's
EAGLE-3 on QA at temperature 0, Qwen3-30B-A3B; docs/models-and-gpus.md).  For
each method and benchmark of a section this module reads, from the run and
the published tables, the serving time the published iteration leaves beyond
the simulated drafting, verification forward and ``step_ms``:

    need = 1000 · Mat_published / tokens/s_published − (simulated iteration − term)

and sets it beside the term; a need that differs by method (EAGLE-3 verifies
32 draft tokens, EVICT 5–8) says the serving time is not one constant.  The
tokens/s error of a row then splits into its Mat ratio and its iteration-time
ratio: tokens/s_sim / tokens/s_pub = (Mat_sim / Mat_pub) · (t_pub / t_sim).
"""

from __future__ import annotations

import numpy as np

METHODS = (("eagle3", "EAGLE-3"), ("evict", "EVICT"))


def _term(pred, bench) -> float | None:
    """The serving term of the profile behind the section's EAGLE-3 run (None without one)."""
    from simmoe.errors import ProfileError
    from simmoe.hardware.profile import load_profile

    run = pred.runs.get(bench.keys["eagle3"])
    if run is None:
        return None
    try:
        phys = load_profile(run.run.hardware).physical
    except ProfileError:
        return None
    t = float(phys.o.spec_iteration_ms) if phys is not None else 0.0
    return t if t > 0 else None


def _per_method(pred, benches, term: float, sel: str, skip: set) -> list[dict]:
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
        out.append({"bench": b.name, "need": t_pub - (t_sim - term), "t_pub": t_pub, "t_sim": t_sim,
                    "mat": float(s["mat"]) / mat_pub, "cyc": t_pub / t_sim, "nodes": float(s["draft_nodes"]),
                    "err": float(s["decode_tps"]) / b.tps[sel] - 1.0})
    return out


def _span(xs, fmt: str = "{:.1f}") -> str:
    lo, hi = min(xs), max(xs)
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else f"{fmt.format(lo)} to {fmt.format(hi)}"


def served_sentences(pred, benches, predicted_for: str | None, label=str) -> list[str]:
    """The served-iteration finding of one physical section (empty without a serving term or runs).

    ``predicted_for``: what the term is a prediction for here (a model, a
    temperature), or None in the section whose QA EAGLE-3 row it was fitted to
    (that row is then left out of the counts); ``label`` names a benchmark.
    """
    if not benches:
        return []
    term = _term(pred, benches[0])
    if term is None:
        return []
    skip = {("eagle3", "qa")} if predicted_for is None else set()
    per = {sel: _per_method(pred, benches, term, sel, skip) for sel, _ in METHODS}
    if not per["eagle3"] or not per["evict"]:
        return []
    where = ("fitted here, to QA's EAGLE-3 row, which the counts leave out" if predicted_for is None else
             f"fitted to Table 1's EAGLE-3 QA row on Qwen3-30B-A3B at temperature 0, a prediction for {predicted_for}")
    within = "; ".join(f"{label} {sum(abs(x['err']) <= 0.10 for x in per[sel])} of {len(per[sel])} "
                       f"({_span([100 * x['err'] for x in per[sel]], '{:+.0f}')} %)" for sel, label in METHODS)
    need_e, need_v = (np.array([x["need"] for x in per[sel]]) for sel, _ in METHODS)
    nodes = _span([x["nodes"] for x in per["evict"]])
    text = (f"Served iteration: every speculative iteration pays spec_iteration_ms = {term:.2f} ms ({where}). "
            f"Tokens/s within 10 %: {within}. Beyond the simulated drafting, forward and step_ms, the published "
            f"iterations (Mat / tokens/s) need {_span(need_e)} ms per EAGLE-3 iteration (32 verified tokens) and "
            f"{_span(need_v)} ms per EVICT iteration ({nodes} verified)")
    gap = float(np.median(need_e) - np.median(need_v))
    if abs(gap) >= 0.5:
        text += (f": medians {np.median(need_e):.1f} and {np.median(need_v):.1f} ms, so the serving time grows "
                 f"with the iteration ({'EVICT' if gap > 0 else 'EAGLE-3'}'s need is {abs(gap):.1f} ms less), "
                 "and one constant cannot match both")
    text += "."
    short = [x for x in per["eagle3"] if x["need"] > term + 0.5 and x["err"] > 0.10]
    if len(short) * 2 > len(per["eagle3"]):
        text += (f" The constant falls short of EAGLE-3's iterations here (median need {np.median(need_e):.1f} ms "
                 f"against {term:.2f} ms), so EAGLE-3's tokens/s stay high on {len(short)} of {len(per['eagle3'])} "
                 f"benchmarks ({_span([100 * x['err'] for x in short], '{:+.0f}')} %), while EVICT's shorter "
                 "iterations, which need less, come closer.")
    return [text + _evict_split(per["evict"], term, label)]


def _evict_split(evict: list[dict], term: float, label) -> str:
    """Where EVICT's tokens/s rows miss, their error split into Mat ratio × iteration-time ratio."""
    miss = [x for x in evict if abs(x["err"]) > 0.10]
    if not miss:
        return ""
    over = [x for x in miss if x["need"] < term]
    parts = "; ".join(f"{label(x['bench'])} {100 * x['err']:+.0f} % = Mat ×{x['mat']:.2f} · time ×{x['cyc']:.2f}"
                      for x in miss)
    text = f" EVICT's misses as Mat ratio × published over simulated iteration time: {parts}."
    if over and len(over) * 2 >= len(miss):
        text += (f" On {len(over)} of them the constant overshoots: EVICT's short iteration needs "
                 f"{_span([x['need'] for x in over])} ms of the {term:.2f} ms it pays.")
    elif miss:
        under = [x for x in miss if x["need"] >= term]
        if under:
            text += (f" On {len(under)} of them the constant falls short: EVICT's iteration needs "
                     f"{_span([x['need'] for x in under])} ms beyond the forward, more than the {term:.2f} ms "
                     "fitted on EAGLE-3's QA iteration.")
    return text

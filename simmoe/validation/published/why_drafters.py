"""Why the Lookahead and DFlash rows miss their goals, computed from the runs (:mod:`.drafter_rows`' sections).

Neither drafter has a published Mat, so the sentences split a miss into
what the replay gives per cycle (its Mat and its cycle or step time) and
the cycle time the published tokens/s would need at the simulated Mat: a
cost the model does not charge (or over-charges) if the acceptance carried
over holds, an acceptance that does not carry over if the costs hold.
"""

from __future__ import annotations

from collections.abc import Callable

from simmoe.validation.published.rows import Row

BENCH_NAMES = {"alpaca": "Alpaca", "gsm8k": "GSM8K", "humaneval": "HumanEval", "qa": "QA",
               "mt_bench": "MT-Bench", "cnndm": "CNN/DM"}


def _step(summary: dict) -> float:
    v = summary.get("ms_per_step_full", float("nan"))
    return float(v) if v == v else float(summary["ms_per_cycle"])


def _rng(values, fmt: str = "{:.2f}") -> str:
    lo, hi = fmt.format(min(values)), fmt.format(max(values))
    return lo if lo == hi else f"{lo}–{hi}"


def why_lookahead(rows: list[Row], pred, model: str) -> list[str]:
    """Per missed benchmark: simulated and published speed over vanilla, the Mat, the cycle against AR's step."""
    from simmoe.validation.published.physical_runs import run_key

    out = []
    for t in (0, 1):
        parts, need = [], []
        for r in rows:
            if r.goal != "tps" or r.status != "MISS" or ("(T=1)" in r.quantity) != bool(t):
                continue
            bench = r.quantity.split(":")[0]
            la, ar = pred.runs.get(r.run), pred.runs.get(run_key(model, bench, "ar", 1, t))
            if la is None or ar is None:
                continue
            pub_ar = next((x.published for x in pred.rows if x.run == run_key(model, bench, "ar", 1, t)
                           and isinstance(x.published, (int, float))), None)
            s, a = la.summary, ar.summary
            implied = 1000.0 * s["mat"] / float(r.published)
            need.append(implied / s["ms_per_cycle"])
            ratio = f", published {float(r.published) / pub_ar:.2f}× vanilla" if pub_ar else ""
            parts.append(f"{BENCH_NAMES.get(bench, bench)} {r.error:+.0f} % (simulated "
                         f"{s['decode_tps'] / a['decode_tps']:.2f}× vanilla{ratio}; Mat {s['mat']:.2f}, "
                         f"{s['draft_nodes']:.0f} tokens verified, a cycle of {s['ms_per_cycle']:.2f} ms against "
                         f"AR's {a['ms_per_cycle']:.2f} ms; the published tokens/s at this Mat needs {implied:.2f} ms)")
        if parts:
            slower = all(x > 1 for x in need)
            out.append(("Temperature 1: " if t else "Temperature 0: ") + "; ".join(parts) + ". "
                       + ("At the simulated Mat every published figure needs a longer cycle (×"
                          f"{_rng(need)}): either the fitted hit does not carry to this model or temperature, "
                          "or its verification of the guesses costs more than the served iteration charges."
                          if slower else "At the simulated Mat the published figures need cycles ×"
                          f"{_rng(need)} of the simulated: the hit fitted on Qwen3-30B-A3B at temperature 0 "
                          "does not carry over as one number per benchmark."))
    return out


def why_dflash(rows: list[Row], pred) -> list[str]:
    """Per missed row: the step, the Mat, the tokens EVICT keeps of the block; the step the figure implies."""
    from simmoe.fitting.drafter_fit import MODEL
    from simmoe.validation.published.physical_runs import run_key

    out, gains = [], []
    for r in rows:
        if r.status != "MISS":
            continue
        bench, b = r.quantity.split(",")[0], int(r.quantity.split("batch")[1].split(":")[0])
        d = pred.runs.get(run_key(MODEL, bench, "dflash", b))
        v = pred.runs.get(run_key(MODEL, bench, "dflash+evict", b))
        if d is None or v is None:
            continue
        sd, sv = d.summary, v.summary
        if r.goal == "tps":
            s = sv if "dflash+evict" in r.quantity else sd
            implied = 1000.0 * b * s["mat"] / float(r.published)
            out.append(f"{BENCH_NAMES[bench]} batch {b}, {r.quantity.split(': ')[1].split(' ')[0]} "
                       f"{r.error:+.0f} %: Mat {s['mat']:.2f} per request at {_step(s):.2f} ms per step; the "
                       f"published tokens/s at this Mat needs {implied:.2f} ms per step (×{implied / _step(s):.2f})")
        elif r.goal == "gain":
            gains.append(f"{BENCH_NAMES[bench]} batch {b}: {r.simulated:+.1f} % (published {r.published:+.1f} %), "
                         f"EVICT verifies {sv['draft_nodes']:.1f} of the block's 15, Mat ×{sv['mat'] / sd['mat']:.2f}, "
                         f"step ×{_step(sd) / _step(sv):.2f} faster")
    if out:
        out = ["DFlash's tokens/s where they miss (the batched step is the Table 6 setting's forward over every "
               "request's block plus DFlash's one drafting forward; per_step was fitted at batch 4 only): "
               + "; ".join(out) + "."]
    if gains:
        out.append("EVICT's gain over DFlash where it misses (the prefix EVICT keeps, its Mat over DFlash's, "
                   "DFlash's step over EVICT's): " + "; ".join(gains) + ".")
    return out


def registry() -> dict[str, Callable[[list[Row], object], list[str]]]:
    """The sections of :mod:`.drafter_rows` and their reasons (:func:`.why.section_why` looks them up here)."""
    from simmoe.validation.published.drafter_rows import DFLASH_SECTION, LOOKAHEAD_TABLES, lookahead_section

    reg: dict[str, Callable[[list[Row], object], list[str]]] = {DFLASH_SECTION: why_dflash}
    for model in LOOKAHEAD_TABLES:
        reg[lookahead_section(model)] = lambda rows, p, model=model: why_lookahead(rows, p, model)
    return reg

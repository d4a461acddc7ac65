"""EVICT Tables 10 and 11: Mat (mean accepted tokens) of EAGLE-3 and EVICT on Ling-flash-2.0 and Qwen3-235B-A22B.

Fit: EAGLE-3's Mat at temperature 0 (each workload's drafting parameters).
Validation: EVICT's Mat at temperature 0 (no goal: a counter behind the
tokens/s rows).  Temperature-1 columns are shown as not simulated.
"""

from __future__ import annotations

from simmoe.validation.published.evict_physical import mat_rows, not_simulated
from simmoe.validation.published.physical_runs import MODELS, run_key
from simmoe.validation.published.rows import Row
from simmoe.validation.published.runs import RunResult

TITLES = {
    "ling-flash-2.0": "EVICT Table 10: Mat on Ling-flash-2.0",
    "qwen3-235b-a22b": "EVICT Table 11: Mat on Qwen3-235B-A22B",
}


def rows(pub: dict, res: dict[str, RunResult], t5: dict[str, dict], traces: dict[str, dict]) -> list[Row]:
    out: list[Row] = []
    for model, section in TITLES.items():
        if run_key(model, "qa", "ar") not in res:
            continue
        table = MODELS[model][1]
        out += mat_rows(pub, res, model, table, section, "eagle3_t0", "evict_t0")
        out.append(not_simulated(pub, table, section, "temperature 1 columns",
                                 "sampled verification needs traces drawn at temperature 1"))
    return out

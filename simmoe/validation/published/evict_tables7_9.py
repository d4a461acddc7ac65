"""EVICT Tables 7, 8 and 9: Ling-flash-2.0 (tensor parallelism 4), Qwen3-235B-A22B (8), dense Hunyuan-7B.

Validation: vanilla (but on QA, which is fit), EAGLE-3, DDD and EVICT tokens/s
on EVICT's six benchmarks at temperature 0, and EVICT's gain over EAGLE-3,
each model replayed on its own catalogued geometry with the physical cost
model.  Temperature-1 rows and Lookahead are shown as not simulated.
"""

from __future__ import annotations

from simmoe.validation.published.evict_physical import METHODS, not_simulated, speed_rows
from simmoe.validation.published.physical_runs import MODELS, run_key
from simmoe.validation.published.rows import Row
from simmoe.validation.published.runs import RunResult

TITLES = {
    "ling-flash-2.0": "EVICT Table 7: Ling-flash-2.0, tensor parallelism 4 (physical cost model)",
    "qwen3-235b-a22b": "EVICT Table 8: Qwen3-235B-A22B, tensor parallelism 8 (physical cost model)",
    "hunyuan-7b": "EVICT Table 9: Hunyuan-7B-Instruct, dense (physical cost model)",
}


def rows(pub: dict, res: dict[str, RunResult], t5: dict[str, dict], traces: dict[str, dict]) -> list[Row]:
    out: list[Row] = []
    for model, section in TITLES.items():
        if run_key(model, "qa", "ar") not in res:
            continue
        table = MODELS[model][3]
        cols = pub["evict"][table]["columns"]
        out += speed_rows(pub, res, model, table, section, methods=METHODS,
                          temperature_col="temperature" in cols)
        out.append(not_simulated(pub, table, section, "lookahead tokens/s (every benchmark)",
                                 "Lookahead has no drafter model in the simulator"))
        if "temperature" in cols:
            out.append(not_simulated(pub, table, section, "temperature 1 rows",
                                     "sampled verification needs traces drawn at temperature 1"))
    return out

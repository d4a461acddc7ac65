"""EVICT Tables 10 and 11: Mat (mean accepted tokens) of EAGLE-3 and EVICT on Ling-flash-2.0 and Qwen3-235B-A22B.

Fit: EAGLE-3's Mat at temperature 0 (each workload's drafting parameters).
Validation (goal ``mat``, within 5 %): EVICT's Mat at temperature 0 and 1 and
EAGLE-3's Mat at temperature 1 (the temperature-0 drafting parameters with the
target distributions whose ``target_spread`` was fitted once, on
Qwen3-30B-A3B's QA; sampled verification).
"""

from __future__ import annotations

from simmoe.validation.published.evict_physical import mat_rows
from simmoe.validation.published.physical_runs import run_key
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
        out += mat_rows(pub, res, model, section)
        out += mat_rows(pub, res, model, section, temperature=1)
    return out

"""EVICT Tables 7, 8 and 9: Ling-flash-2.0 (tensor parallelism 4), Qwen3-235B-A22B (8), dense Hunyuan-7B.

Validation: vanilla (but on QA, which is fit), EAGLE-3, DDD and EVICT tokens/s
on EVICT's six benchmarks, and EVICT's gain over EAGLE-3, each model replayed
on its own catalogued geometry with the physical cost model: at temperature 0,
and for Ling-flash-2.0 and Qwen3-235B-A22B again at temperature 1 (sampled
verification; vanilla on QA fitted per temperature, setting ``sglang-a100-t1``).
Hunyuan-7B's Table 9 has temperature 0 only.  Lookahead's rows are
:mod:`.drafter_rows`' (sections of their own).
"""

from __future__ import annotations

from simmoe.validation.published.evict_physical import METHODS, speed_rows
from simmoe.validation.published.physical_runs import MODELS, profile_t1, run_key
from simmoe.validation.published.rows import Row
from simmoe.validation.published.runs import RunResult

TITLES = {
    "ling-flash-2.0": "EVICT Table 7: Ling-flash-2.0, tensor parallelism 4 (physical cost model)",
    "qwen3-235b-a22b": "EVICT Table 8: Qwen3-235B-A22B, tensor parallelism 8 (physical cost model)",
    "hunyuan-7b": "EVICT Table 9: Hunyuan-7B-Instruct, dense (physical cost model)",
}
TITLES_T1 = {
    "ling-flash-2.0": "EVICT Table 7 at temperature 1: Ling-flash-2.0, tensor parallelism 4 "
                      f"(physical cost model, {profile_t1('ling-flash-2.0')})",
    "qwen3-235b-a22b": "EVICT Table 8 at temperature 1: Qwen3-235B-A22B, tensor parallelism 8 "
                       f"(physical cost model, {profile_t1('qwen3-235b-a22b')})",
}


def rows(pub: dict, res: dict[str, RunResult], t5: dict[str, dict], traces: dict[str, dict]) -> list[Row]:
    out: list[Row] = []
    for model, section in TITLES.items():
        if run_key(model, "qa", "ar") not in res:
            continue
        table = MODELS[model][3]
        cols = pub["evict"][table]["columns"]
        both = "temperature" in cols
        out += speed_rows(pub, res, model, table, section, methods=METHODS, temperature_col=both)
        if both and run_key(model, "qa", "ar", 1, 1) in res:
            sec1 = TITLES_T1[model]
            out += speed_rows(pub, res, model, table, sec1, methods=METHODS, temperature=1, temperature_col=True)
    return out

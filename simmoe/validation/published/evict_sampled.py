"""EVICT Tables 1 and 2 at temperature 1 (six workloads) and at 0 (alpaca, humaneval, qa, mt_bench), resident profile.

Validation: decode tokens/s of vanilla, EAGLE-3, DDD and EVICT (Table 1),
EVICT's gain over EAGLE-3 (goal: within 5 percentage points) and the Mat of
EAGLE-3 and EVICT (Table 2; goal: within 5%), replayed with sampled
verification at temperature 1 (:mod:`simmoe.trace.verdicts`).  Fit, apart
(CALIBRATION.md, ``fit_in_evict_tables``): EAGLE-3's Mat at temperature 0 on
the four EVICT presets (their ``easy_share``) and QA's EAGLE-3 Mat at
temperature 1 (``target_spread``).  GSM8K's and CNN/DM's temperature-0 rows
are ``evict_resident``'s.
"""

from __future__ import annotations

from simmoe.validation.published.rows import Row, decode_gain, role_of
from simmoe.validation.published.runs import RunResult
from simmoe.validation.published.sampled_runs import DATASETS, NEW, run_key

SECTION = "EVICT's six workloads, sampled verification at temperature 1 (a100-sxm-resident)"
SECTION_T0 = "EVICT's four other workloads at temperature 0 (a100-sxm-resident)"
FIT = "evict.fit_in_evict_tables"
TABLES = {0: ("table1_qwen3_30b_a3b_t0", "table2_mat_qwen3_30b_a3b_t0"),
          1: ("table1_qwen3_30b_a3b_t1", "table2_mat_qwen3_30b_a3b_t1")}
METHODS = (("vanilla", "ar"), ("eagle3", "eagle3"), ("ddd", "ddd"), ("evict", "evict"))
NOTE_T1 = ("replayed with sampled verification at temperature 1 on the synthetic trace's greedy text "
           "(each cycle's acceptance drawn from the target distributions; docs/replay.md)")


def _fitted_mat(ds: str, method: str, temperature: int) -> bool:
    return method == "eagle3" and ((temperature == 0 and ds in NEW) or (temperature == 1 and ds == "qa"))


def rows_at(pub: dict, res: dict[str, RunResult], temperature: int, datasets) -> list[Row]:
    t1name, t2name = TABLES[temperature]
    section = SECTION if temperature else SECTION_T0
    t1, t2 = pub["evict"][t1name], pub["evict"][t2name]
    f1, f2 = f"evict.{t1name}", f"evict.{t2name}"
    by1 = {r[0]: (i, r) for i, r in enumerate(t1["rows"])}
    by2 = {r[0]: (i, r) for i, r in enumerate(t2["rows"])}
    note = NOTE_T1 if temperature else ""
    out: list[Row] = []
    for ds in datasets:
        if run_key(ds, "eagle3", temperature) not in res:
            continue
        j = t1["columns"].index(ds)
        for m, sel in METHODS:
            i, r = by1[m]
            key = run_key(ds, sel, temperature)
            out.append(Row(section, f1, role_of(pub, f1), f"{ds}: {m} decode tokens/s (T={temperature})",
                           float(r[j]), float(res[key].summary["decode_tps"]), "rel", run=key,
                           note=note if sel != "ar" else "", path=("evict", t1name, "rows", i, j)))
        ke, kv = run_key(ds, "eagle3", temperature), run_key(ds, "evict", temperature)
        pub_gain = 100.0 * (by1["evict"][1][j] / by1["eagle3"][1][j] - 1.0)
        out.append(Row(section, f1, role_of(pub, f1), f"{ds}: EVICT over EAGLE-3: decode gain % (T={temperature})",
                       round(pub_gain, 1), decode_gain(res[kv].summary, res[ke].summary), "pp", "gain", kv,
                       note="published gain from Table 1's tokens/s"))
        i2, r2 = by2[ds]
        for m in ("eagle3", "evict"):
            c = t2["columns"].index(m)
            key = run_key(ds, m, temperature)
            fitted = _fitted_mat(ds, m, temperature)
            out.append(Row(section, FIT if fitted else f2, "fit" if fitted else role_of(pub, f2),
                           f"{ds}: {m} Mat (T={temperature})", float(r2[c]), float(res[key].summary["mat"]),
                           "rel", None if fitted else "mat", key,
                           note=("fitted: the preset's easy_share" if temperature == 0 else
                                 "fitted: target_spread (shared by every preset)") if fitted else note,
                           path=("evict", t2name, "rows", i2, c)))
    return out


def rows(pub: dict, res: dict[str, RunResult], t5: dict[str, dict], traces: dict[str, dict]) -> list[Row]:
    """Temperature 1 on all six workloads, then temperature 0 on the four EVICT presets."""
    return rows_at(pub, res, 1, DATASETS) + rows_at(pub, res, 0, NEW)

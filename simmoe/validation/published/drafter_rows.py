"""EVICT's Lookahead rows (Tables 1, 7, 8) and DFlash rows (Table 6), from the replays of :mod:`.drafter_runs`.

Fit, apart (``fit_in_evict_tables``, CALIBRATION.md): Table 1's Lookahead
tokens/s at temperature 0 on Qwen3-30B-A3B, one per benchmark (Lookahead's
``hit``), and Table 6's DFlash at batch 4 on QA and HumanEval (DFlash's
``per_step``), both from ``simmoe/drafters/data/drafter_fit.toml``.
Validation (goal ``tps``): Lookahead at temperature 1 and on Ling-flash-2.0
and Qwen3-235B-A22B at both temperatures; DFlash at batch 8-64 and DFlash +
EVICT at every batch; and (goal ``gain``) DFlash + EVICT's gain over DFlash.
Each model's section has its own heading, so that the other methods'
sections and their reasons stay as they are.
"""

from __future__ import annotations

from simmoe.validation.published.rows import Row, role_of
from simmoe.validation.published.runs import RunResult

FIT = "evict.fit_in_evict_tables"
TABLE6 = "table6_batch_vllm"
LOOKAHEAD_TABLES = {  # model -> (tokens/s table at T=0, at T=1: (table, its temperature column?))
    "qwen3-30b-a3b": (("table1_qwen3_30b_a3b_t0", False), ("table1_qwen3_30b_a3b_t1", False)),
    "ling-flash-2.0": (("table7_ling_flash_2_0", True), ("table7_ling_flash_2_0", True)),
    "qwen3-235b-a22b": (("table8_qwen3_235b_a22b", True), ("table8_qwen3_235b_a22b", True)),
}
MODEL_NAMES = {"qwen3-30b-a3b": "Table 1: Qwen3-30B-A3B", "ling-flash-2.0": "Table 7: Ling-flash-2.0, tensor "
               "parallelism 4", "qwen3-235b-a22b": "Table 8: Qwen3-235B-A22B, tensor parallelism 8"}
LOOKAHEAD_SECTION = "EVICT {}: Lookahead (SGLang, physical cost model; hit fitted on Qwen3-30B-A3B at T=0)"
DFLASH_SECTION = ("EVICT Table 6: DFlash and DFlash + EVICT, batch 4-64, Qwen3-30B-A3B (physical cost model, "
                  "vllm-table6; per_step fitted at batch 4)")
BENCHES = ("alpaca", "gsm8k", "humaneval", "qa", "mt_bench", "cnndm")
NOTE_PRED = "predicted: Lookahead's hit of this benchmark, fitted on Qwen3-30B-A3B at temperature 0"


def lookahead_section(model: str) -> str:
    return LOOKAHEAD_SECTION.format(MODEL_NAMES[model])


def _published(pub: dict, table: str, with_t: bool, temperature: int, bench: str) -> tuple[int, int, float]:
    t = pub["evict"][table]
    cols = t["columns"]
    i = next(k for k, r in enumerate(t["rows"]) if r[cols.index("method")] == "lookahead"
             and (not with_t or r[cols.index("temperature")] == temperature))
    j = cols.index(bench)
    return i, j, float(t["rows"][i][j])


def lookahead_rows(pub: dict, res: dict[str, RunResult]) -> list[Row]:
    from simmoe.drafters.fitted import fitted_entry
    from simmoe.validation.published.physical_runs import run_key

    out: list[Row] = []
    for model, tables in LOOKAHEAD_TABLES.items():
        sec = lookahead_section(model)
        for temperature, (table, with_t) in enumerate(tables):
            fig = f"evict.{table}"
            tag = f" (T={temperature})" if temperature else ""
            for bench in BENCHES:
                key = run_key(model, bench, "lookahead", 1, temperature)
                if key not in res:
                    continue
                i, j, value = _published(pub, table, with_t, temperature, bench)
                fitted = model == "qwen3-30b-a3b" and temperature == 0
                hit = fitted_entry("lookahead", bench).get("hit")
                note = (f"fitted: Lookahead's hit ({hit:.4f}; drafter_fit.toml)" if fitted and hit is not None
                        else NOTE_PRED)
                out.append(Row(sec, FIT if fitted else fig, "fit" if fitted else role_of(pub, fig),
                               f"{bench}: lookahead tokens/s{tag}", value, float(res[key].summary["decode_tps"]),
                               "rel", None if fitted else "tps", key,
                               note=f"{note}; simulated Mat {float(res[key].summary['mat']):.2f}",
                               path=("evict", table, "rows", i, j)))
    return out


def _steady(summary: dict) -> float:
    v = summary.get("decode_tps_full", float("nan"))
    return float(v) if v == v else float(summary["decode_tps"])


def dflash_rows(pub: dict, res: dict[str, RunResult]) -> list[Row]:
    from simmoe.drafters.fitted import fitted_entry
    from simmoe.fitting.drafter_fit import DFLASH_BATCH, MODEL
    from simmoe.validation.published.physical_runs import run_key

    t = pub["evict"][TABLE6]
    cols = t["columns"]
    fig = f"evict.{TABLE6}"
    out: list[Row] = []
    for bench in ("qa", "humaneval"):
        pubrows = {r[1]: (i, r) for i, r in enumerate(t["rows"]) if r[0] == bench}
        for b in [int(c[2:]) for c in cols[2:]]:
            j = cols.index(f"bs{b}")
            keys = {m: run_key(MODEL, bench, m, b) for m in ("dflash", "dflash+evict")}
            if any(k not in res for k in keys.values()):
                continue
            for m, key in keys.items():
                i, r = pubrows[m]
                fitted = m == "dflash" and b == DFLASH_BATCH
                ps = fitted_entry("dflash", bench).get("per_step")
                note = (f"fitted: DFlash's per_step ({ps:.3f}; drafter_fit.toml)" if fitted and ps is not None
                        else "predicted: steady-state aggregate tokens/s (every slot busy)")
                out.append(Row(DFLASH_SECTION, FIT if fitted else fig, "fit" if fitted else role_of(pub, fig),
                               f"{bench}, batch {b}: {m} tokens/s", float(r[j]), _steady(res[key].summary), "rel",
                               None if fitted else "tps", key, note=note, path=("evict", TABLE6, "rows", i, j)))
            pg = 100.0 * (pubrows["dflash+evict"][1][j] / pubrows["dflash"][1][j] - 1.0)
            sg = 100.0 * (_steady(res[keys["dflash+evict"]].summary) / _steady(res[keys["dflash"]].summary) - 1.0)
            out.append(Row(DFLASH_SECTION, fig, role_of(pub, fig), f"{bench}, batch {b}: EVICT over DFlash: gain %",
                           round(pg, 1), sg, "pp", "gain", keys["dflash+evict"],
                           note="published gain from the table's tokens/s"))
    return out


def rows(pub: dict, res: dict[str, RunResult], t5: dict[str, dict], traces: dict[str, dict]) -> list[Row]:
    return lookahead_rows(pub, res) + dflash_rows(pub, res)

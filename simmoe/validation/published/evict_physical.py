"""EVICT Tables 1, 2 and 4 (Qwen3-30B-A3B, temperature 0) with the physical cost model.

Validation: vanilla, EAGLE-3, DDD and EVICT tokens/s on EVICT's six
benchmarks (vanilla on QA is fit), EVICT's gain over EAGLE-3, EVICT's Mat
(Table 2), and EAGLE-3's Mat on GSM8K and CNN/DM (predicted by the SpecFit
presets); the same at temperature 1 (Tables 1 and 2 at temperature 1, sampled
verification), where EAGLE-3's Mat is predicted on every benchmark but QA.
Fit, apart: vanilla on QA at each temperature (the cost model's ``step_ms``),
EAGLE-3's and EVICT's tokens/s on QA at temperature 0 (the setting's served
iteration, ``spec_iteration_ms`` + ``spec_token_ms`` per verified token),
EAGLE-3's Mat on the four EVICT workload presets (their ``easy_share``) and on
QA at temperature 1 (``target_spread``), and Table 4's C(k) on QA beside the
cost model's C(k) profiled on the EVICT-shaped GSM8K and CNN/DM traces (what
the efficiency and ``forward_ms`` were fitted to).  The profile-based rows of
``evict_resident`` stay as they were.
"""

from __future__ import annotations

from simmoe.validation.published.physical_runs import MODELS, T1_SETTING, mat_source, profile_t1, run_key
from simmoe.validation.published.rows import Row, decode_gain, role_of
from simmoe.validation.published.runs import RunResult

SECTION = "EVICT Tables 1-2: Qwen3-30B-A3B, experts resident, physical cost model (qwen3-30b-a3b@a100-sxm4-80gb)"
SECTION_T1 = ("EVICT Tables 1-2 at temperature 1: Qwen3-30B-A3B, experts resident, physical cost model "
              f"({profile_t1('qwen3-30b-a3b')})")
NOTE_T1 = ("replayed with sampled verification at temperature 1 (seed 0): each cycle's acceptance drawn from "
           "the synthetic target distributions (docs/replay.md)")
FIT = "evict.fit_in_evict_tables"
METHODS = (("vanilla", "ar"), ("eagle3", "eagle3"), ("ddd", "ddd"), ("evict", "evict"))
BENCHES = ("alpaca", "gsm8k", "humaneval", "qa", "mt_bench", "cnndm")


def speed_rows(pub: dict, res: dict[str, RunResult], model: str, table: str, section: str,
               benches=BENCHES, methods=METHODS, temperature: int = 0, temperature_col: bool = False) -> list[Row]:
    """tokens/s of every method on every bench (vanilla QA: fit), and EVICT's gain over EAGLE-3.

    ``temperature_col``: the table holds both temperatures (a ``temperature``
    column); rows of ``temperature`` are read, and runs at that temperature.
    """
    t = pub["evict"][table]
    cols = t["columns"]
    fig = f"evict.{table}"
    tag = f" (T={temperature})" if temperature else ""
    out: list[Row] = []
    for ds in benches:
        j = cols.index(ds)
        pubrows = {}
        for i, r in enumerate(t["rows"]):
            if temperature_col and r[0] != temperature:
                continue
            pubrows[r[cols.index("method")]] = (i, r)
        for m, sel in methods:
            if m not in pubrows:
                continue
            i, r = pubrows[m]
            key = run_key(model, ds, sel, 1, temperature)
            if key not in res:
                continue
            fitted = ds == "qa" and (m == "vanilla" or is_spec_fit(model, m, temperature))
            goal = None if fitted else ("vanilla" if m == "vanilla" else "tps")
            how = (f"fitted: the model's step_ms at temperature {temperature} (physical_fit.toml, setting "
                   f"{T1_SETTING})" if temperature else "fitted: the model's step_ms (physical_fit.toml)")
            if m != "vanilla":
                how = ("fitted: the setting's served iteration, spec_iteration_ms + spec_token_ms per verified "
                       "token (physical_fit.toml), with " + ("EAGLE-3's fitted Mat" if m == "eagle3"
                                                             else "EVICT's predicted Mat"))
            out.append(Row(section, FIT if fitted else fig, "fit" if fitted else role_of(pub, fig),
                           f"{ds}: {m} tokens/s{tag}", float(r[j]), float(res[key].summary["decode_tps"]), "rel",
                           goal, key, note=how if fitted else (NOTE_T1 if temperature and sel != "ar" else ""),
                           path=("evict", table, "rows", i, j)))
        out += _implied_cycle_rows(pub, res, model, ds, pubrows, j, section, fig, temperature)
        ke, kv = run_key(model, ds, "eagle3", 1, temperature), run_key(model, ds, "evict", 1, temperature)
        if ke in res and kv in res and "eagle3" in pubrows and "evict" in pubrows:
            pg = 100.0 * (pubrows["evict"][1][j] / pubrows["eagle3"][1][j] - 1.0)
            out.append(Row(section, fig, role_of(pub, fig), f"{ds}: EVICT over EAGLE-3: gain %{tag}", round(pg, 1),
                           decode_gain(res[kv].summary, res[ke].summary), "pp", "gain", kv,
                           note="published gain from the table's tokens/s"))
    return out


def is_spec_fit(model: str, method: str, temperature: int) -> bool:
    """Whether (model, method, temperature) on QA is one of the two speculative tokens/s rows that are fitted.

    Table 1's EAGLE-3 and EVICT on QA at temperature 0 for Qwen3-30B-A3B: the
    setting's served iteration, ``spec_iteration_ms + spec_token_ms · tokens``
    (``fit_in_evict_tables``; :func:`simmoe.fitting.physical_fit.fit_spec_iteration`).
    """
    from simmoe.fitting.physical_fit import SPEC_MODEL, SPEC_ROWS

    return model == SPEC_MODEL and method in SPEC_ROWS and temperature == 0


def _implied_cycle_rows(pub, res, model, ds, pubrows, j, section, fig, temperature: int = 0) -> list[Row]:
    """The cycle time a method's published tokens/s and Mat imply, beside the simulated one (no goal).

    Mat / tokens/s is the published time per cycle; the simulated cycle is
    C(k) + ``step_ms`` + the served iteration (+ selector time): the gap is
    what the cost model does not explain.
    """
    src = mat_source(model, temperature)
    if src is None:
        return []
    mat_table, col_e, col_v = src
    t = pub["evict"][mat_table]
    row = next((r for r in t["rows"] if r[0] == ds), None)
    if row is None:
        return []
    tag = f" (T={temperature})" if temperature else ""
    out = []
    for m, col in (("eagle3", col_e), ("evict", col_v)):
        key = run_key(model, ds, m, 1, temperature)
        if key not in res or m not in pubrows:
            continue
        implied = 1000.0 * float(row[t["columns"].index(col)]) / float(pubrows[m][1][j])
        out.append(Row(section, fig, role_of(pub, fig), f"{ds}: {m} ms per cycle (Mat / tokens/s){tag}",
                       round(implied, 2), float(res[key].summary["ms_per_cycle"]), "rel", None, key,
                       note=f"published: Mat ({mat_table}) / tokens/s; simulated: drafting + C(k)'s forward "
                            "+ the fitted step_ms + the served iteration"))
    return out


def mat_rows(pub: dict, res: dict[str, RunResult], model: str, section: str, benches=BENCHES,
             temperature: int = 0) -> list[Row]:
    """Mat (EVICT's: 1 + accepted draft tokens per cycle) of EAGLE-3 and EVICT.

    EAGLE-3's is fit where CALIBRATION.md allows it (no goal); every other Mat
    is a prediction with the goal ``mat``.
    """
    from simmoe.validation.published.physical_runs import mat_fitted, mat_fitted_t1

    src = mat_source(model, temperature)
    if src is None:
        return []
    table, col_e, col_v = src
    t = pub["evict"][table]
    cols = t["columns"]
    fig = f"evict.{table}"
    tag = f" (T={temperature})" if temperature else ""
    out: list[Row] = []
    for ds in benches:
        i = next(k for k, r in enumerate(t["rows"]) if r[0] == ds)
        for col, sel in ((col_e, "eagle3"), (col_v, "evict")):
            key = run_key(model, ds, sel, 1, temperature)
            if key not in res:
                continue
            how = None
            if sel == "eagle3":
                how = mat_fitted_t1(model, ds) if temperature else mat_fitted(model, ds)
            fitted = how is not None
            note = how or (NOTE_T1 if temperature else "")
            out.append(Row(section, FIT if fitted else fig, "fit" if fitted else role_of(pub, fig),
                           f"{ds}: {sel} Mat{tag}", float(t["rows"][i][cols.index(col)]),
                           float(res[key].summary["mat"]), "rel", None if fitted else "mat", key, note=note,
                           path=("evict", table, "rows", i, cols.index(col))))
    return out


def rows(pub: dict, res: dict[str, RunResult], t5: dict[str, dict], traces: dict[str, dict]) -> list[Row]:
    model = "qwen3-30b-a3b"
    if run_key(model, "qa", "ar") not in res:
        return []
    out = speed_rows(pub, res, model, MODELS[model][3], SECTION)
    out += mat_rows(pub, res, model, SECTION)
    if run_key(model, "qa", "ar", 1, 1) in res:
        table_t1 = "table1_qwen3_30b_a3b_t1"
        out += speed_rows(pub, res, model, table_t1, SECTION_T1, temperature=1)
        out += mat_rows(pub, res, model, SECTION_T1, temperature=1)
    return out + _table4_rows(pub, traces)


def _table4_rows(pub: dict, traces: dict[str, dict]) -> list[Row]:
    """Table 4's C(k) on QA beside the fitted cost model (fit set), read from physical_fit.toml's fit."""
    from simmoe.fitting.physical_fit import fit_ck
    from simmoe.hardware.physical import load_settings

    fig = "evict.table4_step_latency_ms"
    sec = "EVICT step latency, Table 4 (QA row): the physical cost model's fit"
    served = load_settings().get("sglang-a100", {}).get("served_dtype")   # a what-if fit file's width
    ck = _CK_CACHE.get(("ck", served))
    if ck is None:
        ck = _CK_CACHE.setdefault(("ck", served), fit_ck(pub, lambda s: None, served))
    t4 = pub["evict"]["table4_step_latency_ms"]
    out = []
    for i, (k, a, b) in enumerate(zip(ck["k"], ck["target"], ck["predicted"], strict=True)):
        out.append(Row(sec, fig, role_of(pub, fig), f"C({k}) ms, QA", float(a), float(b), "rel",
                       note="C(k) = drafting + the physical forward over 1 + k tokens, mean over profiled "
                            "prefixes of EVICT-shaped GSM8K and CNN/DM pools",
                       path=("evict", "table4_step_latency_ms", "qa", i)))
    del t4
    return out


_CK_CACHE: dict = {}

"""SpecFit Table 4 (§4.5): RTX 4090, GSM8K odd-numbered questions, 32 slots.

Counters, speedups over AR without cache, and SpecFit's gains over EAGLE-3,
the published ones derived from Table 4's decode TPS.
"""

from __future__ import annotations

from simmoe.validation.published.rows import Row, decode_gain, method_label, role_of, table_rows
from simmoe.validation.published.runs import RunResult
from simmoe.validation.published.settings import SLOTS_4090

FIGURE = "specfit.table4_gsm8k_rtx4090"
SECTION = "RTX 4090, Table 4 (GSM8K odd-numbered questions, 32 slots)"


def _speedup_rows(pub: dict, res: dict[str, RunResult], t4: dict) -> list[Row]:
    rows = []
    base4 = res["gsm8k-odd/4090/ar/0"].summary
    for (m, cache), prow in t4.items():
        slots = SLOTS_4090 if cache else 0
        rk = f"gsm8k-odd/4090/{m}/{slots}"
        rows.append(Row(SECTION, FIGURE, role_of(pub, FIGURE),
                        f"{method_label(m, cache)}: speedup over AR no cache",
                        round(prow[2] / t4[("ar", False)][2], 2),
                        res[rk].summary["decode_tps"] / base4["decode_tps"], "rel", run=rk,
                        note="published speedup from Table 4's decode TPS"))
    return rows


def _gain_rows(pub: dict, res: dict[str, RunResult], t4: dict) -> list[Row]:
    rows = []
    for cache, slots in ((True, SLOTS_4090), (False, 0)):
        pub_gain = 100.0 * (t4[("specfit", cache)][2] / t4[("eagle3", cache)][2] - 1.0)
        sim = decode_gain(res[f"gsm8k-odd/4090/specfit/{slots}"].summary,
                          res[f"gsm8k-odd/4090/eagle3/{slots}"].summary)
        rows.append(Row(SECTION, FIGURE, role_of(pub, FIGURE),
                        f"SpecFit over EAGLE-3, {'cache' if cache else 'no cache'}: decode gain %",
                        round(pub_gain, 1), sim, "pp", "gain", f"gsm8k-odd/4090/specfit/{slots}",
                        note="published gain from Table 4's decode TPS (text: +10.8% / +18.1%)"))
    return rows


def rows(pub: dict, res: dict[str, RunResult], t5: dict[str, dict], traces: dict[str, dict]) -> list[Row]:
    """Table 4's counters, then the speedups, then the gains."""
    t4 = {(r[0], bool(r[1])): r for r in pub["specfit"]["table4_gsm8k_rtx4090"]["rows"]}
    return (table_rows(pub, FIGURE, SECTION, res, "gsm8k-odd", "4090", SLOTS_4090, {})
            + _speedup_rows(pub, res, t4) + _gain_rows(pub, res, t4))

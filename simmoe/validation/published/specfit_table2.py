"""SpecFit Table 2 / Figure 2 (CNN/DailyMail, A100): counters, decode gains, and the workload figures.

Validation set, but for the figures ``published.json`` lists as ``fit_only``:
EAGLE-3's committed tokens per cycle (2.54), AR's copies per token with the
cache (49.7), and the request lengths the CNN/DM preset was fitted to.
"""

from __future__ import annotations

from simmoe.validation.published.rows import Row, decode_gain, role_of, table_rows
from simmoe.validation.published.runs import RunResult
from simmoe.validation.published.settings import SLOTS_A100

FIGURE = "specfit.table2_cnndm_a100"
SECTION = "CNN/DailyMail, Table 2 and Figure 2 (A100)"
WORKLOAD_SECTION = "CNN/DailyMail workload (fitted)"
# (method, cache, column) -> the fit_only entry of Table 2 it is
FIT_ONLY = {("eagle3", True, "committed"): "eagle3 committed (2.54)",
            ("eagle3", False, "committed"): "eagle3 committed (2.54)",
            ("ar", True, "h2d_per_token"): "ar with cache h2d_per_token (49.7)"}


def _gain_rows(pub: dict, res: dict[str, RunResult]) -> list[Row]:
    """SpecFit over EAGLE-3 with and without the cache (published gain from Figure 2's decode TPS)."""
    rows = []
    for cache, slots in ((True, SLOTS_A100), (False, 0)):
        t2 = {r[0]: r for r in pub["specfit"]["table2_cnndm_a100"]["rows"] if bool(r[1]) == cache}
        pub_gain = 100.0 * (t2["specfit"][2] / t2["eagle3"][2] - 1.0)
        sim = decode_gain(res[f"cnndm/a100/specfit/{slots}"].summary,
                          res[f"cnndm/a100/eagle3/{slots}"].summary)
        rows.append(Row(SECTION, FIGURE, role_of(pub, FIGURE),
                        f"SpecFit over EAGLE-3, {'cache' if cache else 'no cache'}: decode gain %",
                        round(pub_gain, 1), sim, "pp", "gain", f"cnndm/a100/specfit/{slots}",
                        note="published gain computed from Figure 2's decode TPS"))
    return rows


def _workload_rows(pub: dict, traces: dict[str, dict]) -> list[Row]:
    """Request lengths (fit): output tokens in all, input range."""
    c = traces["cnndm"]
    st = pub["specfit"]["setting"]["cnndm"]
    role = role_of(pub, FIGURE, "request lengths")
    return [
        Row(WORKLOAD_SECTION, FIGURE, role, "output tokens in all", 9652.0, float(c["output_tokens"]), "rel",
            note="published in Table 2 (AR cycles)", path=("specfit", "table2_cnndm_a100", "rows", 0, 5)),
        Row(WORKLOAD_SECTION, FIGURE, role, "shortest input (tokens)", float(st["input_tokens_min"]),
            float(c["prompt_min"]), "rel", path=("specfit", "setting", "cnndm", "input_tokens_min")),
        Row(WORKLOAD_SECTION, FIGURE, role, "longest input (tokens)", float(st["input_tokens_max"]),
            float(c["prompt_max"]), "rel", path=("specfit", "setting", "cnndm", "input_tokens_max")),
    ]


def rows(pub: dict, res: dict[str, RunResult], t5: dict[str, dict], traces: dict[str, dict]) -> list[Row]:
    """Table 2's counters, Figure 2's gains, then the workload figures (fit)."""
    return (table_rows(pub, FIGURE, SECTION, res, "cnndm", "a100", SLOTS_A100, FIT_ONLY)
            + _gain_rows(pub, res) + _workload_rows(pub, traces))

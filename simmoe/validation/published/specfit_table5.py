"""SpecFit Table 5 (App. A.4): the selection theory on SpecFit's pools, as ``simmoe bound`` computes it."""

from __future__ import annotations

from simmoe.validation.published.rows import Row, role_of
from simmoe.validation.published.runs import RunResult

FIGURE = "specfit.table5_theory"
SECTION = "Table 5: selection theory on SpecFit's drafted pools (simmoe bound, A100 cached coefficients)"
# Table 5's quantity -> the key ``compute_table5`` gives it, where they differ
OURS = {"stopped_before_level5_pct": "stopped_before_last_level_pct"}
# quantities that are percentages: errors in percentage points
PP_ROWS = {"lambda_star_minus_theta_pct", "eq7_bound_pct", "cycles_s_star_differs_pct",
           "gain_s_star_recorded_acceptance_pct", "stopped_before_level5_pct"}


def rows(pub: dict, res: dict[str, RunResult], t5: dict[str, dict], traces: dict[str, dict]) -> list[Row]:
    """Every quantity of Table 5, CNN/DM then GSM8K."""
    out = []
    for i, prow in enumerate(pub["specfit"]["table5_theory"]["rows"]):
        q = prow[0]
        for j, ds in ((1, "cnndm"), (2, "gsm8k")):
            sim = t5[ds][OURS.get(q, q)]
            out.append(Row(SECTION, FIGURE, role_of(pub, FIGURE), f"{ds}: {q}", float(prow[j]), float(sim),
                           "pp" if q in PP_ROWS else "rel", path=("specfit", "table5_theory", "rows", i, j)))
    return out

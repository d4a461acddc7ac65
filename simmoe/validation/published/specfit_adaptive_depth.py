"""SpecFit's adaptive depth (§4.2–4.3, with the cache): early stops, drafted levels, drafting time cut."""

from __future__ import annotations

from simmoe.validation.published.rows import Row, role_of
from simmoe.validation.published.runs import RunResult
from simmoe.validation.published.settings import SLOTS_A100

FIGURE = "specfit.adaptive_depth"
SECTION = "Adaptive depth (SpecFit §4.2–4.3, with the cache)"


def _dataset_rows(pub: dict, res: dict[str, RunResult], ds: str) -> list[Row]:
    ad = pub["specfit"]["adaptive_depth"]
    role = role_of(pub, FIGURE)
    rk = f"{ds}/a100/specfit/{SLOTS_A100}"
    s = res[rk].summary
    e = res[f"{ds}/a100/eagle3/{SLOTS_A100}"].extra
    cut = 100.0 * (1.0 - res[rk].extra["draft_ms"] / e["draft_ms"]) if e["draft_ms"] else float("nan")
    return [
        Row(SECTION, FIGURE, role, f"{ds}: cycles stopped before level 5 %",
            float(ad["stopped_before_level5_pct"][ds]), float(s["stopped_early_pct"]), "pp",
            run=rk, path=("specfit", "adaptive_depth", "stopped_before_level5_pct", ds),
            note="a pool shorter than 5 levels (end of a request) counts as stopped only "
                 "if SpecFit drafted fewer levels than it holds"),
        Row(SECTION, FIGURE, role, f"{ds}: mean drafted levels",
            float(ad["mean_drafted_levels"][ds]), float(s["drafted_levels"]), "rel", run=rk,
            path=("specfit", "adaptive_depth", "mean_drafted_levels", ds)),
        Row(SECTION, FIGURE, role, f"{ds}: drafting time per cycle cut vs EAGLE-3 %",
            float(ad["drafting_time_cut_pct"][ds]), cut, "pp", run=rk,
            path=("specfit", "adaptive_depth", "drafting_time_cut_pct", ds)),
    ]


def rows(pub: dict, res: dict[str, RunResult], t5: dict[str, dict], traces: dict[str, dict]) -> list[Row]:
    """Three rows per dataset, CNN/DM first."""
    return [row for ds in ("cnndm", "gsm8k") for row in _dataset_rows(pub, res, ds)]

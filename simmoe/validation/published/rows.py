"""A report row (one published figure beside its simulated value) and the helpers the sources share.

Every source module (``specfit_*``, ``evict_*``) turns the runs into rows
with these: ``role_of`` reads a figure's role from ``published.json``,
``table_rows`` lays a SpecFit counters table (Tables 2, 3, 4) beside its
runs, ``decode_gain`` is a selector's decode-TPS gain in percent.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from simmoe.errors import SimmoeError
from simmoe.validation.published.runs import RunResult
from simmoe.validation.published.settings import GOALS

TABLE_COLUMNS = ("method", "cache", "decode_tps", "draft_nodes", "committed", "cycles",
                 "ms_per_cycle", "h2d_per_token")
QUANTITY_LABEL = {"decode_tps": "decode TPS", "draft_nodes": "draft nodes",
                  "committed": "committed / cycle", "cycles": "cycles",
                  "ms_per_cycle": "ms / cycle", "h2d_per_token": "H2D / token"}


@dataclass
class Row:
    """One published figure beside its simulated value."""

    section: str                 # report section (heading)
    figure: str                  # key in published.json, e.g. "specfit.table2_cnndm_a100"
    role: str                    # "fit" or "validate", from published.json
    quantity: str
    published: float | str | None
    simulated: float | str | None
    error_kind: str = "rel"      # "rel" (% of published), "pp" (percentage points), "" (none)
    goal: str | None = None      # key of GOALS
    run: str | None = None       # key of the run that produced it (for the diagnostics)
    note: str = ""
    path: tuple = ()             # where the published value sits in published.json

    @property
    def error(self) -> float | None:
        p, s = self.published, self.simulated
        if not isinstance(p, (int, float)) or not isinstance(s, (int, float)) or isinstance(p, bool):
            return None
        if not (math.isfinite(p) and math.isfinite(s)):
            return None
        if self.error_kind == "rel":
            return 100.0 * (s - p) / p if p else None
        if self.error_kind == "pp":
            return s - p
        return None

    @property
    def status(self) -> str:
        if self.goal is None or self.role != "validate":
            return ""
        if self.goal in ("trend", "batch_trend"):
            return "PASS" if str(self.simulated).startswith(("increasing", "reproduced")) else "MISS"
        err = self.error
        limit = GOALS[self.goal][1]
        if err is None or limit is None:
            return "MISS"
        return "PASS" if abs(err) <= limit + 1e-9 else "MISS"


# A source of rows: (published figures, run results by key, Table 5 by dataset,
# trace descriptions by workload) -> its rows, in report order.
RowSource = Callable[[dict, dict[str, RunResult], dict[str, dict], dict[str, dict]], list[Row]]


def role_of(pub: dict, figure: str, fit_only: str | None = None) -> str:
    """The role published.json gives a figure; a ``fit_only`` entry of that figure is ``fit``."""
    paper, key = figure.split(".", 1)
    entry = pub[paper][key]
    if fit_only is not None:
        if fit_only not in entry.get("fit_only", []):
            raise SimmoeError(f"{figure}: {fit_only!r} is not among its fit_only figures")
        return "fit"
    return entry["role"]


def decode_gain(a: dict, b: dict) -> float:
    """Decode-TPS gain of summary ``a`` over summary ``b``, in percent."""
    return 100.0 * (a["decode_tps"] / b["decode_tps"] - 1.0)


def method_label(method: str, cache: bool, slots: int | None = None) -> str:
    name = {"ar": "AR", "eagle3": "EAGLE-3", "specfit": "SpecFit"}[method]
    if slots is not None:
        return f"{name}, {slots} slots" if cache else f"{name}, no cache"
    return f"{name}, {'cache' if cache else 'no cache'}"


def table_rows(pub: dict, figure: str, section: str, res: dict[str, RunResult], prefix: str,
               hw: str, slots: int, fit_only: dict[tuple[str, bool, str], str]) -> list[Row]:
    """The rows of a SpecFit counters table (Tables 2, 3, 4) beside the matching runs."""
    paper, key = figure.split(".", 1)
    table = pub[paper][key]
    cols = table["columns"]
    rows: list[Row] = []
    for i, prow in enumerate(table["rows"]):
        method, cache = prow[0], bool(prow[1])
        run_key = f"{prefix}/{hw}/{method}/{slots if cache else 0}"
        summ = res[run_key].summary
        for j, col in enumerate(cols):
            if col in ("method", "cache") or prow[j] is None:
                continue
            if method == "ar" and col in ("committed", "draft_nodes"):
                continue  # 1 by definition / none
            label = fit_only.get((method, cache, col))
            role = role_of(pub, figure, label)
            goal = {"ms_per_cycle": "ms", "h2d_per_token": "h2d"}.get(col)
            rows.append(Row(section, figure, role, f"{method_label(method, cache)}: {QUANTITY_LABEL[col]}",
                            float(prow[j]), float(summ[col]), "rel", goal, run_key,
                            path=(paper, key, "rows", i, j)))
    return rows

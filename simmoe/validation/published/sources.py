"""The published sources the report covers, in report order, and ``build_rows`` over them.

Each source is a module with ``rows(pub, res, t5, traces) -> list[Row]``
(see ``rows.RowSource``).  To cover another published table, write its
module and add its ``rows`` to ``SOURCES`` where its rows should appear:
sections are laid out in the order their first row appears, validation and
fit set alike.
"""

from __future__ import annotations

from simmoe.validation.published import (
    drafter_rows,
    evict_mat10_11,
    evict_physical,
    evict_resident,
    evict_sampled,
    evict_table6,
    evict_tables7_9,
    specfit_adaptive_depth,
    specfit_figure4,
    specfit_route_predictor,
    specfit_table2,
    specfit_table3,
    specfit_table4,
    specfit_table5,
)
from simmoe.validation.published.rows import Row, RowSource
from simmoe.validation.published.runs import RunResult

SOURCES: tuple[RowSource, ...] = (
    specfit_table2.rows,            # CNN/DM Table 2 / Figure 2 (validation, but three workload figures)
    specfit_figure4.rows,           # Figure 4 slot sweep
    specfit_adaptive_depth.rows,    # §4.2–4.3
    specfit_table5.rows,            # App. A.4
    specfit_route_predictor.rows,   # §4.6
    specfit_table4.rows,            # RTX 4090, §4.5
    evict_resident.rows,            # EVICT Tables 1, 2, §4.3 averages, Table 4 (fit)
    evict_sampled.rows,             # EVICT Tables 1, 2 at temperature 1; the four other workloads at 0
    evict_physical.rows,            # EVICT Tables 1, 2 with the physical cost model; Table 4 C(k) fit
    evict_table6.rows,              # EVICT Table 6: batch 4-64
    evict_tables7_9.rows,           # EVICT Tables 7-9: Ling-flash-2.0, Qwen3-235B-A22B, Hunyuan-7B
    evict_mat10_11.rows,            # EVICT Tables 10-11: Mat
    drafter_rows.rows,              # EVICT Tables 1, 7, 8 Lookahead; Table 6 DFlash, DFlash + EVICT
    specfit_table3.rows,            # GSM8K Table 3 (fit)
)


def build_rows(pub: dict, res: dict[str, RunResult], t5: dict[str, dict],
               traces: dict[str, dict]) -> list[Row]:
    """Every row of the report, validation and fit set alike (each with its role).

    ``traces`` holds :func:`~simmoe.validation.published.workloads.describe_trace`
    of every workload.
    """
    rows: list[Row] = []
    for source in SOURCES:
        rows += source(pub, res, t5, traces)
    return rows

"""The simulator's predictions of the published figures, beside them: ``reports/validation.md``.

``python -m simmoe.validation.published --out reports/validation.md [--quick]``

Runs, on seeded synthetic traces (``simmoe.synth``), the replays behind every
figure of ``shared/design/CALIBRATION.md`` and writes one markdown report:

* the **validation set** (never fitted): SpecFit Table 2 / Figure 2 (CNN/DM,
  A100) but its three workload figures, the Figure 4 slot sweep, adaptive
  depth (§4.2–4.3), Table 5 (App. A.4, through ``simmoe.theory`` as
  ``simmoe bound`` computes it), the 60 %-accurate route predictor (§4.6),
  the RTX 4090 Table 4 (§4.5), and EVICT's resident-experts regime (EVICT
  Tables 1–2 and its §4.3 averages, with the ``a100-sxm-resident`` profile and
  again with the physical cost model, at temperature 0 and 1; Table 6 at batch
  4–64; Tables 7–11 on Ling-flash-2.0, Qwen3-235B-A22B and the dense
  Hunyuan-7B, at both temperatures where published);
* the **fit set**, apart: SpecFit Table 3 (GSM8K, A100) and the CNN/DM
  workload figures, which the presets and profiles were fitted to;
* goals with PASS/MISS (gains over EAGLE-3 within 5 percentage points,
  ms/cycle and copies per token within 10 %, the slot-sweep trend), and for
  every miss the counters that explain it.

Every row carries the key of its figure in ``published.json`` and the role
(``fit``/``validate``) read from there; nothing here is tuned to the
validation set (no profile or generator parameter is changed).  Runs are
deterministic: fixed seeds, fixed selector times (SpecFit §4.6 medians), no
wall-clock numbers in the report.

Cost: dominated by the exact searches (SpecFit plans and Table 5's Dinkelbach
iterations, O(cycles · |A_K|) each) and by generating the traces.

Modules, in pipeline order:

* ``settings`` — ``Settings``, ``Workload``, the fixed choices (selector
  times, EVICT's pool, slots) and the goals;
* ``workloads`` — the traces: generated, cached or read, and described;
* ``runs`` — the planned replays (``Run``, ``planned_runs``, ``run_replays``)
  and the Table 5 runner;
* ``rows`` — ``Row``, ``role_of`` and the helpers the sources share;
* one module per published source, each with ``rows(pub, res, t5, traces)``:
  ``specfit_table2``, ``specfit_figure4``, ``specfit_adaptive_depth``,
  ``specfit_table5``, ``specfit_route_predictor``, ``specfit_table4``,
  ``evict_resident``, ``evict_physical`` (EVICT Tables 1, 2, 4 with the
  physical cost model), ``evict_table6`` (batch 4–64), ``evict_tables7_9``
  (Ling-flash-2.0, Qwen3-235B-A22B, Hunyuan-7B), ``evict_mat10_11``,
  ``specfit_table3``;
* ``physical_runs`` — the workloads and replays of the physical-cost-model
  sources (other models' geometries, EAGLE-3's Mat fitted per benchmark,
  batched replays);
* ``sources`` — ``SOURCES``, the ordered list of those (add a source here),
  and ``build_rows``;
* ``pipeline`` — ``Predictions`` and ``run_predictions``;
* ``formatting``, ``analysis``, ``why``, ``markdown`` — the report's text
  (``render_markdown``; ``why`` gives each EVICT section with a missed goal
  the reasons its run's numbers show);
* ``cli`` (and ``__main__``) — the command line (``main``).
"""

from simmoe.trace.subset import select_requests
from simmoe.validation.published.analysis import implied_union
from simmoe.validation.published.cli import main, parse_args, settings_from_args
from simmoe.validation.published.markdown import render_markdown
from simmoe.validation.published.pipeline import Predictions, run_predictions
from simmoe.validation.published.rows import Row, role_of
from simmoe.validation.published.runs import Run, RunResult, planned_runs, run_replays, table5
from simmoe.validation.published.settings import (
    EVICT_POOL,
    GOALS,
    SPECFIT_SELECTOR_MS,
    Settings,
    Workload,
    published,
)
from simmoe.validation.published.sources import SOURCES, build_rows
from simmoe.validation.published.workloads import describe_trace, load_workload, odd_numbered

__all__ = [
    "EVICT_POOL", "GOALS", "SOURCES", "SPECFIT_SELECTOR_MS", "Predictions", "Row", "Run", "RunResult",
    "Settings", "Workload", "build_rows", "describe_trace", "implied_union", "load_workload", "main",
    "odd_numbered", "parse_args", "planned_runs", "published", "render_markdown", "role_of",
    "run_predictions", "run_replays", "select_requests", "settings_from_args", "table5",
]

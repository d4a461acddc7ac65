"""The whole computation: traces, then Table 5 and the replays, then the rows (``run_predictions``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from simmoe.errors import SimmoeError
from simmoe.trace.schema import Trace
from simmoe.validation.published.rows import Row
from simmoe.validation.published.runs import RunResult, planned_runs, run_replays, run_table5
from simmoe.validation.published.settings import Settings, published
from simmoe.validation.published.sources import build_rows
from simmoe.validation.published.workloads import describe_trace, load_workload, odd_numbered


@dataclass
class Predictions:
    settings: Settings
    rows: list[Row]
    runs: dict[str, RunResult]
    traces: dict[str, dict[str, Any]]      # name -> description (for the header)
    table5: dict[str, dict]
    profiles: dict[str, str]               # name -> source line


def _silent(line: str) -> None:
    pass


def run_predictions(settings: Settings, *, log: Callable[[str], None] = _silent) -> Predictions:
    """Generate (or read) the traces, run every replay and Table 5, and build the rows."""
    from simmoe.hardware.profile import load_profile

    pub = published()
    traces: dict[str, Trace] = {}
    for w in settings.workloads():
        traces[w.name] = load_workload(w, settings, log)
    traces["gsm8k-odd"] = odd_numbered(traces["gsm8k"])
    for name, t in traces.items():
        if not t.is_synthetic and settings.traces_dir is None:
            raise SimmoeError(f"{name}: expected a synthetic trace")
    runs = planned_runs()
    t5 = run_table5(traces, settings.workers, log)
    res = run_replays(traces, runs, workers=settings.workers, log=log)
    # EVICT Tables 1, 2, 4, 6-11 with the physical cost model: their own workloads and replays
    from simmoe.validation.published.physical_runs import run_physical

    phys, phys_traces, fits = run_physical(settings, pub, log)
    res.update(phys)
    traces.update(phys_traces)
    # EVICT's Lookahead and DFlash rows: the same workloads with those drafters' pools
    from simmoe.validation.published.drafter_runs import run_drafters

    drafted, drafted_traces = run_drafters(settings, fits["position"], log)
    res.update(drafted)
    traces.update(drafted_traces)
    # EVICT Tables 1, 2 at temperature 1 and the four other workloads (sampled verification, resident profile)
    from simmoe.validation.published.sampled_runs import run_sampled

    sampled, sampled_traces = run_sampled(settings, log)
    res.update(sampled)
    traces.update(sampled_traces)
    described = {n: describe_trace(t) for n, t in traces.items()}
    rows = build_rows(pub, res, t5, described)
    profiles = {n: load_profile(n).source for n in sorted({r.run.hardware for r in res.values()})}
    return Predictions(settings, rows, res, described, t5, profiles)

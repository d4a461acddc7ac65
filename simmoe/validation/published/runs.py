"""The replays behind the report (one ``replay_all`` per trace) and SpecFit Table 5 (App. A.4).

Run keys read ``trace/profile/selector/slots[/a<route accuracy>]``; the row
modules look their runs up by these keys.  Table 5 is computed as
``simmoe bound --slots 48`` computes it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from simmoe.trace.schema import Trace
from simmoe.validation.published.settings import (
    A100,
    RESIDENT,
    ROUTE_ACCURACY,
    RTX4090,
    SLOTS_4090,
    SLOTS_A100,
    SPECFIT_SELECTOR_MS,
    SWEEP_SLOTS,
)


@dataclass(frozen=True)
class Run:
    """One replay configuration with its role in the report."""

    key: str          # e.g. "cnndm/a100/specfit/48"
    trace: str        # workload name (or "gsm8k-odd")
    selector: str
    slots: int
    hardware: str
    route_accuracy: float = 1.0


def _config(run: Run, dataset: str):
    from simmoe.replay.engine import ReplayConfig

    sel_ms = SPECFIT_SELECTOR_MS[dataset] if run.selector == "specfit" else 0.0
    return ReplayConfig(selector=run.selector, slots=run.slots,
                        cache="lru" if run.slots > 0 else "none", hardware=run.hardware,
                        route_accuracy=run.route_accuracy, selector_ms=sel_ms, seed=0)


def planned_runs() -> list[Run]:
    """Every replay the report needs (its keys are what the rows refer to)."""
    runs: list[Run] = []
    for sel in ("ar", "eagle3", "specfit"):                      # Table 3 (fit)
        for slots in (SLOTS_A100, 0):
            runs.append(Run(f"gsm8k/a100/{sel}/{slots}", "gsm8k", sel, slots, A100))
    for sel in ("ar",):                                          # Table 2, Figure 4
        for slots in (SLOTS_A100, 0):
            runs.append(Run(f"cnndm/a100/{sel}/{slots}", "cnndm", sel, slots, A100))
    for sel in ("eagle3", "specfit"):
        for slots in SWEEP_SLOTS:
            runs.append(Run(f"cnndm/a100/{sel}/{slots}", "cnndm", sel, slots, A100))
    for sel in ("ar", "eagle3", "specfit"):                      # Table 4
        for slots in (SLOTS_4090, 0):
            runs.append(Run(f"gsm8k-odd/4090/{sel}/{slots}", "gsm8k-odd", sel, slots, RTX4090))
    runs.append(Run("gsm8k-odd/a100/ar/0", "gsm8k-odd", "ar", 0, A100))   # §4.6
    runs.append(Run("gsm8k-odd/a100/specfit/48", "gsm8k-odd", "specfit", SLOTS_A100, A100))
    runs.append(Run("gsm8k-odd/a100/specfit/48/a0.6", "gsm8k-odd", "specfit", SLOTS_A100, A100,
                    ROUTE_ACCURACY))
    for ds in ("gsm8k", "cnndm"):                                # EVICT regime
        for sel in ("ar", "eagle3", "ddd", "evict"):
            runs.append(Run(f"{ds}-evict/resident/{sel}", f"{ds}-evict", sel, 0, RESIDENT))
    return runs


@dataclass
class RunResult:
    run: Run
    summary: dict[str, float]
    extra: dict[str, float]      # counters the report explains misses with


def _extra(res, num_layers: int) -> dict[str, float]:
    c = res.cycles
    n = max(len(c["committed"]), 1)
    return {
        "union_per_layer": float((np.sum(c["hits"], dtype=np.int64) + np.sum(c["misses"], dtype=np.int64))
                                 / (n * num_layers)),
        "misses_per_cycle": float(np.mean(c["misses"])) if len(c["misses"]) else float("nan"),
        "accepted": float(np.mean(c["accepted"])) if len(c["accepted"]) else float("nan"),
        "draft_ms": float(np.mean(c["draft_ms"])) if len(c["draft_ms"]) else float("nan"),
        "selector_ms": float(np.mean(c["selector_ms"])) if len(c["selector_ms"]) else float("nan"),
        "forward_ms": float(np.mean(c["forward_ms"])) if len(c["forward_ms"]) else float("nan"),
    }


def run_replays(traces: dict[str, Trace], runs: list[Run], *, workers: int,
                log: Callable[[str], None]) -> dict[str, RunResult]:
    """Replay every run, one ``replay_all`` per trace (plans shared between configurations)."""
    from simmoe.hardware.profile import load_profile
    from simmoe.replay.engine import replay_all

    profiles = {name: load_profile(name) for name in {r.hardware for r in runs}}
    out: dict[str, RunResult] = {}
    for tname in dict.fromkeys(r.trace for r in runs):
        mine = [r for r in runs if r.trace == tname]
        trace = traces[tname]
        dataset = str(trace.requests.dataset[0])
        log(f"replaying {tname}: {len(mine)} configurations")
        results = replay_all(trace, [_config(r, dataset) for r in mine],
                             {r.hardware: profiles[r.hardware] for r in mine}, workers=workers)
        L = trace.geometry.num_layers
        for r, res in zip(mine, results, strict=True):
            out[r.key] = RunResult(r, res.summary(), _extra(res, L))
    return out


def table5(trace: Trace) -> dict[str, float]:
    """SpecFit Table 5 on ``trace`` as ``simmoe bound --slots 48`` computes it (A100, cached coefficients)."""
    from simmoe.hardware.profile import load_profile
    from simmoe.theory.cycles import specfit_cycles
    from simmoe.theory.table5 import compute_table5

    cost = load_profile(A100).cost_model(True)
    K = trace.pool_shape.K
    cycles = specfit_cycles(trace, cost, K)
    return compute_table5(cycles, K, cost, synthetic=trace.is_synthetic).to_dict()


def _table5_job(name: str) -> tuple[str, dict]:
    return name, table5(_TRACES[name])


_TRACES: dict[str, Trace] = {}   # inherited by forked Table 5 workers


def run_table5(traces: dict[str, Trace], workers: int, log: Callable[[str], None]) -> dict[str, dict]:
    """Table 5 for both datasets, in two forked processes when ``workers > 1``."""
    import multiprocessing as mp

    log("Table 5 (Dinkelbach) on gsm8k and cnndm")
    names = ("gsm8k", "cnndm")
    _TRACES.update({n: traces[n] for n in names})
    try:
        if workers > 1 and "fork" in mp.get_all_start_methods():
            from concurrent.futures import ProcessPoolExecutor

            with ProcessPoolExecutor(max_workers=2, mp_context=mp.get_context("fork")) as pool:
                return dict(pool.map(_table5_job, names))
        return dict(_table5_job(n) for n in names)
    finally:
        _TRACES.clear()

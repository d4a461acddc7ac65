"""One tuning run: checks, the search, and the reason (the best, the engine's default and AR replayed alike).

Every number is a prediction on SYNTHETIC traces of the workload preset.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from simmoe.errors import SimmoeError
from simmoe.tune import space as sp
from simmoe.tune.evaluate import Setup, check_workload, evaluate, evaluator, profile_of
from simmoe.tune.search import RUNGS, SearchResult, successive_halving

DEFAULT_BUDGET_S = 50.0   # the search's share of a one-minute answer: the reason's replays and the start follow
BACKENDS = ("processes", "ray")


@dataclass
class Outcome:
    """What :func:`run_tune` found: the search, the three explained configurations, the calibration used."""

    setup: Setup
    space: sp.Space
    search: SearchResult
    ar: dict = field(default_factory=dict)            # AR's row at the last rung reached
    default: dict = field(default_factory=dict)       # the engine's default configuration's row there
    best: dict = field(default_factory=dict)
    best_config: sp.TuneConfig | None = None
    calibration: dict = field(default_factory=dict)   # which terms came from the user's measured point
    ar_by_rung: dict = field(default_factory=dict)

    def frame_rows(self) -> list[dict]:
        """Every evaluation with its speedup over AR at the same trace length."""
        out = []
        for row in self.search.rows:
            ar = self.ar_by_rung.get(row["rung"], {}).get("tokens_per_s")
            out.append({**row, "speedup": row["tokens_per_s"] / ar if ar else float("nan"), "synthetic": True})
        return out


def parse_budget(text) -> float:
    """``60s``, ``2m``, ``90`` (seconds) → seconds; one line for anything else or ≤ 0."""
    t = str(text).strip().lower()
    scale = 60.0 if t.endswith("m") else 1.0
    core = t[:-1] if t.endswith(("s", "m")) else t
    try:
        v = float(core) * scale
    except ValueError:
        raise SimmoeError(f"--budget {text}: write seconds, e.g. 60s or 2m") from None
    if not v > 0 or v != v or v == float("inf"):
        raise SimmoeError(f"--budget {text}: the time budget must be more than 0 seconds")
    return v


def check_inputs(engine: str, algorithm: str | None, workload: str, hardware: str, batch: int,
                 backend: str, workers: int):
    """Every check of a tuning run before any work; returns (algorithm, profile)."""
    from simmoe.hardware.profile import load_profile

    algo = sp.check_algorithm(engine, algorithm)
    check_workload(workload)
    if isinstance(batch, bool) or int(batch) != batch or batch < 1:
        raise SimmoeError(f"--batch {batch}: the batch size must be an integer >= 1")
    if backend not in BACKENDS:
        raise SimmoeError(f"--backend {backend}: known: {', '.join(BACKENDS)}")
    if workers < 1:
        raise SimmoeError(f"--workers {workers}: must be at least 1")
    profile = load_profile(hardware)
    sp.check_profile(engine, profile)
    if profile.physical is None:   # a fitted profile: the preset's own model must be the one it describes
        from simmoe.hardware.model_check import check_profile_model
        from simmoe.synth import PRESETS

        check_profile_model(PRESETS[workload].params.geometry, profile, f"--hardware {hardware}")
    return algo, profile


def run_tune(*, hardware: str, workload: str = "mt_bench", engine: str = "sglang", algorithm: str | None = None,
             batch: int = 1, budget_s: float = DEFAULT_BUDGET_S, seed: int = 0, workers: int = 1,
             backend: str = "processes", selections: tuple[str, ...] | None = None, measured=None,
             rungs=RUNGS, initial: int | None = None, space_overrides: dict | None = None,
             progress: Callable[[int, int], None] | None = None,
             on_rung: Callable[[int], None] | None = None) -> Outcome:
    """Search ``engine``'s space on ``hardware`` for ``workload`` (every number a synthetic prediction)."""
    if not budget_s > 0:
        raise SimmoeError(f"--budget {budget_s}: the time budget must be more than 0 seconds")
    algo, profile = check_inputs(engine, algorithm, workload, hardware, batch, backend, workers)
    if backend == "ray":
        raise SimmoeError("--backend ray: not available for simmoe tune yet (its evaluations share generated "
                          "traces within a process); use --backend processes --workers N")
    setup = Setup(workload=workload, hardware=hardware, batch=int(batch), seed=int(seed))
    calibration: dict = {}
    t0 = time.perf_counter()
    if measured is not None:
        from simmoe.tune.calibrate import recalibrate

        setup, calibration = recalibrate(setup, engine, measured)
    space = sp.engine_space(engine, selections=selections, offload=not profile.resident,
                            **(space_overrides or {}))
    if algo == "AR":   # nothing to search: AR is the answer and its own baseline
        space = sp.Space(engine, "AR", (), sp.ar_config(engine), {"selection": "ar"})
    rungs = tuple(max(1, int(batch)) * r for r in rungs)
    left = budget_s - (time.perf_counter() - t0)
    res = successive_halving(space, evaluator(setup, workers), budget_s=max(left, 0.0), seed=seed,
                             initial=initial, rungs=rungs, include=(space.default,), progress=progress,
                             on_rung=on_rung, workers=workers)
    out = Outcome(setup=setup, space=space, search=res, calibration=calibration)
    if res.interrupted and not res.rows:
        return out
    for r in sorted({row["rung"] for row in res.rows}):
        out.ar_by_rung[r] = evaluate(setup, sp.ar_config(engine), rungs[r])
    if res.best is not None:
        out.best_config, out.best = res.best
        n = rungs[res.rung]
        out.ar = out.ar_by_rung[res.rung]
        default = space.default if space.default.algorithm != "AR" else sp.default_config(engine)
        hit = [row for c, row in res.ranking if c == default]
        if hit or not res.interrupted:   # after Ctrl-C, only what is at hand
            out.default = {**(hit[0] if hit else evaluate(setup, default, n)), "flags": default.flags(),
                           "label": default.label()}
    return out


def profile_line(setup: Setup) -> str:
    prof = profile_of(setup)
    return f"{prof.name} ({prof.description})" if prof.description else prof.name

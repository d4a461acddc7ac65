"""One tuning run: checks, the search, and the reason (the best, the engine's default and AR replayed alike).

Every number is a prediction, on SYNTHETIC traces of the workload preset or
on the given trace (labelled SYNTHETIC where it is).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from simmoe.errors import SimmoeError
from simmoe.tune import space as sp
from simmoe.tune.evaluate import (
    Setup,
    check_workload,
    evaluate,
    evaluator,
    is_synthetic,
    is_trace_path,
    load_trace,
    profile_of,
)
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
    ar_by_rung: dict = field(default_factory=dict)     # (rung, placement or None) -> AR's row there

    def frame_rows(self) -> list[dict]:
        """Every evaluation with its speedup over AR at the same trace length (and placement), and its workload."""
        out = []
        synthetic = is_synthetic(self.setup)
        for row in self.search.rows:
            ar = self.ar_by_rung.get((row["rung"], row.get("placement")), {}).get("tokens_per_s")
            out.append({**row, "speedup": row["tokens_per_s"] / ar if ar else float("nan"),
                        "workload": self.setup.workload, "synthetic": synthetic})
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
    """Every check of a tuning run before any work; returns (algorithm, profile, CPU base or None, trace path)."""
    from simmoe.hardware.model_check import check_profile_model
    from simmoe.hardware.profile import load_profile
    from simmoe.tune.cpu import check_engine, placements, split_cpu

    algo = sp.check_algorithm(engine, algorithm)
    check_workload(workload)
    if isinstance(batch, bool) or int(batch) != batch or batch < 1:
        raise SimmoeError(f"--batch {batch}: the batch size must be an integer >= 1")
    if backend not in BACKENDS:
        raise SimmoeError(f"--backend {backend}: known: {', '.join(BACKENDS)}")
    if workers < 1:
        raise SimmoeError(f"--workers {workers}: must be at least 1")
    if backend == "ray":        # the extra is there, or one line says how to install it, before any work
        from simmoe.replay.ray_runtime import require_ray

        require_ray("--backend ray")
    cpu = split_cpu(hardware)
    if cpu is not None:
        check_engine(engine, hardware)
        profile = load_profile(cpu.name(cpu.start or placements(cpu)[0]))
    else:
        profile = load_profile(hardware)
    sp.check_profile(engine, profile)
    trace_path = str(workload) if is_trace_path(workload) else None
    if trace_path is not None:      # the shared check: the trace's model must be the profile's
        check_profile_model(load_trace(trace_path).geometry, profile, f"--hardware {hardware}")
    elif profile.physical is None:   # a fitted profile: the preset's own model must be the one it describes
        from simmoe.synth import PRESETS

        check_profile_model(PRESETS[workload].params.geometry, profile, f"--hardware {hardware}")
    return algo, profile, cpu, trace_path


def trace_limits(engine: str, trace, overrides: dict) -> dict:
    """The values a recorded trace can replay: its pools' expansion and depth fixed, budgets up to its nodes."""
    shape = trace.pool_shape
    depth, topk, nodes = int(shape.depth), int(shape.expand_topk), int(shape.max_nodes)
    if engine == "sglang":
        lim = {"steps": (depth,), "topk": (topk,), "draft_tokens": tuple(range(2, nodes + 2))}
    elif engine == "vllm":
        if topk != 1:
            raise SimmoeError(f"--workload {trace.meta.get('dataset', 'TRACE')}: its pools are trees of top-{topk} "
                              "and vLLM drafts a chain; tune this trace with --engine sglang or llama.cpp")
        lim = {"steps": tuple(range(1, depth + 1))}
    else:
        lim = {"steps": tuple(sorted({n for n in (1, 2, 3, 4, 6, 8, 12, 16) if n <= depth} | {depth}))}
    out = {}
    for key, vals in lim.items():
        given = overrides.get(key)
        keep = tuple(v for v in vals if given is None or v in given)
        if not keep:
            raise SimmoeError(f"the trace's pools (top-{topk}, depth {depth}, {nodes} nodes) hold none of the "
                              f"{key} values asked for")
        out[key] = keep
    return out


def build_space(engine: str, algo: str, setup: Setup, profile, selections, overrides: dict) -> sp.Space:
    """The engine's space, narrowed to a trace's pools, with the placement where experts run on the CPU."""
    from simmoe.tune.cpu import placements, start_placement

    overrides = dict(overrides)
    if setup.trace_path is not None:
        overrides.update(trace_limits(engine, load_trace(setup.trace_path), overrides))
    if setup.cpu is not None and "placements" not in overrides:
        values = placements(setup.cpu)
        overrides.update(placements=values, start=start_placement(setup.cpu, values))
    space = sp.engine_space(engine, selections=selections, offload=not profile.resident, **overrides)
    if algo == "AR":   # nothing to search: AR is the answer and its own baseline
        space = sp.Space(engine, "AR", (), sp.ar_config(engine, space.default.placement), {"selection": "ar"})
    return space


def starts(space: sp.Space) -> tuple[sp.TuneConfig, ...]:
    """Always in the first sample: the engine's default, and with experts on the CPU its draft flags at every
    placement (the placement moves tokens/s most; a Latin sample of a few points would miss the best one)."""
    from dataclasses import replace

    out = [space.default]
    for d in space.dims:
        if d.name == "placement":
            out += [replace(space.default, placement=v) for v in d.values if v != space.default.placement]
    return tuple(out)


def run_tune(*, hardware: str, workload: str = "mt_bench", engine: str = "sglang", algorithm: str | None = None,
             batch: int = 1, budget_s: float = DEFAULT_BUDGET_S, seed: int = 0, workers: int = 1,
             backend: str = "processes", selections: tuple[str, ...] | None = None, measured=None,
             rungs=RUNGS, initial: int | None = None, space_overrides: dict | None = None,
             progress: Callable[[int, int], None] | None = None,
             on_rung: Callable[[int], None] | None = None, address: str | None = None) -> Outcome:
    """Search ``engine``'s space on ``hardware`` for ``workload`` (every number a prediction).

    ``backend``: ``"processes"`` (``workers`` forked processes) or ``"ray"`` (Ray tasks: a local runtime of
    ``workers`` CPUs, or the cluster at ``address``; :mod:`simmoe.tune.ray_backend`)."""
    if not budget_s > 0:
        raise SimmoeError(f"--budget {budget_s}: the time budget must be more than 0 seconds")
    algo, profile, cpu, trace_path = check_inputs(engine, algorithm, workload, hardware, batch, backend, workers)
    if address is not None and backend != "ray":
        raise SimmoeError("--address needs --backend ray")
    if measured is not None and cpu is not None:
        raise SimmoeError("--measured: recalibrating from a measured point is not modelled with experts on the "
                          "CPU yet (the regime's serving terms are not the physical model's); leave it out")
    if measured is not None and trace_path is not None:
        raise SimmoeError("--measured: a measured point recalibrates a preset's drafter, and a trace's pools are "
                          "fixed; use a synthetic preset as --workload, or leave it out")
    setup = Setup(workload=workload, hardware=hardware, batch=int(batch), seed=int(seed), cpu=cpu,
                  trace_path=trace_path)
    calibration: dict = {}
    t0 = time.perf_counter()
    if measured is not None:
        from simmoe.tune.calibrate import recalibrate

        setup, calibration = recalibrate(setup, engine, measured)
    space = build_space(engine, algo, setup, profile, selections, space_overrides or {})
    rungs = tuple(max(1, int(batch)) * r for r in rungs)
    left = budget_s - (time.perf_counter() - t0)
    if backend == "ray":
        from simmoe.tune.ray_backend import ray_evaluator

        evaluate_batch = ray_evaluator(setup, address=address, num_cpus=workers if address is None else None)
    else:
        evaluate_batch = evaluator(setup, workers)
    try:
        res = successive_halving(space, evaluate_batch, budget_s=max(left, 0.0), seed=seed,
                                 initial=initial, rungs=rungs, include=starts(space), progress=progress,
                                 on_rung=on_rung, workers=workers)
    finally:
        close = getattr(evaluate_batch, "close", None)
        if close is not None:
            close()
    out = Outcome(setup=setup, space=space, search=res, calibration=calibration)
    if res.interrupted and not res.rows:
        return out
    # AR at each rung and placement tried: each row's speedup is over vanilla decoding on the same traces and
    # placement (one AR trace per rung: cheap)
    for key in sorted({(row["rung"], row.get("placement")) for row in res.rows}, key=str):
        out.ar_by_rung[key] = evaluate(setup, sp.ar_config(engine, key[1]), rungs[key[0]])
    if res.best is not None:
        out.best_config, out.best = res.best
        n = rungs[res.rung]
        ar = sp.ar_config(engine, out.best_config.placement)
        out.ar = {**ar.params(), **out.ar_by_rung[(res.rung, ar.placement)], "flags": ar.flags()}
        default = space.default if space.default.algorithm != "AR" else \
            sp.default_config(engine, space.default.placement)
        hit = [row for c, row in res.ranking if c == default]
        if hit or not res.interrupted:   # after Ctrl-C, only what is at hand
            out.default = {**default.params(), **(hit[0] if hit else evaluate(setup, default, n)),
                           "flags": default.flags(),
                           "label": default.label()}
    return out


def profile_line(setup: Setup) -> str:
    prof = profile_of(setup)
    return f"{prof.name} ({prof.description})" if prof.description else prof.name

"""A grid of replays run in parallel worker processes, collected into one tidy table.

The grid is the product selectors × slots × cache policies × hardware
profiles × route accuracies × traces.  Configurations that share a selection
plan (same trace, selector, cost model and route information: see
:func:`simmoe.replay.engine.plan_key`) form one task, so each plan is computed once
and replayed through every cache configuration of its task.  Tasks run in
``workers`` processes (:mod:`concurrent.futures`); every row is the same as
a one-by-one :func:`simmoe.replay.engine.replay` of its configuration, because
plans and timing draws depend only on the configuration and its seed (with
measured selector times, only the selector time itself differs from run to
run).

Each row also holds the speedup over AR without a cache on the same trace,
profile, timing model and seed (SpecFit §4.1).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from simmoe.atomicio import write_bytes_atomic, write_text_atomic
from simmoe.errors import SimmoeError
from simmoe.replay.engine import ReplayConfig, ar_baseline, plan_key, replay
from simmoe.replay.metrics import COUNTERS, speedup
from simmoe.replay.results import RESIDENT_COUNTERS
from simmoe.replay.selectors import SELECTORS


@dataclass(frozen=True)
class Grid:
    """The axes of a sweep; every combination is one configuration."""

    traces: tuple[str, ...]
    selectors: tuple[str, ...] = ("ar", "eagle3", "evict", "specfit", "oracle")
    slots: tuple[int, ...] = (48,)
    caches: tuple[str, ...] = ("lru",)
    hardware: tuple[str, ...] = ("a100-pcie-40gb",)
    route_accuracy: tuple[float, ...] = (1.0,)
    # ms per cycle for every selector; None: measured; "model": the profile's cycle.selector_ms for the
    # exact searches and 0 for the top-K rules (reproducible, as simmoe replay's default)
    selector_ms: float | str | None = None
    selector_clock: str = "wall"
    timing: str = "event"
    seed: int = 0
    requests: int | None = None
    options: tuple = ()
    # the drafter axis (simmoe sweep --drafter): (name, its parameters as sorted (key, value) pairs) each; empty:
    # every trace with its own drafter, as before
    drafters: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()

    def trace_keys(self) -> list[str]:
        """The traces the grid replays: each file, or each file under each drafter (:func:`variant_key`)."""
        if not self.drafters:
            return [str(t) for t in self.traces]
        return [variant_key(str(t), name, dict(params)) for t in self.traces for name, params in self.drafters]

    def configs(self) -> list[tuple[str, ReplayConfig]]:
        """(trace, config) for every distinct point of the grid, validated.

        Without slots there is no cache, so every policy at ``slots = 0`` is the same
        replay: it appears once, with cache ``none``.
        """
        if not self.traces:
            raise SimmoeError("a sweep needs at least one trace")
        seen: dict[str, str] = {}
        for tr in self.traces:
            real = os.path.realpath(tr)
            if real in seen:
                raise SimmoeError(f"trace {tr} is listed twice (as {seen[real]} too)")
            seen[real] = str(tr)
        out = []
        for tr, hw, sel, acc, slots, cache in itertools.product(
                self.trace_keys(), self.hardware, self.selectors, self.route_accuracy,
                self.slots, self.caches):
            if slots == 0:
                cache = "none"
            cfg = ReplayConfig(selector=sel, slots=slots, cache=cache, hardware=hw,
                               route_accuracy=acc, selector_ms=self.selector_time(sel, hw),
                               selector_clock=self.selector_clock,
                               timing=self.timing, seed=self.seed, requests=self.requests,
                               options=self.options).validate()
            out.append((str(tr), cfg))
        return list(dict.fromkeys(out))

    def selector_time(self, selector: str, hardware: str) -> float | None:
        """The fixed selector ms of ``selector`` on profile ``hardware`` (None: measured)."""
        if self.selector_ms != "model":
            return self.selector_ms  # type: ignore[return-value]
        # a plugin need not declare uses_cost (simmoe.api): undeclared is False, as simmoe replay reads it
        return float(_profile(hardware).selector_ms) if getattr(SELECTORS[selector], "uses_cost", False) else 0.0


# -- the drafter axis: a trace under a drafter, named by one string ------------------
DRAFTER_MARK = "#drafter="


def variant_key(path: str, drafter: str, params: dict) -> str:
    """``PATH#drafter=NAME[?KEY=VALUE;...]``: the trace at ``path`` under ``drafter`` (everything a worker
    needs to make it again, so the key alone travels to any worker)."""
    text = ";".join(f"{k}={v}" for k, v in sorted(params.items()))
    return f"{path}{DRAFTER_MARK}{drafter}" + (f"?{text}" if text else "")


def split_key(key: str) -> tuple[str, str | None, dict[str, str]]:
    """``(path, drafter or None, its parameters)`` of a trace key (:func:`variant_key`, or a plain path)."""
    path, mark, rest = str(key).partition(DRAFTER_MARK)
    if not mark:
        return path, None, {}
    name, _, text = rest.partition("?")
    return path, name, dict(item.split("=", 1) for item in text.split(";") if item)


# -- workers --------------------------------------------------------------------
_TRACES: dict = {}
_PROFILES: dict = {}


def cached_trace(key: str):
    """The trace of ``key`` (a path, or a path under a drafter), made once per process (forked workers
    inherit the parent's); under another drafter, the synthetic workload drafted again, every request of it
    (:func:`simmoe.drafters.workload.with_drafter`)."""
    if key not in _TRACES:
        path, drafter, params = split_key(key)
        if drafter is None:
            from simmoe.trace.io import read_trace

            _TRACES[key] = read_trace(path)
        else:
            from simmoe.drafters.workload import with_drafter

            _TRACES[key] = with_drafter(cached_trace(path), drafter, params)
    return _TRACES[key]


def _profile(name: str):
    if name not in _PROFILES:
        from simmoe.hardware.profile import load_profile

        _PROFILES[name] = load_profile(name)
    return _PROFILES[name]


@dataclass(frozen=True)
class Failure:
    """A configuration whose replay failed, with the error's type and message."""

    trace: str
    config: ReplayConfig
    error: str


def replay_task(trace, path: str, configs: Sequence[ReplayConfig], profiles: dict) -> list[tuple]:
    """Replay configurations sharing one plan; (config, row or None, error or None) each.

    Both engines' worker entry point: a configuration whose replay raises is
    reported with its error and the rest of the task goes on.
    O(plan + Σ simulate).
    """
    plans: dict = {}
    out: list[tuple[ReplayConfig, dict | None, str | None]] = []
    for cfg in configs:
        try:
            res = replay(trace, cfg, profiles[cfg.hardware], plans=plans)
            out.append((cfg, _row(path, trace, cfg, res.summary(), res.lambda_star), None))
        except Exception as exc:  # reported per configuration; the rest of the grid completes
            out.append((cfg, None, f"{type(exc).__name__}: {exc}"))
    return out


def run_task(path: str, configs: Sequence[ReplayConfig]) -> list[tuple]:
    """:func:`replay_task` in a local worker process (traces and profiles read once per process)."""
    return replay_task(cached_trace(path), path, configs, {c.hardware: _profile(c.hardware) for c in configs})


def assemble(configs: Sequence[tuple[str, ReplayConfig]], results: dict, failures: dict):
    """The table in the order of ``configs`` (failed ones left out) and the list of :class:`Failure`.

    ``results`` and ``failures`` map (trace, config) to a row or an error;
    ``speedup`` is over the AR-without-cache row of the same trace, profile,
    timing and seed (NaN where that baseline failed).
    """
    import pandas as pd

    rows, failed = [], []
    for path, cfg in configs:
        key = (path, cfg)
        if key not in results:
            failed.append(Failure(path, cfg, failures.get(key, "no result")))
            continue
        r = dict(results[key])
        base = results.get((path, ar_baseline(cfg)))
        r["speedup"] = speedup(r, base) if base is not None else float("nan")
        rows.append(r)
    return pd.DataFrame(rows), failed


def _row(key, trace, cfg: ReplayConfig, summary: dict, lambda_star) -> dict:
    path, drafter, params = split_key(key)
    row = {"trace": path, "synthetic": bool(trace.is_synthetic), "selector": cfg.selector,
           "slots": cfg.slots, "cache": cfg.cache, "hardware": cfg.hardware,
           "route_accuracy": cfg.route_accuracy, "timing": cfg.timing, "seed": cfg.seed,
           "selector_ms_fixed": cfg.selector_ms, "selector_clock": cfg.selector_clock,
           "requests_limit": cfg.requests}
    # a resident profile has no cache: no H2D or hit rate (NaN), the experts read from HBM instead
    row.update({k: summary.get(k, float("nan")) for k in COUNTERS})
    row.update({k: summary[k] for k in RESIDENT_COUNTERS if k in summary})
    row["lambda_star"] = lambda_star
    if drafter is not None:   # the drafter axis only: tables of sweeps without it keep their columns
        row["drafter"] = drafter
        row["drafter_params"] = ";".join(f"{k}={v}" for k, v in sorted(params.items()))
    return row


def tasks_of(configs: Sequence[tuple[str, ReplayConfig]]) -> list[tuple[str, list[ReplayConfig]]]:
    """Group configurations by (trace, plan key), adding each AR-without-cache baseline."""
    groups: dict[tuple, list[ReplayConfig]] = {}
    for path, cfg in configs:
        groups.setdefault((path, plan_key(cfg)), []).append(cfg)
        base = ar_baseline(cfg)
        bucket = groups.setdefault((path, plan_key(base)), [])
        if base not in bucket:
            bucket.append(base)
    return [(path, cfgs) for (path, _), cfgs in groups.items()]


class SweepInterrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM during :func:`run_sweep`, with the rows finished so far (``frame``) to keep for a resume.

    ``frame`` holds every finished configuration whose AR-without-cache
    baseline finished too (so its speedup is known); ``total`` counts the
    configurations asked for; ``status`` is the exit status (130 SIGINT, 143
    SIGTERM) and ``what`` the word for it.
    """

    def __init__(self, frame, total: int, status: int = 130, what: str = "interrupted"):
        super().__init__()
        self.frame, self.total, self.status, self.what = frame, total, status, what


class SweepWorkerDied(SimmoeError):
    """A worker process died during :func:`run_sweep`: the message names the task; ``frame`` and
    ``total`` as :class:`SweepInterrupted`'s, the finished rows kept for a resume."""

    def __init__(self, message: str, frame, total: int):
        super().__init__(message)
        self.frame, self.total = frame, total


def task_order(tasks):
    """AR tasks first (cheap; every row's speedup needs their baseline), then the exact searches (slow)."""
    def rank(task):
        sel = SELECTORS[task[1][0].selector]
        return 0 if task[1][0].selector == "ar" else (1 if getattr(sel, "uses_cost", False) else 2)
    return sorted(tasks, key=rank)


def run_sweep(grid: Grid, *, workers: int = 1,
              progress: Callable[[int, int], None] | None = None,
              configs: Sequence[tuple[str, ReplayConfig]] | None = None):
    """Run every configuration of ``grid``; return ``(frame, failures)``.

    ``frame``: a pandas DataFrame, one row per configuration that ran, in
    grid order; ``speedup`` is over AR without a cache (same trace, profile,
    timing, seed).  ``failures``: a :class:`Failure` for each configuration
    whose replay raised; the rest complete.
    ``workers > 1`` runs tasks in that many processes
    (:func:`simmoe.replay.workers.run_pooled`).  ``configs`` (a subset of
    ``grid.configs()``, e.g. those not yet in an output table) replaces the
    whole grid.  Ctrl-C or SIGTERM raises :class:`SweepInterrupted` with the
    finished rows, a worker process's death :class:`SweepWorkerDied` with them.
    """
    import pandas as pd

    from simmoe.interrupt import acknowledge, exit_status, pause_point, what
    from simmoe.replay.workers import WorkerDied, describe, fork_available, run_pooled

    configs = grid.configs() if configs is None else list(configs)
    if not configs:
        return pd.DataFrame(), []
    tasks = task_order(tasks_of(configs))
    workers = max(1, int(workers))
    results: dict[tuple, dict] = {}
    failures: dict[tuple, str] = {}
    done = 0

    def collect(j, outcome, error):
        nonlocal done
        path, cfgs = tasks[j]
        if error is not None:  # the task could not run (its arguments or results could not be pickled)
            outcome = [(c, None, f"{type(error).__name__}: {error}") for c in cfgs]
        for cfg, row, err in outcome:
            if err is None:
                results[(path, cfg)] = row
            else:
                failures[(path, cfg)] = err
        done += 1
        if progress is not None:
            progress(done, len(tasks))
        if any(c.selector == "ar" for c in cfgs):    # the baselines are in: rows are kept from now on
            pause_point("sweep-row")

    try:
        if workers == 1 or len(tasks) == 1:
            for j, (path, cfgs) in enumerate(tasks):
                collect(j, run_task(path, cfgs), None)
        else:
            for path in {p for p, _ in configs}:  # forked workers inherit the traces read here
                cached_trace(str(path))
            run_pooled(run_task, tasks, workers, collect, fork=fork_available())
    except KeyboardInterrupt as exc:
        acknowledge()
        raise SweepInterrupted(_finished(configs, results), len(configs), exit_status(exc), what(exc)) from None
    except WorkerDied as exc:
        task = "" if exc.index is None else f" while replaying {Path(tasks[exc.index][0]).name}: " + \
            describe(tasks[exc.index][1])
        raise SweepWorkerDied(f"{exc}{task}", _finished(configs, results), len(configs)) from None
    return assemble(configs, results, failures)


def _finished(configs, results):
    """The table of the finished configurations whose AR baseline finished too (their speedup is known)."""
    return assemble([(p, c) for p, c in configs if (p, c) in results and (p, ar_baseline(c)) in results],
                    results, {})[0]


# -- resuming: which configurations a table already holds ---------------------------
KEY_COLUMNS = ("trace", "selector", "slots", "cache", "hardware", "route_accuracy", "timing", "seed",
               "selector_ms_fixed", "selector_clock", "requests_limit")


def _opt(x, kind):
    """None for a missing value (None or NaN, as CSV gives it back), else ``kind(x)``."""
    return None if x is None or x != x else kind(x)


def config_key(path: str, cfg: ReplayConfig) -> tuple:
    """The identity of a configuration's row in a sweep table (:data:`KEY_COLUMNS`)."""
    return (str(path), cfg.selector, int(cfg.slots), cfg.cache, str(cfg.hardware),
            float(cfg.route_accuracy), cfg.timing, int(cfg.seed), _opt(cfg.selector_ms, float),
            cfg.selector_clock, _opt(cfg.requests, int))


def row_keys(frame) -> set[tuple]:
    """The :func:`config_key` of every row of a sweep table (read back from CSV or parquet)."""
    missing = [c for c in KEY_COLUMNS if c not in frame.columns]
    if missing:
        raise SimmoeError(f"not a sweep table: no column(s) {', '.join(missing)}")
    cols = list(KEY_COLUMNS) + [c for c in ("drafter", "drafter_params") if c in frame.columns]
    return {(_trace_key(r), str(r.selector), int(r.slots), str(r.cache), str(r.hardware),
             float(r.route_accuracy), str(r.timing), int(r.seed), _opt(r.selector_ms_fixed, float),
             str(r.selector_clock), _opt(r.requests_limit, int))
            for r in frame[cols].itertuples(index=False)}


def _trace_key(r) -> str:
    """A row's trace key: its path, under its drafter where the table has the drafter axis."""
    drafter = getattr(r, "drafter", None)
    if drafter is None or drafter != drafter:
        return str(r.trace)
    text = getattr(r, "drafter_params", "")
    pairs = str(text).split(";") if isinstance(text, str) and text else []
    return variant_key(str(r.trace), str(drafter), dict(p.split("=", 1) for p in pairs))


def read_table(path):
    """A table written by :func:`write_table`, by its extension."""
    import pandas as pd

    suffix = Path(path).suffix.lower()
    try:
        return pd.read_csv(path) if suffix == ".csv" else pd.read_parquet(path)
    except Exception as exc:
        raise SimmoeError(f"cannot read the existing table {path}: {exc}") from None




def write_table(frame, path) -> None:
    """CSV or parquet by the file's extension (``.csv``, ``.parquet``/``.pq``), atomically."""
    import io

    suffix = Path(path).suffix.lower()
    if suffix == ".csv":
        write_text_atomic(path, frame.to_csv(index=False))
    elif suffix in (".parquet", ".pq"):
        buf = io.BytesIO()
        frame.to_parquet(buf, index=False)
        write_bytes_atomic(path, buf.getvalue())
    else:
        raise SimmoeError(f"output {path}: unknown extension {suffix!r} (use .csv or .parquet)")


def check_output_path(path, inputs=()) -> None:
    """Fail before any work when the table could not be written (or would overwrite a trace)."""
    from simmoe.atomicio import check_outputs

    suffix = Path(path).suffix.lower()
    if suffix not in (".csv", ".parquet", ".pq"):
        raise SimmoeError(f"output {path}: unknown extension {suffix!r} (use .csv or .parquet)")
    check_outputs([("--out", path)], inputs=inputs)


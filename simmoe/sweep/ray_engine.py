"""The sweep on a Ray cluster: the same grid, tasks and rows as :func:`simmoe.sweep.grid.run_sweep`.

Ray is an optional extra (``pip install 'simmoe[ray]'``).  The driver
groups configurations into tasks exactly as the local engine does
(:func:`simmoe.sweep.grid.tasks_of`: one task per trace and selection plan, the
AR-without-cache baselines added), puts each trace into Ray's object store
once (its numpy arrays are shared read-only with workers on the same node)
and the hardware profiles once, and submits one Ray task per plan.  Rows
are computed by the same code as the local engine, so with a fixed selector
time both engines give identical tables.

- Progress: ``on_result`` is called for every configuration as its task
  finishes, with its row or its error.
- Failures: a configuration whose replay raises is reported with its error
  (type and message) and left out of the table; the others complete.  A
  task whose worker dies fails all its configurations.
- Cluster: ``address=None`` starts a local Ray runtime (``num_cpus``
  workers) and shuts it down afterwards; an address (``"auto"``,
  ``"ray://host:10001"``, ``"host:6379"``) joins an existing cluster, whose
  nodes need simmoe installed.  Traces travel through the object store, so
  workers need no shared file system.
- Signals: SIGINT or SIGTERM is acted on within half a second (the waits are
  short) and shuts down the local runtime this call started, its workers
  with it (exit 130 or 143, one line, as the local engine).

Scaling: a task's cost is its plan (selection) plus one cache-and-timing
pass per configuration; tasks are independent, so with W workers the wall
time is about max(total / W, the longest task) plus putting each trace into
the object store once and fetching it once per node.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from simmoe.replay.engine import ReplayConfig
from simmoe.replay.ray_runtime import require_ray, start_ray
from simmoe.replay.selectors import SELECTORS
from simmoe.sweep.grid import Failure, assemble, cached_trace, replay_task, tasks_of  # noqa: F401 (Failure: API)


def run_sweep_ray(grid, *, configs: Sequence[tuple[str, ReplayConfig]] | None = None,
                  address: str | None = None, num_cpus: int | None = None,
                  on_result: Callable[[int, int, str, ReplayConfig, dict | None, str | None], None] | None = None):
    """Run ``configs`` (default: every configuration of ``grid``) on Ray.

    Returns ``(frame, failures)``: a pandas DataFrame in the order of
    ``configs`` (failed configurations left out) with the same columns as
    :func:`simmoe.sweep.grid.run_sweep`, and a list of :class:`Failure`.
    ``on_result(done, total, trace, config, row, error)`` reports each
    configuration as its task finishes (baselines added for the speedups
    included).
    """
    import pandas as pd

    from simmoe.hardware.profile import load_profile

    ray = require_ray()
    configs = list(grid.configs() if configs is None else configs)
    if not configs:
        return pd.DataFrame(), []
    tasks = sorted(tasks_of(configs), key=lambda t: not SELECTORS[t[1][0].selector].uses_cost)
    total = sum(len(c) for _, c in tasks)
    profiles = {}
    for _, cfgs in tasks:
        for c in cfgs:
            if c.hardware not in profiles:
                profiles[c.hardware] = load_profile(c.hardware)
    traces = {path: cached_trace(path) for path, _ in tasks}  # a bad trace fails here, before Ray starts

    started = start_ray(ray, address, num_cpus)
    results: dict[tuple[str, ReplayConfig], dict] = {}
    failures: dict[tuple[str, ReplayConfig], str] = {}
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(replay_task)
        trace_refs = {path: ray.put(tr) for path, tr in traces.items()}
        profile_ref = ray.put(profiles)
        pending = {remote.remote(trace_refs[path], path, cfgs, profile_ref): (path, cfgs)
                   for path, cfgs in tasks}
        done = 0
        while pending:
            # short waits: Ray's wait blocks in C++, where a SIGINT or SIGTERM (raised as the
            # interruption, simmoe.interrupt) would wait for the next task to finish
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
            for ref in ready:
                path, cfgs = pending.pop(ref)
                try:
                    outcome = ray.get(ref)
                except Exception as exc:  # the worker died or Ray failed the task
                    outcome = [(c, None, f"{type(exc).__name__}: {exc}") for c in cfgs]
                for cfg, row, error in outcome:
                    done += 1
                    if error is None:
                        results[(path, cfg)] = row
                    else:
                        failures[(path, cfg)] = error
                    if on_result is not None:
                        on_result(done, total, path, cfg, row, error)
    finally:
        if started:
            ray.shutdown()

    return assemble(configs, results, failures)

"""The traces the report replays: generated from the presets (seeded), cached, or read from ``--traces``.

The EVICT-shaped workloads regenerate the presets with EVICT's pool
(App. C.4); ``gsm8k-odd`` is SpecFit §4.5's 40 odd-numbered GSM8K questions,
cut from the full trace.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from simmoe.errors import SimmoeError
from simmoe.trace.schema import Trace
from simmoe.trace.subset import select_requests
from simmoe.validation.published.settings import Settings, Workload


def odd_numbered(trace: Trace) -> Trace:
    """The odd-numbered questions (1st, 3rd, …) of a trace: SpecFit §4.5's 40 of 80 GSM8K questions."""
    return select_requests(trace, np.arange(0, len(trace.requests), 2))


def _generate(w: Workload, seed: int) -> Trace:
    from simmoe.synth import generate, preset

    pr = preset(w.preset)
    params, fitted = pr.params, pr.fitted_to
    if w.pool is not None:
        params = params.with_(pool=w.pool)
        fitted = fitted + ("then modified by hand: pool shape " + ", ".join(
            f"{k}={v}" for k, v in w.pool.to_dict().items()) + " (EVICT App. C.4)",)
    return generate(params, seed=seed, num_requests=w.requests, preset=pr.name, fitted_to=fitted)


def _cache_name(w: Workload, seed: int) -> str:
    from simmoe.synth import GENERATOR

    n = "full" if w.requests is None else f"n{w.requests}"
    version = GENERATOR.replace(" ", "-").replace("/", "-")
    return f"{w.name}-seed{seed}-{n}-{version}.parquet"


def load_workload(w: Workload, settings: Settings, log: Callable[[str], None]) -> Trace:
    """The trace of ``w``: read from ``--traces``, from the cache folder, or generated (seeded)."""
    from simmoe.trace.io import read_trace

    if settings.traces_dir is not None and w.pool is None:
        path = Path(settings.traces_dir) / f"{w.preset}.parquet"
        if not path.is_file():
            raise SimmoeError(f"--traces {settings.traces_dir}: no {path.name} there")
        log(f"reading {path}")
        trace = read_trace(path)
        if w.requests is not None and w.requests < len(trace.requests):
            trace = select_requests(trace, np.arange(w.requests))
        return trace
    return cached_trace(settings, _cache_name(w, settings.seed), lambda: _generate(w, settings.seed),
                        f"{w.name} (seed {settings.seed})", log)


def cached_trace(settings: Settings, file_name: str, make: Callable[[], Trace], what: str,
                 log: Callable[[str], None]) -> Trace:
    """``make()``'s trace, kept as ``file_name`` in ``--cache-dir`` and read back from there on the next run.

    The name must say everything the trace depends on (workload, sizes, seed,
    generator version): a cached file is read without regenerating.
    """
    from simmoe.trace.io import read_trace, write_trace

    if settings.cache_dir is None:
        log(f"generating {what}")
        return make()
    path = Path(settings.cache_dir) / file_name
    if path.is_file():
        log(f"reading cached {path}")
        return read_trace(path)
    log(f"generating {what} into {path}")
    trace = make()
    path.parent.mkdir(parents=True, exist_ok=True)
    write_trace(trace, path)
    return trace


def describe_trace(trace: Trace) -> dict[str, Any]:
    """What the report says about a trace (header) and needs from it (request lengths)."""
    prov = trace.meta.get("provenance", {})
    return {"synthetic": trace.is_synthetic, "kind": prov.get("kind"), "generator": prov.get("generator"),
            "seed": prov.get("seed"), "preset": prov.get("preset"),
            "requests": len(trace.requests), "requests_full": trace.meta.get("num_requests_full"),
            "positions": trace.num_positions, "nodes": trace.num_nodes,
            "output_tokens": int(trace.requests.output_len.sum()),
            "prompt_min": int(trace.requests.prompt_len.min()),
            "prompt_max": int(trace.requests.prompt_len.max()),
            "pool": trace.pool_shape.to_dict(), "subset": trace.meta.get("subset")}

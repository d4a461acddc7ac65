"""The replays behind EVICT's Lookahead rows (Tables 1, 7, 8) and DFlash rows (Table 6).

Lookahead (SGLang, batch 1): for each model with a published Lookahead row
(Qwen3-30B-A3B, Ling-flash-2.0, Qwen3-235B-A22B) and each benchmark, the
same EVICT workload as the other methods' (the model's geometry, the
benchmark's preset and, where EAGLE-3's Mat was fitted for that model, the
same drafting parameters) with Lookahead's pools; its ``hit`` is the one
fitted on Qwen3-30B-A3B for that benchmark (``drafter_fit.toml``), carried
to the other models and to temperature 1 as a prediction.  Every guess is
verified (selector ``eagle3``: the first ``draft_tokens`` by path
probability), at temperature 0 on the model's profile and, for the models
with temperature-1 tables, at temperature 1 on ``profile_t1``.

DFlash (vLLM, Table 6): the QA and HumanEval workloads of Table 6 with
DFlash's pools, ``per_step`` fitted at batch 4 per workload; "DFlash" verifies
the whole block (selector ``eagle3``), "DFlash + EVICT" lets EVICT choose the
prefix (selector ``evict``), at every batch of the run, on the Table 6 profile.

Run keys: ``run_key(model, bench, "lookahead", 1, T)``, ``run_key(model,
bench, "dflash" | "dflash+evict", B)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

LOOKAHEAD_MODELS = ("qwen3-30b-a3b", "ling-flash-2.0", "qwen3-235b-a22b")
DFLASH_METHODS = (("dflash", "eagle3"), ("dflash+evict", "evict"))


def run_drafters(settings, positions: dict, log: Callable[[str], None]) -> tuple[dict, dict]:
    """Every Lookahead and DFlash replay: ``(results by key, traces by name)``.

    ``positions``: the drafting-path positions the physical runs fitted per
    (model, benchmark) (:func:`~.physical_runs.run_physical`'s fits).  The
    quick run replays Lookahead on QA only; DFlash on Table 6's sizes.
    """
    from simmoe.validation.published.physical_runs import BENCHES, sizes_for

    sizes = sizes_for(settings)
    results: dict = {}
    traces: dict = {}
    run_lookahead(settings, sizes, positions, results, traces, log, ("qa",) if settings.quick else BENCHES)
    run_dflash(settings, sizes, results, traces, log, sizes.table6, sizes.batches)
    return results, traces


def _file(name: str, drafter) -> str:
    """A cached workload's file with the drafter's parameters in its name (a refit makes another file)."""
    tag = "-".join(f"{k}{v:.6g}" if isinstance(v, float) else f"{k}{v}" for k, v in drafter.parameters().items())
    return name.removesuffix(".parquet") + f"-{tag}.parquet"


def _replay_into(results, trace, name, keys, configs, profiles, workers) -> None:
    from simmoe.replay.engine import replay_all
    from simmoe.validation.published.runs import Run, RunResult, _extra

    out = replay_all(trace, configs, profiles, workers=workers)
    for key, c, res in zip(keys, configs, out, strict=True):
        results[key] = RunResult(Run(key, name, c.selector, 0, c.hardware), res.summary(),
                                 _extra(res, trace.geometry.num_layers))


def run_lookahead(settings, sizes, positions: dict, results: dict, traces: dict, log: Callable[[str], None],
                  benches) -> None:
    """Lookahead's batch-1 replays (module docstring) into ``results``, its workloads into ``traces``."""
    from simmoe import drafters
    from simmoe.drafters.fitted import fitted_params
    from simmoe.fitting.drafter_fit import drafter_workload
    from simmoe.hardware.profile import load_profile
    from simmoe.replay.engine import ReplayConfig
    from simmoe.validation.published.physical_runs import (
        MODELS,
        T1_MAT,
        drafting_at,
        profile_t1,
        run_key,
        workload_file,
        workload_name,
    )
    from simmoe.validation.published.workloads import cached_trace

    for model in LOOKAHEAD_MODELS:
        prof = MODELS[model][0]
        sampled = model in T1_MAT
        profiles = {prof: load_profile(prof)}
        if sampled:
            profiles[profile_t1(model)] = load_profile(profile_t1(model))
        for bench in benches:
            d = drafters.build("lookahead", fitted_params("lookahead", bench))
            x = positions.get((model, bench), (None, None))[1]
            drafting = None if x is None else drafting_at(x)
            n, temp = sizes.batch1[model], 1.0 if sampled else 0.0
            name = workload_name(model, bench) + "-lookahead"
            trace = cached_trace(settings, _file(workload_file(name, n, x, settings.seed, temp), d),
                                 lambda bench=bench, d=d, n=n, drafting=drafting, temp=temp, model=model:
                                 drafter_workload(model, bench, d, n, settings.seed, drafting, temp),
                                 f"{name} ({n} requests, hit {d['hit']:.4f})", log)
            traces[name] = trace
            temps = (0, 1) if sampled else (0,)
            configs = [ReplayConfig(selector="eagle3", slots=0, cache="none",
                                    hardware=profile_t1(model) if t else prof, selector_ms=0.0, seed=0,
                                    temperature=float(t)) for t in temps]
            log(f"replaying {name}: {len(configs)} configurations")
            _replay_into(results, trace, name, [run_key(model, bench, "lookahead", 1, t) for t in temps],
                         configs, profiles, settings.workers)


def run_dflash(settings, sizes, results: dict, traces: dict, log: Callable[[str], None], requests: int,
               batches) -> None:
    """DFlash's and DFlash + EVICT's Table 6 replays (module docstring)."""
    from simmoe import drafters
    from simmoe.drafters.fitted import fitted_params
    from simmoe.fitting.drafter_fit import MODEL, drafter_workload, table6_profile
    from simmoe.hardware.profile import load_profile
    from simmoe.replay.engine import ReplayConfig
    from simmoe.validation.published.physical_runs import run_key, workload_file, workload_name
    from simmoe.validation.published.workloads import cached_trace

    prof = table6_profile()
    profiles = {prof: load_profile(prof)}
    for bench in ("qa", "humaneval"):
        d = drafters.build("dflash", fitted_params("dflash", bench))
        name = workload_name(MODEL, bench, table6=True) + "-dflash"
        trace = cached_trace(settings, _file(workload_file(name, requests, None, settings.seed, 0.0), d),
                             lambda bench=bench, d=d: drafter_workload(MODEL, bench, d, requests, settings.seed),
                             f"{name} ({requests} requests, per_step {d['per_step']:.4f})", log)
        traces[name] = trace
        base = [ReplayConfig(selector=sel, slots=0, cache="none", hardware=prof, selector_ms=0.0, seed=0)
                for _, sel in DFLASH_METHODS]
        for b in batches:
            log(f"replaying {name} at batch {b}")
            _replay_into(results, trace, name, [run_key(MODEL, bench, m, b) for m, _ in DFLASH_METHODS],
                         [replace(c, batch=b) for c in base], profiles, settings.workers)

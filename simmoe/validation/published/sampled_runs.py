"""The replays behind EVICT Tables 1 and 2 at temperature 1 and the four other workloads at 0 (resident profile).

Workloads: EVICT's six (alpaca, gsm8k, humaneval, qa, mt_bench, cnndm),
each a synthetic trace of its preset with EVICT's pool (App. C.4; the four
EVICT presets have it, GSM8K and CNN/DM are regenerated with it, as the
``*-evict`` workloads of the report), generated with the target's
distributions at temperature 1 (:mod:`simmoe.synth.sampling`) so that one
trace serves both temperatures: its pools, text and greedy agreement are
those of temperature 0.  Replays: vanilla (AR), EAGLE-3, DDD and EVICT on
``a100-sxm-resident`` without a cache, at temperature 0 and 1 (AR once: it
verifies nothing).  Run keys read ``sampled/<workload>/<selector>/t<T>``.
"""

from __future__ import annotations

from collections.abc import Callable

DATASETS = ("alpaca", "gsm8k", "humaneval", "qa", "mt_bench", "cnndm")
NEW = ("alpaca", "humaneval", "qa", "mt_bench")
SELECTORS = ("ar", "eagle3", "ddd", "evict")
PROFILE = "a100-sxm-resident"
# requests per workload (the EVICT pool's 200-candidate drafting makes full-size traces slow)
REQUESTS = {"alpaca": 10, "gsm8k": 20, "humaneval": 20, "qa": 20, "mt_bench": 10, "cnndm": 10}
QUICK_REQUESTS = {d: 1 for d in DATASETS}


def run_key(dataset: str, selector: str, temperature: int) -> str:
    return f"sampled/{dataset}/{'ar' if selector == 'ar' else selector}/t{0 if selector == 'ar' else temperature}"


def workload(dataset: str, requests: int, seed: int):
    """The trace of ``dataset`` with EVICT's pool and target distributions at temperature 1 (SYNTHETIC)."""
    from simmoe.synth import generate, preset
    from simmoe.synth.evict_presets import EVICT_POOL

    pr = preset(dataset)
    params, fitted = pr.params, pr.fitted_to
    if params.pool != EVICT_POOL:
        params = params.with_(pool=EVICT_POOL)
        fitted = fitted + ("then modified by hand: pool shape " + ", ".join(
            f"{k}={v}" for k, v in EVICT_POOL.to_dict().items()) + " (EVICT App. C.4)",)
    return generate(params, seed=seed, num_requests=requests, preset=pr.name, fitted_to=fitted, temperature=1.0)


def run_sampled(settings, log: Callable[[str], None]):
    """Generate the six workloads and replay them; ``(results by key, traces by name)``."""
    from simmoe.hardware.profile import load_profile
    from simmoe.replay.engine import ReplayConfig, replay_all
    from simmoe.validation.published.runs import Run, RunResult, _extra

    sizes = QUICK_REQUESTS if settings.quick else REQUESTS
    profile = load_profile(PROFILE)
    results, traces = {}, {}
    for ds in DATASETS:
        name = f"{ds}-evict-t1"
        log(f"generating {name} ({sizes[ds]} requests, target distributions at temperature 1)")
        trace = workload(ds, sizes[ds], settings.seed)
        traces[name] = trace
        configs = [ReplayConfig(selector="ar", slots=0, cache="none", hardware=PROFILE, selector_ms=0.0)]
        configs += [ReplayConfig(selector=s, slots=0, cache="none", hardware=PROFILE, selector_ms=0.0,
                                 temperature=float(t), seed=0)
                    for t in (0, 1) for s in SELECTORS[1:]]
        log(f"replaying {name}: {len(configs)} configurations at temperature 0 and 1")
        out = replay_all(trace, configs, {PROFILE: profile}, workers=settings.workers)
        for c, res in zip(configs, out, strict=True):
            key = run_key(ds, c.selector, int(c.temperature))
            results[key] = RunResult(Run(key, name, c.selector, 0, PROFILE), res.summary(),
                                     _extra(res, trace.geometry.num_layers))
    return results, traces

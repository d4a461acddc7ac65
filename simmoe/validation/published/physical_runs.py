"""The replays behind EVICT Tables 1, 2, 4 and 6–11 with the physical cost model (simmoe.hardware.physical).

Workloads: EVICT-shaped synthetic traces (EVICT's pool, App. C.4) of each
target model — Qwen3-30B-A3B, Ling-flash-2.0, Qwen3-235B-A22B and the dense
Hunyuan-7B, with their catalogued geometry — on EVICT's six benchmarks, each
from its synth preset (GSM8K and CNN/DM calibrated on SpecFit's figures; the
EVICT workload presets Alpaca, HumanEval, QA and MT-Bench fitted to Qwen3-30B-A3B's
EAGLE-3 Mat).  What may be fitted per CALIBRATION.md's EVICT section
(``fit_in_evict_tables``) is:

* EAGLE-3's Mat per (model, benchmark) except GSM8K and CNN/DM on
  Qwen3-30B-A3B, which the presets predict.  Qwen3-30B-A3B replays the
  presets as they are; for Ling-flash-2.0 and Qwen3-235B-A22B the workload's
  drafting parameters are read off a curve of EAGLE-3's Mat along one path
  through two of them — ``hard_confidence`` from 0.05 to the EVICT presets'
  0.3 with no easy positions, then ``easy_share`` from 0 to 0.95
  (:func:`drafting_at`; EVICT-shaped pools, drafting only, made
  non-decreasing and interpolated); Hunyuan-7B has no published Mat and
  replays the presets (a prediction);
* vanilla tokens/s on QA per model and Table 6's vanilla QA row: the cost
  model's ``step_ms`` (``physical_fit.toml``, :mod:`simmoe.fitting.physical_fit`).

* at temperature 1, vanilla tokens/s on QA per model again (setting
  ``sglang-a100-t1``); nothing else: the batch-1 traces of the three models
  with temperature-1 tables carry the target's distributions at temperature 1
  (``simmoe synth --temperature 1``: their own random stream, so the pools,
  text and temperature-0 replays are unchanged), whose ``target_spread`` was
  fitted once, to QA's EAGLE-3 Mat at temperature 1 on Qwen3-30B-A3B
  (:mod:`simmoe.synth.evict_presets`); every other temperature-1 Mat is a
  prediction.

Runs at batch 1 (Tables 1, 2, 7–11): vanilla, EAGLE-3, DDD and EVICT on
``MODEL@a100-sxm4-80gb[:tpN]`` (tensor parallelism 4 for Ling-flash-2.0 and 8
for Qwen3-235B-A22B, EVICT App. C.4), and for Qwen3-30B-A3B, Ling-flash-2.0
and Qwen3-235B-A22B again at temperature 1 (sampled verification, seed 0) on
``MODEL@a100-sxm4-80gb[:tpN]~sglang-a100-t1``.  Table 6: vanilla, EAGLE-3 and
EVICT at batch 4–64 with continuous batching on ``qwen3-30b-a3b@GPU~vllm-table6``
(the GPU the Table 6 fit chose).  Run keys read
``phys/<model>/<bench>/<selector>/b<batch>``, with ``/t1`` at temperature 1.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

BENCHES = ("alpaca", "gsm8k", "humaneval", "qa", "mt_bench", "cnndm")
MODELS = {  # key -> (profile, Mat table, Mat column, table of tokens/s)
    "qwen3-30b-a3b": ("qwen3-30b-a3b@a100-sxm4-80gb", "table2_mat_qwen3_30b_a3b_t0", "eagle3",
                      "table1_qwen3_30b_a3b_t0"),
    "ling-flash-2.0": ("ling-flash-2.0@a100-sxm4-80gb:tp4", "table10_mat_ling_flash_2_0", "eagle3_t0",
                       "table7_ling_flash_2_0"),
    "qwen3-235b-a22b": ("qwen3-235b-a22b@a100-sxm4-80gb:tp8", "table11_mat_qwen3_235b_a22b", "eagle3_t0",
                        "table8_qwen3_235b_a22b"),
    "hunyuan-7b": ("hunyuan-7b@a100-sxm4-80gb", None, None, "table9_hunyuan_7b_dense_t0"),
}
# models with temperature-1 tables (Tables 1-2, 7, 8, 10, 11) -> (their Mat table, EAGLE-3 and EVICT columns)
T1_MAT = {"qwen3-30b-a3b": ("table2_mat_qwen3_30b_a3b_t1", "eagle3", "evict"),
          "ling-flash-2.0": ("table10_mat_ling_flash_2_0", "eagle3_t1", "evict_t1"),
          "qwen3-235b-a22b": ("table11_mat_qwen3_235b_a22b", "eagle3_t1", "evict_t1")}
T1_SETTING = "sglang-a100-t1"
BATCH1_SELECTORS = ("ar", "eagle3", "ddd", "evict")
TABLE6_BATCHES = (4, 8, 16, 32, 64)
TABLE6_SELECTORS = ("ar", "eagle3", "evict")
# One path through two drafting parameters along which EAGLE-3's Mat rises: first the predictability of
# hard positions (easy_share 0), then the share of easy positions (hard_confidence at the preset's 0.45).
GRID = tuple(round(x, 3) for x in np.linspace(0.0, 2.0, 17))
HARD_MIN, HARD_PRESET, EASY_MAX = 0.05, 0.3, 0.95   # 0.3: the EVICT workload presets' hard_confidence


def drafting_at(x: float) -> dict:
    """The drafting parameters at position ``x`` ∈ [0, 2] of the path (module docstring)."""
    if x <= 1.0:
        return {"easy_share": 0.0, "hard_confidence": HARD_MIN + (HARD_PRESET - HARD_MIN) * x}
    return {"easy_share": EASY_MAX * (x - 1.0), "hard_confidence": HARD_PRESET}


@dataclass
class PhysicalSizes:
    """Requests per workload (the full run; ``quick`` shrinks every one)."""

    batch1: dict = field(default_factory=lambda: {"qwen3-30b-a3b": 20, "ling-flash-2.0": 10,
                                                  "qwen3-235b-a22b": 6, "hunyuan-7b": 10})
    table6: int = 80
    batches: tuple = TABLE6_BATCHES
    grid_requests: int = 12


def sizes_for(settings) -> PhysicalSizes:
    if settings.quick:
        return PhysicalSizes(batch1={k: 1 for k in MODELS}, table6=8, batches=(4, 8), grid_requests=2)
    return PhysicalSizes()


def run_key(model: str, bench: str, selector: str, batch: int = 1, temperature: int = 0) -> str:
    return f"phys/{model}/{bench}/{selector}/b{batch}" + (f"/t{temperature}" if temperature else "")


def profile_t1(model: str) -> str:
    """The batch-1 profile of ``model`` with the temperature-1 ``step_ms`` (setting ``sglang-a100-t1``)."""
    return f"{MODELS[model][0]}~{T1_SETTING}"


def mat_source(model: str, temperature: int) -> tuple[str, str, str] | None:
    """(Mat table, EAGLE-3 column, EVICT column) of ``model`` at ``temperature``, or None (no Mat published)."""
    if temperature:
        return T1_MAT.get(model)
    table, col = MODELS[model][1], MODELS[model][2]
    return None if table is None or col is None else (table, col, col.replace("eagle3", "evict"))


def mat_fitted_t1(model: str, bench: str) -> str | None:
    """How EAGLE-3's temperature-1 Mat of (model, bench) was fitted (a note), or None: a prediction."""
    if model == "qwen3-30b-a3b" and bench == "qa":
        return "fitted: target_spread (shared by every preset and model)"
    return None


def workload_name(model: str, bench: str, table6: bool = False) -> str:
    return f"{bench}-evict-{model}" + ("-batch" if table6 else "")


def mat_target(pub: dict, model: str, bench: str) -> float | None:
    """EAGLE-3's Mat at temperature 0 that this module fits for (model, bench), or None.

    None for Qwen3-30B-A3B (the presets: GSM8K's and CNN/DM's predict it, the
    EVICT workload presets were fitted to it) and for Hunyuan-7B (no published
    Mat: it replays the Qwen3-30B-A3B presets, a prediction).
    """
    _, table, col, _ = MODELS[model]
    if table is None or model == "qwen3-30b-a3b":
        return None
    t = pub["evict"][table]
    row = next(r for r in t["rows"] if r[0] == bench)
    return float(row[t["columns"].index(col)])


def mat_fitted(model: str, bench: str) -> str | None:
    """How EAGLE-3's Mat of (model, bench) was fitted (a note), or None when it is a prediction."""
    if model == "qwen3-30b-a3b":
        return None if bench in ("gsm8k", "cnndm") else "fitted: the workload preset's easy_share"
    if model == "hunyuan-7b":
        return None
    return "fitted: the workload's drafting parameters (physical_runs.drafting_at)"


def _params(model: str, bench: str, position: float | None):
    from simmoe.hardware.catalogue import load_model, with_model
    from simmoe.synth import preset
    from simmoe.synth.evict_presets import EVICT_POOL

    pr = preset(bench)
    params, fitted = with_model(pr.params, pr.fitted_to, load_model(model), bench)
    changes = {"pool": EVICT_POOL}
    if position is not None:
        changes.update(drafting_at(position))
    note = ("then: EVICT's pool (App. C.4)"
            + (", easy_share {easy_share:.4f} and hard_confidence {hard_confidence:.4f} fitted to EVICT's "
               "EAGLE-3 Mat".format(**drafting_at(position)) if position is not None else ""))
    return params.with_(**changes), fitted + (note,), bench


def mat_curve(requests: int, log: Callable[[str], None]) -> tuple[np.ndarray, np.ndarray]:
    """EAGLE-3's Mat (committed per cycle, EVICT's pool, K = 32) against ``easy_share``: drafting only."""
    from simmoe.synth import generate
    from simmoe.synth.stats import replay_eagle3

    mats = []
    for x in GRID:
        params, _, _ = _params("ling-flash-2.0", "qa", x)
        t = generate(params, seed=0, num_requests=requests, routes=False)
        mats.append(replay_eagle3(t).committed_per_cycle)
    raw = np.asarray(mats)
    curve = np.maximum.accumulate(raw)   # sampling noise made non-decreasing
    log(f"EAGLE-3 Mat along the drafting path ({requests} requests per point): "
        + ", ".join(f"{x:.2f}: {m:.2f}" for x, m in zip(GRID, raw, strict=True)))
    return np.asarray(GRID), curve


def path_position_for(target: float, grid: np.ndarray, mats: np.ndarray) -> float:
    """The path position whose EAGLE-3 Mat is ``target`` (linear interpolation; clamped to the curve's ends)."""
    lo = int(np.searchsorted(mats, target, side="left"))
    if lo == 0:
        return float(grid[0])
    if lo >= len(mats):
        return float(grid[-1])
    m0, m1 = mats[lo - 1], mats[lo]
    f = 0.0 if m1 == m0 else (target - m0) / (m1 - m0)
    return float(grid[lo - 1] + f * (grid[lo] - grid[lo - 1]))


def generate_workload(model: str, bench: str, requests: int, position: float | None, seed: int,
                      temperature: float = 0.0):
    """The workload's trace; ``temperature`` 1 adds the target's distributions (nothing else changes)."""
    from simmoe.synth import generate

    params, fitted, base = _params(model, bench, position)
    return generate(params, seed=seed, num_requests=requests, preset=base, fitted_to=fitted,
                    temperature=temperature)


def workload_file(name: str, requests: int, position: float | None, seed: int, temperature: float) -> str:
    """The ``--cache-dir`` file of a physical workload: every input of :func:`generate_workload` in its name."""
    from simmoe.synth import GENERATOR

    at = "preset" if position is None else f"x{position:.12g}"
    version = GENERATOR.replace(" ", "-").replace("/", "-")
    return f"{name}-seed{seed}-n{requests}-{at}-t{temperature:g}-{version}.parquet"


def run_physical(settings, pub: dict, log: Callable[[str], None]):
    """Generate the workloads, replay every run; ``(results by key, traces by name, fits)``."""
    from simmoe.hardware.physical import load_settings
    from simmoe.hardware.profile import load_profile
    from simmoe.replay.engine import ReplayConfig, replay_all
    from simmoe.replay.selection import evict_table
    from simmoe.validation.published.runs import Run, RunResult, _extra
    from simmoe.validation.published.workloads import cached_trace

    sizes = sizes_for(settings)
    grid, mats = mat_curve(sizes.grid_requests, log)
    fits: dict = {"mat_curve": (grid.tolist(), mats.tolist()), "position": {}}
    results: dict[str, RunResult] = {}
    traces: dict = {}

    def replay_set(trace, name, model, bench, configs, batch, profiles):
        configs = [replace(c, batch=batch) for c in configs]
        out = replay_all(trace, configs, profiles, workers=settings.workers)
        for c, res in zip(configs, out, strict=True):
            key = run_key(model, bench, c.selector, batch, int(c.temperature))
            run = Run(key, name, c.selector, 0, c.hardware)
            extra = _extra(res, trace.geometry.num_layers)
            if c.selector == "evict":   # the C(k) it selected with (profiled on this trace at this batch size)
                ck = evict_table(trace, profiles[c.hardware], batch)
                extra.update(evict_c1=float(ck[0]), evict_cK=float(ck[-1]))
            results[key] = RunResult(run, res.summary(), extra)

    for model, (prof_name, _, _, _) in MODELS.items():
        profiles = {prof_name: load_profile(prof_name)}
        sampled = model in T1_MAT
        if sampled:
            profiles[profile_t1(model)] = load_profile(profile_t1(model))
        for bench in BENCHES:
            target = mat_target(pub, model, bench)
            x = None if target is None else path_position_for(target, grid, mats)
            if x is not None:
                fits["position"][(model, bench)] = (target, x)
            n = sizes.batch1[model]
            name = workload_name(model, bench)
            what = f"{name} ({n} requests" + (", target distributions at temperature 1)" if sampled else ")")
            trace = cached_trace(settings, workload_file(name, n, x, settings.seed, 1.0 if sampled else 0.0),
                                 lambda model=model, bench=bench, n=n, x=x, sampled=sampled: generate_workload(
                                     model, bench, n, x, settings.seed, 1.0 if sampled else 0.0), what, log)
            traces[name] = trace
            configs = [ReplayConfig(selector=s, slots=0, cache="none", hardware=prof_name, selector_ms=0.0,
                                    seed=0) for s in BATCH1_SELECTORS]
            if sampled:
                configs += [ReplayConfig(selector=s, slots=0, cache="none", hardware=profile_t1(model),
                                         selector_ms=0.0, seed=0, temperature=1.0) for s in BATCH1_SELECTORS]
            log(f"replaying {name}: {len(configs)} configurations on {', '.join(profiles)}")
            replay_set(trace, name, model, bench, configs, 1, profiles)
    vllm = load_settings().get("vllm-table6", {})
    gpu = vllm.get("gpu", "h200")
    prof6 = f"qwen3-30b-a3b@{gpu}~vllm-table6"
    profile6 = load_profile(prof6)
    fits["table6_profile"] = prof6
    for bench in ("qa", "humaneval"):
        name = workload_name("qwen3-30b-a3b", bench, table6=True)
        trace = cached_trace(settings, workload_file(name, sizes.table6, None, settings.seed, 0.0),
                             lambda bench=bench: generate_workload("qwen3-30b-a3b", bench, sizes.table6, None,
                                                                   settings.seed), f"{name} ({sizes.table6} requests)",
                             log)
        traces[name] = trace
        configs = [ReplayConfig(selector=s, slots=0, cache="none", hardware=prof6, selector_ms=0.0, seed=0)
                   for s in TABLE6_SELECTORS]
        for b in sizes.batches:
            log(f"replaying {name} at batch {b}")
            replay_set(trace, name, "qwen3-30b-a3b", bench, configs, b, {prof6: profile6})
    return results, traces, fits

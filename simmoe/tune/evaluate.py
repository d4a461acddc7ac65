"""One configuration's prediction: a synthetic trace of its pool shape, replayed under its selection.

Generating a trace is the expensive part (routes of every pool node); a
replay costs little.  So configurations are evaluated in groups that share
a trace (:meth:`TuneConfig.trace_key`: the same top-k expansion and depth),
each trace generated once per (shape, requests) in a process and every K and
selection replayed on it: a pool of the drafted tree's largest-probability
nodes holds the pool of any smaller K (the top-K nodes by path probability),
so narrowing the trace's ``max_nodes`` and ``K`` replays SGLang's
``--speculative-num-draft-tokens``.

A recorded trace (``--workload TRACE``) fixes its pools: every configuration
replays that trace's first N requests, narrowed to its budget as above.
With experts on the CPU (:mod:`simmoe.tune.cpu`) each configuration's
placement names its own profile.

Every number here is a prediction; on SYNTHETIC traces unless a recorded
trace is given.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace

import numpy as np

from simmoe.errors import SimmoeError
from simmoe.tune.cpu import CpuBase
from simmoe.tune.space import TuneConfig


@dataclass(frozen=True)
class Setup:
    """What every evaluation of one tuning run shares: workload, hardware, batch, the user's calibration."""

    workload: str
    hardware: str
    batch: int = 1
    seed: int = 0
    # the drafter's confidence shifted in logit space (0: the preset's drafter; simmoe.tune.calibrate)
    confidence_shift: float = 0.0
    # serving terms replacing the profile's fitted ones (None: the fitted setting's)
    step_ms: float | None = None
    spec_iteration_ms: float | None = None
    # llama.cpp with experts on the CPU: the profile without its placement (simmoe.tune.cpu), else None
    cpu: CpuBase | None = None
    # a trace file's path when the workload is a trace (its pools fixed), else None (a synthetic preset)
    trace_path: str | None = None

    def hardware_of(self, cfg: TuneConfig | None = None) -> str:
        """The profile name a configuration replays on (its placement's, with experts on the CPU)."""
        if self.cpu is None:
            return self.hardware
        placement = cfg.placement if cfg is not None and cfg.placement is not None else self.cpu.start
        return self.cpu.name(placement or "cpu-all")


def is_trace_path(workload: str) -> bool:
    """Whether ``workload`` names a trace file rather than a preset (a path, or a name ending in .parquet)."""
    from simmoe.synth import PRESETS

    w = str(workload)
    return w not in PRESETS and (w.endswith(".parquet") or "/" in w or os.sep in w or os.path.exists(w))


def check_workload(workload: str) -> None:
    from simmoe.synth import PRESETS

    if workload not in PRESETS and not is_trace_path(workload):
        raise SimmoeError(f"--workload {workload}: no synthetic preset of that name (known: "
                          f"{', '.join(sorted(PRESETS))}) and not a trace file (a path to a .parquet trace, "
                          "as simmoe replay reads)")


def load_trace(path: str):
    """The trace of a ``--workload TRACE`` (read and validated once per process; one line if unreadable)."""
    key = ("file", str(path))
    if key not in _TRACES:
        from simmoe.trace.io import read_trace

        _TRACES[key] = read_trace(path)
    return _TRACES[key]


def workload_label(setup: Setup) -> str:
    """Which workload was tuned on and whether it is synthetic (SYNTHETIC where it is)."""
    if setup.trace_path is None:
        return f"{setup.workload} (SYNTHETIC preset)"
    t = load_trace(setup.trace_path)
    kind = "SYNTHETIC trace" if t.is_synthetic else "recorded trace"
    return f"{setup.trace_path} ({kind}, {len(t.requests)} requests)"


def is_synthetic(setup: Setup) -> bool:
    return setup.trace_path is None or bool(load_trace(setup.trace_path).is_synthetic)


def shifted(conf: float, shift: float) -> float:
    """``conf`` moved by ``shift`` in logit space (stays inside (0, 1))."""
    if shift == 0.0:
        return conf
    z = math.log(conf / (1.0 - conf)) + shift
    return float(min(max(1.0 / (1.0 + math.exp(-z)), 1e-4), 1.0 - 1e-4))


def synth_params(setup: Setup, pool):
    """The workload preset's parameters with the configuration's pool and the calibrated confidence.

    A physical profile of another model than the presets' Qwen3-30B-A3B gets
    routes of its own geometry (as ``simmoe synth --model``); the routing and
    drafter parameters stay the preset's.
    """
    from simmoe.synth import PRESETS

    p = PRESETS[setup.workload].params
    changes: dict = {"pool": pool}
    phys = profile_of(setup).physical
    if phys is not None:
        changes["geometry"] = phys.model.geometry()
    if setup.confidence_shift:
        changes["easy_confidence"] = shifted(p.easy_confidence, setup.confidence_shift)
        changes["hard_confidence"] = shifted(p.hard_confidence, setup.confidence_shift)
    return p.with_(**changes)


_PROFILES: dict = {}
_TRACES: dict = {}


def profile_of(setup: Setup, cfg: TuneConfig | None = None):
    """The hardware profile, its serving terms replaced where the user's measured point set them."""
    name = setup.hardware_of(cfg)
    key = (name, setup.step_ms, setup.spec_iteration_ms)
    if key not in _PROFILES:
        from simmoe.hardware.profile import HardwareProfile, load_profile, validate

        prof = load_profile(name)
        if (setup.step_ms is not None or setup.spec_iteration_ms is not None) and prof.physical is not None:
            from simmoe.hardware.physical import profile_fields

            o = prof.physical.o
            o = replace(o, step_ms=o.step_ms if setup.step_ms is None else float(setup.step_ms),
                        spec_iteration_ms=(o.spec_iteration_ms if setup.spec_iteration_ms is None
                                           else float(setup.spec_iteration_ms)),
                        source=o.source + "; serving terms recalibrated to the user's measured point")
            prof = validate(HardwareProfile(**profile_fields(setup.hardware, overheads=o)))
        _PROFILES[key] = prof
    return _PROFILES[key]


def trace_for(setup: Setup, cfg: TuneConfig, requests: int):
    """The synthetic trace of ``cfg``'s pool shape over the first ``requests`` requests (memoized)."""
    from simmoe.synth import generate

    if setup.trace_path is not None:
        return load_trace(setup.trace_path)
    key = _trace_key(setup, cfg, requests)
    if key not in _TRACES:
        if len(_TRACES) > 64:   # a long search visits many shapes: keep memory bounded
            _TRACES.clear()
        pool = cfg.pool()
        full = replace(pool, K=pool.max_nodes)
        _TRACES[key] = generate(synth_params(setup, full), seed=setup.seed, num_requests=requests,
                                preset=setup.workload)
    return _TRACES[key]


def _trace_key(setup: Setup, cfg: TuneConfig, requests: int) -> tuple:
    if setup.trace_path is not None:
        return ("file", str(setup.trace_path))
    return (setup.workload, setup.seed, setup.confidence_shift, cfg.trace_key(), requests)


def narrowed(trace, cfg: TuneConfig):
    """``trace`` with the pool budget of ``cfg``: the top-K nodes by path probability may be verified."""
    if cfg.is_ar:
        return trace
    k = max(1, min(cfg.K, int(trace.pool_shape.max_nodes)))
    shape = replace(trace.pool_shape, K=k, max_nodes=k if cfg.selection != "llama-chain" else
                    int(trace.pool_shape.max_nodes))
    return replace(trace, meta={**trace.meta, "pool_shape": shape.to_dict()})


def replay_config(setup: Setup, cfg: TuneConfig, profile, requests: int | None = None):
    from simmoe.replay.config import ReplayConfig
    from simmoe.tune.cpu import cache_experts

    common = dict(selector=cfg.selection, hardware=profile.name, batch=setup.batch, seed=setup.seed,
                  options=cfg.options(), selector_ms=0.0, requests=requests)
    if cfg.placement is not None:   # a static placement fixes the GPU's experts; cpu-misses:M caches M MiB
        budget = cache_experts(cfg.placement, profile.physical)
        return ReplayConfig(**common, slots=0, cache="none" if budget is None else "lru", cache_budget=budget)
    resident = bool(profile.resident)
    return ReplayConfig(**common, slots=0 if resident else int(cfg.cache_slots or 48),
                        cache="none" if resident else "lru")


def evaluate(setup: Setup, cfg: TuneConfig, requests: int) -> dict:
    """The predicted counters of ``cfg`` on the first ``requests`` requests (module docstring)."""
    from simmoe.replay.engine import replay

    profile = profile_of(setup, cfg)
    trace = narrowed(trace_for(setup, cfg, requests), cfg)
    # a trace file holds more requests than the rung replays; a generated one exactly the rung's
    n = None if setup.trace_path is None else min(int(requests), len(trace.requests))
    res = replay(trace, replay_config(setup, cfg, profile, n), profile)
    s = res.summary()
    row = {"tokens_per_s": float(s["decode_tps"]), "accept_len": float(s["mat"]),
           "verified": float(s["draft_nodes"]) + (0.0 if cfg.is_ar else 1.0),
           "output_tokens": int(s["output_tokens"]), "requests": int(requests if n is None else n),
           # what a recalibration needs to move a serving term exactly
           "decode_ms": float(s["decode_s"]) * 1e3, "replay_steps": int(len(res.steps["step_ms"])),
           "drafting_steps": int(np.sum(np.asarray(res.steps["levels"]) > 0))}
    row.update(breakdown(res, profile))
    return row


def breakdown(res, profile) -> dict:
    """Per decoded token: drafting, verification compute, expert reads or copies, framework time (ms).

    Framework time is the serving loop's per-step overhead and the speculative
    iteration's serving term (both inside the replay's commit and drafting
    times); expert reads are the resident experts' bytes at the achieved HBM
    bandwidth (copies over the link where experts are offloaded), the rest of
    the forward is verification compute (dense weights, attention, the LM head).
    """
    st = res.steps
    tokens = float(np.sum(res.cycles["committed"]))
    if tokens <= 0:
        return {}
    phys = profile.physical
    drafting = np.asarray(st["levels"]) > 0
    drafting_steps = float(np.sum(drafting))
    if phys is not None:   # the served iteration a + b · verified tokens, charged with the drafting
        b = float(getattr(phys.o, "spec_token_ms", 0.0))
        served = drafting_steps * float(phys.o.spec_iteration_ms) \
            + b * float(np.sum(np.asarray(st["tokens"], dtype=np.float64)[drafting]))
    else:
        served = drafting_steps * float(profile.draft_fixed_ms)
    draft = float(np.sum(st["draft_ms"])) - served
    forward = float(np.sum(st["forward_ms"]))
    steps = max(len(st["step_ms"]), 1)
    cpu = 0.0
    if getattr(phys, "placement", None) is not None:
        experts, cpu = _cpu_parts(st, phys, forward)
    elif profile.resident and phys is not None:
        experts = float(np.sum(st["hits"])) * phys.expert_bytes / phys.bw * 1e3
    else:
        experts = float(np.sum(st["misses"])) * profile.effective_copy_ms
    experts = min(experts, forward - cpu)
    framework = float(np.sum(st["commit_ms"])) + float(np.sum(st["selector_ms"])) + served
    out = {"draft_ms_per_token": draft / tokens, "compute_ms_per_token": (forward - experts - cpu) / tokens,
           "experts_ms_per_token": experts / tokens, "framework_ms_per_token": framework / tokens,
           "experts_per_step": float(np.sum(st["hits"]) + np.sum(st["misses"])) / steps,
           "forward_ms_per_step": forward / steps}
    if getattr(phys, "placement", None) is not None:
        out.update(cpu_experts_ms_per_token=cpu / tokens, cpu_experts_per_step=float(np.sum(st["misses"])) / steps)
    return out


def _cpu_parts(st, fwd, forward: float) -> tuple[float, float]:
    """(GPU expert reads, CPU experts) ms over the decode steps of a CPU-regime replay.

    A step's misses are the experts computed on the CPU, its hits those served
    on the GPU.  At decode a CPU expert is bound by its DRAM read (n_e below
    ``membound_tokens``), so each costs the mean read time of the layers that
    may hold one; a GPU expert its read at the GPU's bandwidth.  The
    synchronisation and the activations' round trip stay in verify compute.
    """
    layers = fwd.cpu_layer if not fwd.placement.uses_cache else np.ones(fwd.L_moe, dtype=bool)
    read = float(np.mean(fwd.read_ms[layers])) if layers.any() else 0.0
    cpu = min(float(np.sum(st["misses"])) * read, forward)
    gpu = float(np.sum(st["hits"])) * float(np.mean(fwd.E)) / fwd.gpu.bw * 1e3
    return gpu, cpu


def evaluate_group(setup: Setup, cfgs: list[TuneConfig], requests: int) -> list[dict]:
    """:func:`evaluate` for configurations that share one trace (what a worker process runs)."""
    return [evaluate(setup, c, requests) for c in cfgs]


def evaluator(setup: Setup, workers: int = 1):
    """``evaluate(configs, requests) -> rows`` (in order): trace groups in ``workers`` processes.

    A batch whose configurations share one trace runs here, where the trace
    may already be generated; several groups go to forked workers as the
    sweep's do (:func:`simmoe.replay.workers.run_pooled`).
    """

    def run(cfgs: list[TuneConfig], requests: int) -> list[dict]:
        groups: dict[tuple, list[int]] = {}
        for i, c in enumerate(cfgs):
            groups.setdefault(c.trace_key(), []).append(i)
        out: list[dict] = [{} for _ in cfgs]
        # groups whose trace this process holds, or all when there is no one to share with, run here
        here = [ix for ix in groups.values() if workers <= 1 or len(groups) == 1
                or _trace_key(setup, cfgs[ix[0]], requests) in _TRACES]
        idx = [ix for ix in groups.values() if ix not in here]
        for ix in here:
            for i, row in zip(ix, evaluate_group(setup, [cfgs[i] for i in ix], requests)):
                out[i] = row
        if not idx:
            return out
        from simmoe.replay.workers import run_pooled

        def done(j, rows, error):
            if error is not None:
                raise error
            for i, row in zip(idx[j], rows):
                out[i] = row

        run_pooled(evaluate_group, [(setup, [cfgs[i] for i in ix], requests) for ix in idx], workers, done)
        return out

    return run

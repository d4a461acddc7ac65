"""Recalibration from one measured point of the user's: the drafter's acceptance and the serving terms.

A drafter's acceptance depends on its checkpoint, and a serving stack's time
beyond the forward on the host and the engine's version; neither is in a
preset or a profile.  One measurement — a configuration with its measured
acceptance length and tokens/s, and the vanilla tokens/s — fixes three terms,
in this order, each from the one figure that identifies it:

1. the vanilla step (``step_ms``, paid by every decode step): the AR replay's
   time per token moved onto the measured vanilla tokens/s (exact: the
   replay's decode time per token is the forward plus ``step_ms``);
2. the drafter's confidence: the easy and hard predictability means of the
   preset shifted by one amount in logit space, searched by bisection
   (drafting-only traces, acceptance increasing in the shift) until the
   measured configuration's acceptance length matches;
3. the served speculative iteration's constant (``spec_iteration_ms``, paid
   once per iteration that drafts; its part per verified token, where the
   setting has one, is kept): the measured configuration's replay moved onto
   its measured tokens/s (exact: the constant adds the same time to every
   drafting iteration).

Everything else (every other configuration, batch size, selector) stays a
prediction, and the output says which terms came from the user's point.
"""

from __future__ import annotations

import math
from dataclasses import replace

from simmoe.errors import SimmoeError
from simmoe.tune import space as sp
from simmoe.tune.evaluate import Setup, evaluate, profile_of

FIELDS = ("topk", "steps", "draft_tokens", "accept_len", "tokens_per_s", "vanilla_tokens_per_s")
REQUIRED = ("steps", "accept_len", "tokens_per_s", "vanilla_tokens_per_s")
FIT_REQUESTS = 8          # drafting-only traces of the acceptance fit: cheap, so more requests
TIME_REQUESTS = 4         # traces with routes of the two timing terms
SHIFT_RANGE = (-6.0, 6.0)
BISECT_STEPS = 12


def parse_measured(text: str) -> dict:
    """``topk=8,steps=4,draft_tokens=32,accept_len=3.07,tokens_per_s=152.8,vanilla_tokens_per_s=144.6``."""
    out: dict = {}
    for item in str(text).split(","):
        if not item.strip():
            continue
        key, eq, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not eq or key not in FIELDS:
            raise SimmoeError(f"--measured {item.strip()!r}: write KEY=VALUE with KEY one of {', '.join(FIELDS)}")
        try:
            v = float(value)
        except ValueError:
            raise SimmoeError(f"--measured {key}={value.strip()}: not a number") from None
        if not (math.isfinite(v) and v > 0):
            raise SimmoeError(f"--measured {key}={value.strip()}: must be a positive number")
        if key in ("topk", "steps", "draft_tokens"):
            if v != int(v):
                raise SimmoeError(f"--measured {key}={value.strip()}: must be an integer")
            v = int(v)
        out[key] = v
    missing = [k for k in REQUIRED if k not in out]
    if missing:
        raise SimmoeError(f"--measured: missing {', '.join(missing)} (give {', '.join(FIELDS)})")
    if out["accept_len"] < 1.0:
        raise SimmoeError(f"--measured accept_len={out['accept_len']}: an acceptance length counts the "
                          "target's own token, so it is at least 1")
    return out


def measured_config(engine: str, m: dict) -> sp.TuneConfig:
    """The engine's configuration the measurement was taken with (one line if the engine cannot run it)."""
    steps, topk = int(m["steps"]), int(m.get("topk", 1))
    if engine == "sglang":
        draft = int(m.get("draft_tokens", steps + 1))
        cfg = sp.TuneConfig("sglang", "EAGLE3", "eagle3", steps=steps, topk=topk, draft_tokens=draft)
    elif engine == "vllm":
        cfg = sp.TuneConfig("vllm", "eagle3", "eagle3", steps=steps)
    else:
        d = sp.default_config("llama.cpp")
        cfg = replace(d, steps=steps)
    if topk != 1 and engine != "sglang":
        raise SimmoeError(f"--measured topk={topk}: {engine} drafts a chain (top-k 1)")
    if not sp.valid(cfg):
        raise SimmoeError(f"--measured: {cfg.label()} is not a configuration {engine} accepts")
    if m["accept_len"] > cfg.steps + 1:
        raise SimmoeError(f"--measured accept_len={m['accept_len']}: more than the {cfg.steps} drafted levels "
                          "plus one can accept")
    return cfg


def acceptance(setup: Setup, cfg: sp.TuneConfig, shift: float, requests: int = FIT_REQUESTS) -> float:
    """The acceptance length of ``cfg`` with the drafter's confidence shifted by ``shift`` (drafting only)."""
    from simmoe.replay.engine import replay
    from simmoe.synth import generate
    from simmoe.tune.evaluate import narrowed, replay_config, synth_params

    s = replace(setup, confidence_shift=shift)
    pool = cfg.pool()
    trace = generate(synth_params(s, replace(pool, K=pool.max_nodes)), seed=s.seed, num_requests=requests,
                     routes=False, preset=s.workload)
    res = replay(narrowed(trace, cfg), replay_config(s, cfg, profile_of(s)), profile_of(s))
    return float(res.summary()["mat"])


def fit_shift(setup: Setup, cfg: sp.TuneConfig, target: float, requests: int = FIT_REQUESTS) -> tuple[float, float]:
    """The confidence shift whose acceptance matches ``target``, by bisection; ``(shift, acceptance there)``."""
    lo, hi = SHIFT_RANGE
    a_lo, a_hi = acceptance(setup, cfg, lo, requests), acceptance(setup, cfg, hi, requests)
    if not a_lo <= target <= a_hi:
        raise SimmoeError(f"--measured accept_len={target:g}: the drafter of preset {setup.workload} reaches "
                          f"{a_lo:.2f}-{a_hi:.2f} with {cfg.label()} however its confidence is scaled")
    for _ in range(BISECT_STEPS):
        mid = 0.5 * (lo + hi)
        a = acceptance(setup, cfg, mid, requests)
        if a < target:
            lo = mid
        else:
            hi = mid
    shift = 0.5 * (lo + hi)
    return shift, acceptance(setup, cfg, shift, requests)


def _extra_ms(row: dict, tokens_per_s: float) -> float:
    """Decode time to add to a replay for its tokens/s to become ``tokens_per_s`` (its decoded tokens kept)."""
    return row["decode_ms"] * (row["tokens_per_s"] / tokens_per_s - 1.0)


def recalibrate(setup: Setup, engine: str, m: dict, *, fit_requests: int = FIT_REQUESTS,
                time_requests: int = TIME_REQUESTS) -> tuple[Setup, dict]:
    """``setup`` with the three terms of the module docstring from ``m``, and what each became."""
    cfg = measured_config(engine, m)
    prof = profile_of(setup)
    if prof.physical is None:
        raise SimmoeError(f"--measured needs a physical profile MODEL@GPU[...] (its serving terms are what a "
                          f"measured point recalibrates); {setup.hardware} is a fitted profile")
    o = prof.physical.o
    notes: dict = {}
    # 1. the vanilla step
    ar = evaluate(setup, sp.ar_config(engine), time_requests)
    step = o.step_ms + _extra_ms(ar, m["vanilla_tokens_per_s"]) / ar["replay_steps"]
    notes["vanilla step"] = (f"{max(step, 0.0):.3f} ms per decode step (the profile's {o.step_ms:.3f}), from your "
                             f"vanilla {m['vanilla_tokens_per_s']:g} tokens/s"
                             + (" (clipped at 0: the forward alone is slower than your vanilla)" if step < 0 else ""))
    setup = replace(setup, step_ms=max(step, 0.0))
    # 2. the drafter's confidence
    shift, got = fit_shift(setup, cfg, float(m["accept_len"]), fit_requests)
    notes["drafter confidence"] = (f"shifted by {shift:+.3f} in logit space: {cfg.label()} accepts {got:.2f} "
                                   f"(your {m['accept_len']:g})")
    setup = replace(setup, confidence_shift=shift)
    # 3. the served speculative iteration
    row = evaluate(setup, cfg, time_requests)
    spec = o.spec_iteration_ms + _extra_ms(row, m["tokens_per_s"]) / max(row["drafting_steps"], 1)
    notes["served iteration"] = (f"{max(spec, 0.0):.3f} ms per speculative iteration (the profile's "
                                 f"{o.spec_iteration_ms:.3f}), from your {m['tokens_per_s']:g} tokens/s with "
                                 f"{cfg.label()}" + (" (clipped at 0)" if spec < 0 else ""))
    return replace(setup, spec_iteration_ms=max(spec, 0.0)), notes

"""Hardware profiles measured by hwprobe, in the simulator's format (``simmoe.hardware.profile``).

The event-model fields come from what the probe saw: ``copy_ms`` is the mean
duration of one expert copy on the backend's single copy stream (copies run
one after another there, so ``copies_in_flight = 1`` in the simulator's
sense: c copies sharing the engine at once), ``link_gbps`` the fastest rate
observed (sweep or copies), and ``forward_ms`` / ``expert_ms`` a
non-negative least-squares fit of verification time ≈ forward_ms +
expert_ms·F + c·copies over the timed forwards.  The SpecFit cost models
(b_k, β) come from :mod:`hwprobe.calibration` when calibrated.
"""

from __future__ import annotations

import statistics

import numpy as np

MIN_INTERCEPT_MS = 1e-6   # the profile format needs b_k > 0; NNLS may return exactly 0


def fit_forward(verify_ms, union, copies) -> tuple[float, float]:
    """(forward_ms, expert_ms) from verify ≈ a + b·F + c·copies, all coefficients ≥ 0."""
    from scipy.optimize import nnls

    v = np.asarray(verify_ms, float)
    if len(v) < 3:
        return (float(np.mean(v)) if len(v) else 0.0), 0.0
    A = np.stack([np.ones_like(v), np.asarray(union, float), np.asarray(copies, float)], 1)
    coef, _ = nnls(A, v)
    return float(coef[0]), float(coef[1])


def positive_intercepts(b) -> tuple[tuple[float, ...], list[int]]:
    """b with zeros raised to MIN_INTERCEPT_MS, and the indices that were raised."""
    raised = [j for j, x in enumerate(b) if not x > MIN_INTERCEPT_MS]
    return tuple(max(float(x), MIN_INTERCEPT_MS) for x in b), raised


def build_profile(*, name: str, device: str, model: str, expert_bytes: int, num_layers: int,
                  copy_samples_ms, link_gbps: float, forward_ms: float, expert_ms: float,
                  draft_level_ms: float = 0.0, commit_ms: float = 0.0, fits: dict | None = None,
                  notes: str = "", cpu: bool = False):
    """A validated :class:`simmoe.hardware.profile.HardwareProfile`; ``fits``: {"cache": Fit, "no_cache": Fit}."""
    from simmoe.hardware.profile import HardwareProfile, validate

    samples = [float(x) for x in copy_samples_ms if x > 0]
    copy_ms = statistics.fmean(samples) if samples else 0.0
    if samples and expert_bytes:
        link_gbps = max(link_gbps, expert_bytes / (min(samples) * 1e-3) / 1e9)
    extra = {}
    note = [notes] if notes else []
    for key in ("cache", "no_cache"):
        f = (fits or {}).get(key)
        if f is None:
            continue
        b, raised = positive_intercepts(f.b)
        extra[f"cost_b_{key}"] = b
        extra[f"cost_beta_{key}"] = float(f.beta)
        if raised:
            note.append(f"{key}: b_{raised} fitted as 0 (or without points), stored as {MIN_INTERCEPT_MS}")
    if cpu:
        note.append("measured on the CPU: no device, copies are host memcpy stand-ins")
    prof = HardwareProfile(
        name=name, description=f"{model} on {device}, measured by hwprobe",
        source=f"measured by hwprobe on {device}", device=device, model=model,
        expert_bytes=int(expert_bytes), num_layers=int(num_layers),
        copies_in_flight=1, copy_ms=copy_ms, copy_samples_ms=tuple(samples[:2000]),
        link_gbps=float(link_gbps), forward_ms=float(forward_ms), expert_ms=float(expert_ms),
        draft_level_ms=float(draft_level_ms), commit_ms=float(commit_ms),
        notes="; ".join(note), **extra)
    return validate(prof)


def profile_dict(profile) -> dict:
    """JSON-ready dict of a profile (for trace metadata)."""
    import dataclasses

    d = dataclasses.asdict(profile)
    d.pop("path", None)
    d["copy_samples_ms"] = list(d["copy_samples_ms"])[:200]
    for k, v in d.items():
        if isinstance(v, tuple):
            d[k] = list(v)
    return d

"""``simmoe synth``: seeded synthetic traces with calibrated presets.

Public API::

    SynthParams, Preset, PRESETS, preset(name)
    generate(params, *, seed=0, num_requests=None, preset=None, fitted_to=(),
             routes=True, progress=None) -> Trace
    synth_preset(name, *, seed=0, num_requests=None, progress=None, **overrides) -> Trace

The generative model is documented in ``docs/synthetic-traces.md``; every
trace it produces is labelled synthetic in ``meta["provenance"]``.
"""

from __future__ import annotations

from simmoe.synth import evict_presets as _evict_presets  # noqa: E402,F401  (registers alpaca, humaneval, qa, mt_bench)
from simmoe.synth.generate import GENERATOR, generate
from simmoe.synth.params import PRESETS, Preset, SynthParams, preset

__all__ = ["GENERATOR", "PRESETS", "Preset", "SynthParams", "generate", "preset", "synth_preset"]


def synth_preset(name: str, *, seed: int = 0, num_requests: int | None = None,
                 progress=None, **overrides):
    """The trace of preset ``name``; ``overrides`` replace generative parameters."""
    p = preset(name)
    params = p.params.with_(**overrides) if overrides else p.params
    fitted = p.fitted_to if not overrides else p.fitted_to + (
        "then modified by hand: " + ", ".join(f"{k}={v}" for k, v in sorted(overrides.items())),)
    return generate(params, seed=seed, num_requests=num_requests, preset=name,
                    fitted_to=fitted, progress=progress)

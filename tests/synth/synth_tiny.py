"""Tiny generator settings shared by the synth tests (small geometry: fast)."""

from __future__ import annotations

from simmoe.synth import SynthParams
from simmoe.trace.schema import ModelGeometry, PoolShape

TINY = SynthParams(
    dataset="gsm8k", num_requests=4, total_output_tokens=160, limit_tokens=512,
    geometry=ModelGeometry(6, 32, 4, expert_bytes=1024, name="tiny"),
    pool=PoolShape(2, 5, 18, 7),
    easy_share=0.6, popularity_sigma=1.0, locality=0.6, token_share=0.8,
)

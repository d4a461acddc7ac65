"""Every setting composes: each built-in drafter with every selector, batch 1 and 4, temperature 0 and 1, on a
resident profile, an offloaded one with a cache and a prefetch policy, and one whose experts run on the CPU.

Each combination either runs and gives sane numbers (tokens/s finite and positive, at most what was verified
committed per cycle) or is refused in one line, and only where the combination has no meaning (listed below).
Tiny synthetic traces (4 requests of ~8 tokens) on OLMoE's geometry, which catalogued profiles describe.
"""

from __future__ import annotations

import math

import pytest

import simmoe.drafters as drafters
from simmoe.errors import SimmoeError
from simmoe.hardware.catalogue import load_model, with_model
from simmoe.hardware.profile import load_profile
from simmoe.replay.engine import ReplayConfig, replay
from simmoe.replay.selectors import SELECTORS
from simmoe.synth import generate, preset

MODEL = "olmoe-1b-7b"
RESIDENT, OFFLOADED, CPU = f"{MODEL}@rtx4090", f"{MODEL}@rtx4090+pcie4-x16", f"{MODEL}@rtx4090+i9-10900x~cpu-layers:8"
DRAFTERS = {   # small pools keep the replays fast; every drafter's own structure kept
    "eagle3": ("eagle3", {}),
    "mtp": ("mtp", {"heads": 3}),
    "mtp-tree": ("mtp", {"heads": 2, "topk": 2}),
    "llama-chain": ("llama-chain", {"draft_max": 6, "draft_model": MODEL}),
    "llama-chain-cpu-moe": ("llama-chain", {"draft_max": 6, "draft_model": MODEL, "draft_n_cpu_moe": 4}),
    "dflash": ("dflash", {"block": 6}),
    "lookahead": ("lookahead", {"branches": 2, "branch_length": 3, "draft_tokens": 5}),
}


def refusal(drafter: str, profile: str, selector: str) -> str | None:
    """What the combination is refused for (a part of the line), None where it must run."""
    if drafter == "llama-chain-cpu-moe" and profile != CPU:   # the drafter's cost is checked first
        return "the profile has none"
    if selector == "specfit-prefetch" and profile == RESIDENT:
        return "keeps every expert there"
    if selector == "specfit-prefetch" and profile == CPU:
        return "computes them on the CPU instead"
    return None


@pytest.fixture(scope="module")
def traces():
    pr = preset("gsm8k")
    params, _ = with_model(pr.params, pr.fitted_to, load_model(MODEL), "gsm8k")
    params = params.with_(total_output_tokens=80 * 8)
    out = {}
    for key, (name, p) in DRAFTERS.items():
        d = drafters.build(name, p)
        out[key] = generate(params.with_(pool=d.pool_shape()), seed=0, num_requests=4, temperature=1.0,
                            drafter=None if name == "eagle3" else d)
    return out


@pytest.mark.parametrize("profile", [RESIDENT, OFFLOADED, CPU])
@pytest.mark.parametrize("drafter", list(DRAFTERS))
def test_every_selector_batch_and_temperature(traces, drafter, profile):
    prof = load_profile(profile)
    residency = dict(slots=16, cache="lru", prefetch="draft") if profile == OFFLOADED else dict(slots=0, cache="none")
    ran = 0
    for selector in SELECTORS:
        want = refusal(drafter, profile, selector)
        for batch in (1, 4):
            for temperature in (0.0, 1.0):
                cfg = ReplayConfig(selector=selector, hardware=profile, batch=batch, temperature=temperature,
                                   selector_ms=0.0, **residency)
                try:
                    s = replay(traces[drafter], cfg.validate(), prof).summary()
                except SimmoeError as exc:
                    what = f"{drafter} {selector} on {profile}, batch {batch}, T {temperature}"
                    assert want is not None, f"{what} refused: {exc}"
                    assert want in str(exc) and "\n" not in str(exc), what
                    continue
                assert want is None, f"{drafter} {selector} on {profile} ran; expected a refusal ({want})"
                assert math.isfinite(s["decode_tps"]) and s["decode_tps"] > 0
                assert 1.0 <= s["committed"] <= s["draft_nodes"] + 1.0 + 1e-9
                if selector == "ar":
                    assert s["committed"] == 1.0 and s["draft_nodes"] == 0.0
                ran += 1
    assert ran > 0 or drafter == "llama-chain-cpu-moe"

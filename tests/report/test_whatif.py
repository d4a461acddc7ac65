"""Link-bandwidth profiles derived from a base profile."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simmoe.errors import ProfileError
from simmoe.hardware.profile import load_profile
from simmoe.report.whatif import LINKS, bandwidth_profile, copy_ms_per_expert

BASE = load_profile("a100-pcie-40gb")


@given(gbps=st.floats(min_value=0.5, max_value=2000.0))
@settings(max_examples=40)
def test_copy_engine_moves_one_expert_per_bytes_over_bandwidth(gbps):
    p = bandwidth_profile(BASE, gbps)
    x = BASE.expert_bytes / (gbps * 1e9) * 1e3
    assert p.effective_copy_ms == pytest.approx(x, rel=1e-12)
    assert p.copy_ms == pytest.approx(x * BASE.copies_in_flight, rel=1e-12)
    assert p.link_gbps == gbps and p.link_ms_per_expert == pytest.approx(x, rel=1e-12)
    # everything that is not the link stays
    for f in ("forward_ms", "expert_ms", "cache_overhead_ms", "draft_level_ms", "commit_ms",
              "copies_in_flight", "cost_b_cache", "cost_b_no_cache", "evict_cost", "expert_bytes"):
        assert getattr(p, f) == getattr(BASE, f), f
    # beta without cache follows the slower of copy and compute per expert; with the
    # cache it never exceeds that
    e = BASE.expert_ms
    scale = max(x, e) / max(BASE.effective_copy_ms, e)
    assert p.cost_beta_no_cache == pytest.approx(BASE.cost_beta_no_cache * scale)
    assert p.cost_beta_cache == pytest.approx(min(BASE.cost_beta_cache, p.cost_beta_no_cache))
    assert p.cost_beta_cache <= BASE.cost_beta_cache
    assert p.name == f"a100-pcie-40gb@{gbps:g}GBps" and "derived from a100-pcie-40gb" in p.source


def test_published_link_copy_times():
    # CALIBRATION.md "Physical limits": 0.38 ms, 0.17 ms, 25 µs per 9,437,184-byte expert
    want = {24.8: 0.3805, 55.0: 0.1716, 375.0: 0.02517}
    for _, gbps in LINKS:
        assert copy_ms_per_expert(BASE.expert_bytes, gbps) == pytest.approx(want[gbps], rel=1e-3)


def test_faster_link_never_slows_ar_without_cache():
    from factories import random_trace

    from simmoe.replay.engine import ReplayConfig, replay

    trace = random_trace(7, num_requests=2, output_len=(6, 9), pool_nodes=0, L=3, N=12, k=2)
    cfg = ReplayConfig(selector="ar", slots=0, cache="none", hardware="x")
    any_model = BASE.replace(num_layers=0)      # BASE describes Qwen3-30B-A3B's 48 layers, not the small trace
    tps = [replay(trace, cfg, bandwidth_profile(any_model, g)).summary()["decode_tps"]
           for g in (5.0, 24.8, 55.0, 375.0)]
    assert tps == sorted(tps) and tps[0] < tps[-1]


def test_bad_bases_are_refused():
    with pytest.raises(ProfileError, match="resident"):
        bandwidth_profile(load_profile("a100-sxm-resident"), 55.0)
    with pytest.raises(ProfileError, match="expert_bytes"):
        bandwidth_profile(BASE.replace(expert_bytes=0), 55.0)
    with pytest.raises(ProfileError, match="> 0"):
        bandwidth_profile(BASE, 0.0)


@pytest.mark.parametrize("shape", [(48, 128, 8), (3, 12, 2), (48, 64, 8)])
def test_a_derived_profile_describes_the_base_s_model(shape):
    # so the report checks the base alone for its link what-ifs (simmoe.report.experiments.check_models)
    from simmoe.hardware.model_check import geometry_problem
    from simmoe.trace.schema import ModelGeometry

    g = ModelGeometry(*shape)
    for base in (BASE, BASE.replace(num_layers=0)):
        for _, gbps in LINKS:
            p = bandwidth_profile(base, gbps)
            assert (p.num_layers, p.model) == (base.num_layers, base.model)
            assert (geometry_problem(g, p, "x") is None) == (geometry_problem(g, base, "x") is None)

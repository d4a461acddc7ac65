"""A CPU-regime profile's copy time follows the expert bytes it records, so it always validates."""

from __future__ import annotations

import pytest

from simmoe.hardware.profile import load_profile


@pytest.mark.parametrize("name", ["deepseek-v2-lite/q4_k_m@rtx2080+i9-10900x~cpu-layers:10",
                                  "deepseek-v3/q4_k_m@rtx4090+epyc-9654~cpu-all"])
def test_copy_time_is_the_recorded_bytes_over_the_link(name):
    # both means of expert bytes round up: the copy was once priced from the unrounded mean and refused
    p = load_profile(name)
    assert p.copy_ms == pytest.approx(p.expert_bytes / (p.link_gbps * 1e9) * 1e3, rel=1e-12)
    assert p.effective_copy_ms >= p.link_ms_per_expert

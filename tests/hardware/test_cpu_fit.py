"""The one fitted term of the CPU-expert regime: the shipped fit file is what the fit writes, and it hits the figure."""

from __future__ import annotations

import pytest

from simmoe.fitting.cpu_fit import FIGURE, PROFILE, ar_token_ms, fit, render
from simmoe.hardware.cpu_forward import CPU_FIT_FILE, load_cpu_terms
from simmoe.hardware.cpu_profile import build_cpu_forward
from simmoe.published import PUBLISHED


def test_shipped_fit_is_reproduced_and_hits_the_admitted_figure():
    terms, seen = fit()
    assert CPU_FIT_FILE.read_text() == render(terms, seen)      # python -m simmoe.fitting.cpu_fit
    target = PUBLISHED["cpu_experts"][FIGURE]["generation_tokens_per_s"]
    shipped = load_cpu_terms()
    assert 1e3 / ar_token_ms(build_cpu_forward(PROFILE, shipped)) == pytest.approx(target, rel=1e-5)
    assert 0 < shipped.mem_efficiency < 1 and "fitted to llmfit PR #755" in shipped.source


def test_the_fit_moves_only_eta_mem():
    a, _ = fit(30.0)
    b, _ = fit(40.0)
    assert a.mem_efficiency < b.mem_efficiency
    assert (a.compute_efficiency, a.sync_ms, a.gpu_efficiency) == (b.compute_efficiency, b.sync_ms, b.gpu_efficiency)

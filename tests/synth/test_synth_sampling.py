"""`simmoe synth --temperature T`: the target-distribution model and the EVICT workload presets."""

from __future__ import annotations

import numpy as np
import pytest

from simmoe.cli import main
from simmoe.synth import PRESETS, generate
from simmoe.synth.evict_presets import EVICT_POOL, MAT_T0, eagle3_mat
from simmoe.trace.validate import validate_trace
from simmoe.trace.verdicts import sampled_agree


def small(name="qa", **changes):
    return PRESETS[name].params.with_(**changes)


def test_temperature_adds_fields_and_changes_nothing_else():
    p = small(target_spread=0.4)
    t0 = generate(p, num_requests=2)
    t1 = generate(p, num_requests=2, temperature=1.0)
    validate_trace(t1)
    assert t0.node_target_prob is None and t1.meta["sampling"] == {"temperature": 1.0, "seed": None,
                                                                    "text": "greedy"}
    for name in ("root_token", "root_routes", "node_ptr", "node_parent", "node_token", "node_q", "node_p",
                 "node_agree", "node_routes"):
        assert np.array_equal(getattr(t0, name), getattr(t1, name)), name


def test_zero_spread_at_temperature_one_is_greedy():
    """target_spread = 0: the greedy token holds all the mass, so every draw is the greedy verdict."""
    t = generate(small(target_spread=0.0), num_requests=2, temperature=1.0)
    for seed in (0, 1):
        assert np.array_equal(sampled_agree(t, 1.0, seed), t.node_agree)


def test_lower_temperature_sharpens_the_greedy_token():
    p = small(target_spread=0.6)
    greedy = {}
    for temp in (0.5, 1.0, 2.0):
        t = generate(p, num_requests=1, temperature=temp)
        greedy[temp] = t.node_target_prob[t.node_agree].astype(np.float64)
    assert np.all(greedy[0.5] >= greedy[1.0] - 1e-6) and np.all(greedy[1.0] >= greedy[2.0] - 1e-6)
    assert greedy[0.5].mean() > greedy[1.0].mean() > greedy[2.0].mean()


def test_spread_lowers_mat_at_temperature_one():
    mats = [eagle3_mat(generate(small(target_spread=s), num_requests=10, routes=False, temperature=1.0), 1.0)
            for s in (0.0, 0.3, 0.8)]
    assert mats[0] > mats[1] > mats[2]


def test_evict_presets_are_registered_with_evicts_pool():
    for name in MAT_T0:
        pr = PRESETS[name]
        assert pr.params.pool == EVICT_POOL and pr.params.dataset == name
        assert any("EVICT Table 2" in f for f in pr.fitted_to)
    assert PRESETS["gsm8k"].params.target_spread == PRESETS["qa"].params.target_spread > 0


@pytest.mark.slow
@pytest.mark.parametrize("name", list(MAT_T0))
def test_fitted_presets_reproduce_their_fitted_mat(name):
    """The fit figures (EVICT Table 2, temperature 0) are met within 2% on the full preset (fit set, not validation)."""
    t = generate(PRESETS[name].params, num_requests=None, routes=False)
    assert eagle3_mat(t) == pytest.approx(MAT_T0[name], rel=0.02)


def test_cli_temperature(tmp_path, capsys):
    out = tmp_path / "q.parquet"
    assert main(["synth", "--preset", "qa", "--requests", "1", "--temperature", "1", "--out", str(out),
                 "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["replay", str(out), "--temperature", "1", "--selectors", "eagle3", "--no-progress",
                 "--hardware", "a100-sxm-resident", "--slots", "0"]) == 0
    assert "Mat" in capsys.readouterr().out
    for bad in ("-0.5", "nan"):
        assert main(["synth", "--preset", "qa", "--requests", "1", "--temperature", bad, "--out",
                     str(tmp_path / "x.parquet")]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "temperature" in err

"""EVICT Tables 1, 2, 4, 6-11 with the physical cost model: what is fitted, the rows, the batch trend."""

from __future__ import annotations

import numpy as np
import pytest

from simmoe.validation.published import evict_mat10_11, evict_physical, evict_table6, evict_tables7_9
from simmoe.validation.published.physical_runs import (
    MODELS,
    TABLE6_BATCHES,
    mat_target,
    path_position_for,
    run_key,
)
from simmoe.validation.published.runs import Run, RunResult
from simmoe.validation.published.settings import published

PUB = published()


def test_what_may_be_fitted_follows_calibration():
    from simmoe.validation.published.physical_runs import mat_fitted

    for bench in ("gsm8k", "cnndm", "qa"):                           # Qwen3-30B-A3B replays the presets
        assert mat_target(PUB, "qwen3-30b-a3b", bench) is None
    assert mat_fitted("qwen3-30b-a3b", "gsm8k") is None               # the SpecFit presets predict it
    assert "preset" in mat_fitted("qwen3-30b-a3b", "qa")              # the EVICT presets were fitted to it
    assert mat_target(PUB, "ling-flash-2.0", "gsm8k") == 4.71        # Table 10, temperature 0
    assert mat_target(PUB, "qwen3-235b-a22b", "humaneval") == 4.56   # Table 11
    assert mat_target(PUB, "hunyuan-7b", "qa") is None and mat_fitted("hunyuan-7b", "qa") is None


def test_easy_share_is_read_off_an_increasing_curve():
    grid = np.linspace(0.05, 0.95, 13)
    mats = 1.5 + 3.0 * grid ** 1.5
    for target in (2.0, 3.07, 4.2):
        x = path_position_for(target, grid, mats)
        assert 1.5 + 3.0 * x ** 1.5 == pytest.approx(target, abs=0.02)
    assert path_position_for(0.0, grid, mats) == grid[0]                # clamped outside the curve


def _res(keys_tps: dict) -> dict:
    out = {}
    for key, (tps, committed) in keys_tps.items():
        summ = {"decode_tps": tps, "committed": committed, "ms_per_cycle": 10.0, "draft_nodes": 5.0,
                "drafted_levels": 4.0}
        extra = {"union_per_layer": 20.0, "misses_per_cycle": 0.0, "accepted": 1.0, "draft_ms": 1.0,
                 "selector_ms": 0.0, "forward_ms": 8.0}
        out[key] = RunResult(Run(key, "t", key.split("/")[3], 0, "h"), summ, extra)
    return out


def test_table6_rows_gains_and_trend():
    res = {}
    for bench in ("qa", "humaneval"):
        for i, b in enumerate(TABLE6_BATCHES):
            e = 100.0 * b
            gain = (0.05 + 0.08 * i) if bench == "qa" else -0.02
            res.update(_res({run_key("qwen3-30b-a3b", bench, "ar", b): (50.0 * b, 1.0),
                             run_key("qwen3-30b-a3b", bench, "eagle3", b): (e, 3.0),
                             run_key("qwen3-30b-a3b", bench, "evict", b): (e * (1 + gain), 2.5)}))
    rows = evict_table6.rows(PUB, res, {}, {})
    trend = [r for r in rows if r.goal == "batch_trend"]
    assert [r.status for r in trend] == ["PASS", "PASS"]
    gains = [r for r in rows if r.goal == "gain" and r.quantity.startswith("qa, batch 4:")]
    assert gains[0].simulated == pytest.approx(5.0) and gains[0].published == pytest.approx(5.1, abs=0.05)
    fit = [r for r in rows if r.role == "fit"]
    assert fit and all(r.quantity.startswith("qa") and "vanilla" in r.quantity for r in fit)
    assert all(r.figure == "evict.fit_in_evict_tables" for r in fit)
    # a flat QA gain is not the published trend
    for b in TABLE6_BATCHES:
        res[run_key("qwen3-30b-a3b", "qa", "evict", b)].summary["decode_tps"] = 100.0 * b
    assert [r for r in evict_table6.rows(PUB, res, {}, {}) if r.goal == "batch_trend"][0].status == "MISS"


def test_published_values_sit_at_their_paths():
    res = {}
    for model in MODELS:
        for bench in ("alpaca", "gsm8k", "humaneval", "qa", "mt_bench", "cnndm"):
            res.update(_res({run_key(model, bench, s): (100.0 + i, 3.0)
                             for i, s in enumerate(("ar", "eagle3", "ddd", "evict"))}))
    rows = evict_physical.rows(PUB, res, {}, {})[:-9]      # Table 4's rows recompute the fit: left to the slow test
    rows += evict_tables7_9.rows(PUB, res, {}, {}) + evict_mat10_11.rows(PUB, res, {}, {})
    assert len(rows) > 100
    for r in rows:
        if not r.path:
            assert r.simulated == "not simulated" or r.goal in ("gain",) or "cycle" in r.quantity
            continue
        node = PUB
        for p in r.path:
            node = node[p]
        assert node == r.published, r.quantity
        assert r.role in ("fit", "validate")
        if r.role == "fit":
            assert r.figure == "evict.fit_in_evict_tables" and r.goal is None

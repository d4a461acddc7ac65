"""The fidelity command's temperature-1 pieces: the sampling term and the report section (no model runs)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from hwprobe.fidelity import sampling_term
from hwprobe.fidelity_report import t1_report, t1_rows


def _run(selector, slots, commit, accepted, select=None, cycle=None, samples=None):
    n = len(commit)
    cycles = {"commit_ms": np.asarray(commit, np.float64), "accepted": np.asarray(accepted, np.int16),
              "select_ms": np.asarray(select if select is not None else [0.0] * n, np.float64),
              "cycle_ms": np.asarray(cycle if cycle is not None else [10.0] * n, np.float64),
              "samples_ms": samples if samples is not None else [[]] * n}
    return SimpleNamespace(meta={"selector": selector, "slots": slots}, num_cycles=n, cycles=cycles,
                           requests=[{"output_len": n + 1}])


def test_sampling_term_is_the_mean_commit_difference_per_configuration():
    # commit = 0.05 + 0.03 * accepted (+ 0.13 when sampled); temperature 1 accepts fewer tokens
    acc0, acc1 = np.array([0, 1, 2, 3, 4, 2]), np.array([0, 1, 0, 1, 2, 0])
    t0 = [_run("eagle3", 4, 0.05 + 0.03 * acc0, acc0), _run("ar", 4, [0.04] * 6, [0] * 6)]
    t1 = [_run("eagle3", 4, 0.18 + 0.03 * acc1, acc1), _run("ar", 4, [0.16] * 4, [0] * 4)]
    term = sampling_term(t0, t1)
    d_eagle = 0.13 + 0.03 * (acc1.mean() - acc0.mean())
    assert term["ms"] == pytest.approx((d_eagle + 0.12) / 2)
    eagle, ar = term["rows"]
    assert eagle["commit_ms"][1] - eagle["commit_ms"][0] == pytest.approx(d_eagle)
    assert eagle["equal_accepted_ms"] == pytest.approx(0.13)       # the verdict's own cost, acceptance held equal
    assert ar["equal_accepted_ms"] == pytest.approx(0.12)          # no spread in accepted tokens: the difference
    assert eagle["cycles"] == (6, 6) and ar["cycles"] == (6, 4)


def test_sampling_term_refuses_mismatched_configurations():
    with pytest.raises(ValueError, match="different configurations"):
        sampling_term([_run("eagle3", 4, [0.1], [0])], [_run("eagle3", 0, [0.2], [0])])
    with pytest.raises(ValueError, match="no runs"):
        sampling_term([], [])


def _validation(tps_live, tps_rep, mat):
    return SimpleNamespace(
        selector="eagle3", slots=4, live={"cycles": 3, "decode_tps": tps_live},
        replay={"mat": mat, "decode_tps": tps_rep},
        errors={"decode_tps": (tps_rep - tps_live) / tps_live, "accepted_mismatches": 0, "cycle_median": 0.02,
                "cycle_noise_floor": 0.01,
                "parts_ms": {"draft": (20.0, 21.0), "select": (1.0, 1.0), "verify": (9.0, 8.0), "commit": (0.6, 0.5)}})


def test_t1_report_has_the_term_the_parts_and_the_noise():
    run = _run("eagle3", 4, [0.2] * 3, [1, 0, 2], cycle=[10.0, 10.0, 10.0],
               samples=[[10.0, 11.0], [10.0, 12.0], [10.0, 10.5]])
    v, plain = _validation(100.0, 102.0, 2.0), _validation(100.0, 104.0, 2.0)
    rows = t1_rows([v], [run], [plain])
    assert rows[0]["pass"] and rows[0]["mat_error"] == pytest.approx(0.0)
    assert rows[0]["tps_error_plain"] == pytest.approx(0.04)
    sampling = {"ms": 0.1, "rows": [{"selector": "eagle3", "slots": 4, "cycles": (5, 8), "commit_ms": (0.1, 0.2),
                                     "accepted": (1.5, 0.6), "select_ms": (0.04, 0.05), "equal_accepted_ms": 0.13}]}
    text = t1_report([v], [run], sampling=sampling, plain=[plain], profile=SimpleNamespace(commit_ms=0.175))
    assert "met by 1 of 1" in text and "| +2.0% | +4.0% | 2.0% | 1.0% |" in text
    assert "### The sampling term" in text and "0.1000 ms per cycle" in text and "0.0750 → 0.1750" in text
    assert "| eagle3 | 4 | 20 / 21 | 1 / 1 | 9 / 8 | 1 / 0 |" in text
    assert "Mat holds by construction" in text
    # each pass's decode TPS: output_len - 1 = 3 tokens over 30 ms (pass 1) and 33.5 ms (pass 2)
    assert "| eagle3 | 4 | 89.6–100.0 | 100.0 |" in text

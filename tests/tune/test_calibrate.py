"""Recalibration from one measured point: parsing, a round trip through the simulator, EVICT's published rows."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simmoe.errors import SimmoeError
from simmoe.published import PUBLISHED
from simmoe.tune import space as sp
from simmoe.tune.calibrate import measured_config, parse_measured, recalibrate
from simmoe.tune.evaluate import Setup, evaluate


def test_parse_measured_reads_every_field():
    m = parse_measured("topk=8, steps=4,draft_tokens=32,accept_len=3.07,tokens_per_s=152.79,"
                       "vanilla_tokens_per_s=144.62")
    assert m == {"topk": 8, "steps": 4, "draft_tokens": 32, "accept_len": 3.07, "tokens_per_s": 152.79,
                 "vanilla_tokens_per_s": 144.62}


@pytest.mark.parametrize("text, match", [
    ("steps=4,accept_len=3", "missing"),
    ("steps=4.5,accept_len=3,tokens_per_s=1,vanilla_tokens_per_s=1", "integer"),
    ("steps=4,accept_len=0.5,tokens_per_s=1,vanilla_tokens_per_s=1", "at least 1"),
    ("steps=4,accept_len=nan,tokens_per_s=1,vanilla_tokens_per_s=1", "positive"),
    ("steps=4,accept_len=x,tokens_per_s=1,vanilla_tokens_per_s=1", "not a number"),
])
def test_parse_measured_refuses_in_one_line(text, match):
    with pytest.raises(SimmoeError, match=match):
        parse_measured(text)


def test_measured_config_per_engine():
    m = {"steps": 3, "accept_len": 2.0, "tokens_per_s": 1.0, "vanilla_tokens_per_s": 1.0}
    assert measured_config("sglang", m).draft_tokens == 4          # top-k 1: the chain and its root
    assert measured_config("vllm", m).K == 3
    with pytest.raises(SimmoeError, match="chain"):
        measured_config("vllm", {**m, "topk": 4})
    with pytest.raises(SimmoeError, match="drafted levels"):
        measured_config("sglang", {**m, "accept_len": 5.0})


def test_round_trip_recovers_the_terms_that_made_the_point():
    """A point measured on the simulator itself with changed terms: recalibration finds them again."""
    base = Setup("qa", "qwen3-30b-a3b@h100-sxm:tp2")
    cfg = sp.TuneConfig("sglang", "EAGLE3", "eagle3", steps=3, topk=2, draft_tokens=6)
    truth = replace(base, confidence_shift=-0.8, step_ms=5.0, spec_iteration_ms=4.0)
    ar, spec = evaluate(truth, sp.ar_config("sglang"), 1), evaluate(truth, cfg, 1)
    m = {"topk": 2, "steps": 3, "draft_tokens": 6, "accept_len": spec["accept_len"],
         "tokens_per_s": spec["tokens_per_s"], "vanilla_tokens_per_s": ar["tokens_per_s"]}
    got, notes = recalibrate(base, "sglang", m, fit_requests=1, time_requests=1)
    assert set(notes) == {"vanilla step", "drafter confidence", "served iteration"}
    assert got.step_ms == pytest.approx(5.0, rel=0.01)
    # exact at the fitted acceptance: the measured configuration's tokens/s is reproduced
    assert evaluate(got, cfg, 1)["tokens_per_s"] == pytest.approx(m["tokens_per_s"], rel=1e-6)
    assert evaluate(got, cfg, 1)["accept_len"] == pytest.approx(m["accept_len"], abs=0.03)
    assert got.spec_iteration_ms == pytest.approx(4.0, rel=0.05)
    assert got.confidence_shift < 0


@pytest.mark.slow
def test_fit_on_evict_qa_row_predicts_the_other_workloads():
    """EVICT Table 1 (Qwen3-30B-A3B, A100, temperature 0): fit on QA's EAGLE-3 row, predict the others."""
    e = PUBLISHED["evict"]
    cols = e["table1_qwen3_30b_a3b_t0"]["columns"]
    rows = {r[0]: dict(zip(cols[1:], r[1:])) for r in e["table1_qwen3_30b_a3b_t0"]["rows"]}
    mat = {r[0]: dict(zip(e["table2_mat_qwen3_30b_a3b_t0"]["columns"][1:], r[1:]))
           for r in e["table2_mat_qwen3_30b_a3b_t0"]["rows"]}
    m = {"topk": 8, "steps": 4, "draft_tokens": 32, "accept_len": mat["qa"]["eagle3"],
         "tokens_per_s": rows["eagle3"]["qa"], "vanilla_tokens_per_s": rows["vanilla"]["qa"]}
    base = Setup("qa", "qwen3-30b-a3b@a100-sxm4-80gb")
    got, _ = recalibrate(base, "sglang", m, fit_requests=2, time_requests=2)
    cfg = measured_config("sglang", m)
    for w in ("mt_bench", "alpaca"):
        s = replace(got, workload=w)
        assert evaluate(s, sp.ar_config("sglang"), 2)["tokens_per_s"] == pytest.approx(rows["vanilla"][w], rel=0.05)
        assert evaluate(s, cfg, 2)["tokens_per_s"] == pytest.approx(rows["eagle3"][w], rel=0.15)

"""`simmoe.tune(...)`: a DataFrame of every configuration tried."""

from __future__ import annotations

import pytest

import simmoe
from simmoe.errors import SimmoeError


def test_tune_returns_every_evaluation_as_a_frame():
    df = simmoe.tune("qwen3-30b-a3b@h100-sxm:tp2", workload="qa", engine="vllm", budget="20s")
    outcome = df.attrs["outcome"]
    assert len(df) == outcome.search.evaluations > 0
    assert df["synthetic"].all()
    last = df[df["rung"] == df["rung"].max()]
    assert last["tokens_per_s"].max() == pytest.approx(outcome.best["tokens_per_s"])
    ar = outcome.ar_by_rung[(0, None)]["tokens_per_s"]
    first = df[df["rung"] == 0]
    assert (first["speedup"] - first["tokens_per_s"] / ar).abs().max() < 1e-12


def test_tune_refuses_bad_input_in_one_line():
    with pytest.raises(SimmoeError, match="more than 0 seconds"):
        simmoe.tune("qwen3-30b-a3b@h100-sxm:tp2", budget=0)
    assert callable(simmoe.tune) and simmoe.tune.space.ENGINES

"""Topic facets and drift: each knob moves its routing statistic, next-token overlap stays put."""

from __future__ import annotations

import numpy as np
import pytest

from simmoe.errors import SimmoeError
from simmoe.synth import PRESETS, SynthParams, generate
from simmoe.synth.routing import TOPIC_SEGMENT_TOKENS, DriftingSampler, modulate, topic_segments
from simmoe.trace.compare import per_request_statistics

GSM8K = PRESETS["gsm8k"].params
KEYS = ("next_token_overlap", "top10pct_share", "hot_set_stability")
# How far next-token overlap may move (share of k); the real traces' requests span 0.23-0.83.
OVERLAP_TOLERANCE = 0.025


def statistics(seed: int, **knobs) -> dict[str, float]:
    """Mean over three requests of the gsm8k preset's committed tokens (pool nodes skipped: not measured)."""
    trace = generate(GSM8K.with_(**knobs), seed=seed, num_requests=3, node_routes=False)
    per = per_request_statistics(trace)
    return {key: float(np.nanmean(per[key])) for key in KEYS}


@pytest.mark.parametrize("seed", [0, 1])
def test_facet_share_spreads_routings_keeping_next_token_overlap(seed):
    base, spread = statistics(seed), statistics(seed, facet_share=1.0)
    assert spread["top10pct_share"] < base["top10pct_share"] - 0.12
    assert abs(spread["next_token_overlap"] - base["next_token_overlap"]) < OVERLAP_TOLERANCE


@pytest.mark.parametrize("seed", [0, 1])
def test_topic_drift_unsettles_the_hot_set_keeping_next_token_overlap(seed):
    base, drift = statistics(seed), statistics(seed, topic_drift=0.01)
    fall = base["hot_set_stability"] - drift["hot_set_stability"]
    assert fall > 0.2
    assert fall > 2 * (base["top10pct_share"] - drift["top10pct_share"])   # mostly stability, not concentration
    assert abs(drift["next_token_overlap"] - base["next_token_overlap"]) < OVERLAP_TOLERANCE


def test_knobs_leave_pools_and_text_unchanged():
    from synth_tiny import TINY

    params = TINY.with_(topic_sigma=1.0)
    a, b = generate(params, seed=2), generate(params.with_(facet_share=0.4, topic_drift=0.05), seed=2)
    for name in ("root_token", "node_ptr", "node_parent", "node_q", "node_p", "node_agree"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert not np.array_equal(a.root_routes, b.root_routes)


def test_static_segments_are_the_static_topic():
    """With neither knob every segment is the topic modulate() draws from the same stream."""
    probs = np.random.default_rng(0).dirichlet(np.ones(9), size=3)
    segs = topic_segments(probs, 1.3, 0.0, 0.0, 5 * TOPIC_SEGMENT_TOKENS - 1, np.random.default_rng(7))
    want = modulate(probs, 1.3, np.random.default_rng(7))
    assert segs.shape == (5, 3, 9)
    for s in range(5):
        np.testing.assert_allclose(segs[s], want, rtol=1e-12)


def test_drifting_sampler_draws_from_the_segment_of_each_step():
    S, L, N = 4, 2, 6
    probs = np.zeros((S, L, N))
    for s in range(S):
        probs[s, 0, s] = 1.0                          # layer 0: all mass on expert s in segment s
        probs[s, 1] = np.arange(1, N + 1) / (N * (N + 1) / 2)
    sampler = DriftingSampler(probs)
    rng = np.random.default_rng(1)
    steps = rng.integers(0, S * TOPIC_SEGMENT_TOKENS + 20, size=500)     # past the end: the last segment
    got = sampler.draw(np.zeros(500, np.int64), rng, steps)
    assert np.array_equal(got, np.minimum(steps // TOPIC_SEGMENT_TOKENS, S - 1))
    draws = sampler.draw(np.ones(60_000, np.int64), rng, np.zeros(60_000, np.int64))
    freq = np.bincount(draws, minlength=N) / draws.size
    assert np.abs(freq - probs[0, 1]).max() < 0.01


@pytest.mark.parametrize("bad", [dict(facet_share=-0.1), dict(facet_share=1.5), dict(topic_drift=2.0),
                                 dict(topic_sigma=0.0, topic_drift=0.1), dict(topic_sigma=0.0, facet_share=0.5)])
def test_bad_knobs_raise_simmoe_error(bad):
    with pytest.raises(SimmoeError):
        GSM8K.with_(**bad)


def test_metadata_names_the_knobs_only_when_set():
    assert "facet_share" not in GSM8K.to_dict() and "topic_drift" not in GSM8K.to_dict()
    p = GSM8K.with_(facet_share=0.25, topic_drift=0.02)
    d = p.to_dict()
    assert (d["facet_share"], d["topic_drift"]) == (0.25, 0.02)
    assert SynthParams.from_dict(d) == p and SynthParams.from_dict(GSM8K.to_dict()) == GSM8K


def test_synth_flags(tmp_path, capsys):
    from simmoe.cli import main
    from simmoe.cli.synth import OVERRIDES

    assert OVERRIDES["--facet-share"][0] == "facet_share" and OVERRIDES["--topic-drift"][0] == "topic_drift"
    out = tmp_path / "t.parquet"
    assert main(["synth", "--preset", "gsm8k", "--requests", "1", "--facet-share", "0.5", "--topic-drift",
                 "0.01", "--out", str(out), "--no-progress"]) == 0
    from simmoe.trace.io import read_trace

    meta = read_trace(out).meta
    assert meta["synth_params"]["facet_share"] == 0.5 and meta["synth_params"]["topic_drift"] == 0.01
    assert any("facet_share=0.5" in x for x in meta["provenance"]["fitted_to"])
    assert main(["synth", "--preset", "gsm8k", "--requests", "1", "--topic-drift", "3",
                 "--out", str(tmp_path / "u.parquet")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "topic_drift" in err
    assert not (tmp_path / "u.parquet").exists()

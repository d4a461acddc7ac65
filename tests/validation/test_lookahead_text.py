"""Lookahead's acceptance from text: the counts, the rates and stretches read from them, the simulated Mat."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hwprobe.lookahead_check import text_counts
from simmoe.errors import SimmoeError
from simmoe.validation.lookahead import TextCounts, lookahead_params, simulate_mat, text_workload


def test_a_periodic_text_is_all_hits():
    prompt = [5, 6, 7] * 3
    c = text_counts(prompt, [5, 6, 7] * 4, branches=2, branch_length=3)
    assert (c.positions, c.hits, c.others, c.hit_runs, c.miss_runs) == (11, 11, 0, 1, 0)
    # down each matched branch: min(branch_length - 1, tokens left) further tokens, all right
    want = sum(min(2, 12 - 2 - t) for t in range(11))
    assert (c.follow_trials, c.follow_hits) == (want, want)


def test_text_without_repeats_is_all_misses():
    c = text_counts([1, 2, 3], list(range(10, 20)), branches=3, branch_length=4)
    assert (c.positions, c.hits, c.others, c.follow_trials, c.hit_runs, c.miss_runs) == (9, 0, 0, 0, 0, 1)


def test_runs_are_counted_per_switch():
    # 10 11 12 repeats the prompt (the branch after 12 says 10, not 30), fresh 30 31, then 10 11 12 again
    c = text_counts([10, 11, 12], [10, 11, 12, 30, 31, 10, 11, 12], branches=1, branch_length=2)
    assert (c.positions, c.hits, c.hit_runs, c.miss_runs) == (7, 4, 2, 1)


@given(st.integers(1, 400), st.data(), st.integers(2, 8))
def test_spread_inverts_the_generators_sibling_shares(positions, data, branches):
    hits = data.draw(st.integers(0, positions - 1))
    others = data.draw(st.integers(0, positions - hits))
    p = lookahead_params(TextCounts(positions, hits, others, 1, 1), branches)
    missed = positions - hits
    assert p["hit"] == pytest.approx(max(hits / positions, 1e-3))
    if 0 < others < missed and p["spread"] > 1e-3:    # not at the floor that keeps it inside (0, 1]
        assert 1 - (1 - p["spread"]) ** (branches - 1) == pytest.approx(others / missed)
    assert all(0 < v <= 1 for v in p.values())


def test_stretches_from_runs():
    w = text_workload(TextCounts(positions=100, hits=60, others=5, follow_trials=1, follow_hits=1,
                                 hit_runs=6, miss_runs=4))
    assert w["easy_share"] == pytest.approx(0.6)
    assert w["stretch_tokens"] == pytest.approx((60 / 6 + 40 / 4) / 2)
    assert w["hard_confidence"] < w["easy_confidence"]


def test_inconsistent_counts_and_unknown_workload_are_one_line():
    with pytest.raises(SimmoeError, match="inconsistent"):
        TextCounts(10, 8, 5, 0, 0)
    for f in (lambda c: lookahead_params(c, 2), text_workload):
        with pytest.raises(SimmoeError, match="no output position"):
            f(TextCounts(0, 0, 0, 0, 0))
    with pytest.raises(SimmoeError, match="unknown workload"):
        simulate_mat(TextCounts(10, 5, 0, 1, 1, 1, 1), [10], branches=2, branch_length=2, draft_tokens=4,
                     workload="nope")


def test_simulated_mat_follows_the_texts_repetitiveness():
    kw = dict(branches=2, branch_length=4, draft_tokens=8, replicas=2)
    rare = simulate_mat(TextCounts(100, 2, 1, 2, 1, 2, 3), [40, 40], **kw)
    often = simulate_mat(TextCounts(100, 90, 2, 300, 290, 3, 2), [40, 40], **kw)
    assert 1.0 <= rare.mat < 1.2 < 3.0 < often.mat <= 5.0
    assert rare.cycles > often.cycles


@pytest.mark.parametrize("argv, says", [
    (["--branches", "0"], "--branches 1..16"),
    (["--json", "out.txt"], "--json"),
    (["--limit", "0"], "--limit >= 1"),
    (["--category", "nope"], "no prompts in category"),
])
def test_bad_input_is_one_line_before_any_model(argv, says, capsys, tmp_path, monkeypatch):
    from hwprobe.lookahead_check import main

    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and "\n" not in err and not (tmp_path / "out.txt").exists()

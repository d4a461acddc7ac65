"""Lookahead's and DFlash's fit (simmoe.fitting.drafter_fit) and their rows in the validation report."""

from __future__ import annotations

import tomllib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simmoe.drafters.fitted import DRAFTER_FIT_FILE, FITTED, fitted_params
from simmoe.fitting import drafter_fit
from simmoe.validation.published import drafter_rows
from simmoe.validation.published.physical_runs import run_key
from simmoe.validation.published.runs import Run, RunResult
from simmoe.validation.published.settings import published

PUB = published()


@given(st.floats(0.5, 3.0), st.floats(0.05, 0.95), st.floats(0.0, 5.0))
def test_root_finds_the_target_of_an_increasing_curve(power, where, offset):
    """Against the closed-form root of f(x) = offset + x^power on [0, 1], from any starting bracket."""
    f = lambda x: offset + 100.0 * x ** power   # noqa: E731
    target = f(where)
    x, got, how = drafter_fit.root(f, target, 0.0, 1.0, (0.3, 0.6), evals=60)
    assert how == "fitted"
    assert abs(got - target) <= drafter_fit.TOLERANCE * target
    assert abs(f(x) - got) < 1e-9


def test_root_keeps_the_bound_and_says_so_when_unreachable():
    x, got, how = drafter_fit.root(lambda v: 10.0 * v, 50.0, 0.5, 2.0, (1.0, 1.5))
    assert x == 2.0 and got == 20.0 and how.startswith("unreachable: the upper bound gives 20.00")
    x, got, how = drafter_fit.root(lambda v: 10.0 * v, 1.0, 0.5, 2.0, (1.0, 1.5))
    assert x == 0.5 and how.startswith("unreachable: the lower bound")


def test_shipped_fit_names_every_admitted_figure_once_and_is_read_back():
    fit = tomllib.loads(DRAFTER_FIT_FILE.read_text())
    assert set(fit["lookahead"]) == set(drafter_fit.LOOKAHEAD_BENCHES)
    assert set(fit["dflash"]) == set(drafter_fit.DFLASH_BENCHES)
    for drafter, benches in fit.items():
        for bench, e in benches.items():
            assert e["target_tps"] == drafter_fit.published_value(PUB, drafter, bench)
            assert fitted_params(drafter, bench) == {FITTED[drafter]: pytest.approx(e[FITTED[drafter]], abs=1e-6)}
            if e["how"] == "fitted":   # within the tolerance, or where MAX_EVALS replays of a noisy curve stopped
                assert abs(e["fitted_tps"] / e["target_tps"] - 1.0) <= 2 * drafter_fit.TOLERANCE
    assert fitted_params("lookahead", "no-such-workload") == {} and fitted_params("eagle3", "qa") == {}
    # the file is what to_toml writes from its own entries: nothing edited by hand
    entries = {d: {b: dict(e) for b, e in fit[d].items()} for d in ("lookahead", "dflash")}
    assert drafter_fit.to_toml({**entries, "seed": 0}) == DRAFTER_FIT_FILE.read_text()


def test_a_small_fit_reproduces_its_own_numbers():
    """A one-request Lookahead fit on QA: the tokens/s it reports is what its hit replays to."""
    from simmoe import drafters

    seen: list[str] = []
    e = drafter_fit.fit_one(PUB, "lookahead", "qa", drafter_fit.Sizes(lookahead=1), seen.append, evals=3)
    assert 2 <= len(seen) <= 3 and e["target_tps"] == 93.6 and e["requests"] == 1
    assert drafter_fit.HIT_RANGE[0] <= e["hit"] <= drafter_fit.HIT_RANGE[1]
    d = drafters.build("lookahead", {"hit": e["hit"]})
    trace = drafter_fit.drafter_workload(drafter_fit.MODEL, "qa", d, 1, 0)
    assert drafter_fit.replay_tps(trace, drafter_fit.LOOKAHEAD_PROFILE) == e["fitted_tps"]
    assert trace.meta["drafter"]["params"]["hit"] == e["hit"]


@pytest.mark.slow
def test_shipped_lookahead_fit_replays_to_its_tokens_per_second():
    """The shipped hit on QA, replayed on the fit's workload, gives the tokens/s the file records."""
    from simmoe import drafters

    e = tomllib.loads(DRAFTER_FIT_FILE.read_text())["lookahead"]["qa"]
    d = drafters.build("lookahead", {"hit": e["hit"]})
    trace = drafter_fit.drafter_workload(drafter_fit.MODEL, "qa", d, e["requests"], 0)
    assert drafter_fit.replay_tps(trace, e["profile"]) == pytest.approx(e["fitted_tps"], abs=0.006)


def _res(keys: list[str]) -> dict:
    out = {}
    for k, key in enumerate(keys):
        summ = {"decode_tps": 100.0 + k, "mat": 2.0, "ms_per_cycle": 10.0, "draft_nodes": 5.0}
        out[key] = RunResult(Run(key, "t", "eagle3", 0, "h"), summ, {})
    return out


def test_fitted_rows_are_exactly_what_calibration_admits():
    keys = [run_key(m, b, "lookahead", 1, t) for m in drafter_rows.LOOKAHEAD_TABLES for b in drafter_rows.BENCHES
            for t in (0, 1)]
    keys += [run_key("qwen3-30b-a3b", b, m, bs) for b in ("qa", "humaneval") for m in ("dflash", "dflash+evict")
             for bs in (4, 8, 16, 32, 64)]
    rows = drafter_rows.rows(PUB, _res(keys), {}, {})
    fit = sorted((r.section.split(":")[0], r.quantity) for r in rows if r.role == "fit")
    assert fit == sorted([("EVICT Table 1", f"{b}: lookahead tokens/s") for b in drafter_rows.BENCHES]
                         + [("EVICT Table 6", f"{b}, batch 4: dflash tokens/s") for b in ("qa", "humaneval")])
    for r in rows:
        if r.role == "fit":
            assert r.figure == "evict.fit_in_evict_tables" and r.goal is None
        else:
            assert r.goal in ("tps", "gain") and r.figure.startswith("evict.table")
        if r.path:   # the published value sits where the row says
            node = PUB
            for p in r.path:
                node = node[p]
            assert node == r.published
    t1 = [r for r in rows if "(T=1)" in r.quantity]
    assert len(t1) == 18 and all(r.run.endswith("/t1") and r.role == "validate" for r in t1)
    dflash = [r for r in rows if "dflash" in r.quantity and r.role == "validate"]
    assert len(dflash) == 2 * 4 + 2 * 5   # DFlash at 8-64, DFlash + EVICT at 4-64

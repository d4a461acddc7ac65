"""The optimizer: it finds the exhaustive best on spaces small enough to enumerate, and is reproducible."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simmoe.tune import space as sp
from simmoe.tune.evaluate import Setup, evaluator
from simmoe.tune.search import latin_points, neighbours, successive_halving


def _objective(seed):
    """A random objective over (steps, topk, draft tokens), the same at every trace length."""
    rng = np.random.default_rng(seed)
    table = rng.random((9, 11, 65))

    def run(cfgs, requests):
        return [{"tokens_per_s": float(table[c.steps, c.topk, c.draft_tokens]), "accept_len": 1.0,
                 "verified": 1.0} for c in cfgs]
    return run, table


def _small_space():
    return sp.engine_space("sglang", selections=("eagle3",), steps=(1, 2, 3), topk=(1, 2, 3),
                           draft_tokens=(2, 3, 4, 5, 6, 7, 8))


@given(st.integers(0, 10_000))
@settings(max_examples=25, deadline=None)
def test_finds_the_exhaustive_best_of_a_small_space(seed):
    space = _small_space()
    run, table = _objective(seed)
    brute = max((space.make(p) for p in space.points()),
                key=lambda c: table[c.steps, c.topk, c.draft_tokens])
    res = successive_halving(space, run, budget_s=60.0, seed=seed, initial=space.size())
    assert res.best[0] == brute
    assert res.evaluations <= 3 * space.size()      # each point at most once per rung


def _unimodal(cfgs, requests):
    # peak at steps 5, top-k 4, draft tokens 20 (a smooth landscape, as the predicted ones are)
    return [{"tokens_per_s": 100.0 - (c.steps - 5) ** 2 - 2 * (c.topk - 4) ** 2 - 0.1 * abs(c.draft_tokens - 20),
             "accept_len": 1.0, "verified": 1.0} for c in cfgs]


def test_climbs_to_the_peak_from_a_small_sample():
    space = sp.engine_space("sglang", selections=("eagle3",))
    res = successive_halving(space, _unimodal, budget_s=60.0, seed=3, initial=12)
    best = res.best[0]
    assert (best.steps, best.topk, best.draft_tokens) == (5, 4, 20)
    # not a grid: the climb reaches the peak early (the budget left then explores further from the ranking)
    first = next(i for i, r in enumerate(res.rows) if (r["steps"], r["topk"], r["draft_tokens"]) == (5, 4, 20)
                 and r["rung"] == res.rung)
    assert first < space.size() / 10


def test_latin_sample_covers_each_dimension():
    space = sp.engine_space("vllm")
    pts = latin_points(space, 8, np.random.default_rng(0))
    assert sorted(p[0] for p in pts) == list(range(8))      # 8 strata of 8 values: each once


def test_neighbours_are_valid_and_one_step_away():
    space = sp.engine_space("sglang", selections=("eagle3",))
    p = space.point_of(sp.TuneConfig("sglang", "EAGLE3", "eagle3", steps=3, topk=2, draft_tokens=6))
    for q in neighbours(space, p):
        assert space.make(q) is not None
        assert sum(a != b for a, b in zip(p, q)) >= 1


def test_budget_stops_the_search():
    space = sp.engine_space("sglang", selections=("eagle3",))
    res = successive_halving(space, _unimodal, budget_s=0.0, seed=0, initial=10)
    assert res.out_of_budget and res.evaluations == 0 and res.best is None


def test_real_search_reproducible_with_seed():
    setup = Setup("qa", "qwen3-30b-a3b@h100-sxm:tp2")
    space = sp.engine_space("vllm", steps=(1, 2, 3, 4))
    runs = [successive_halving(space, evaluator(setup), budget_s=60.0, seed=5, initial=3, rungs=(1, 2))
            for _ in range(2)]
    assert [r["tokens_per_s"] for r in runs[0].rows] == [r["tokens_per_s"] for r in runs[1].rows]
    assert runs[0].best[0] == runs[1].best[0]
    assert {r["rung"] for r in runs[0].rows} == {0, 1}


def test_real_search_matches_exhaustive_on_a_tiny_space():
    setup = Setup("qa", "qwen3-30b-a3b@h100-sxm:tp2")
    space = sp.engine_space("vllm", steps=(1, 2, 3))
    ev = evaluator(setup)
    brute = ev([space.make(p) for p in space.points()], 1)
    best = max(zip(space.points(), brute), key=lambda t: t[1]["tokens_per_s"])[0]
    res = successive_halving(space, ev, budget_s=60.0, seed=0, initial=3, rungs=(1,))
    assert res.best[0] == space.make(best)


@pytest.mark.parametrize("engine", sp.ENGINES)
def test_default_is_in_its_space(engine):
    space = sp.engine_space(engine)
    assert space.make(space.point_of(space.default)) == space.default

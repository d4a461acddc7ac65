"""The learned cache policy trains only on requests outside the replay, and says when too few remain."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from factories import random_trace
from hypothesis import given, settings
from hypothesis import strategies as st

from simmoe.api import CacheShape, ForwardEvent
from simmoe.errors import SimmoeError
from simmoe.replay import cache_learned
from simmoe.replay.cache_learned import Learned, training_demands
from simmoe.replay.engine import ReplayConfig, replay


def shape_for(trace, replayed: int, seed: int = 0) -> CacheShape:
    g = trace.geometry
    return CacheShape(g.num_layers, g.num_experts, 2, seed=seed, trace=trace, requests=tuple(range(replayed)))


def scrambled(trace, requests, seed):
    """The trace with every route and prefill of ``requests`` replaced by other random ones."""
    rng = np.random.default_rng(seed)
    g = trace.geometry
    roots = trace.root_routes.copy()
    rows = np.flatnonzero(np.isin(trace.pos_request, list(requests)))
    roots[rows] = rng.integers(0, g.num_experts, size=roots[rows].shape)
    prefill = trace.requests.prefill_union.copy()
    prefill[list(requests)] = rng.random(prefill[list(requests)].shape) < 0.5
    return dataclasses.replace(trace, root_routes=roots,
                               requests=dataclasses.replace(trace.requests, prefill_union=prefill))


@settings(max_examples=8)
@given(replayed=st.integers(1, 6), seed=st.integers(0, 3))
def test_the_learner_never_sees_the_requests_it_is_evaluated_on(replayed, seed):
    trace = random_trace(seed=seed, num_requests=12, output_len=(8, 14), L=2, N=6, k=2)
    policy = Learned()
    policy.reset(shape_for(trace, replayed, seed))
    assert policy.trained_on and not set(policy.trained_on) & set(range(replayed))
    assert policy.trained_on == tuple(range(replayed, min(12, replayed + Learned.train_requests)))
    # whatever the replayed requests route to, the learner is the same
    other = Learned()
    other.reset(shape_for(scrambled(trace, range(replayed), seed + 7), replayed, seed))
    assert np.array_equal(policy._table, other._table)
    # ... and it does read the requests it trains on
    third = Learned()
    third.reset(shape_for(scrambled(trace, policy.trained_on, seed + 7), replayed, seed))
    assert not np.array_equal(policy._table, third._table)


def test_deterministic_given_the_seed():
    trace = random_trace(seed=3, num_requests=10, output_len=(8, 14), L=2, N=6, k=2)
    a, b = Learned(), Learned()
    a.reset(shape_for(trace, 3, seed=5))
    cache_learned._TRAINED.clear()          # train again, not from the memo
    b.reset(shape_for(trace, 3, seed=5))
    assert np.array_equal(a._table, b._table)
    d = np.zeros((2, 6), dtype=bool)
    d[:, :2] = True
    for p in (a, b):
        p.observe(ForwardEvent(d, d, 0, "step", (0,), (0,)))
    assert np.array_equal(a.scores(), b.scores())


def test_too_few_requests_left_to_train_on_is_one_line():
    trace = random_trace(seed=1, num_requests=6)
    with pytest.raises(SimmoeError, match="the trace has 6, the replay covers 4, leaving 2 .*at least 4"):
        Learned().reset(shape_for(trace, 4))
    with pytest.raises(SimmoeError, match="asked to train on 2 requests; it needs at least 4"):
        Learned(train_requests=2).reset(shape_for(trace, 1))
    # the replay refuses it before any work
    with pytest.raises(SimmoeError, match="trains only on requests the replay does not cover"):
        replay(trace, ReplayConfig(selector="eagle3", cache="learned", slots=2, requests=4))


def test_training_sequence_is_one_token_per_forward():
    trace = random_trace(seed=2, num_requests=5)
    seq = training_demands(trace, (3,), 3, 8)
    n = int(trace.requests.output_len[3])
    assert len(seq) == 1 + n
    assert np.array_equal(seq[0], trace.requests.prefill_union[3])
    assert all(int(d.sum()) <= 3 * 2 for d in seq[1:])        # k = 2 per layer


def test_learned_replays_and_stays_within_belady():
    trace = random_trace(seed=4, num_requests=12, output_len=(10, 16), L=2, N=6, k=2)
    base = ReplayConfig(selector="eagle3", slots=2, requests=6, selector_ms=0.0)
    learned = replay(trace, dataclasses.replace(base, cache="learned")).summary()
    belady = replay(trace, dataclasses.replace(base, cache="belady")).summary()
    assert learned["h2d_per_token"] >= belady["h2d_per_token"]

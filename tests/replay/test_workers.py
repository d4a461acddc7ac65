"""Groups of replay tasks in forked workers (simmoe.replay.workers): the same results as one process."""

from __future__ import annotations

import multiprocessing as mp

import numpy as np
import pytest
from factories import random_trace

from simmoe.hardware.profile import load_profile
from simmoe.replay.engine import ReplayConfig
from simmoe.replay.workers import SHARED, run_groups, shared

pytestmark = pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="no fork on this platform")

SELECTORS = ("ar", "eagle3", "evict", "specfit")


def _configs():
    # two cache sizes per selector: the groups (one plan each) hold two configurations
    return [ReplayConfig(selector=s, slots=n, selector_ms=0.5) for s in SELECTORS for n in (2, 4)]


def _same_summaries(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        sx, sy = x.summary(), y.summary()
        assert sx.keys() == sy.keys()
        for k in sx:
            assert sx[k] == sy[k] or (np.isnan(sx[k]) and np.isnan(sy[k])), k


def _tag(items, progress):
    trace, profiles = shared()
    return [(i, trace, sorted(profiles)) for i in items]


def test_run_groups_places_results_by_index_and_calls_on_done_per_group():
    order = [[3, 0], [1], [2, 4]]
    done = []
    for workers in (1, 2):
        out = run_groups(order, list("abcde"), _tag, trace="T", profiles={"p": 1}, workers=workers,
                         on_done=done.append)
        assert out == [(c, "T", ["p"]) for c in "abcde"]
        assert SHARED == {}                       # nothing of the call is left behind
    assert sorted(len(g) for g in done) == [1, 1, 2, 2, 2, 2]


def _boom(items, progress):
    raise ValueError("no")


def test_a_failing_group_raises_and_clears_the_shared_trace():
    with pytest.raises(ValueError):
        run_groups([[0], [1]], [0, 1], _boom, trace="T", profiles={}, workers=2)
    assert SHARED == {}


def test_replay_all_in_workers_equals_one_process():
    from simmoe.replay.engine import replay_all

    trace = random_trace(3, num_requests=3, pool_nodes=6)
    configs = _configs()
    _same_summaries(replay_all(trace, configs, workers=1), replay_all(trace, configs, workers=2))


def test_batched_and_prefetch_replays_in_workers_equal_one_process():
    from dataclasses import replace

    from simmoe.replay.engine import replay_all

    trace = random_trace(5, num_requests=4, pool_nodes=6)
    profiles = {"a100-pcie-40gb": load_profile("a100-pcie-40gb")}
    configs = [replace(c, batch=2) for c in _configs()]
    _same_summaries(replay_all(trace, configs, profiles, workers=1),
                    replay_all(trace, configs, profiles, workers=2))
    cfgs = [ReplayConfig(selector=s, slots=3, selector_ms=0.5, route_accuracy=1.0, prefetch=p)
            for s in ("eagle3", "specfit") for p in ("draft", "oracle")]
    _same_summaries(replay_all(trace, cfgs, profiles, workers=1, paired=True),
                    replay_all(trace, cfgs, profiles, workers=2, paired=True))

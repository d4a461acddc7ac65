"""MoE-Infinity's and SpecMD's prefetch policies, and prefetching under one budget across layers."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from factories import random_trace

from simmoe.api import CacheShape, ForwardEvent, PrefetchStep
from simmoe.replay import plugins
from simmoe.replay.caches import ExpertCache
from simmoe.replay.engine import ReplayConfig, replay
from simmoe.replay.prefetch_papers import EAMPrefetch, ScorePrefetch


def step(requests, roots, pools=(), L=2, N=4):
    return PrefetchStep(roots=np.asarray(roots), pools=tuple(pools), available=np.zeros((L, N), dtype=bool),
                        requests=tuple(requests), rows=tuple(range(len(requests))))


def event(d, r, t):
    return ForwardEvent(d, np.zeros_like(d), t, "step", (r,), (t,))


def test_eam_matches_the_most_similar_past_request_and_ranks_by_layer_decay():
    L, N = 2, 4
    pol = EAMPrefetch()
    pol.reset(CacheShape(L, N, 2))
    a = np.array([[1, 1, 0, 0], [1, 0, 0, 0]], dtype=bool)      # request 0's pattern
    b = np.array([[0, 0, 1, 1], [0, 0, 0, 1]], dtype=bool)      # request 1's pattern
    for t in range(3):
        pol.observe(event(a, 0, t))
    assert pol.drafting(step([0], [[[0], [0]]])) is None          # no past request yet
    for t in range(3):
        pol.observe(event(b, 1, 3 + t))
    pol.drafting(step([1], [[[3], [3]]]))                        # request 0 has left: it is the past
    pol.observe(event(np.array([[0, 1, 0, 0], [0, 0, 0, 0]], dtype=bool), 2, 6))
    jobs = pol.drafting(step([2], [[[1], [0]]]))                 # request 2 looks like request 0
    L0 = 1 - 0 / (L + 1)
    L1 = 1 - 1 / (L + 1)
    want = sorted([(0.5 * L0, 0), (0.5 * L0, 1), (1.0 * L1, N + 0)], key=lambda x: (-x[0], x[1]))
    assert jobs.pairs.tolist() == [p for _, p in want]
    assert pol.layers(step([2], [[[1], [0]]])) == [[0, 1], [0]]


def test_score_prefetch_queues_experts_when_their_expected_demand_reaches_the_threshold():
    L, N = 1, 6
    pol = ScorePrefetch()
    pol.reset(CacheShape(L, N, 2))
    pool = {"levels": np.array([1, 1, 2]), "p": np.array([0.3, 0.6, 0.25]),
            "routes": np.array([[[2]], [[3]], [[2]]]), "selected": None}
    jobs = pol.drafting(step([0], [[[5]]], [pool], L, N))
    # root expert 5 at level 0; expert 3 (0.6) at level 1; expert 2 reaches 0.55 at level 2
    assert jobs.pairs.tolist() == [5, 3, 2]
    assert jobs.levels.tolist() == [0, 1, 2]


class _Checked(ExpertCache):
    """An expert cache that asserts its budget after every change."""

    def _ok(self):
        assert int(self.resident.sum()) <= self.budget
        assert int(self._count.sum()) == int(self.resident.sum())

    def forward(self, *a, **k):
        out = super().forward(*a, **k)
        self._ok()
        return out

    def insert_many(self, *a, **k):
        super().insert_many(*a, **k)
        self._ok()

    def insert_layer(self, *a, **k):
        super().insert_layer(*a, **k)
        self._ok()


@pytest.mark.parametrize("prefetch", ["draft", "next-layer", "eam", "score"])
@pytest.mark.parametrize("cache", ["lru", "least-stale", "eam", "belady"])
def test_prefetch_respects_the_budget(monkeypatch, prefetch, cache):
    import simmoe.replay.caches as caches

    monkeypatch.setattr(caches, "ExpertCache", _Checked)
    trace = random_trace(seed=5, num_requests=3, output_len=(8, 12), L=3, N=8, k=2, pool_nodes=6)
    cfg = ReplayConfig(selector="eagle3", cache=cache, cache_budget=5, prefetch=prefetch, selector_ms=0.0)
    res = replay(trace, cfg)
    s = res.summary()
    assert s["h2d_per_token"] > 0
    if cache == "lru" and prefetch != "eam":    # room is left under LRU: the policy does prefetch
        assert s["prefetched_per_token"] > 0


@pytest.mark.parametrize("prefetch", ["eam", "score"])
def test_the_papers_prefetch_composes_with_every_selector_and_cache(prefetch):
    trace = random_trace(seed=6, num_requests=3, output_len=(6, 9), L=2, N=6, k=2, pool_nodes=5)
    knows = getattr(plugins.load("prefetch", prefetch), "knows_truth", False)
    assert not knows
    for selector in plugins.names("selector"):
        for cache, size in (("lru", {"slots": 2}), ("lfru", {"cache_budget": 4}), ("none", {"slots": 0})):
            cfg = ReplayConfig(selector=selector, cache=cache, prefetch=prefetch, selector_ms=0.0, **size)
            res = replay(trace, cfg)
            assert int(res.cycles["committed"].sum()) == int(trace.requests.output_len.sum())


def test_budget_and_slots_with_prefetch_match_when_one_layer_holds_everything():
    # one layer: a budget of E experts is E slots; the replay must be identical
    trace = random_trace(seed=7, num_requests=3, output_len=(8, 12), L=1, N=8, k=2, pool_nodes=6)
    base = ReplayConfig(selector="eagle3", cache="lru", prefetch="draft", selector_ms=0.0)
    a = replay(trace, dataclasses.replace(base, slots=4)).summary()
    b = replay(trace, dataclasses.replace(base, cache_budget=4)).summary()
    for key in ("h2d_per_token", "hit_rate", "decode_tps", "prefetched_per_token", "useful_per_token"):
        assert a[key] == b[key], key

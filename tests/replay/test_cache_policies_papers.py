"""The papers' cache policies and the one budget across layers, against plain-Python references (hypothesis).

Properties: every online policy copies at least as many experts as Belady on
any demand stream, per layer and under one budget; Belady under one budget is
the optimum (dynamic programming over cache states); every policy keeps
within its slots or budget at every step; the same stream and seed give the
same hits and misses; least-stale, lfru and the budget keep rule match
independent references forward by forward.
"""

from __future__ import annotations

import numpy as np
import pytest
from cache_references import (
    RefLeastStale,
    RefLFRU,
    RefLRU,
    demand_streams,
    optimum_copies_global,
    run_reference,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from simmoe.api import CacheShape, ForwardEvent
from simmoe.errors import SimmoeError
from simmoe.replay import plugins
from simmoe.replay.cache_policies_papers import EAM
from simmoe.replay.caches import ExpertCache, make_cache

ONLINE = ("lru", "lfu", "least-stale", "lfru", "eam", "static")
PAPERS = ("least-stale", "lfru", "eam", "learned")


def streams(max_layers=3, max_experts=8, max_forwards=25, budget=False):
    return demand_streams(max_layers, max_experts, max_forwards, min_size=1, budget=budget)


def build(policy, L, N, size, stream, budget, admission="bypass"):
    pop = sum(stream) if stream else np.zeros((L, N), int)
    slots, b = (0, size) if budget else (size, None)
    return make_cache(policy if policy in ("lru", "lfu", "belady", "static") else plugins.instantiate("cache", policy),
                      L, N, slots, future=stream, popularity=pop, budget=b, admission=admission)


def replay(cache, stream, budget):
    out = []
    for d in stream:
        h, m = cache.forward(d)
        if budget:
            assert int(cache.resident.sum()) <= cache.budget           # the budget holds at every step
        else:
            assert (cache.resident.sum(axis=1) <= cache.slots).all()   # so do the slots
        assert (h + m == d.sum(axis=1)).all()
        out.append((h.tolist(), m.tolist()))
    return out


# -- Belady bounds every online policy, per layer and under one budget -----------------------------
@pytest.mark.parametrize("budget", [False, True])
@given(data=st.data())
def test_no_online_policy_beats_belady_and_every_policy_keeps_its_capacity(budget, data):
    L, N, size, stream = data.draw(streams(budget=budget))
    best = build("belady", L, N, size, stream, budget)
    replay(best, stream, budget)
    for policy in ONLINE:
        cache = build(policy, L, N, size, stream, budget)
        first = replay(cache, stream, budget)
        assert cache.copies >= best.copies, policy
        again = build(policy, L, N, size, stream, budget)
        assert replay(again, stream, budget) == first, policy      # deterministic


@settings(max_examples=40)
@given(streams(max_layers=2, max_experts=3, max_forwards=8, budget=True))
def test_belady_under_one_budget_is_the_optimum(s):
    L, N, size, stream = s
    cache = build("belady", L, N, size, stream, True)
    replay(cache, stream, True)
    assert cache.copies == optimum_copies_global(L, N, min(size, L * N), stream)


# -- the papers' policies and the budget keep rule against references ---------------------------
@pytest.mark.parametrize("name, ref", [("least-stale", RefLeastStale), ("lfru", RefLFRU), ("lru", RefLRU)])
@pytest.mark.parametrize("budget", [False, True])
@given(data=st.data())
def test_policies_match_their_references(name, ref, budget, data):
    L, N, size, stream = data.draw(streams(budget=budget))
    cache = build(name, L, N, size, stream, budget)
    got = [(list(h), list(m)) for h, m in replay(cache, stream, budget)]
    kw = {"budget": min(size, L * N)} if budget else {"slots": min(size, N)}
    assert got == run_reference(ref(), L, N, stream, **kw)


def test_budget_ties_go_to_the_smaller_layer_and_id():
    class Flat:
        name = "flat"

        def reset(self, shape):
            self.shape = (shape.num_layers, shape.num_experts)

        def observe(self, event):
            pass

        def scores(self):
            return np.zeros(self.shape)

    cache = ExpertCache(2, 4, 0, Flat(), budget=3)
    cache.forward(np.ones((2, 4), dtype=bool))
    assert np.flatnonzero(cache.resident.reshape(-1)).tolist() == [0, 1, 2]


def test_a_budget_spreads_over_layers_as_the_scores_say():
    # layer 0 is demanded every forward, layer 1 once: LRU under 4 experts keeps layer 0's whole set
    d0 = np.zeros((2, 4), dtype=bool)
    d0[0] = True
    d1 = d0.copy()
    d1[1, 0] = True
    cache = make_cache("lru", 2, 4, 0, budget=4)
    for d in (d1, d0, d0):
        cache.forward(d)
    assert cache.resident[0].all() and not cache.resident[1].any()
    per_layer = make_cache("lru", 2, 4, 2)
    for d in (d1, d0, d0):
        per_layer.forward(d)
    assert per_layer.copies > cache.copies


def test_eam_scores_follow_the_formula():
    L, N = 3, 4
    pol = EAM()
    pol.reset(CacheShape(L, N, 2))
    rng = np.random.default_rng(0)
    resident = np.zeros((L, N), dtype=bool)
    visits = np.zeros((L, N))
    eam = np.zeros((L, N))
    for t in range(6):
        d = rng.random((L, N)) < 0.5
        hits = d & resident
        pol.observe(ForwardEvent(d, hits, t, "step", (7,), (t,)))
        eam += d
        visits = np.where(d & ~hits, 1.0, visits + hits)
        resident |= d
    act = np.array([row / row.sum() if row.sum() else np.full(N, 1 / N) for row in eam])
    w = np.array([1.0] + [1 - i / L for i in range(1, L)])[:, None] * np.ones((1, N))

    def norm(x):
        return (x / x.sum() if x.sum() else np.full(x.shape, 1 / x.size)) + 1e-6

    assert np.allclose(pol.scores(), norm(act) * norm(visits) * norm(w), rtol=1e-12, atol=0)


def test_budget_refusals_are_one_line():
    with pytest.raises(SimmoeError, match="budget must be >= 0"):
        make_cache("lru", 2, 4, 0, budget=-1)
    assert make_cache("lru", 2, 4, 3, budget=0).name == "none"


def test_registered_like_any_plugin():
    for name in PAPERS:
        assert name in plugins.names("cache")
    for name in ("eam", "score"):
        assert name in plugins.names("prefetch")
    with pytest.raises(SimmoeError, match="least-stale, lfru, eam, learned"):
        plugins.load("cache", "nope")

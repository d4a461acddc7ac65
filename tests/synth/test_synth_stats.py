"""Workload statistics against brute-force references, and the statistics moving with the parameters."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
from factories import random_trace
from hypothesis import given, settings
from hypothesis import strategies as st
from synth_tiny import TINY

from simmoe.synth import generate
from simmoe.synth import stats as S
from simmoe.synth.routing import ExpertSampler, context_chain, popularity, resample


def lru_reference(demands, slots):
    """Per-layer LRU with the documented in-forward order: hits (by id), then misses (by id)."""
    L = demands[0].shape[0]
    caches = [OrderedDict() for _ in range(L)]
    copies = 0
    for d in demands:
        for layer in range(L):
            c = caches[layer]
            want = np.flatnonzero(d[layer])
            if slots == 0:
                copies += len(want)
                continue
            hits = [e for e in want if e in c]
            misses = [e for e in want if e not in c]
            copies += len(misses)
            for e in hits + misses:
                c.pop(e, None)
                c[e] = True
                while len(c) > slots:
                    c.popitem(last=False)
    return copies


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31), slots=st.integers(0, 10), n=st.integers(1, 30),
       density=st.floats(0.05, 0.8))
def test_lru_counter_matches_reference(seed, slots, n, density):
    rng = np.random.default_rng(seed)
    demands = [rng.random((3, 12)) < density for _ in range(n)]
    c = S.LRUCounter(3, 12, slots)
    for d in demands:
        c.forward(d)
    assert c.copies == lru_reference(demands, slots)


def brute_accepted(parents, levels, agree, selected):
    best = 0
    for v in range(len(parents)):
        ok, a = True, v
        while a >= 0:
            ok &= bool(selected[a] and agree[a])
            a = parents[a]
        if ok:
            best = max(best, int(levels[v]))
    return best


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31), K=st.integers(1, 8))
def test_eagle3_replay_matches_brute_force(seed, K):
    tr = random_trace(seed, num_requests=2, pool_nodes=10)
    rep = S.replay_eagle3(tr, K=K)
    for r in range(len(tr.requests)):
        lo, hi = tr.request_positions(r)
        assert rep.committed[(rep.cycles >= lo) & (rep.cycles < hi)].sum() >= 1
    for c, i in enumerate(rep.cycles):
        sl = tr.pool_slice(i)
        p = tr.node_p[sl]
        order = np.argsort(-p, kind="stable")[:K]
        sel = np.zeros(len(p), bool)
        sel[order] = True
        assert np.array_equal(rep.selected[c][: len(p)], sel)
        acc = brute_accepted(tr.node_parent[sl], tr.node_level[sl], tr.node_agree[sl], sel)
        assert rep.committed[c] == 1 + acc


def test_committed_tokens_cover_each_request_exactly():
    tr = generate(TINY, seed=3)
    rep = S.replay_eagle3(tr)
    req = tr.pos_request[rep.cycles]
    assert np.array_equal(np.bincount(req, rep.committed, minlength=len(tr.requests)).astype(int),
                          tr.requests.output_len)


def test_forward_tokens_are_the_root_and_the_selected_nodes():
    tr = random_trace(5, num_requests=2, pool_nodes=10)
    rep = S.replay_eagle3(tr, K=3)
    # top-3 by p of each pool, or the whole pool when it is smaller
    sizes = np.diff(tr.node_ptr)[rep.cycles]
    assert np.array_equal(rep.forward_tokens(), 1 + np.minimum(sizes, 3))
    ar = S.replay_ar(tr)
    assert np.array_equal(ar.forward_tokens(), np.ones(tr.num_positions, dtype=np.int64))


def test_no_cache_copies_are_union_sizes():
    tr = generate(TINY, seed=4)
    ar = S.replay_ar(tr)
    g = tr.geometry
    expect = tr.requests.prefill_union.sum() + tr.num_positions * g.num_layers * g.top_k
    assert S.h2d_per_token(tr, ar, 0) * tr.requests.output_len.sum() == expect


def test_resample_keeps_rows_distinct_and_keep_one_is_identity():
    rng = np.random.default_rng(0)
    sampler = ExpertSampler(popularity(4, 20, 2.0, rng))
    layers = np.tile(np.arange(4), 500)
    start = resample(np.full((2000, 6), -1), layers, 0.0, sampler, rng)
    assert (np.diff(np.sort(start, 1), axis=1) > 0).all()
    assert np.array_equal(resample(start, layers, 1.0, sampler, rng), start)
    half = resample(start, layers, 0.5, sampler, rng)
    assert (np.diff(np.sort(half, 1), axis=1) > 0).all()
    kept = (half == start).mean()
    assert 0.45 < kept < 0.75   # half kept, plus refills that happen to land on the same slot value


def test_context_chain_locality_and_popularity():
    rng = np.random.default_rng(1)
    probs = popularity(3, 40, 1.5, rng)
    sampler = ExpertSampler(probs)
    def shared(loc):
        C = context_chain(3000, 5, loc, sampler, np.random.default_rng(2))
        assert (np.diff(np.sort(C, -1), axis=-1) > 0).all()
        return np.mean([(np.isin(C[u], C[u + 1]).sum() / 3) for u in range(0, 2999, 7)]), C
    lo, _ = shared(0.2)
    hi, C = shared(0.9)
    assert hi > lo + 1.5
    # popular experts appear more often than unpopular ones
    counts = np.bincount(C[:, 0].reshape(-1), minlength=40)
    top, bottom = np.argsort(-probs[0])[:5], np.argsort(probs[0])[:5]
    assert counts[top].sum() > 3 * counts[bottom].sum()


# -- the statistics move the right way with their parameters (common random numbers) --------

BIG = TINY.with_(num_requests=4, total_output_tokens=900)


def test_more_locality_fewer_lru_copies_per_token():
    vals = []
    for loc in (0.2, 0.5, 0.8):
        tr = generate(BIG.with_(locality=loc), seed=11)
        vals.append(S.h2d_per_token(tr, S.replay_ar(tr), slots=8))
    assert vals[0] > vals[1] > vals[2]


def test_more_sharing_slower_union_growth():
    def tree_union(**kw):
        tr = generate(BIG.with_(**kw), seed=12)
        return S.union_sizes(tr, S.replay_eagle3(tr)).mean()
    assert tree_union(token_share=0.3) > tree_union(token_share=0.6) > tree_union(token_share=0.95)
    assert tree_union(locality=0.2) > tree_union(locality=0.8)
    # and far below independent routing of the same number of tokens
    tr = generate(BIG, seed=12)
    rep = S.replay_eagle3(tr)
    g = tr.geometry
    tokens = 1 + rep.selected.sum(1)
    independent = g.num_experts * (1 - (1 - g.top_k / g.num_experts) ** tokens)
    assert S.union_sizes(tr, rep).mean(1).mean() < 0.9 * independent.mean()


def test_sharing_statistics_follow_the_model():
    tr = generate(BIG.with_(token_share=0.9, locality=0.5), seed=13)
    sh = S.sharing(tr)
    # siblings share a context, parent and child one step of it
    assert sh["siblings"] > sh["parent_child"]


def test_higher_easy_share_longer_accepted_paths():
    vals = [S.replay_eagle3(generate(BIG.with_(easy_share=e), seed=14, routes=False)).committed_per_cycle
            for e in (0.1, 0.5, 0.9)]
    assert vals[0] < vals[1] < vals[2]


def test_more_history_reuse_fewer_lru_copies_per_token():
    vals = []
    for w in (0.0, 0.5, 1.0):
        tr = generate(BIG.with_(history_reuse=w, token_share=0.4), seed=15)
        vals.append(S.h2d_per_token(tr, S.replay_ar(tr), slots=8))
    assert vals[0] > vals[1] > vals[2]


def test_topic_concentrates_a_requests_experts():
    def prefill(topic):
        tr = generate(BIG.with_(topic_sigma=topic), seed=16)
        return S.prefill_union_mean(tr)
    assert prefill(0.0) > prefill(1.5) > prefill(3.0)


def test_lru_counter_agrees_with_the_simulator_cache():
    from simmoe.replay.caches import make_cache

    tr = generate(TINY, seed=17)
    g = tr.geometry
    for rep in (S.replay_ar(tr), S.replay_eagle3(tr)):
        for slots in (0, 6, 12):
            ours = S.LRUCounter(g.num_layers, g.num_experts, slots)
            theirs = make_cache("lru", g.num_layers, g.num_experts, slots)
            for _, _, demand in S.forward_demands(tr, rep):
                ours.forward(demand)
                theirs.forward(demand)
            assert ours.copies == theirs.copies

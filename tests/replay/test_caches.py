"""Expert caches against independent per-layer reference implementations (hypothesis).

References process each forward as a sequence of single-expert accesses
(hits first, then misses, each in ascending id) with plain Python
containers; Belady is also checked against the exact optimum by dynamic
programming over cache states.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest
from cache_references import demand_streams, optimum_copies_global
from hypothesis import given, settings
from hypothesis import strategies as st

from simmoe.errors import CheckFailed, SimmoeError
from simmoe.replay.caches import POLICIES, make_cache


# -- random demand streams ----------------------------------------------------
def streams(max_layers=3, max_experts=9, max_forwards=25):
    return demand_streams(max_layers, max_experts, max_forwards)


# -- references -------------------------------------------------------------------
def accesses(demand_row, resident):
    hits = [e for e in np.flatnonzero(demand_row) if e in resident]
    misses = [e for e in np.flatnonzero(demand_row) if e not in resident]
    return hits, misses


def ref_lru(L, N, slots, stream):
    caches = [OrderedDict() for _ in range(L)]
    out = []
    for d in stream:
        hs, ms = [], []
        for layer in range(L):
            c = caches[layer]
            hits, misses = accesses(d[layer], c)
            hs.append(len(hits))
            ms.append(len(misses))
            for e in hits + misses:
                c.pop(e, None)
                c[e] = True
                while len(c) > slots:
                    c.popitem(last=False)
        out.append((hs, ms))
    return out


def ref_lfu(L, N, slots, stream):
    out = []
    freq = [dict() for _ in range(L)]
    last = [dict() for _ in range(L)]
    resident = [set() for _ in range(L)]
    clock = 0
    for d in stream:
        hs, ms = [], []
        for layer in range(L):
            hits, misses = accesses(d[layer], resident[layer])
            hs.append(len(hits))
            ms.append(len(misses))
            for e in hits + misses:
                clock += 1
                freq[layer][e] = freq[layer].get(e, 0) + 1
                last[layer][e] = clock
                resident[layer].add(e)
                if len(resident[layer]) > slots:
                    victim = min(resident[layer], key=lambda x: (freq[layer][x], last[layer][x]))
                    resident[layer].remove(victim)
        out.append((hs, ms))
    return out


def ref_belady(L, N, slots, stream):
    """Naive MIN with bypass: after each forward keep the soonest-needed experts."""
    out = []
    resident = [set() for _ in range(L)]
    T = len(stream)
    for t, d in enumerate(stream):
        hs, ms = [], []
        for layer in range(L):
            need = set(np.flatnonzero(d[layer]).tolist())
            hs.append(len(need & resident[layer]))
            ms.append(len(need - resident[layer]))
            cand = resident[layer] | need

            def next_use(e, t=t, layer=layer):
                for u in range(t + 1, T):
                    if stream[u][layer][e]:
                        return u
                return T + 1
            resident[layer] = set(sorted(cand, key=lambda e: (next_use(e), e))[:slots])
        out.append((hs, ms))
    return out


def ref_static(L, N, slots, stream, popularity):
    out = []
    pinned = [set(sorted(range(N), key=lambda e: (-popularity[layer][e], e))[:slots]) for layer in range(L)]
    loaded = [set() for _ in range(L)]
    for d in stream:
        hs, ms = [], []
        for layer in range(L):
            need = set(np.flatnonzero(d[layer]).tolist())
            hs.append(len(need & loaded[layer]))
            ms.append(len(need - loaded[layer]))
            loaded[layer] |= need & pinned[layer]
        out.append((hs, ms))
    return out


def optimum_copies(N, slots, layer_stream):
    """Fewest copies over all on-demand policies of one layer: the budget DP on a one-layer model."""
    return optimum_copies_global(1, N, slots, [[need] for need in layer_stream])


def run(cache, stream):
    return [tuple(map(list, cache.forward(d))) for d in stream]


# -- properties -------------------------------------------------------------------
@given(streams())
def test_lru_matches_reference(s):
    L, N, slots, stream = s
    got = run(make_cache("lru", L, N, slots), stream)
    want = ref_lru(L, N, slots, stream) if slots else [([0] * L, [int(x) for x in d.sum(1)]) for d in stream]
    assert got == [tuple(w) for w in want]


@given(streams())
def test_lfu_matches_reference(s):
    L, N, slots, stream = s
    got = run(make_cache("lfu", L, N, slots, admission="bypass"), stream)
    want = ref_lfu(L, N, slots, stream) if slots else [([0] * L, [int(x) for x in d.sum(1)]) for d in stream]
    assert got == [tuple(w) for w in want]


@given(streams())
def test_belady_matches_reference(s):
    L, N, slots, stream = s
    got = run(make_cache("belady", L, N, slots, future=stream, admission="bypass"), stream)
    want = ref_belady(L, N, slots, stream) if slots else [([0] * L, [int(x) for x in d.sum(1)]) for d in stream]
    assert got == [tuple(w) for w in want]


@settings(max_examples=40)
@given(streams(max_layers=1, max_experts=5, max_forwards=10))
def test_belady_is_the_optimum(s):
    L, N, slots, stream = s
    cache = make_cache("belady", L, N, slots, future=stream, admission="bypass")
    run(cache, stream)
    assert cache.copies == optimum_copies(N, min(slots, N), [d[0] for d in stream])


@given(streams(), st.integers(0, 2**32 - 1))
def test_static_matches_reference(s, seed):
    L, N, slots, stream = s
    popularity = np.random.default_rng(seed).integers(0, 4, size=(L, N))  # ties on purpose
    got = run(make_cache("static", L, N, slots, popularity=popularity), stream)
    if slots:
        want = ref_static(L, N, slots, stream, popularity)
    else:
        want = [([0] * L, [int(x) for x in d.sum(1)]) for d in stream]
    assert got == [tuple(w) for w in want]


@given(streams())
def test_counts_conserve_demand_and_belady_bounds_every_policy(s):
    L, N, slots, stream = s
    popularity = sum(stream) if stream else np.zeros((L, N), int)
    copies = {}
    for policy in POLICIES:
        cache = make_cache(policy, L, N, slots, future=stream, popularity=popularity, admission="bypass")
        for d in stream:
            h, m = cache.forward(d)
            assert (h + m == d.sum(axis=1)).all()
            assert (h >= 0).all() and (m >= 0).all()
            assert (cache.resident.sum(axis=1) <= cache.slots).all()
        assert cache.forwards == len(stream)
        assert cache.demand == sum(int(d.sum()) for d in stream)
        copies[policy] = cache.copies
    assert copies["belady"] == min(copies.values())
    assert copies["none"] == max(copies.values())


@given(streams())
def test_none_and_zero_slots_copy_every_demanded_expert(s):
    L, N, slots, stream = s
    for policy in POLICIES:
        cache = make_cache(policy, L, N, 0, future=stream, popularity=np.ones((L, N)))
        for d in stream:
            h, m = cache.forward(d)
            assert h.sum() == 0 and (m == d.sum(axis=1)).all()
    cache = make_cache("none", L, N, slots)
    run(cache, stream)
    assert cache.hits == 0


def test_expert_shared_within_a_forward_loads_once():
    d = np.zeros((2, 4), bool)
    d[0, [1, 2]] = True
    d[1, 3] = True
    cache = make_cache("none", 2, 4, 0)
    h, m = cache.forward(d)
    assert m.tolist() == [2, 1] and cache.copies == 3


def test_lru_evicts_the_least_recently_used():
    cache = make_cache("lru", 1, 4, 2)

    def f(*es):
        return np.isin(np.arange(4), es)[None, :]

    cache.forward(f(0))
    cache.forward(f(1))
    cache.forward(f(0))
    cache.forward(f(2))  # evicts 1
    h, m = cache.forward(f(0, 1))
    assert (h[0], m[0]) == (1, 1)


def test_reset_restores_the_empty_state():
    rng = np.random.default_rng(3)
    stream = list(rng.random((12, 2, 6)) < 0.4)
    for policy in POLICIES:
        cache = make_cache(policy, 2, 6, 3, future=stream, popularity=np.arange(12).reshape(2, 6))
        first = run(cache, stream)
        cache.reset()
        assert cache.copies == cache.hits == cache.forwards == 0
        assert run(cache, stream) == first


def test_belady_rejects_a_demand_that_differs_from_its_future():
    stream = [np.eye(3, dtype=bool)[:1], np.eye(3, dtype=bool)[1:2]]
    cache = make_cache("belady", 1, 3, 1, future=stream)
    cache.forward(stream[0])
    with pytest.raises(CheckFailed):
        cache.forward(stream[0])


@pytest.mark.parametrize("args, kw, match", [
    (("fifo", 2, 4, 1), {}, "unknown cache policy"),
    (("lru", 2, 4, -1), {}, "slots"),
    (("belady", 2, 4, 1), {}, "future"),
    (("static", 2, 4, 1), {}, "popularity"),
    (("static", 2, 4, 1), {"popularity": np.ones((3, 4))}, "popularity"),
])
def test_bad_arguments_are_user_errors(args, kw, match):
    with pytest.raises(SimmoeError, match=match):
        make_cache(*args, **kw)


def test_bad_demand_shape_is_a_user_error():
    cache = make_cache("lru", 2, 4, 1)
    with pytest.raises(SimmoeError, match="demand"):
        cache.forward(np.zeros((2, 5), bool))


@settings(max_examples=30)
@given(streams())
def test_recency_renumbering_keeps_the_order(s):
    # a tiny stamp range forces the rare renumbering of recency stamps every few forwards
    L, N, slots, stream = s
    if slots == 0:
        return
    for policy, ref in (("lru", ref_lru), ("lfu", ref_lfu)):
        cache = make_cache(policy, L, N, slots, admission="bypass")     # ref_lfu is the bypass rule
        cache.STAMP_LIMIT = 6 * N
        assert run(cache, stream) == [tuple(w) for w in ref(L, N, slots, stream)]


# -- prefetched experts entering the cache between forwards ---------------------------------
@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), L=st.integers(1, 3), N=st.integers(2, 8), steps=st.integers(1, 12),
       one_layer=st.booleans())
def test_lru_insertions_match_a_reference_that_evicts_the_least_recent_unprotected(seed, L, N, steps, one_layer):
    # the copy engine's rule (tests/replay/prefetch_reference.py take_slot): a prefetched expert becomes the
    # most recently used; in a full layer it displaces the least recently used expert that is not protected
    rng = np.random.default_rng(seed)
    slots = int(rng.integers(1, N + 1))
    cache = make_cache("lru", L, N, slots)
    ref = [OrderedDict() for _ in range(L)]
    for _ in range(steps):
        if rng.random() < 0.5:          # a forward
            d = rng.random((L, N)) < 0.3
            h, m = cache.forward(d)
            for layer in range(L):
                hits, misses = accesses(d[layer], ref[layer])
                assert (h[layer], m[layer]) == (len(hits), len(misses))
                for e in hits + misses:
                    ref[layer].pop(e, None)
                    ref[layer][e] = True
                while len(ref[layer]) > slots:
                    ref[layer].popitem(last=False)
            continue
        # protected: some resident experts (unused prefetches); new: absent ones, protected + new <= slots
        protected = np.zeros((L, N), dtype=bool)
        new_by_layer = []
        for layer in range(L):
            res = list(ref[layer])
            keep = [e for e in res if rng.random() < 0.4][:slots - 1]
            protected[layer, keep] = True
            absent = [e for e in range(N) if e not in ref[layer]]
            n = int(rng.integers(0, min(len(absent), slots - len(keep)) + 1))
            new_by_layer.append([int(e) for e in rng.permutation(absent)[:n]])
        if one_layer:
            layer = int(rng.integers(0, L))
            cache.insert_layer(layer, np.asarray(new_by_layer[layer], dtype=np.int64), protected[layer])
            todo = [(layer, e) for e in new_by_layer[layer]]
        else:
            pairs = [(layer, e) for layer in range(L) for e in new_by_layer[layer]]
            order = rng.permutation(len(pairs)) if pairs else np.zeros(0, dtype=np.int64)
            todo = [pairs[i] for i in order]
            flat = np.asarray([layer * N + e for layer, e in todo], dtype=np.int64)
            cache.insert_many(flat, np.bincount(flat // N, minlength=L).astype(np.int64), protected)
        for layer, e in todo:
            c = ref[layer]
            if len(c) >= slots:
                victim = next(x for x in c if not protected[layer, x])
                del c[victim]
            c[e] = True
        for layer in range(L):
            assert set(np.flatnonzero(cache.resident[layer]).tolist()) == set(ref[layer]), layer


@pytest.mark.parametrize("policy", ["lru", "lfu", "belady", "static"])
def test_insertions_keep_protected_and_new_experts_within_the_slots(policy):
    rng = np.random.default_rng(5)
    L, N, slots = 2, 6, 3
    stream = [rng.random((L, N)) < 0.4 for _ in range(8)]
    cache = make_cache(policy, L, N, slots, future=stream)
    for t, d in enumerate(stream):
        cache.forward(d)
        absent = [int(e) for e in np.flatnonzero(~cache.resident[0])]
        protected = np.zeros((L, N), dtype=bool)
        res0 = np.flatnonzero(cache.resident[0])
        protected[0, res0[:1]] = True
        new = absent[:slots - int(protected[0].sum())]
        if t % 2:
            cache.insert_layer(0, np.asarray(new, dtype=np.int64), protected[0])
        else:
            flat = np.asarray(new, dtype=np.int64)
            cache.insert_many(flat, np.bincount(flat // N, minlength=L).astype(np.int64), protected)
        assert cache.resident[0, new].all() and cache.resident[protected].all()
        assert (cache.resident.sum(axis=1) <= slots).all()


def test_an_insertion_with_no_room_left_is_a_check_failure():
    cache = make_cache("lru", 1, 4, 2)
    cache.forward(np.array([[True, True, False, False]]))
    protected = np.array([[True, True, False, False]])
    with pytest.raises(CheckFailed, match="no expert left to evict"):
        cache.insert_layer(0, np.array([2]), protected[0])
    with pytest.raises(CheckFailed, match="no expert left to evict"):
        cache.insert_many(np.array([3]), np.array([1]), protected)

"""The generator: determinism, validity, the consistency that makes replay exact."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from synth_tiny import TINY

from simmoe.errors import SimmoeError
from simmoe.synth import PRESETS, SynthParams, generate, synth_preset
from simmoe.synth.draft import level_sizes
from simmoe.trace.schema import ModelGeometry, PoolShape
from simmoe.trace.validate import validate_trace

ARRAYS = ("pos_request", "pos_index", "root_token", "root_routes", "node_ptr", "node_parent",
          "node_level", "node_token", "node_q", "node_p", "node_agree", "node_routes")


def same(a, b) -> bool:
    return all(np.array_equal(getattr(a, f), getattr(b, f)) for f in ARRAYS) and \
        np.array_equal(a.requests.prefill_union, b.requests.prefill_union) and \
        np.array_equal(a.requests.output_len, b.requests.output_len)


def test_same_seed_same_trace_other_seed_other_trace():
    a, b = generate(TINY, seed=3), generate(TINY, seed=3)
    assert same(a, b)
    c = generate(TINY, seed=4)
    assert not np.array_equal(a.node_q, c.node_q) or not np.array_equal(a.root_routes, c.root_routes)
    assert not np.array_equal(a.root_routes[: min(a.num_positions, c.num_positions)],
                              c.root_routes[: min(a.num_positions, c.num_positions)])


def test_fewer_requests_is_a_prefix_of_the_full_trace():
    full = generate(TINY, seed=1)
    part = generate(TINY, seed=1, num_requests=2)
    P, M = part.num_positions, part.num_nodes
    assert np.array_equal(part.requests.output_len, full.requests.output_len[:2])
    assert np.array_equal(part.root_routes, full.root_routes[:P])
    assert np.array_equal(part.node_routes, full.node_routes[:M])
    assert np.array_equal(part.node_p, full.node_p[:M])
    assert np.array_equal(part.requests.prefill_union, full.requests.prefill_union[:2])


def test_routing_parameters_leave_pools_unchanged():
    a = generate(TINY, seed=2)
    b = generate(TINY.with_(locality=0.9, token_share=0.3), seed=2)
    for f in ("node_ptr", "node_parent", "node_q", "node_p", "node_agree", "node_token"):
        assert np.array_equal(getattr(a, f), getattr(b, f))
    assert not np.array_equal(a.node_routes, b.node_routes)


def check_consistency(tr):
    """Chain nodes carry the true continuation; p exact; pools stop at the last position."""
    validate_trace(tr)
    counts = np.diff(tr.node_ptr)
    pos = np.repeat(np.arange(tr.num_positions), counts)
    start = tr.node_ptr[pos]
    par = tr.node_parent.astype(np.int64)
    lev = tr.node_level.astype(np.int64)
    # exact float32 products of q along the path
    expect = np.where(par < 0, tr.node_q, tr.node_p[start + np.maximum(par, 0)] * tr.node_q)
    assert np.array_equal(tr.node_p, expect.astype(np.float32))
    # chain = every node of the path agrees (parents precede children)
    chain = np.zeros(tr.num_nodes, dtype=bool)
    for m in range(tr.num_nodes):
        chain[m] = tr.node_agree[m] and (par[m] < 0 or chain[start[m] + par[m]])
    u = pos + lev
    end = np.repeat(tr._request_starts()[1:], np.bincount(tr.pos_request, minlength=len(tr.requests)))[pos]
    assert (u < end).all(), "a pool reaches past the request's last position"
    c = np.flatnonzero(chain)
    assert np.array_equal(tr.node_token[c], tr.root_token[u[c]])
    assert np.array_equal(tr.node_routes[c], tr.root_routes[u[c]])
    # at most one agreeing child per parent (the target has one greedy token)
    key = pos * 1000 + par + 1
    agreeing = key[tr.node_agree]
    assert len(np.unique(agreeing)) == len(agreeing)
    # siblings carry distinct tokens, and a non-chain child of a chain node is not the true token
    k2 = np.stack([pos, par], 1)
    for (pp, aa) in {tuple(x) for x in k2[:200]}:
        sib = np.flatnonzero((pos == pp) & (par == aa))
        assert len(set(tr.node_token[sib])) == len(sib)
    # routes sorted ascending and distinct per layer
    for r in (tr.root_routes, tr.node_routes):
        assert (np.diff(r.astype(np.int64), axis=-1) > 0).all()
    return chain


def test_tiny_trace_is_valid_and_consistent():
    tr = generate(TINY, seed=0)
    chain = check_consistency(tr)
    assert chain.any()
    assert tr.is_synthetic and "synthetic" in tr.meta["provenance"]["note"]
    assert tr.meta["num_requests_full"] == TINY.num_requests


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**31), topk=st.integers(1, 3), depth=st.integers(1, 6),
       cap=st.integers(1, 40), easy=st.floats(0, 1), loc=st.floats(0, 1), share=st.floats(0, 1),
       sigma=st.floats(0, 3))
def test_any_parameters_give_a_valid_consistent_trace(seed, topk, depth, cap, easy, loc, share, sigma):
    params = TINY.with_(num_requests=2, total_output_tokens=30, pool=PoolShape(topk, depth, cap, 7),
                        easy_share=easy, locality=loc, token_share=share, popularity_sigma=sigma,
                        geometry=ModelGeometry(3, 12, 3, 64, "tiny"))
    tr = generate(params, seed=seed)
    check_consistency(tr)
    assert int(np.diff(tr.node_ptr).max(initial=0)) <= min(cap, sum(level_sizes(params.pool)))


def test_pool_shape_is_eagle3_top2_expansion():
    tr = generate(TINY, seed=5)
    sizes = np.diff(tr.node_ptr)
    n_last = tr.requests.output_len[tr.pos_request] - 1 - tr.pos_index
    full = n_last >= 5
    assert (sizes[full] == 18).all()
    # near the end the pool holds only the levels that fit: 2 + 4·(d-1) nodes for d levels
    for d in range(0, 5):
        sel = n_last == d
        assert (sizes[sel] == (0 if d == 0 else 2 + 4 * (d - 1))).all()
    # each level >= 2 expands the two most probable nodes of the previous level
    for i in np.flatnonzero(full)[:300]:
        sl = tr.pool_slice(i)
        lev, par, p = tr.node_level[sl], tr.node_parent[sl], tr.node_p[sl]
        for j in range(2, 6):
            prev = np.flatnonzero(lev == j - 1)
            top2 = prev[np.argsort(-p[prev], kind="stable")[:2]]
            assert set(par[lev == j]) == set(top2)
            assert np.bincount(par[lev == j] - top2.min()).max() == 2


def test_agreement_is_calibrated_to_q():
    tr = generate(TINY.with_(num_requests=4, total_output_tokens=1200, easy_share=0.5), seed=7)
    q = tr.node_q.astype(float)
    for lo, hi in [(0.0, 0.2), (0.2, 0.5), (0.5, 0.8), (0.8, 1.0)]:
        m = (q >= lo) & (q < hi)
        assert m.sum() > 300
        # binomial tolerance: 4 standard errors
        se = np.sqrt(q[m].mean() * (1 - q[m].mean()) / m.sum())
        assert abs(tr.node_agree[m].mean() - q[m].mean()) < 4 * se + 0.01


def test_lengths_fit_the_published_totals():
    for name in PRESETS:
        p = PRESETS[name].params
        tr = generate(p.with_(geometry=ModelGeometry(2, 16, 2, 8, "t")), routes=False)
        assert int(tr.requests.output_len.sum()) == p.total_output_tokens
        assert ((tr.requests.prompt_len + tr.requests.output_len) <= p.limit_tokens).all()
        assert len(tr.requests) == p.num_requests
    cnn = generate(PRESETS["cnndm"].params.with_(geometry=ModelGeometry(2, 16, 2, 8, "t")),
                   routes=False)
    assert (cnn.requests.prompt_len.min(), cnn.requests.prompt_len.max()) == (156, 1496)
    assert list(cnn.requests.request_id[:3]) == ["241", "242", "243"]


def test_preset_prefix_is_valid_and_labelled():
    tr = synth_preset("gsm8k", num_requests=1)
    validate_trace(tr)
    prov = tr.meta["provenance"]
    assert prov["kind"] == "synthetic" and prov["preset"] == "gsm8k" and prov["fitted_to"]
    assert tr.meta["num_requests_full"] == 80 and tr.meta["num_requests"] == 1
    assert tr.requests.request_id[0] == "401"


@pytest.mark.parametrize("bad", [dict(easy_share=1.5), dict(locality=-0.1), dict(num_requests=0),
                                 dict(pool=PoolShape(0, 5, 18, 7))])
def test_bad_parameters_raise_simmoe_error(bad):
    with pytest.raises(SimmoeError):
        SynthParams(**bad)


def test_too_many_requests_is_a_user_error():
    with pytest.raises(SimmoeError, match="only 80"):
        generate(TINY, num_requests=81)


def test_subset_requests_equal_their_full_trace_requests():
    full = generate(TINY, seed=6)
    sub = generate(TINY, seed=6, subset=[1, 3])
    assert sub.meta["subset"] == [1, 3]
    for s_r, f_r in [(0, 1), (1, 3)]:
        a, b = sub.request_positions(s_r), full.request_positions(f_r)
        assert np.array_equal(sub.root_routes[a[0]:a[1]], full.root_routes[b[0]:b[1]])
        na = slice(sub.node_ptr[a[0]], sub.node_ptr[a[1]])
        nb = slice(full.node_ptr[b[0]], full.node_ptr[b[1]])
        assert np.array_equal(sub.node_routes[na], full.node_routes[nb])
        assert np.array_equal(sub.requests.prefill_union[s_r], full.requests.prefill_union[f_r])
    with pytest.raises(SimmoeError):
        generate(TINY, subset=[2, 1])

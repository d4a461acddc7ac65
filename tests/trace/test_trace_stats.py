"""Trace statistics against direct (per-node, per-position Python) computations on small traces."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from factories import random_trace
from hypothesis import given, settings
from hypothesis import strategies as st

from simmoe.trace.stats import calibration_table, independent_union, route_bitmaps, trace_statistics

seeds = st.integers(0, 10_000)


def pools(trace):
    """Per position: list of (parent, level, q, p, agree, routes) — the slow, obvious view."""
    out = []
    for i in range(trace.num_positions):
        s = trace.pool_slice(i)
        out.append([(int(a), int(lv), float(q), float(p), bool(g), r)
                    for a, lv, q, p, g, r in zip(trace.node_parent[s], trace.node_level[s], trace.node_q[s],
                                                 trace.node_p[s], trace.node_agree[s], trace.node_routes[s])])
    return out


def path_ok_direct(pool):
    ok = []
    for a, _, _, _, g, _ in pool:
        ok.append(g and (a < 0 or ok[a]))
    return ok


@settings(max_examples=20)
@given(seed=seeds, nodes=st.sampled_from([3, 6, 12]))
def test_acceptance_by_level_and_accepted_length(seed, nodes):
    t = random_trace(seed, pool_nodes=nodes, num_requests=3)
    st_ = trace_statistics(t)["acceptance"]
    per_level: dict[int, list] = {}
    lengths, expected = [], []
    for pool in pools(t):
        ok = path_ok_direct(pool)
        for (_a, lv, q, p, g, _), o in zip(pool, ok):
            per_level.setdefault(lv, []).append((q, g, p, o))
        lengths.append(max([lv for (_, lv, *_), o in zip(pool, ok) if o], default=0))
        expected.append(sum(p for _, _, _, p, _, _ in pool))
    for row in st_["by_level"]:
        vals = per_level[row["level"]]
        assert row["nodes"] == len(vals)
        assert row["accept_rate"] == pytest.approx(np.mean([g for _, g, _, _ in vals]))
        assert row["path_accept_rate"] == pytest.approx(np.mean([o for *_, o in vals]))
        assert row["mean_q"] == pytest.approx(np.mean([q for q, *_ in vals]))
    assert st_["full_pool_accepted_mean"] == pytest.approx(np.mean(lengths))
    assert st_["full_pool_expected_mean"] == pytest.approx(np.mean(expected), rel=1e-6)


@given(conf=st.lists(st.floats(0, 1), min_size=1, max_size=60), data=st.data(), bins=st.integers(1, 12))
def test_calibration_table_direct(conf, data, bins):
    hit = data.draw(st.lists(st.booleans(), min_size=len(conf), max_size=len(conf)))
    table = calibration_table(np.array(conf), np.array(hit), bins)
    ece = 0.0
    for i, row in enumerate(table["bins"]):
        members = [(c, h) for c, h in zip(conf, hit) if min(int(c * bins), bins - 1) == i]
        assert row["nodes"] == len(members)
        if members:
            mc, ar = np.mean([c for c, _ in members]), np.mean([h for _, h in members])
            assert row["mean_confidence"] == pytest.approx(mc)
            assert row["accept_rate"] == pytest.approx(ar)
            ece += len(members) / len(conf) * abs(ar - mc)
    assert table["ece"] == pytest.approx(ece, abs=1e-12)
    assert table["brier"] == pytest.approx(np.mean([(c - h) ** 2 for c, h in zip(conf, hit)]))


def test_perfectly_calibrated_bins_have_zero_ece():
    conf = np.repeat([0.05, 0.55], 20)
    hit = np.concatenate([np.arange(20) < 1, np.arange(20) < 11])
    assert calibration_table(conf, hit)["ece"] == pytest.approx(0.0)


@settings(max_examples=20)
@given(seed=seeds, N=st.sampled_from([8, 70, 130]), k=st.integers(1, 6))
def test_reuse_direct(seed, N, k):
    t = random_trace(seed, N=N, k=k, L=3, pool_nodes=5, num_requests=3)
    reuse = trace_statistics(t)["reuse"]
    overlaps = []
    for i in range(t.num_positions - 1):
        if t.pos_request[i] == t.pos_request[i + 1]:
            for layer in range(3):
                overlaps.append(len(set(t.root_routes[i, layer]) & set(t.root_routes[i + 1, layer])) / k)
    assert reuse["consecutive_pairs"] * 3 == len(overlaps)
    assert reuse["consecutive_overlap"] == pytest.approx(np.mean(overlaps))
    pc = []
    for i, pool in enumerate(pools(t)):
        for a, *_, r in pool:
            ref = t.root_routes[i] if a < 0 else pool[a][5]
            pc += [len(set(r[layer]) & set(ref[layer])) / k for layer in range(3)]
    assert reuse["parent_child_overlap"] == pytest.approx(np.mean(pc))
    assert reuse["independent_overlap"] == k / N


@settings(max_examples=20)
@given(seed=seeds, N=st.sampled_from([8, 100]), k=st.integers(1, 4))
def test_union_vs_tree_size_direct(seed, N, k):
    t = random_trace(seed, N=N, k=k, L=2, pool_nodes=7, num_requests=2)
    u = trace_statistics(t)["union_vs_tree_size"]
    sums: dict[int, list] = {}
    for i, pool in enumerate(pools(t)):
        ranked = sorted(range(len(pool)), key=lambda j: (-pool[j][3], j))
        for size in range(1, len(pool) + 2):
            rows = [t.root_routes[i]] + [pool[j][5] for j in ranked[:size - 1]]
            sums.setdefault(size, []).append(np.mean([len(set(np.concatenate([r[layer] for r in rows])))
                                                      for layer in range(2)]))
    for size, mean, n in zip(u["tree_size"], u["mean_union"], u["pools"]):
        assert n == len(sums[size])
        assert mean == pytest.approx(np.mean(sums[size]))
    assert u["independent"] == pytest.approx([N * (1 - (1 - k / N) ** s) for s in u["tree_size"]])


@settings(max_examples=15)
@given(seed=seeds, lens=st.tuples(st.integers(1, 12), st.integers(1, 12)))
def test_union_vs_window_direct(seed, lens):
    t = random_trace(seed, N=16, k=3, L=2, pool_nodes=0, num_requests=2, output_len=(min(lens), max(lens)))
    u = trace_statistics(t)["union_vs_window"]
    for w, mean, n in zip(u["window"], u["mean_union"], u["windows"]):
        vals = []
        for r in range(2):
            a, b = t.request_positions(r)
            for s in range(a, b - w + 1):
                vals += [len(set(t.root_routes[s:s + w, layer].ravel())) for layer in range(2)]
        assert n * 2 == len(vals)
        if vals:
            assert mean == pytest.approx(np.mean(vals))
        else:
            assert mean is None


def test_union_chunking_matches_unchunked(monkeypatch):
    from simmoe.trace import stats

    t = random_trace(5, N=20, k=3, L=2, pool_nodes=6, num_requests=3, output_len=(9, 14))
    whole = trace_statistics(t)
    monkeypatch.setattr(stats, "_CHUNK_WORDS", 3)  # a few rows per chunk
    chunked = trace_statistics(t)
    for key in ("union_vs_tree_size", "union_vs_window", "reuse"):
        assert chunked[key] == whole[key]


@settings(max_examples=20)
@given(seed=seeds)
def test_popularity_direct(seed):
    t = random_trace(seed, N=10, k=2, L=2, num_requests=2)
    pop = trace_statistics(t)["popularity"]
    for layer in range(2):
        counts = np.bincount(t.root_routes[:, layer].ravel(), minlength=10).astype(float)
        share_top = np.sort(counts)[::-1][:1].sum() / counts.sum()
        x = np.sort(counts)
        gini = sum(abs(a - b) for a in x for b in x) / (2 * len(x) ** 2 * x.mean())
        row = pop["per_layer"][layer]
        assert row["top10pct_share"] == pytest.approx(share_top)
        assert row["gini"] == pytest.approx(gini)
        assert row["unused_experts"] == int((counts == 0).sum())


def test_route_bitmaps_direct():
    routes = np.array([[[0, 63], [64, 129]]], dtype=np.uint8)
    bm = route_bitmaps(routes, 130)
    assert bm.shape == (1, 2, 3)
    assert bm[0, 0].tolist() == [1 | (1 << 63), 0, 0]
    assert bm[0, 1].tolist() == [0, 1, 2]


def test_independent_union_limits():
    assert independent_union(128, 8, 1) == pytest.approx(8)
    assert independent_union(128, 8, 7) == pytest.approx(128 * (1 - (120 / 128) ** 7))
    assert independent_union(128, 8, 10_000) == pytest.approx(128)


def test_statistics_are_json_and_labelled(ar_trace):
    s = trace_statistics(ar_trace)
    text = json.dumps(s, allow_nan=False)
    assert s["synthetic"] is True and json.loads(text)["counts"]["autoregressive_only"] is True
    assert s["acceptance"]["by_level"] == [] and s["union_vs_tree_size"]["tree_size"] == [1]
    assert not any(isinstance(v, float) and math.isnan(v) for v in s["reuse"].values())


def test_progress_reports_every_stage_in_order(small_trace):
    from simmoe.trace.stats import STAGES

    seen = []
    with_progress = trace_statistics(small_trace, progress=lambda *a: seen.append(a))
    assert seen == [(name, i, len(STAGES)) for i, name in enumerate(STAGES)]
    assert with_progress == trace_statistics(small_trace)

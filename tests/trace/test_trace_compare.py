"""`simmoe inspect A B`: each routing statistic against a brute-force reference, the range rule, the command."""

from __future__ import annotations

import itertools
import json
import math
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from factories import random_trace
from hypothesis import given
from hypothesis import strategies as st

from simmoe.cli import main
from simmoe.trace import compare as cmp
from simmoe.trace.io import write_trace

ROOT = Path(__file__).resolve().parents[2]


def tiny(seed: int, N: int = 6, k: int = 2, L: int = 2, requests: int = 3, lengths=(1, 12)):
    """AR-only random trace small enough for ties and repeats (and a one-token request now and then)."""
    return random_trace(seed, num_requests=requests, output_len=lengths, L=L, N=N, k=k, pool_nodes=0)


def request_routes(trace):
    """Each request's committed routes as a list of [layer][set of experts] per token."""
    out = []
    for r in range(len(trace.requests)):
        a, b = trace.request_positions(r)
        out.append([[set(int(e) for e in trace.root_routes[t, ell]) for ell in range(trace.geometry.num_layers)]
                    for t in range(a, b)])
    return out


def brute_hot_overlap(c1, c2, h: int) -> float:
    """Mean |H1 ∩ H2| / h over every tie-break: every top-h set each count vector allows, uniformly."""
    def top_sets(c):
        N = len(c)
        return [set(s) for s in itertools.combinations(range(N), h)
                if min(c[i] for i in s) >= max([c[i] for i in range(N) if i not in s], default=-1)]
    s1, s2 = top_sets(c1), top_sets(c2)
    return sum(len(a & b) for a in s1 for b in s2) / (len(s1) * len(s2) * h)


def layer_counts(tokens, ell: int, N: int) -> list[int]:
    c = Counter(e for tok in tokens for e in tok[ell])
    return [c[e] for e in range(N)]


# ------------------------------------------------------- brute-force checks ---

@given(st.lists(st.integers(0, 4), min_size=2, max_size=7), st.lists(st.integers(0, 4), min_size=7, max_size=7),
       st.integers(1, 6))
def test_hot_overlap_is_the_mean_over_every_tie_break(c1, c2, h):
    N = len(c1)
    h = min(h, N)
    c2 = c2[:N]
    want = brute_hot_overlap(c1, c2, h)
    assert cmp.hot_overlap(np.array(c1), np.array(c2), h) == pytest.approx(want)
    w = cmp.hot_weights(np.array(c1), h)
    assert w.sum() == pytest.approx(h) and ((w >= 0) & (w <= 1)).all()


@given(st.integers(0, 10_000), st.integers(2, 7), st.integers(1, 3))
def test_next_token_overlap_against_sets(seed, N, k):
    k = min(k, N)
    trace = tiny(seed, N=N, k=k)
    got = cmp.next_token_overlap(trace)
    for r, toks in enumerate(request_routes(trace)):
        pairs = [len(a[ell] & b[ell]) / k for a, b in zip(toks, toks[1:]) for ell in range(len(a))]
        if pairs:
            assert got[r] == pytest.approx(sum(pairs) / len(pairs))
        else:
            assert math.isnan(got[r])


@given(st.integers(0, 10_000), st.integers(2, 7))
def test_reuse_distances_against_a_scan(seed, N):
    trace = tiny(seed, N=N)
    k, L = trace.geometry.top_k, trace.geometry.num_layers
    want_all = []
    quant = cmp.reuse_distance_quantiles(trace)
    for r, toks in enumerate(request_routes(trace)):
        dist = []
        for t, tok in enumerate(toks):
            for ell in range(L):
                for e in tok[ell]:
                    prev = [u for u in range(t) if e in toks[u][ell]]
                    if prev:
                        dist.append(t - prev[-1])
        want_all += [(r, d) for d in dist]
        if dist:
            assert quant[r] == pytest.approx(np.quantile(dist, cmp.REUSE_QUANTILES) * k / N)
        else:
            assert np.isnan(quant[r]).all()
    d, req = cmp.reuse_distances(trace)
    assert sorted(zip(req.tolist(), d.tolist())) == sorted(want_all)


@given(st.integers(0, 10_000), st.integers(2, 12))
def test_top_share_stability_and_drift_against_counts(seed, N):
    trace = tiny(seed, N=N, requests=4)
    L = trace.geometry.num_layers
    h = cmp.hot_count(N)
    routes = request_routes(trace)
    share, stab, vs = cmp.top_share(trace), cmp.hot_set_stability(trace), cmp.hot_set_vs_others(trace)
    for r, toks in enumerate(routes):
        tops = [sum(sorted(layer_counts(toks, ell, N), reverse=True)[:h]) / sum(layer_counts(toks, ell, N))
                for ell in range(L)]
        assert share[r] == pytest.approx(np.mean(tops))
        half = len(toks) // 2
        if len(toks) < 2:
            assert math.isnan(stab[r])
        else:
            assert stab[r] == pytest.approx(np.mean([brute_hot_overlap(
                layer_counts(toks[:half], ell, N), layer_counts(toks[half:], ell, N), h) for ell in range(L)]))
        others = [tok for q, other in enumerate(routes) if q != r for tok in other]
        assert vs[r] == pytest.approx(np.mean([brute_hot_overlap(
            layer_counts(toks, ell, N), layer_counts(others, ell, N), h) for ell in range(L)]))


# ------------------------------------------------------ hand-built traces ---

def with_routes(per_request: list[list[list[list[int]]]], N: int):
    """A trace whose committed routes are given: requests → tokens → layers → experts."""
    lens = [len(x) for x in per_request]
    L, k = len(per_request[0][0]), len(per_request[0][0][0])
    t = random_trace(0, num_requests=len(lens), output_len=(1, 1), L=L, N=N, k=k, pool_nodes=0)
    t.requests.output_len = np.array(lens, dtype=np.int32)
    t.pos_request = np.repeat(np.arange(len(lens), dtype=np.int32), lens)
    t.pos_index = np.concatenate([np.arange(n, dtype=np.int32) for n in lens])
    t.root_routes = np.array([tok for req in per_request for tok in req], dtype=np.uint8)
    t.root_token = np.zeros(sum(lens), np.int32)
    t.node_ptr = np.zeros(sum(lens) + 1, np.int64)
    t._starts = None
    return t


def test_a_request_that_repeats_itself():
    """The same two experts every token: overlap 1, every reuse one token back, all routings in the hot set."""
    t = with_routes([[[[1, 4]]] * 6, [[[0, 2]]] * 2, [[[3, 5]]] * 4], N=20)   # h = 2
    per = cmp.per_request_statistics(t)
    assert per["next_token_overlap"].tolist() == [1.0, 1.0, 1.0]
    assert per["reuse_distance_p50"].tolist() == [2 / 20] * 3                 # one token × k/N
    assert per["top10pct_share"].tolist() == [1.0, 1.0, 1.0]
    assert per["hot_set_stability"].tolist() == [1.0, 1.0, 1.0]
    assert per["hot_set_vs_others"].tolist() == [0.0, 0.0, 0.0]             # disjoint hot sets


def test_a_request_that_moves_on_halfway():
    t = with_routes([[[[0, 1]]] * 3 + [[[2, 3]]] * 3, [[[0, 1]]] * 2], N=20)
    per = cmp.per_request_statistics(t)
    assert per["hot_set_stability"][0] == 0.0 and per["next_token_overlap"][0] == pytest.approx(4 / 5)
    assert per["top10pct_share"][0] == pytest.approx(0.5)
    # the second request's hot set {0, 1} is one of the first's four tied experts, each in with p = 1/2
    assert per["hot_set_vs_others"][1] == pytest.approx(0.5)


def test_summary_and_range_rule():
    s = cmp.summarise(np.array([np.nan, *range(21)], dtype=float))
    assert (s["mean"], s["lo"], s["hi"], s["requests"]) == (10.0, 1.0, 19.0, 21)
    assert cmp.summarise(np.array([np.nan]))["mean"] is None
    assert [cmp.position(x, s) for x in (0.5, 1.0, 19.0, 19.5, None)] == ["below", "in", "in", "above", "–"]
    assert cmp.position(3.0, cmp.summarise(np.array([]))) == "–"


def test_compare_names_what_lies_outside():
    a = cmp.routing_statistics(with_routes([[[[1, 4]]] * 6, [[[0, 2]]] * 4], N=20))
    b = cmp.routing_statistics(random_trace(3, num_requests=6, output_len=(20, 30), L=1, N=20, k=2,
                                            pool_nodes=0))
    res = cmp.compare(a, b)
    rows = {r["statistic"]: r for r in res["rows"]}
    assert [r["statistic"] for r in res["rows"]] == [key for key, _ in cmp.STATISTICS]
    assert rows["next_token_overlap"]["a_vs_b_range"] == "above"            # 1.0 against independent routing
    assert rows["next_token_overlap"]["b_vs_a_range"] == "below"
    assert set(res["a_out_of_b_range"]) == {key for key, r in rows.items() if r["a_vs_b_range"] != "in"}


# ------------------------------------------------------------- the command ---

def test_inspect_two_traces_json_and_table(tmp_path, capsys):
    a, b = tiny(1, requests=4, lengths=(8, 16)), random_trace(2, num_requests=3, pool_nodes=3)
    pa, pb = tmp_path / "a.parquet", tmp_path / "b.parquet"
    write_trace(a, pa)
    write_trace(b, pb)
    assert main(["inspect", str(pa), str(pb), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    want = cmp.compare(cmp.routing_statistics(a), cmp.routing_statistics(b))
    assert got["a"].pop("file") == str(pa) and got["b"].pop("file") == str(pb)
    assert got == json.loads(json.dumps(want))
    assert main(["inspect", str(pa), str(pb), "--no-progress"]) == 0
    out = capsys.readouterr().out
    flat = " ".join(out.replace("│", " ").split())
    assert "top-10% share" in flat and "Out of B's range" in flat and "SYNTHETIC" in flat


def test_inspect_two_traces_progress_on_a_terminal(tmp_path, capsys, monkeypatch):
    pa = tmp_path / "a.parquet"
    write_trace(tiny(1), pa)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert main(["inspect", str(pa), str(pa), "--json"]) == 0
    shown = capsys.readouterr()
    assert "routing statistics of B" in shown.err or "inspect:" in shown.err
    assert all(r["a_vs_b_range"] in ("in", "–") for r in json.loads(shown.out)["rows"])


def test_a_missing_second_trace_is_one_line(tmp_path):
    pa = tmp_path / "a.parquet"
    write_trace(tiny(1), pa)
    res = subprocess.run([sys.executable, "-m", "simmoe", "inspect", str(pa), str(tmp_path / "nope.parquet")],
                         capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 2 and res.stdout == ""
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert "nope.parquet" in res.stderr

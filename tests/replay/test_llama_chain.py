"""llama-chain: llama.cpp's greedy draft chain, against a brute-force reference, its limits, its CLI flags."""

from __future__ import annotations

import json

import numpy as np
import pytest
from factories import random_trace, random_tree
from hypothesis import given, settings
from hypothesis import strategies as st

from simmoe.api import PoolView, SelectorContext
from simmoe.errors import SimmoeError
from simmoe.replay.selectors import LlamaChain, make_selector

L, N, k = 2, 8, 2


def view_of(parents, q) -> PoolView:
    parents = np.asarray(parents, dtype=np.int64)
    q = np.asarray(q, dtype=np.float64)
    levels, p = np.zeros(len(parents), dtype=np.int64), np.zeros(len(parents))
    for v, a in enumerate(parents):
        levels[v] = 1 if a < 0 else levels[a] + 1
        p[v] = q[v] if a < 0 else p[a] * q[v]
    n = len(parents)
    return PoolView(row=0, parents=parents, levels=levels, p=p, q=q, agree=np.zeros(n, dtype=bool),
                    root_routes=np.zeros((L, k), dtype=np.int64), node_routes=np.zeros((n, L, k), dtype=np.int64),
                    num_experts=N)


def chain(view, *, K=7, **options):
    return make_selector("llama-chain", SelectorContext(K=K, options=options)).select(view)


def reference(view, K, n_max, n_min, p_min):
    """The chain as a characterisation, not a loop: the longest root path whose every node is its parent's
    greedy child (largest q, then smallest id) with q ≥ p_min, within the size limit."""
    n = view.size
    greedy = {}
    for v in range(n):          # the greedy child of each parent, by brute force over all its children
        a = int(view.parents[v])
        best = greedy.get(a)
        if best is None or (view.q[v], -v) > (view.q[best], -best):
            greedy[a] = v
    paths = [[]]
    for v in range(n):
        path, u = [], v
        while u >= 0:
            path.append(u)
            u = int(view.parents[u])
        paths.append(path[::-1])
    limit = min(n_max, K)
    ok = [pa for pa in paths if len(pa) <= limit
          and all(greedy[int(view.parents[u])] == u and view.q[u] >= p_min for u in pa)]
    best = max(ok, key=len)
    nxt = greedy.get(best[-1] if best else -1)
    low = len(best) < limit and nxt is not None and view.q[nxt] < p_min
    drafted = len(best) + int(low)
    return ([] if len(best) < n_min else sorted(best)), drafted


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(0, 14), K=st.integers(1, 8), n_max=st.integers(1, 8),
       n_min=st.integers(0, 8), p_min=st.sampled_from([0.0, 0.25, 0.5, 0.75, 0.9, 1.0]))
def test_chain_matches_brute_force(seed, n, K, n_max, n_min, p_min):
    n_min = min(n_min, n_max)
    rng = np.random.default_rng(seed)
    parents, _ = random_tree(rng, n, expand=3, depth=6)
    q = rng.choice([0.1, 0.25, 0.5, 0.75, 0.9, 1.0], size=len(parents))    # few values: many ties
    view = view_of(parents, q)
    got = chain(view, K=K, draft_max=n_max, draft_min=n_min, draft_p_min=p_min)
    nodes, drafted = reference(view, K, n_max, n_min, p_min)
    assert got.nodes.tolist() == nodes
    assert got.drafted_levels == drafted <= view.depth
    assert all(view.parents[v] < 0 or view.parents[v] in nodes for v in nodes)   # a chain from the root


# root ─ 0 (q .9) ─ 2 (q .6) ─ 4 (q .95)
#      └ 1 (q .9) ─ 3 (q .99)
PARENTS, Q = [-1, -1, 0, 1, 2], [0.9, 0.9, 0.6, 0.99, 0.95]


def test_ties_take_the_smallest_id_and_p_min_stops_the_chain():
    c = chain(view_of(PARENTS, Q), draft_p_min=0.75)
    assert c.nodes.tolist() == [0] and c.drafted_levels == 2       # node 2 (q .6) was drafted, then refused
    c = chain(view_of(PARENTS, Q), draft_p_min=0.5)
    assert c.nodes.tolist() == [0, 2, 4] and c.drafted_levels == 3  # the pool's depth: nothing more to draft


def test_p_min_bounds():
    c = chain(view_of(PARENTS, Q), draft_p_min=0.0)
    assert c.nodes.tolist() == [0, 2, 4]
    c = chain(view_of(PARENTS, Q), draft_p_min=1.0)
    assert c.nodes.tolist() == [] and c.drafted_levels == 1        # the first level was drafted to decide


def test_draft_max_and_K_cut_without_drafting_further():
    for opts, K in (({"draft_max": 2}, 7), ({"draft_max": 16}, 2)):
        c = chain(view_of(PARENTS, Q), K=K, draft_p_min=0.5, **opts)
        assert c.nodes.tolist() == [0, 2] and c.drafted_levels == 2


def test_draft_min_drops_a_short_chain_but_not_its_drafting():
    c = chain(view_of(PARENTS, Q), draft_p_min=0.75, draft_min=2)
    assert c.nodes.tolist() == [] and c.drafted_levels == 2
    c = chain(view_of(PARENTS, Q), draft_p_min=0.5, draft_min=3)
    assert c.nodes.tolist() == [0, 2, 4]


def test_empty_pool_drafts_nothing():
    c = chain(view_of([], []))
    assert c.nodes.tolist() == [] and c.drafted_levels == 0


def test_defaults_are_llama_cpps():
    s = LlamaChain(SelectorContext(K=7))
    assert (s.n_max, s.n_min, s.p_min) == (16, 0, 0.75)


@pytest.mark.parametrize("opts, flag", [({"draft_max": 0}, "--draft-max"), ({"draft_max": 2.5}, "--draft-max"),
                                        ({"draft_min": -1}, "--draft-min"), ({"draft_min": 20}, "--draft-min"),
                                        ({"draft_p_min": 1.5}, "--draft-p-min")])
def test_bad_options_are_one_error_naming_the_flag(opts, flag):
    with pytest.raises(SimmoeError, match=flag):
        LlamaChain(SelectorContext(K=7, options=opts))


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory):
    from simmoe.hardware.profile import HardwareProfile, save_profile
    from simmoe.trace.io import write_trace

    d = tmp_path_factory.mktemp("llama")
    save_profile(HardwareProfile(
        name="llama", description="llama-chain CLI tests", source="hand-written for tests",
        copy_ms=0.5, forward_ms=64.0, expert_ms=0.125, draft_level_ms=4.0, commit_ms=1.0,
        cost_b_cache=tuple(128.0 + 2 * j for j in range(33)), cost_beta_cache=0.25,
        cost_b_no_cache=tuple(112.0 + j for j in range(33)), cost_beta_no_cache=0.5,
        evict_cost=tuple(128.0 + 4.0 * k for k in range(1, 33))), d / "p.toml")
    write_trace(random_trace(6, num_requests=3, output_len=(8, 12), pool_nodes=6), d / "t.parquet")
    return d / "t.parquet"


def _replay(path, *argv):
    from simmoe.cli import main

    return main(["replay", str(path), "--hardware", str(path.with_name("p.toml")), "--no-progress",
                 "--workers", "1", "--slots", "2", "--selectors", "ar,llama-chain", *argv])


def test_cli_replays_the_chain(trace_file, capsys):
    docs = {}
    for p_min in ("0.5", "1"):
        assert _replay(trace_file, "--draft-p-min", p_min, "--json", "-") == 0
        docs[p_min] = json.loads(capsys.readouterr().out)
    doc = docs["0.5"]
    assert [r["selector"] for r in doc["results"]] == ["ar", "llama-chain"]
    assert doc["config"]["options"]["draft_p_min"] == 0.5 and doc["config"]["options"]["draft_max"] == 16
    ar, lc = doc["results"]
    assert lc["output_tokens"] == ar["output_tokens"]
    assert 0 < lc["draft_nodes"] <= 6 and lc["committed"] > 1.0
    # p_min = 1 refuses every drafted token (q < 1 in the trace): nothing verified, one token per cycle, as AR
    strict = docs["1"]["results"][1]
    assert strict["draft_nodes"] == 0 and strict["committed"] == 1.0 and strict["drafted_levels"] == 1.0


@pytest.mark.parametrize("argv", [("--draft-p-min", "1.5"), ("--draft-min", "17"), ("--draft-max", "0")])
def test_cli_bad_flag_is_one_line_exit_2(trace_file, capsys, argv):
    assert _replay(trace_file, *argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and argv[0] in err[0]

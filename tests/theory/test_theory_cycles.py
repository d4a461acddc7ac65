"""SpecFit's cycle walk (simmoe.theory.cycles) against a brute-force walk."""

from __future__ import annotations

import numpy as np
import pytest
from factories import random_trace
from hypothesis import given, settings
from hypothesis import strategies as st
from theory_brute import accepted, brute_pool, walk

from simmoe.theory.cycles import accepted_length, specfit_cycles
from solvers import CostModel

costs = st.tuples(
    st.lists(st.floats(0.5, 6.0), min_size=8, max_size=8),
    st.floats(0.0, 0.6),
)


@settings(max_examples=25)
@given(seed=st.integers(0, 10_000), cost=costs, agree=st.floats(0.2, 0.95),
       nodes=st.integers(1, 7))
def test_walk_matches_brute_force(seed, cost, agree, nodes):
    b, beta = cost
    trace = random_trace(seed, num_requests=2, output_len=(3, 8), pool_nodes=nodes,
                         agree_rate=agree)
    K = trace.pool_shape.K
    got = specfit_cycles(trace, CostModel(b, beta), K)
    want = walk(trace, K, b, beta)
    assert [c.row for c in got] == [w["row"] for w in want]
    for c, w in zip(got, want):
        assert c.drafted_levels == w["d"]
        assert c.pool_depth == w["depth"]
        assert c.pool.n == w["pool"].n
        assert list(c.parents) == w["pool"].parents
        assert c.selection.nodes == w["s_hat"]
        assert c.committed == w["committed"]
        assert c.stopped_early == (w["d"] < w["depth"])


@pytest.mark.parametrize("seed", range(4))
def test_cycles_cover_every_position_once(seed):
    trace = random_trace(seed, num_requests=3, output_len=(4, 12), agree_rate=0.9)
    cycles = specfit_cycles(trace, CostModel([1.0] * 8, 0.05))
    for r in range(len(trace.requests)):
        lo, hi = trace.request_positions(r)
        mine = [c for c in cycles if c.request == r]
        assert sum(c.committed for c in mine) == hi - lo
        rows = [c.row for c in mine]
        assert rows[0] == lo and rows == sorted(rows)
        assert all(c.committed <= c.remaining for c in mine)


@pytest.mark.parametrize("seed", range(3))
def test_the_first_requests_walk_as_in_the_whole_trace(seed):
    """``num_requests = n``: exactly the whole walk's cycles of requests 0..n-1 (n past the end: all)."""
    trace = random_trace(seed, num_requests=4, output_len=(3, 9), agree_rate=0.8)
    cost = CostModel([1.0] * 8, 0.05)
    whole = specfit_cycles(trace, cost)
    for n in (1, 2, 4, 9):
        head = specfit_cycles(trace, cost, num_requests=n)
        want = [c for c in whole if c.request < n]
        assert [(c.request, c.row, c.committed, c.selection.nodes) for c in head] == \
            [(c.request, c.row, c.committed, c.selection.nodes) for c in want]


def test_empty_pools_commit_one_token_each(ar_trace):
    cycles = specfit_cycles(ar_trace, CostModel([2.0], 0.1), K=0)
    assert len(cycles) == ar_trace.num_positions
    assert all(c.committed == 1 and c.drafted_levels == 0 and not c.selection.nodes
               for c in cycles)


@settings(max_examples=40)
@given(seed=st.integers(0, 10_000), data=st.data())
def test_accepted_length_matches_brute_force(seed, data):
    from factories import random_tree

    rng = np.random.default_rng(seed)
    parents, levels = random_tree(rng, int(rng.integers(1, 9)))
    agree = rng.random(len(parents)) < 0.6
    pool = brute_pool(parents, np.full(len(parents), 0.5), np.zeros((1, 1), int),
                      np.zeros((len(parents), 1, 1), int), agree)
    # an ancestor-closed subset: close a random set under parents
    chosen = set(data.draw(st.sets(st.integers(0, len(parents) - 1))))
    for v in sorted(chosen, reverse=True):
        u = int(parents[v])
        while u >= 0:
            chosen.add(u)
            u = int(parents[u])
    nodes = tuple(sorted(chosen))
    assert accepted_length(parents, levels, agree, nodes) == accepted(pool, nodes)


def test_cycle_starts_match_the_replay_engine():
    engine = pytest.importorskip("simmoe.replay.engine")
    trace = random_trace(7, num_requests=3, output_len=(6, 14), agree_rate=0.8)
    cost = CostModel([3.0, 3.1, 3.3, 3.4, 3.6, 3.7, 3.9, 4.0], 0.15)

    class Profile:  # the engine asks the profile for the cost model only
        def cost_model(self, cache):
            return cost

    plan = engine.plan(trace, engine.ReplayConfig(selector="specfit", slots=48), Profile())
    cycles = specfit_cycles(trace, cost)
    assert [c.row for c in cycles] == plan.cycles["row"].tolist()
    assert [c.drafted_levels for c in cycles] == plan.cycles["drafted_levels"].tolist()
    assert [c.committed for c in cycles] == plan.cycles["committed"].tolist()
    assert [len(c.selection.nodes) for c in cycles] == plan.cycles["draft_nodes"].tolist()

"""simmoe.api's PoolView.probability_order against a brute-force sort, on random trace pools."""

from __future__ import annotations

from factories import random_trace
from hypothesis import given, settings
from hypothesis import strategies as st

from simmoe.api import PoolView


def views_of(trace):
    N = trace.geometry.num_experts
    for i in range(trace.num_positions):
        s = trace.pool_slice(i)
        yield PoolView(row=i, parents=trace.node_parent[s], levels=trace.node_level[s],
                       p=trace.node_p[s], q=trace.node_q[s], agree=trace.node_agree[s],
                       root_routes=trace.root_routes[i], node_routes=trace.node_routes[s],
                       num_experts=N)


@settings(max_examples=25)
@given(seed=st.integers(0, 10_000), n=st.integers(0, 18))
def test_probability_order_sorts_by_p_then_level_then_id_and_its_prefixes_are_ancestor_closed(seed, n):
    trace = random_trace(seed, num_requests=1, output_len=(4, 4), pool_nodes=n)
    for view in views_of(trace):
        order = [int(v) for v in view.probability_order()]
        assert order == sorted(range(view.size), key=lambda v: (-float(view.p[v]), int(view.levels[v]), v))
        seen: set[int] = set()
        for v in order:     # p never grows along a path, so a parent always comes first
            assert int(view.parents[v]) < 0 or int(view.parents[v]) in seen
            seen.add(v)

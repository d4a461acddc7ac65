"""Properties of every built-in drafter against brute-force references (hypothesis)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import simmoe.drafters as drafters
from simmoe.drafters.builtin import geometric_rate
from simmoe.drafters.cost import expected_union
from simmoe.synth.draft import expansion_plan, level_sizes
from simmoe.trace.schema import PoolShape

_PHYS = {}


def _phys():
    if not _PHYS:
        from simmoe.hardware.profile import load_profile

        _PHYS["p"] = load_profile("qwen3-30b-a3b@a100-sxm4-80gb").physical
    return _PHYS["p"]


DRAFTERS = st.sampled_from([
    ("mtp", {}), ("mtp", {"heads": 5, "topk": 3}), ("dflash", {"block": 9, "layers": 2}), ("lookahead", {}),
    ("lookahead", {"lookup_ms": 0.2}), ("llama-chain", {"draft_model": "qwen1.5-moe-a2.7b"}), ("eagle3", {}),
])


@given(DRAFTERS, st.integers(1, 12), st.integers(1, 64))
def test_drafting_is_affine_in_levels(spec, levels, requests):
    """The protocol's rule: a fixed part per iteration plus a part per level (what event profiles hold)."""
    d = drafters.build(*spec)
    t = [d.drafting_ms(_phys(), lv, requests) for lv in (levels, levels + 1, levels + 2)]
    assert t[2] - t[1] == pytest.approx(t[1] - t[0], rel=1e-9, abs=1e-12)
    assert d.drafting_ms(_phys(), 0, requests) == 0.0 and min(t) >= 0.0


@given(st.floats(0.05, 1.0), st.floats(1.01, 20.0), st.integers(1, 20))
def test_geometric_rate_against_a_direct_sum(first, per_step, drafted):
    r = geometric_rate(first, per_step, drafted)
    assert 0.0 <= r <= 1.0
    got = first * sum(r ** j for j in range(drafted))
    if first >= per_step - 1:               # the first position alone gives more: nothing after it
        assert r == 0.0
    elif first * drafted > per_step - 1:    # reachable: the rate gives the mean exactly
        assert got == pytest.approx(per_step - 1, abs=1e-9)
    else:                                   # every position accepted is still too few
        assert r == 1.0


@given(st.integers(1, 256), st.integers(1, 8), st.integers(1, 16))
def test_expected_union_against_enumeration(experts, top_k, tokens):
    top_k = min(top_k, experts)
    # brute force: the chance an expert is reached by none of the tokens, over all experts
    miss = (1 - top_k / experts) ** tokens
    assert expected_union(experts, top_k, tokens) == pytest.approx(experts * (1 - miss))
    assert top_k - 1e-9 <= expected_union(experts, top_k, tokens) <= min(experts, top_k * tokens) + 1e-9


@given(st.integers(1, 4), st.integers(1, 8))
def test_expansion_plan_is_eagles_level_sizes(k, depth):
    pool = PoolShape(k, depth, 10_000, 7)
    plan = expansion_plan(pool)
    assert [b * c for b, c in plan] == level_sizes(pool) and plan[0] == (1, k)


@given(st.integers(1, 16), st.integers(1, 32))
def test_lookahead_plan_matches_its_shape(branches, length):
    d = drafters.build("lookahead", {"branches": branches, "branch_length": length})
    plan = d.level_plan()
    shape = d.pool_shape()
    assert len(plan) == shape.depth and sum(b * c for b, c in plan) == shape.max_nodes
    assert np.all([b == branches for b, _ in plan[1:]]) and plan[0] == (1, branches)

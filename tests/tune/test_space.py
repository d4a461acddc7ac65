"""The search space: each engine's flags mapped to a pool shape, a selector and a budget K."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simmoe.errors import SimmoeError
from simmoe.tune import space as sp
from simmoe.tune.evaluate import check_workload, narrowed, shifted


def _sglang_valid_reference(steps, topk, draft):
    """SGLang's rule, written out: a chain verifies itself; a tree verifies at most what it drafted (64 cap)."""
    if topk == 1:
        return draft == steps + 1
    nodes = topk
    width = topk
    for _ in range(steps - 1):
        nodes += width * topk
    return 2 <= draft <= min(nodes, 63) + 1


@given(st.integers(1, 8), st.integers(1, 10), st.integers(2, 64))
def test_sglang_validity_matches_reference(steps, topk, draft):
    cfg = sp.TuneConfig("sglang", "EAGLE3", "eagle3", steps=steps, topk=topk, draft_tokens=draft)
    assert sp.valid(cfg) == _sglang_valid_reference(steps, topk, draft)
    if sp.valid(cfg):
        pool = cfg.pool()
        assert (pool.expand_topk, pool.depth) == (topk, steps)
        assert pool.K == draft - 1 <= pool.max_nodes <= 63
        assert f"--speculative-num-draft-tokens {draft}" in cfg.flags()


def test_space_enumeration_counts_only_valid_points():
    space = sp.engine_space("sglang", selections=("eagle3",))
    brute = sum(_sglang_valid_reference(s, k, d)
                for s, k, d in itertools.product(range(1, 9), range(1, 11), range(2, 65)))
    assert space.size() == brute
    for p in itertools.islice(space.points(), 0, None, 97):
        cfg = space.make(p)
        assert cfg is not None and space.point_of(cfg) == p


def test_repair_keeps_steps_and_topk():
    space = sp.engine_space("sglang", selections=("eagle3",))
    p = space.repair((0, 0, 40))      # steps 1, top-k 1: only draft tokens 2 is valid
    cfg = space.make(p)
    assert cfg is not None and (cfg.steps, cfg.topk, cfg.draft_tokens) == (1, 1, 2)


def test_vllm_and_llama_map_to_chains():
    v = sp.TuneConfig("vllm", "eagle3", "eagle3", steps=5)
    assert (v.pool().expand_topk, v.pool().depth, v.K) == (1, 5, 5)
    assert '"num_speculative_tokens": 5' in v.flags()
    ll = sp.TuneConfig("llama.cpp", "draft", "llama-chain", steps=6, draft_min=2, p_min=0.5)
    assert dict(ll.options()) == {"draft_max": 6.0, "draft_min": 2.0, "draft_p_min": 0.5}
    assert ll.flags() == "--draft-max 6 --draft-min 2 --draft-p-min 0.5"
    assert not sp.valid(sp.TuneConfig("llama.cpp", "draft", "llama-chain", steps=2, draft_min=4))


def test_trace_key_shared_across_draft_tokens():
    a = sp.TuneConfig("sglang", "EAGLE3", "eagle3", steps=4, topk=8, draft_tokens=8)
    b = sp.TuneConfig("sglang", "EAGLE3", "evict", steps=4, topk=8, draft_tokens=32)
    assert a.trace_key() == b.trace_key() and a.K != b.K


def test_narrowed_trace_budget():
    from tests.factories import random_trace

    trace = random_trace(seed=1)
    before = trace.pool_shape
    cfg = sp.TuneConfig("sglang", "EAGLE3", "eagle3", steps=2, topk=2, draft_tokens=3)
    t = narrowed(trace, cfg)
    assert (t.pool_shape.K, t.pool_shape.max_nodes) == (2, 2)
    assert trace.pool_shape == before          # the shared trace is not changed


@pytest.mark.parametrize("call, match", [
    (lambda: sp.check_engine("tgi"), "unknown serving engine"),
    (lambda: sp.check_algorithm("llama.cpp", "EAGLE3"), "no such speculative algorithm"),
    (lambda: sp.check_algorithm("vllm", "medusa"), "no such speculative algorithm"),
    (lambda: sp.engine_space("vllm", selections=("evict",)), "no such selection"),
    (lambda: check_workload("nosuch"), "no synthetic preset"),
])
def test_bad_choices_refused_in_one_line(call, match):
    with pytest.raises(SimmoeError, match=match) as exc:
        call()
    assert "\n" not in str(exc.value)


def test_algorithm_case_insensitive():
    assert sp.check_algorithm("sglang", "eagle3") == "EAGLE3"
    assert sp.check_algorithm("vllm", None) == "eagle3"


@given(st.floats(0.01, 0.99), st.floats(-5, 5))
def test_confidence_shift_monotone_and_bounded(c, d):
    s = shifted(c, d)
    assert 0.0 < s < 1.0
    assert (s >= c - 1e-12) if d >= 0 else (s <= c + 1e-12)

"""Drafters as components: pools against hand-built expectations, acceptance models, costs by hand."""

from __future__ import annotations

import numpy as np
import pytest

import simmoe.drafters as drafters
from simmoe.drafters.builtin import DFLASH_FIRST, DFLASH_PER_STEP, LLAMA_CURVE, LLAMA_RATES, geometric_rate
from simmoe.errors import SimmoeError
from simmoe.synth import SynthParams, generate
from simmoe.synth.draft import draft_pools, predictability, stretches
from simmoe.trace.schema import ModelGeometry, PoolShape

# a small geometry (fast), EAGLE-3's pool by default
TINY = SynthParams(dataset="gsm8k", num_requests=4, total_output_tokens=160, limit_tokens=512,
                   geometry=ModelGeometry(6, 32, 4, expert_bytes=1024, name="tiny"), pool=PoolShape(2, 5, 18, 7),
                   easy_share=0.6, popularity_sigma=1.0, locality=0.6, token_share=0.8)

COLUMNS = ("root_token", "root_routes", "node_ptr", "node_parent", "node_level", "node_token", "node_q", "node_p",
           "node_agree", "node_routes")
SMALL = {"mtp": {"heads": 3}, "llama-chain": {"draft_max": 6}, "dflash": {"block": 8},
         "mtp-tree": {"heads": 3, "topk": 2}, "lookahead": {"branches": 3, "branch_length": 4, "draft_tokens": 8}}


def _drafter(key):
    return drafters.build(key.split("-tree")[0], SMALL.get(key, {}))


def _trace(drafter, seed=0, requests=2):
    params = TINY.with_(pool=drafter.pool_shape())
    return generate(params, seed=seed, num_requests=requests, drafter=drafter, node_routes=False)


def test_builtins_are_registered_in_documented_order():
    assert drafters.names()[:5] == ["eagle3", "mtp", "llama-chain", "dflash", "lookahead"]
    assert drafters.load("simmoe.drafters.builtin:MTP") is drafters.load("mtp")


def test_default_drafter_reproduces_the_pools_of_before():
    before = generate(TINY, seed=3, num_requests=2)
    given = generate(TINY, seed=3, num_requests=2, drafter=drafters.build("eagle3"))
    for name in COLUMNS:
        assert np.array_equal(getattr(before, name), getattr(given, name)), name
    assert before.meta == given.meta and "drafter" not in given.meta


def test_acceptance_hook_is_transparent():
    """The generator's hook with EAGLE-3's own formula draws the very same pools (same random stream)."""
    n = 40
    rng = np.random.default_rng(5)
    tokens = rng.integers(0, TINY.vocab_size, n).astype(np.int32)
    z = predictability(stretches(n, TINY.easy_share, TINY.stretch_tokens, rng), TINY, rng)
    a = draft_pools(tokens, z, TINY, np.random.default_rng(9))
    b = draft_pools(tokens, z, TINY, np.random.default_rng(9), lambda zu, j: zu * TINY.depth_decay ** (j - 1))
    for f in ("valid", "parent", "q", "p", "agree", "token"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f


@pytest.mark.parametrize("key", ["mtp", "llama-chain", "dflash", "mtp-tree", "lookahead"])
def test_pools_have_the_drafters_shape(key):
    d = _drafter(key)
    shape = d.pool_shape()
    t = _trace(d)
    counts = np.diff(t.node_ptr)
    assert counts.max() == shape.max_nodes and (counts <= shape.max_nodes).all()
    assert t.meta["drafter"]["name"] == d.name and t.meta["pool_shape"] == shape.to_dict()
    for pos in range(t.num_positions):
        lo, hi = t.node_ptr[pos], t.node_ptr[pos + 1]
        parent, level, p = t.node_parent[lo:hi], t.node_level[lo:hi], t.node_p[lo:hi]
        if d.chain:   # one node per level, each the child of the one before: no siblings
            assert np.array_equal(parent, np.arange(hi - lo) - 1)
            assert np.array_equal(level, np.arange(1, hi - lo + 1))
        elif hi > lo:
            assert (level == 1).sum() == shape.expand_topk
        has = parent >= 0
        # probabilities never grow along a path
        assert (p[has] <= p[parent[has]]).all() and (p <= 1).all() and (p > 0).all()


@pytest.mark.parametrize("key", ["mtp", "dflash", "lookahead"])
def test_pools_are_reproducible_by_seed(key):
    d = _drafter(key)
    a, b, c = _trace(d, seed=4), _trace(d, seed=4), _trace(d, seed=5)
    assert all(np.array_equal(getattr(a, f), getattr(b, f)) for f in COLUMNS)
    assert not np.array_equal(a.node_q, c.node_q)


def test_acceptance_models_follow_the_published_rates():
    z = np.array([0.2, 0.5, 0.9])
    mtp = drafters.build("mtp", {"first": 0.8, "decay": 0.5})
    assert np.allclose(mtp.level_mean(z, 3, 0.5), z * 0.8 * 0.25 / 0.5)
    # llama.cpp's chain: the conditional rates multiply back to the published curve
    assert np.allclose(np.cumprod(LLAMA_RATES), LLAMA_CURVE[1:])
    chain = drafters.build("llama-chain")
    assert chain.level_rate(1) == pytest.approx(0.652) and chain.level_rate(40) == LLAMA_RATES[-1]
    # DFlash: first-token rate, then the constant rate giving the published tokens per step
    d = drafters.build("dflash")
    r = d.level_rate(2)
    assert d.level_rate(1) == DFLASH_FIRST
    assert DFLASH_FIRST * sum(r ** j for j in range(15)) == pytest.approx(DFLASH_PER_STEP - 1, abs=1e-9)
    assert geometric_rate(0.5, 100.0, 4) == 1.0   # more than a full block asked: every position accepted


def test_level_one_acceptance_in_the_generated_pools():
    """The mean top-1 q of level 1 is the drafter's first-token rate (the workload's predictability rescaled)."""
    d = drafters.build("mtp", {"heads": 1, "first": 0.6})
    t = _trace(d, requests=4)
    assert abs(float(t.node_q[t.node_level == 1].mean()) - 0.6) < 0.08


@pytest.mark.parametrize("name,params,message", [
    ("mtp", {"heads": 0}, "heads=0 must lie in 1..16"),
    ("mtp", {"first": "x"}, "first='x' is not a number"),
    ("dflash", {"per_step": 20}, "per_step=20.0 must lie in [1 + first, 16]"),
    ("dflash", {"per_step": 1.5}, "per_step=1.5 must lie in [1 + first, 16]"),
    ("eagle3", {"depth": 3}, "unknown parameter 'depth'"),
    ("nope", {}, "unknown drafter 'nope'"),
    ("simmoe.nowhere:X", {}, "cannot be loaded"),
    ("simmoe.drafters.base:chain_shape", {}, "lacks pool_shape"),
])
def test_bad_drafters_are_one_line(name, params, message):
    with pytest.raises(SimmoeError, match=None) as exc:
        drafters.build(name, params)
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_parse_params():
    assert drafters.parse_params(["a=1", "b = x"]) == {"a": "1", "b": "x"}
    for bad in (["a"], ["=1"], ["a=1", "a=2"]):
        with pytest.raises(SimmoeError):
            drafters.parse_params(bad)


def test_lookahead_pools_are_branches_from_the_root():
    """Siblings only at the root: every deeper node is the one child of its parent, branch by branch."""
    d = _drafter("lookahead")
    t = _trace(d, requests=3)
    assert d.pool_shape().K == 8 and d.pool_shape().max_nodes == 12
    full = np.flatnonzero(np.diff(t.node_ptr) == 12)
    assert len(full) > 10
    for pos in full:
        lo = t.node_ptr[pos]
        parent, level = t.node_parent[lo:lo + 12], t.node_level[lo:lo + 12]
        assert np.array_equal(level, np.repeat(np.arange(1, 5), 3))
        assert (parent[:3] == -1).all()
        children = np.bincount(parent[3:], minlength=12)
        assert (children[:9] == 1).all() and (children[9:] == 0).all()   # each node but the leaves: one child
    # the acceptance model: the branches' first tokens together hold about hit + the spread of the rest
    q1 = t.node_q[t.node_level == 1].reshape(-1, 3)
    assert abs(float(q1[:, 0].mean()) - 0.35) < 0.08 and float(q1.sum(axis=1).mean()) < 0.6


def test_lookahead_costs_no_drafter_forward():
    from simmoe.hardware.profile import load_profile

    phys = load_profile("qwen3-30b-a3b@a100-sxm4-80gb").physical
    assert drafters.build("lookahead").drafting_ms(phys, 6, 4) == 0.0
    assert drafters.build("lookahead", {"lookup_ms": "0.05"}).drafting_ms(phys, 6, 4) == 0.05
    assert drafters.build("lookahead", {"lookup_ms": "0.05"}).drafting_ms(phys, 0, 4) == 0.0

"""Tree verification: tree-forward logits equal sequential forwards; KV compaction; lossless decoding."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from hwprobe_models import tiny_model
from hypothesis import given, settings
from hypothesis import strategies as st

from hwprobe.drafters.ngram import NGramDrafter
from hwprobe.drafters.random_draft import RandomDrafter
from hwprobe.drafters.target_derived import TargetDerivedDrafter
from hwprobe.offload import install_offload
from hwprobe.pool import Pool, PoolSpec
from hwprobe.specdecode import greedy_generate, select_all, select_top_k, speculative_generate
from hwprobe.tree import (
    ancestor_matrix,
    cache_length,
    compact_cache,
    greedy_verdict,
    lm_forward,
    new_cache,
    tree_forward,
)

pytestmark = pytest.mark.torch


def random_pool(rng, m, vocab=300):
    pool = Pool()
    for _ in range(m):
        par = int(rng.integers(-1, len(pool))) if len(pool) else -1
        pool.add(par, int(rng.integers(3, vocab)), float(rng.uniform(0.1, 1)))
    return pool


@pytest.fixture(scope="module", params=["sdpa", "eager"])
def model(request):
    return tiny_model(seed=5, attn=request.param)


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 10_000), m=st.integers(0, 9), prefix_len=st.integers(1, 8))
def test_tree_logits_equal_sequential_paths(model, seed, m, prefix_len):
    rng = np.random.default_rng(seed)
    prefix = rng.integers(3, 300, prefix_len).tolist()
    root = int(rng.integers(3, 300))
    pool = random_pool(rng, m)
    cache = new_cache(model)
    lm_forward(model, torch.tensor([prefix]), cache)
    tree = tree_forward(model, cache, root, pool).logits[0]
    assert cache_length(cache) == prefix_len + 1 + m
    for v in [-1, *range(m)]:
        path = [root] + (pool.path_tokens(v) if v >= 0 else [])
        seq = lm_forward(model, torch.tensor([prefix + path]), new_cache(model)).logits[0, -1]
        torch.testing.assert_close(tree[v + 1], seq, rtol=1e-4, atol=1e-5)


def test_compaction_keeps_exactly_the_accepted_rows(model):
    rng = np.random.default_rng(1)
    prefix = rng.integers(3, 300, 6).tolist()
    pool = random_pool(rng, 7)
    cache = new_cache(model)
    lm_forward(model, torch.tensor([prefix]), cache)
    tree_forward(model, cache, 42, pool)
    leaf = 6
    path = []
    v = leaf
    while v >= 0:
        path.append(v)
        v = pool.parent[v]
    path = path[::-1]
    compact_cache(cache, len(prefix), [0] + [1 + j for j in path])
    toks = prefix + [42] + [pool.token[j] for j in path]
    assert cache_length(cache) == len(toks)
    nxt = lm_forward(model, torch.tensor([[7]]), cache).logits[0, -1]
    ref = lm_forward(model, torch.tensor([toks + [7]]), new_cache(model)).logits[0, -1]
    torch.testing.assert_close(nxt, ref, rtol=1e-4, atol=1e-5)


def test_ancestor_matrix_and_verdict():
    pool = Pool()
    a = pool.add(-1, 10, 0.5)
    b = pool.add(-1, 11, 0.4)
    c = pool.add(a, 12, 0.5)
    pool.add(c, 13, 0.5)
    A = ancestor_matrix(pool.parent)
    assert A[4].tolist() == [True, True, False, True, True] and A[2].tolist() == [True, False, True, False, False]
    V = 20
    logits = torch.full((5, V), -1.0)
    logits[0, 11] = 1  # root predicts 11: node b agrees, a does not
    logits[2, 5] = 1   # after b: 5
    logits[1, 12] = 1
    logits[3, 13] = 1
    v = greedy_verdict(pool, logits)
    assert v.agree.tolist() == [False, True, True, True]
    assert v.path == [b] and v.next_root == 5


def _exact_rule(pool):
    """Eq. 5 over A_7 with the solvers' exact search (pseudo routes: only losslessness is tested)."""
    exact = pytest.importorskip("solvers.exact")
    from solvers.cost import CostModel
    from solvers.pool import Pool as SPool

    rng = np.random.default_rng(len(pool))
    routes = np.sort(rng.random((len(pool) + 1, 2, 8)).argsort(-1)[..., :2], -1)
    sp = SPool.from_routes(pool.parent, pool.p, routes[0], routes[1:], 8)
    return list(exact.select_exact(sp, min(7, len(pool)), CostModel([10.0] * 8, 1.0)).nodes)


@pytest.mark.parametrize("rule", [select_all, select_top_k(3), _exact_rule], ids=["all", "top3", "exact"])
def test_speculative_decoding_is_lossless(rule):
    target = tiny_model(seed=6)
    prompt = [40, 41, 42, 43, 40, 41, 42, 43, 40, 41]
    ref = greedy_generate(target, prompt, 14)
    for drafter in (TargetDerivedDrafter(copy.deepcopy(target), agreement=0.7, seed=1), NGramDrafter(),
                    RandomDrafter(320)):
        res = speculative_generate(target, drafter, prompt, 14, rule, PoolSpec(depth=3, max_nodes=10))
        assert res.tokens == ref, drafter.name
        assert sum(res.committed) >= len(ref) - 1


def test_lossless_on_offloaded_target_and_agreement_controls_acceptance():
    target = tiny_model(seed=7)
    prompt = [100, 101, 102, 103]
    ref = greedy_generate(target, prompt, 12)
    off = copy.deepcopy(target)
    install_offload(off, slots=1, device=torch.device("cpu"))
    high = speculative_generate(off, TargetDerivedDrafter(copy.deepcopy(target), agreement=1.0), prompt, 12,
                                select_all, PoolSpec(depth=4))
    assert high.tokens == ref
    # the root's first child is the target's own greedy token: every cycle accepts at least it
    assert all(c >= 2 for c in high.committed[:-1]) and sum(high.committed) > len(high.committed) * 2
    low = speculative_generate(off, TargetDerivedDrafter(copy.deepcopy(target), agreement=0.0), prompt, 12,
                               lambda pool: [j for j in select_all(pool) if pool.level[j] == 1][:1],
                               PoolSpec(depth=1))
    assert low.tokens == ref and set(low.committed) == {1}

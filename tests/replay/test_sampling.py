"""Sampled verification (temperature > 0): the rule, its exact law, the replay's draws, bad input.

Statistical tests use a fixed seed (deterministic) and a stated significance
level: a chi-square goodness-of-fit test rejects at p < 0.001.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from factories import random_trace, random_tree
from hypothesis import given
from hypothesis import strategies as st
from sampling_factories import attach_distributions, repeated_pool_trace, sampled_trace
from scipy import stats

from simmoe.errors import SimmoeError
from simmoe.replay.engine import ReplayConfig, plan, replay
from simmoe.trace.verdicts import (
    exact_accept_distribution,
    expected_accepted,
    inverse_cdf,
    sampled_agree,
    sequential_accept,
    uniforms,
)

ALPHA = 1e-3  # significance of every goodness-of-fit test here


# ------------------------------------------------------------------ pools ---
@st.composite
def pools(draw):
    """A random pool, consistent target probabilities (siblings sum <= 1) and an ancestor-closed S."""
    seed = draw(st.integers(0, 10_000))
    n = draw(st.integers(1, 10))
    rng = np.random.default_rng(seed)
    parents, _ = random_tree(rng, n, expand=draw(st.integers(1, 4)), depth=4)
    probs = np.zeros(len(parents))
    for a in np.unique(parents):
        kids = np.flatnonzero(parents == a)
        w = rng.dirichlet(np.ones(len(kids) + 1))       # the last share: tokens outside the pool
        probs[kids] = w[:-1] * draw(st.sampled_from([1.0, 0.5, 0.999]))
    keep = rng.random(len(parents)) < 0.7
    closed = []
    for v in range(len(parents)):
        a = int(parents[v])
        if keep[v] and (a < 0 or a in closed):
            closed.append(v)
    return parents, probs, np.array(closed, dtype=np.int64)


def closed_form(parents, probs, nodes):
    """P(path) = Π p along it × P(no verified child of its end is drawn) (EVICT Eq. 14 and the bonus)."""
    kids = {}
    for v in nodes:
        kids.setdefault(int(parents[v]), []).append(int(v))
    out = {(): 1.0 - sum(probs[c] for c in kids.get(-1, []))}
    for v in sorted(nodes):
        path, u = [], int(v)
        while u >= 0:
            path.append(u)
            u = int(parents[u])
        path = tuple(reversed(path))
        out[path] = math.prod(probs[u] for u in path) * (1.0 - sum(probs[c] for c in kids.get(int(v), [])))
    return out


@given(pools())
def test_the_rule_accepts_each_path_with_the_product_of_target_probabilities(pool):
    parents, probs, nodes = pool
    law = exact_accept_distribution(parents, probs, nodes)
    ref = closed_form(parents, probs, nodes)
    assert set(law) == set(ref)
    for path, pr in ref.items():
        assert law[path] == pytest.approx(pr, abs=1e-12)
    assert sum(law.values()) == pytest.approx(1.0)
    mean = sum(len(path) * pr for path, pr in law.items())
    assert expected_accepted(parents, probs, nodes) == pytest.approx(mean, abs=1e-12)


def test_the_sequential_rule_samples_its_exact_law():
    """Monte Carlo of EVICT Eq. 3 as stated (one uniform per tried child) against the enumeration."""
    parents = np.array([-1, -1, -1, 0, 0, 1, 3])
    probs = np.array([0.35, 0.25, 0.1, 0.5, 0.3, 0.6, 0.9])
    nodes = np.array([0, 1, 3, 4, 6])
    law = exact_accept_distribution(parents, probs, nodes)
    rng = np.random.default_rng(7)
    n = 20_000
    counts = {}
    for _ in range(n):
        path = tuple(sequential_accept(parents, probs, nodes, rng))
        counts[path] = counts.get(path, 0) + 1
    keys = sorted(law)
    assert set(counts) <= set(keys)
    res = stats.chisquare([counts.get(k, 0) for k in keys], [n * law[k] for k in keys])
    assert res.pvalue > ALPHA


# --------------------------------------------------------- the replay ---
def family_pool():
    """A 6-node pool (depth 3) with its target distributions over an 8-token vocabulary."""
    parents = np.array([-1, -1, -1, 0, 0, 3])
    levels = np.array([1, 1, 1, 2, 2, 3])
    tokens = np.array([5, 2, 7, 1, 4, 3])
    q = np.array([0.5, 0.3, 0.1, 0.6, 0.3, 0.8])
    dists = {-1: np.array([0.04, 0.02, 0.25, 0.03, 0.03, 0.45, 0.08, 0.10]),
             0: np.array([0.05, 0.55, 0.05, 0.05, 0.20, 0.05, 0.03, 0.02]),
             3: np.array([0.01, 0.01, 0.01, 0.80, 0.05, 0.05, 0.05, 0.02])}
    probs = np.array([dists[int(a)][t] for a, t in zip(parents, tokens, strict=True)])
    below = {a: np.concatenate([[0.0], np.cumsum(d)]) for a, d in dists.items()}
    cdf = np.array([below[int(a)][t] for a, t in zip(parents, tokens, strict=True)])
    return parents, levels, q, probs, cdf, tokens


@pytest.mark.parametrize("selector, K", [("eagle3", 6), ("eagle3", 3), ("evict", 6)])
def test_replayed_acceptance_matches_the_exact_law(selector, K):
    """Chi-square (α = 0.001) of the replay's accepted lengths against the enumerated law for the selected S."""
    from simmoe.hardware.profile import load_profile

    parents, levels, q, probs, cdf, tokens = family_pool()
    trace = repeated_pool_trace(parents, levels, q, probs.astype(np.float32), cdf.astype(np.float32),
                                tokens, positions=6000)
    trace.meta["pool_shape"]["K"] = K
    profile = load_profile("a100-sxm-resident")
    pl = plan(trace, ReplayConfig(selector=selector, temperature=1.0, seed=11, slots=0, cache="none",
                                  hardware="a100-sxm-resident"), profile)
    full = np.flatnonzero(pl.cycles["pool_size"] == len(parents))
    chosen = {tuple(pl.selected_of(int(c))) for c in full}
    assert len(chosen) == 1                       # one pool, one selection
    nodes = np.array(next(iter(chosen)))
    law = exact_accept_distribution(parents, probs, nodes)
    by_len = np.zeros(int(levels.max()) + 1)
    for path, pr in law.items():
        by_len[len(path)] += pr
    observed = np.bincount(pl.cycles["accepted"][full], minlength=len(by_len))
    support = by_len > 0
    assert observed[~support].sum() == 0
    res = stats.chisquare(observed[support], by_len[support] * len(full))
    assert res.pvalue > ALPHA, (observed, by_len * len(full))


def test_draws_are_seeded_shared_by_selectors_and_independent_of_the_request_subset():
    trace = sampled_trace(3, num_requests=3, output_len=(20, 30), pool_nodes=8)
    a = sampled_agree(trace, 1.0, seed=5)
    assert np.array_equal(a, sampled_agree(trace, 1.0, seed=5))
    assert not np.array_equal(a, sampled_agree(trace, 1.0, seed=6))
    from simmoe.trace.subset import select_requests

    sub = select_requests(trace, [1, 2])
    lo = int(trace.node_ptr[trace.request_positions(1)[0]])
    assert np.array_equal(sampled_agree(sub, 1.0, seed=5), a[lo:])
    # at most one drawn child per parent, as at temperature 0
    ptr = trace.node_ptr
    for i in range(trace.num_positions):
        s = slice(int(ptr[i]), int(ptr[i + 1]))
        par = trace.node_parent[s][a[s]]
        assert len(par) == len(set(par.tolist()))


def test_temperature_zero_is_greedy_and_replays_are_reproducible():
    from simmoe.hardware.profile import load_profile

    trace = sampled_trace(4, num_requests=2, output_len=(30, 40), pool_nodes=10)
    prof = load_profile("a100-pcie-40gb")
    g = ReplayConfig(selector="eagle3", slots=0, cache="none", selector_ms=0.0)
    plain = replay(random_trace(4, num_requests=2, output_len=(30, 40), pool_nodes=10), g, prof)
    # the fields attached change tokens and agreement, so compare against the trace's own greedy replay
    greedy = replay(trace, g, prof)
    assert np.array_equal(greedy.cycles["accepted"], plan(trace, g, prof).cycles["accepted"])
    assert plain.summary()["cycles"] > 0
    t1 = ReplayConfig(selector="eagle3", slots=0, cache="none", selector_ms=0.0, temperature=1.0, seed=2)
    r1, r2 = replay(trace, t1, prof), replay(trace, t1, prof)
    assert np.array_equal(r1.cycles["accepted"], r2.cycles["accepted"])
    s = r1.summary()
    assert s["mat"] == pytest.approx(1 + np.mean(r1.cycles["accepted"]))
    assert s["mat"] >= s["committed"]


def test_uniforms_and_inverse_cdf():
    u = uniforms(3, np.uint64(12345), np.arange(50_000))
    assert u.min() >= 0 and u.max() < 1
    assert stats.kstest(u, "uniform").pvalue > ALPHA
    assert uniforms(3, np.uint64(12345), 17) == u[17]
    probs = np.array([0.2, 0.0, 0.5, 0.3])
    assert [inverse_cdf(probs, x) for x in (0.0, 0.19, 0.2, 0.69, 0.7, 0.999999)] == [0, 0, 2, 2, 3, 3]


# ------------------------------------------------------------ bad input ---
def test_greedy_only_traces_refuse_sampled_replay():
    from simmoe.hardware.profile import load_profile

    trace = random_trace(1)
    with pytest.raises(SimmoeError, match="greedy-only"):
        plan(trace, ReplayConfig(selector="eagle3", temperature=1.0), load_profile("a100-pcie-40gb"))
    t = sampled_trace(1, temperature=0.7)
    with pytest.raises(SimmoeError, match="temperature 0.7"):
        plan(t, ReplayConfig(selector="eagle3", temperature=1.0), load_profile("a100-pcie-40gb"))
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(SimmoeError, match="temperature"):
            ReplayConfig(selector="eagle3", temperature=bad).validate()


def test_sampled_text_refuses_greedy_replay():
    from simmoe.trace.sampling import check_replay_temperature

    t = sampled_trace(2)
    t.meta["sampling"]["text"] = "sampled"
    with pytest.raises(SimmoeError, match="its text was sampled"):
        check_replay_temperature(t, 0.0)
    check_replay_temperature(t, 1.0)


def test_attach_distributions_gives_a_valid_trace():
    from simmoe.trace.validate import validate_trace

    t = attach_distributions(random_trace(9, pool_nodes=12), temperature=1.0)
    validate_trace(t)

"""The admission rule of the expert cache: forced (a missed expert takes a slot) or bypass (docs/caches.md).

Properties (hypothesis, against the plain-Python references of
``cache_references``): Belady under each rule equals the optimum of that rule
(dynamic programming over every choice a cache can make), per layer and under
one budget; under forced admission every policy keeps the forward's experts;
``lfu`` under forced admission is textbook LFU; ``lru``, ``least-stale`` and
``static`` do the same under both rules; the bypass optimum bounds every
policy under either rule, the forced one every policy that admits.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from cache_references import (
    RefLFU,
    demand_streams,
    optimum_copies_global,
    optimum_copies_per_layer,
    run_reference,
    textbook_lfu,
)
from factories import random_trace
from hypothesis import given, settings
from hypothesis import strategies as st

from simmoe.errors import SimmoeError
from simmoe.replay import plugins
from simmoe.replay.cache_policies import LFU, LRU
from simmoe.replay.cache_policies_papers import LeastStale
from simmoe.replay.caches import ADMISSIONS, make_cache
from simmoe.replay.config import ReplayConfig, plan_key

OWN = ("lru", "lfu", "belady", "static")
ADMITTING = ("lru", "lfu", "least-stale", "lfru", "eam")     # finite scores: forced admission binds them


def build(policy, L, N, size, stream, budget, admission):
    pop = sum(stream) if stream else np.zeros((L, N), int)
    slots, b = (0, size) if budget else (size, None)
    return make_cache(policy if policy in OWN else plugins.instantiate("cache", policy), L, N, slots,
                      future=stream, popularity=pop, budget=b, admission=admission)


def run(cache, stream):
    return [(h.tolist(), m.tolist()) for h, m in (cache.forward(d) for d in stream)]


def small(budget, max_layers=2, max_experts=4, max_forwards=8):
    return demand_streams(max_layers, max_experts, max_forwards, min_size=1, budget=budget)


# -- Belady is the optimum of each rule ------------------------------------------------------------
@settings(max_examples=40, deadline=None)
@pytest.mark.parametrize("admission", ADMISSIONS)
@given(s=small(budget=False))
def test_belady_per_layer_is_the_optimum_of_its_rule(admission, s):
    L, N, slots, stream = s
    cache = build("belady", L, N, slots, stream, False, admission)
    run(cache, stream)
    assert cache.copies == optimum_copies_per_layer(L, N, slots, stream, admission)


@settings(max_examples=40, deadline=None)
@pytest.mark.parametrize("admission", ADMISSIONS)
@given(s=small(budget=True, max_experts=3))
def test_belady_under_one_budget_is_the_optimum_of_its_rule(admission, s):
    L, N, size, stream = s
    cache = build("belady", L, N, size, stream, True, admission)
    run(cache, stream)
    assert cache.copies == optimum_copies_global(L, N, min(size, L * N), stream, admission)


def test_forced_admission_can_cost_copies_that_bypass_and_a_pinned_set_avoid():
    # one slot, A B A B A: forced must load B over A each time; bypass (and static, which pins A) keep A
    a, b = np.array([[True, False]]), np.array([[False, True]])
    stream = [a, b, a, b, a]
    copies = {}
    for policy, admission in (("belady", "forced"), ("belady", "bypass"), ("static", "forced")):
        cache = build(policy, 1, 2, 1, stream, False, admission)
        run(cache, stream)
        copies[policy, admission] = cache.copies
    assert copies == {("belady", "forced"): 5, ("belady", "bypass"): 3, ("static", "forced"): 3}
    assert optimum_copies_per_layer(1, 2, 1, stream, "forced") == 5
    assert optimum_copies_per_layer(1, 2, 1, stream, "bypass") == 3


@pytest.mark.parametrize("budget", [False, True])
@given(data=st.data())
def test_the_bypass_optimum_bounds_every_policy_and_the_forced_one_every_admitting_policy(budget, data):
    L, N, size, stream = data.draw(demand_streams(3, 6, 12, min_size=1, budget=budget))
    best = {adm: build("belady", L, N, size, stream, budget, adm) for adm in ADMISSIONS}
    for cache in best.values():
        run(cache, stream)
    assert best["bypass"].copies <= best["forced"].copies
    for policy in (*ADMITTING, "static"):
        for adm in ADMISSIONS:
            cache = build(policy, L, N, size, stream, budget, adm)
            run(cache, stream)
            assert cache.copies >= best["bypass"].copies, (policy, adm)
            if policy != "static":      # static never admits what it has not pinned, under either rule
                assert cache.copies >= best["forced"].copies if adm == "forced" else True, (policy, adm)


# -- what forced admission keeps -------------------------------------------------------------------
@pytest.mark.parametrize("budget", [False, True])
@given(data=st.data())
def test_forced_admission_keeps_the_forward_s_experts(budget, data):
    L, N, size, stream = data.draw(demand_streams(3, 8, 15, min_size=1, budget=budget))
    for policy in ("belady", *ADMITTING):
        cache = build(policy, L, N, size, stream, budget, "forced")
        for d in stream:
            cache.forward(d)
            res = cache.resident
            if budget:
                cap = min(size, L * N)
                if d.sum() <= cap:
                    assert (res >= d).all(), policy               # every demanded expert stays
                else:
                    assert (res <= d).all() and res.sum() == cap, policy
            else:
                cap = min(size, N)
                for layer in range(L):
                    if d[layer].sum() <= cap:
                        assert (res[layer] >= d[layer]).all(), policy
                    else:                                           # the forward fills the layer alone
                        assert (res[layer] <= d[layer]).all() and res[layer].sum() == cap, policy


@given(s=demand_streams(3, 9, 25, min_size=1))
def test_lfu_under_forced_admission_is_textbook_lfu(s):
    L, N, slots, stream = s
    got = run(build("lfu", L, N, slots, stream, False, "forced"), stream)
    assert got == textbook_lfu(L, N, min(slots, N), stream)


@pytest.mark.parametrize("admission", ADMISSIONS)
@pytest.mark.parametrize("budget", [False, True])
@given(data=st.data())
def test_lfu_matches_its_reference_under_each_rule(admission, budget, data):
    L, N, size, stream = data.draw(demand_streams(3, 8, 20, min_size=1, budget=budget))
    got = run(build("lfu", L, N, size, stream, budget, admission), stream)
    kw = {"budget": min(size, L * N)} if budget else {"slots": min(size, N)}
    assert got == run_reference(RefLFU(), L, N, stream, admission=admission, **kw)


class OutsideLRU(LRU):
    """simmoe's lru as another package's policy: the engine forces admission for it (no demand_first shortcut)."""


class OutsideLeastStale(LeastStale):
    """least-stale likewise."""


@pytest.mark.parametrize("budget", [False, True])
@given(data=st.data())
def test_lru_least_stale_and_static_are_the_same_under_both_rules(budget, data):
    # lru and least-stale rank a forward's experts above all others; static never admits what it has not pinned
    L, N, size, stream = data.draw(demand_streams(3, 8, 20, min_size=1, budget=budget))
    for policy in ("lru", "least-stale", "static"):
        bypass = run(build(policy, L, N, size, stream, budget, "bypass"), stream)
        assert run(build(policy, L, N, size, stream, budget, "forced"), stream) == bypass, policy
    for outside, own in ((OutsideLRU, "lru"), (OutsideLeastStale, "least-stale")):
        slots, b = (0, size) if budget else (size, None)
        cache = make_cache(outside(), L, N, slots, budget=b, admission="forced")
        assert cache._forced                                  # the general forced path, not the shortcut
        assert run(cache, stream) == run(build(own, L, N, size, stream, budget, "bypass"), stream), own


@given(seed=st.integers(0, 2**32 - 1), L=st.integers(1, 3), N=st.integers(1, 8), steps=st.integers(1, 20))
def test_demand_first_policies_rank_every_forward_s_experts_above_all_others(seed, L, N, steps):
    """The promise behind ``demand_first``, with prefetched experts landing between forwards."""
    from simmoe.api import CacheShape, ForwardEvent

    rng = np.random.default_rng(seed)
    for policy in (LRU(), LeastStale()):
        assert policy.demand_first
        policy.reset(CacheShape(L, N, N))
        for t in range(steps):
            if rng.random() < 0.3:
                policy.inserted(rng.choice(L * N, size=int(rng.integers(1, L * N + 1)), replace=False))
            demand = rng.random((L, N)) < 0.4
            policy.observe(ForwardEvent(demand, demand & (rng.random((L, N)) < 0.5), t, "step", (), ()))
            s = np.asarray(policy.scores(), dtype=np.float64)
            if demand.any() and (~demand).any():
                assert s[demand].min() > s[~demand].max(), type(policy).__name__
    assert not LFU.demand_first


# -- the setting and the command line ----------------------------------------------------------------
def test_the_rule_is_a_residency_setting_checked_in_one_line():
    assert ReplayConfig().admission == "forced"
    assert plan_key(ReplayConfig(admission="bypass")) == plan_key(ReplayConfig())
    with pytest.raises(SimmoeError, match="forced, bypass") as err:
        ReplayConfig(admission="evict").validate()
    assert "\n" not in str(err.value)
    with pytest.raises(SimmoeError, match="admission"):
        make_cache("lru", 1, 2, 1, admission="Forced")


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory):
    from simmoe.hardware.profile import HardwareProfile, save_profile
    from simmoe.trace.io import write_trace

    d = tmp_path_factory.mktemp("admission")
    save_profile(HardwareProfile(
        name="admission", description="admission CLI tests", source="hand-written for tests",
        copy_ms=0.5, forward_ms=64.0, expert_ms=0.125, draft_level_ms=4.0, commit_ms=1.0,
        cost_b_cache=tuple(128.0 + 2 * j for j in range(33)), cost_beta_cache=0.25,
        cost_b_no_cache=tuple(112.0 + j for j in range(33)), cost_beta_no_cache=0.5,
        evict_cost=tuple(128.0 + 4.0 * k for k in range(1, 33))), d / "p.toml")
    write_trace(random_trace(5, num_requests=3, output_len=(8, 12), pool_nodes=6, L=3, N=8, k=2), d / "t.parquet")
    return d / "t.parquet"


def _replay(path, *argv):
    from simmoe.cli import main

    return main(["replay", str(path), "--hardware", str(path.with_name("p.toml")), "--no-progress",
                 "--workers", "1", "--selectors", "ar,eagle3", "--slots", "2", *argv])


def test_cli_admission_flag(trace_file, capsys):
    docs = {}
    for cache in ("lru", "belady"):
        for adm in ADMISSIONS:
            assert _replay(trace_file, "--cache", cache, "--admission", adm, "--json", "-") == 0
            docs[cache, adm] = json.loads(capsys.readouterr().out)
            assert docs[cache, adm]["config"]["admission"] == adm
    h2d = {k: [r["h2d_per_token"] for r in d["results"]] for k, d in docs.items()}
    assert h2d["lru", "forced"] == h2d["lru", "bypass"]
    assert all(b <= f for b, f in zip(h2d["belady", "bypass"], h2d["belady", "forced"]))
    assert h2d["belady", "bypass"] != h2d["belady", "forced"]      # two slots of eight: the rule binds here
    assert _replay(trace_file) == 0
    assert "2 slots/layer, lru cache, forced admission," in " ".join(capsys.readouterr().out.split())
    with pytest.raises(SystemExit) as exc:      # a usage error: one line, exit 2
        _replay(trace_file, "--admission", "sometimes")
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--admission" in err and "bypass" in err

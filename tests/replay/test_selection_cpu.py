"""SpecFit under a static CPU placement: the adapter CpuForward → CpuCostModel by hand and against the forward,
SpecFit's choices against brute force, and the replay end to end."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from cpu_toy import BW_CPU, BW_GPU, E_BYTES, NE, P_E, PEAK_GPU, H, gpu_layer, head, toy_forward
from factories import random_trace, views_of
from hypothesis import given, settings
from hypothesis import strategies as st

from simmoe.api import SelectorContext
from simmoe.replay.selection_cpu import CpuPricedCost, cpu_cost_model, cpu_rates, pairs_ms, priced_cost

NAME = "qwen3-30b-a3b/q4_k_m@rtx2080+i9-10900x~"


def fixed_ms(f, k: int) -> float:
    """b_k's terms outside the forward: drafting, the served iteration, the step, per-token overheads."""
    return f.draft_ms(4, served=False) + f.o.step_ms + f.served_iteration_ms(0.0) + f.o.spec_token_ms * (1 + k)


def test_adapter_rates_and_intercepts_by_hand():
    f = toy_forward("cpu-layers:1")
    r = cpu_rates(f)
    assert list(r["on_cpu"]) == [True, False]
    assert np.allclose(np.asarray(r["read"]) * 1e3, E_BYTES / BW_CPU * 1e6, rtol=1e-12)    # µs
    assert r["compute"] * 1e3 == pytest.approx(2 * P_E / (0.5 * 16e9) * 1e6, rel=1e-12)
    assert np.allclose(np.asarray(r["gpu_read"]) * 1e3, E_BYTES / BW_GPU * 1e6, rtol=1e-12)
    assert r["gpu_compute"] * 1e3 == pytest.approx(2 * P_E / PEAK_GPU * 1e6, rel=1e-12)
    b, _ = f.cost_model(4, levels=4)
    for k in range(5):
        n = 1 + k
        # the GPU part without routed experts, layer 0's sync (10 µs) and F32 round trip, the LM head
        want = 2 * gpu_layer(n, 0, 0) + 10.0 + n * 2 * H * 4 / 10e9 * 1e6 + head(n)
        assert (b[k] - fixed_ms(f, k)) * 1e3 == pytest.approx(want, rel=1e-9)


def forward_ms(f, counts: np.ndarray) -> float:
    """CpuForward's own time of a forward whose tokens route ``counts`` [L, N] (static placement)."""
    n = int(counts.sum()) // (f.model.trace_top_k * f.L_moe)
    cpu = (counts > 0) & f.cpu_layer[:, None]
    gpu = (counts > 0) & ~cpu
    return f.forward_parts(n, gpu.sum(1), np.where(gpu, counts, 0).sum(1),
                           f.socket_sums(f.cpu_expert_ms(np.where(cpu, counts, 0))), f.cpu_layer)[0]


def empty_ms(f, n: int) -> float:
    z = np.zeros(f.L_moe)
    return f.forward_parts(n, z, z, z, f.cpu_layer)[0]


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["cpu-layers:1", "cpu-all", "cpu-layers:0"]), st.sampled_from(["llamacpp", "ktransformers"]),
       st.integers(1, 4), st.randoms(use_true_random=False))
def test_adapter_time_equals_the_forward_where_both_agree(placement, engine, tokens, rnd):
    """One socket, read-bound GPU layers (≤ 4 tokens on the toy): T − b_|S| is the forward's time past its
    expert-free part, compute-bound CPU experts included (the toy's are from 2 tokens on)."""
    f = toy_forward(placement, engine=engine)
    routes = np.array([[rnd.sample(range(NE), 2) for _ in range(2)] for _ in range(tokens)])
    counts = np.zeros((2, NE), dtype=np.int64)
    for t in routes:
        for layer in range(2):
            counts[layer, t[layer]] += 1
    assert pairs_ms(f, counts) == pytest.approx(forward_ms(f, counts) - empty_ms(f, tokens), rel=1e-9, abs=1e-15)


def test_two_sockets_are_bounded_above():
    f = toy_forward("cpu-all", sockets=2)
    counts = np.array([[3, 1, 2, 0], [2, 2, 0, 2]])
    assert pairs_ms(f, counts) >= forward_ms(f, counts) - empty_ms(f, 3) - 1e-12


# -- SpecFit against brute force on a CPU profile -------------------------------------------------------------
@pytest.fixture(scope="module")
def cpu_setup():
    from simmoe.hardware.profile import load_profile

    profile = load_profile(NAME + "cpu-layers:36")
    cost = priced_cost(profile, profile.cost_model(False))
    trace = random_trace(3, num_requests=2, output_len=(4, 5), L=48, N=128, k=8, pool_nodes=7)
    return profile.physical, cost, trace


def toy_setup():
    """The toy with every expert on the CPU, compute-bound from 2 tokens: where Eq. 4 and the exact cost part."""
    f = toy_forward("cpu-all")
    b, beta = f.cost_model(7, levels=4)
    cost = CpuPricedCost(b, beta, cpu=cpu_cost_model(f, b))
    return f, cost, random_trace(5, num_requests=3, output_len=(5, 6), L=2, N=NE, k=2, pool_nodes=7)


def legal_subsets(parents: np.ndarray, K: int):
    n = len(parents)
    for size in range(min(K, n) + 1):
        for s in itertools.combinations(range(n), size):
            if all(parents[v] < 0 or parents[v] in s for v in s):
                yield s


def true_time(f, cost, view, nodes) -> float:
    """T(S) from CpuForward's own forward over the root and ``nodes`` (b's non-forward terms added)."""
    k = f.model.trace_top_k
    rows = [view.root_routes] + [view.node_routes[v] for v in nodes]
    counts = np.zeros((f.L_moe, f.N), dtype=np.int64)
    for r in rows:
        np.add.at(counts, (np.repeat(np.arange(f.L_moe), k), np.asarray(r).ravel()), 1)
    n = len(rows)
    return cost.b[len(nodes)] - empty_ms(f, n) + forward_ms(f, counts)


def brute(f, cost, view, K, upto=None):
    """The largest R̂/T over the legal subsets of at most K nodes (of V≤upto), T from CpuForward's forward."""
    parents, p, levels = np.asarray(view.parents), np.asarray(view.p, dtype=np.float64), np.asarray(view.levels)
    best, arg = -1.0, None
    for s in legal_subsets(parents, K):
        if upto is not None and any(levels[v] > upto for v in s):
            continue
        ratio = (1.0 + sum(p[list(s)])) / true_time(f, cost, view, s)
        if ratio > best * (1 + 1e-12):
            best, arg = ratio, s
    return best, arg


@pytest.mark.parametrize("which", ["qwen3", "toy"])
def test_specfit_choices_equal_brute_force(cpu_setup, which):
    from simmoe.replay.selectors import SpecFit, SpecFitFull
    from solvers import select_exact

    f, cost, trace = cpu_setup if which == "qwen3" else toy_setup()
    assert isinstance(cost, CpuPricedCost) and cost.cpu is not None
    ctx = SelectorContext(K=7, cost=cost)
    full, adaptive = SpecFitFull(ctx), SpecFit(ctx)
    checked = eq4_differs = 0
    for view in views_of(trace):
        if view.size == 0:
            continue
        view.cost = cost
        best, arg = brute(f, cost, view, 7)
        eq4_differs += select_exact(view.pool(), 7, cost).nodes != arg
        got = tuple(full.select(view).nodes.tolist())
        assert true_time(f, cost, view, got) == pytest.approx(cost.b[len(got)] + cpu_time(cost, view, got), rel=1e-9)
        assert got == arg, (view.row, got, arg)
        # Lemma 2's loop, literally, with brute force over V≤d
        levels = np.asarray(view.levels)
        for d in range(1, view.depth + 1):
            _, sel = brute(f, cost, view, 7, upto=d)
            if d == view.depth or not any(levels[v] == d for v in sel):
                break
        choice = adaptive.select(view)
        assert (tuple(choice.nodes.tolist()), choice.drafted_levels) == (sel, d)
        checked += 1
    assert checked >= 6
    if which == "toy":      # the test tells the exact cost from Eq. 4's
        assert eq4_differs > 0


def cpu_time(cost, view, nodes) -> float:
    from solvers import RoutedPool, cpu_evaluate

    rp = RoutedPool.from_routes(np.asarray(view.parents, dtype=np.int64), np.asarray(view.p, dtype=np.float64),
                                view.root_routes, view.node_routes, view.num_experts)
    return cpu_evaluate(rp, nodes, cost.cpu).time - cost.b[len(nodes)]


def test_other_regimes_keep_eq4(cpu_setup):
    """The copy regime, the resident regime and the cache placements price with Eq. 4 as before."""
    from simmoe.hardware.profile import load_profile

    for name in ("a100-pcie-40gb", "qwen3-30b-a3b@h100-sxm", NAME + "cpu-misses", NAME + "fiddler"):
        p = load_profile(name)
        c = p.cost_model(False)
        assert priced_cost(p, c) is c
    f, cost, _ = cpu_setup
    assert cost.cpu == cpu_cost_model(f, cost.b)


def test_batch_cost_prices_the_whole_step(cpu_setup):
    """At batch > 1: T(S | others) = the step's forward over the others' tokens + the request's, its experts priced
    on the union of both (the marginal of select_marginal_cpu), plus drafting for the batch."""
    from simmoe.replay.selection_cpu import batch_cpu_cost
    from solvers import RoutedPool, select_marginal_cpu

    f, cost, trace = cpu_setup
    views = [v for v in views_of(trace) if v.size][:2]
    other, me = views
    k = f.model.trace_top_k
    m = np.zeros((f.L_moe, f.N), dtype=np.int64)
    np.add.at(m, (np.repeat(np.arange(f.L_moe), k), np.asarray(other.root_routes).ravel()), 1)
    c = batch_cpu_cost(f, cost, 7, 5, 1, m, 100.0, 2)
    rp = RoutedPool.from_routes(np.asarray(me.parents, dtype=np.int64), np.asarray(me.p, dtype=np.float64),
                                me.root_routes, me.node_routes, me.num_experts)
    sel = select_marginal_cpu(rp, 7, c.cpu, m)
    own = m.copy()
    for r in [me.root_routes] + [me.node_routes[v] for v in sel.nodes]:
        np.add.at(own, (np.repeat(np.arange(f.L_moe), k), np.asarray(r).ravel()), 1)
    n = 2 + len(sel.nodes)
    want = (f.forward_ms(n, 0.0, 100.0, n * 100.0 / 2, 2) + f.draft_ms(5, 2) + f.o.spec_token_ms * n + f.o.step_ms
            + pairs_ms(f, own))
    assert sel.time == pytest.approx(want, rel=1e-9)


# -- end to end ---------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def trace_file(tmp_path_factory):
    from simmoe.trace.io import write_trace

    path = tmp_path_factory.mktemp("cpusel") / "t.parquet"
    write_trace(random_trace(11, num_requests=2, output_len=(4, 6), L=48, N=128, k=8, pool_nodes=6), path)
    return path


@pytest.mark.parametrize("batch", ["1", "2"])
def test_specfit_replays_through_the_cli(trace_file, capsys, batch):
    from simmoe.cli import main

    rc = main(["replay", str(trace_file), "--hardware", NAME + "cpu-layers:36", "--no-progress", "--workers", "1",
               "--selector-ms", "0", "--selectors", "specfit,specfit-full", "--batch", batch, "--json", "-"])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["regime"] == "cpu" and doc["synthetic"] is True
    rows = {r["selector"]: r for r in doc["results"]}
    assert set(rows) == {"specfit", "specfit-full"}
    for r in rows.values():
        assert r["decode_tps"] > 0 and r["cpu_reads_per_token"] > 0

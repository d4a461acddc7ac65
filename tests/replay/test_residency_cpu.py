"""The CPU-expert placements as a residency stage: hand-computed forwards, the resident limit, refusals."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
from cpu_toy import BW_CPU, E_BYTES, NE, H, c_e, gpu_layer, head, toy_forward
from factories import random_trace
from hypothesis import given, settings
from hypothesis import strategies as st

from simmoe.hardware.profile import HardwareProfile
from simmoe.replay.config import ReplayConfig, resolve
from simmoe.replay.residency_cpu import build_cpu_residency
from simmoe.replay.timing import CycleTimer

L = 2


@pytest.fixture(scope="module")
def trace():
    return random_trace(3, num_requests=2, output_len=(6, 8), L=L, N=NE, k=2, pool_nodes=6)


def toy_profile(placement, **kw):
    return HardwareProfile(name=f"toy~{placement}", description="toy", source="hand-made for tests",
                           physical=toy_forward(placement, **kw))


def stage(trace, placement, cache="none", slots=0, **kw):
    prof = toy_profile(placement, **kw)
    setting = resolve(ReplayConfig(selector="eagle3", cache=cache, slots=slots, hardware="toy"))
    return build_cpu_residency(trace, setting, prof, CycleTimer(prof, cache=False), requests=(0, 1))


def a_step(trace, row=1):
    """Request 0's root at ``row`` and its first two pool nodes, by hand: (step, n_e per layer and expert)."""
    lo = int(trace.node_ptr[row])
    nodes = np.array([0, 1])
    routes = [trace.root_routes[row]] + [trace.node_routes[lo + j] for j in nodes]
    counts = np.zeros((L, NE), dtype=np.int64)
    for r in routes:
        for layer in range(L):
            for e in r[layer]:
                counts[layer, int(e)] += 1
    step = SimpleNamespace(demand=counts > 0, rows=[row], nodes=[nodes], requests=[0], positions=[row],
                           tokens=len(routes), context=0, size=1, levels=0)
    return step, counts


def by_hand(counts, on_gpu, copied=None, *, copy_us=0.0, eta_cpu=0.5, sync_us=10.0):
    """The forward in µs from the doc's terms: GPU part in turn with sync, round trip, CPU experts, copies."""
    n = int(counts[0].sum() // 2)         # k = 2 routes per token
    copied = np.zeros_like(on_gpu) if copied is None else copied
    total = head(n)
    for layer in range(L):
        gpu = (on_gpu[layer] | copied[layer]) & (counts[layer] > 0)
        cpu = (counts[layer] > 0) & ~gpu
        side = sum(c_e(int(c), eta_cpu) for c in counts[layer][cpu])
        if cpu.any():
            side += sync_us + n * 2 * H * 4 / (copy_link_gbps(copy_us) * 1e9) * 1e6
        side = max(side, copy_us * int(copied[layer].sum()))
        total += gpu_layer(n, int(gpu.sum()), int(counts[layer][gpu].sum())) + side
    return total


def copy_link_gbps(copy_us):
    return 10.0 if copy_us == 0 else E_BYTES / (copy_us * 1e-6) / 1e9


def test_cpu_layers_1(trace):
    step, counts = a_step(trace)
    st = stage(trace, "cpu-layers:1")
    _, fwd, _, h, m, _ = st.step(step, 0.0)
    assert np.array_equal(st.token_counts(step), counts)
    on_gpu = np.array([[False] * NE, [True] * NE])
    assert fwd * 1e3 == pytest.approx(by_hand(counts, on_gpu), rel=1e-12)
    assert list(h) == [0, int((counts[1] > 0).sum())] and list(m) == [int((counts[0] > 0).sum()), 0]
    c = st.counters()
    assert c["cpu_reads"] == m.sum() and c["dram_bytes"] == m.sum() * E_BYTES and c["gpu_served"] == h.sum()


def test_cpu_all(trace):
    step, counts = a_step(trace)
    st = stage(trace, "cpu-all")
    fwd = st.step(step, 0.0)[1]
    assert fwd * 1e3 == pytest.approx(by_hand(counts, np.zeros((L, NE), bool)), rel=1e-12)
    c = st.counters()
    assert c["cpu_ms"] * 1e3 > sum(c_e(int(x)) for x in counts[counts > 0])       # + sync and round trips
    assert c["dram_bytes"] / (E_BYTES) == (counts > 0).sum()
    assert c["cpu_ms"] * 1e3 == pytest.approx(by_hand(counts, np.zeros((L, NE), bool)) - c["gpu_ms"] * 1e3)
    assert E_BYTES / BW_CPU * 1e6 == pytest.approx(c_e(1))                     # one token: memory-bound


def test_cpu_misses_hits_run_on_the_gpu_misses_on_the_cpu(trace):
    step, counts = a_step(trace)
    st = stage(trace, "cpu-misses", cache="lru", slots=NE)
    first = st.step(step, 0.0)
    second = st.step(step, 0.0)           # everything demanded is cached now
    assert first[3].sum() == 0 and first[4].sum() == (counts > 0).sum()
    assert second[4].sum() == 0 and second[3].sum() == (counts > 0).sum()
    assert first[1] * 1e3 == pytest.approx(by_hand(counts, np.zeros((L, NE), bool)), rel=1e-12)
    assert second[1] * 1e3 == pytest.approx(by_hand(counts, np.ones((L, NE), bool)), rel=1e-12)
    assert st.counters()["copies"] == 0        # misses are computed, never copied


def test_fiddler_copies_when_the_copy_lands_first(trace):
    step, counts = a_step(trace)
    copy_us = 10.0                        # c_e(1) = 6.1 µs < 10 < c_e(2) = 12.3 µs at η_cpu = 1/8
    st = stage(trace, "fiddler", eta_cpu=0.125, link_gbps=copy_link_gbps(copy_us))
    fwd = st.step(step, 0.0)[1]
    copied = counts >= 2
    assert copied.any() and (counts == 1).any(), "the step must hold both kinds"
    want = by_hand(counts, np.zeros((L, NE), bool), copied, copy_us=copy_us, eta_cpu=0.125)
    assert fwd * 1e3 == pytest.approx(want, rel=1e-12)
    assert st.counters()["copies"] == copied.sum()


def test_cpu_layers_0_replays_as_the_resident_regime():
    """No expert on the CPU, the same GPU part: every step, draft and prefill time equals the resident replay's."""
    from simmoe.hardware.catalogue import load_cpu, load_format, load_link
    from simmoe.hardware.cpu_forward import CpuForward, CpuTerms, Placement
    from simmoe.hardware.profile import load_profile
    from simmoe.replay.engine import replay

    tr = random_trace(5, num_requests=2, output_len=(4, 6), L=48, N=128, k=8, pool_nodes=6)
    res = load_profile("qwen3-30b-a3b@h200")
    fwd = CpuForward(res.physical, load_cpu("epyc-9654"), load_format("bf16"), Placement("layers", 0),
                     load_link("pcie5-x16"), CpuTerms())
    cpu = replace(res, name="cpu-layers-0", resident=False, physical=fwd)
    cfg = ReplayConfig(selector="eagle3", slots=0, cache="none", hardware="x", selector_ms=0.0)
    a, b = replay(tr, cfg, res), replay(tr, cfg, cpu)
    assert b.regime == "cpu" and a.regime == "resident"
    for key in ("forward_ms", "draft_ms", "commit_ms", "step_ms"):
        assert np.allclose(a.steps[key], b.steps[key], rtol=1e-12, atol=0), key
    assert np.allclose(a.requests["prefill_ms"], b.requests["prefill_ms"], rtol=1e-12)
    s = b.summary()
    assert s["gpu_share"] == 1.0 and s["cpu_reads_per_token"] == 0.0 and s["dram_gb_per_token"] == 0.0


@pytest.mark.parametrize("placement", ["cpu-layers:24", "fiddler", "cpu-misses"])
def test_skipping_the_token_counts_changes_no_time(placement, monkeypatch):
    """Where every CPU expert is read-bound and the GPU memory-bound, the replay skips n_e: same results."""
    from simmoe.hardware.profile import load_profile
    from simmoe.replay.engine import replay

    tr = random_trace(11, num_requests=2, output_len=(4, 6), L=48, N=128, k=8, pool_nodes=8)
    prof = load_profile(f"qwen3-30b-a3b/q4_k_m@rtx3090+i9-10900x~{placement}")
    cfg = ReplayConfig(selector="eagle3", slots=8, cache="lru", hardware="x", selector_ms=0.0)
    assert prof.physical.membound_tokens > 9           # the trace's steps verify at most 9 tokens
    fast = replay(tr, cfg, prof)
    monkeypatch.setattr(prof.physical, "membound_tokens", -1.0)       # always count n_e
    exact = replay(tr, cfg, prof)
    for key in ("forward_ms", "step_ms", "hits", "misses"):
        assert np.array_equal(fast.steps[key], exact.steps[key]), key
    assert fast.summary() == exact.summary()


def test_a_compute_bound_gpu_part_counts_the_tokens(trace):
    """A GPU slow enough that the routed flops set its time: the step counts n_e, and times as if always counted."""
    from dataclasses import replace as dc_replace

    from cpu_toy import GPU_

    step, counts = a_step(trace)
    slow = dc_replace(GPU_, bf16_tflops=1e-4)
    times = []
    for always in (False, True):
        st = stage(trace, "cpu-misses", cache="lru", slots=1, gpu=slow)
        if always:
            st.fwd.membound_tokens = -1.0
        calls = []
        made = st.token_counts
        st.token_counts = lambda s, made=made, calls=calls: calls.append(1) or made(s)
        times.append([st.step(step, 0.0)[1] for _ in range(2)])    # the second step finds 1 expert cached
        assert len(calls) == 2 if always else len(calls) >= 1     # lazily: counted where compute-bound
    assert times[0] == times[1]


def test_a_memory_bound_step_counts_no_tokens(trace):
    step, _ = a_step(trace)
    st = stage(trace, "cpu-misses", cache="lru", slots=1, eta_cpu=1.0)    # read-bound up to 4 tokens
    assert st.fwd.membound_tokens >= step.tokens
    st.token_counts = lambda s: pytest.fail("counted n_e where no time depends on them")
    assert st.step(step, 0.0)[1] > 0 and st.step(step, 0.0)[1] > 0


def brute_force(f, counts, held, n, fiddler):
    """A forward by the doc's formula, expert by expert in plain Python (any engine, sockets, placement)."""
    g, total, sockets = f.gpu, 0.0, f.sockets
    for layer in range(L):
        gpu_e, gpu_pairs, per_socket, copies = 0, 0, [0.0] * sockets, 0
        for e in range(NE):
            ne = int(counts[layer, e])
            if not ne:
                continue
            c = max(f.E[layer] / f.cpu_bw, 2 * ne * f.P / f.cpu_peak) * 1e3
            if held[layer, e] or (fiddler and f.E[layer] / f.link_bw * 1e3 < c):
                gpu_e, gpu_pairs = gpu_e + 1, gpu_pairs + ne
                copies += 0 if held[layer, e] else 1
            else:
                per_socket[e * sockets // NE] += c
        side = max(per_socket) + (f.terms.sync_ms + n * f.roundtrip_ms if any(per_socket) else 0.0)
        side = max(side, copies * f.E[layer] / f.link_bw * 1e3)
        attn_b, w = f.attn_bytes[layer], f.w_bytes[layer]
        attn_f, dense_f = n * f.attn_tok_flops[layer], n * f.dense_tok_flops[layer]
        routed_b, routed_f = gpu_e * f.E[layer], gpu_pairs * 2 * f.P
        if f.overlap:
            a = max(attn_b / g.bw, attn_f / g.peak) * 1e3
            ffn = max((w - attn_b + routed_b) / g.bw, (dense_f - attn_f + routed_f) / g.peak) * 1e3
            total += a + max(ffn, side)
        else:
            total += max((w + routed_b) / g.bw, (dense_f + routed_f) / g.peak) * 1e3 + side
    return total + max(f.head_bytes / g.bw, n * g.head_flops / g.peak) * 1e3


@settings(max_examples=60, deadline=None)
@given(data=st.data(), placement=st.sampled_from(["cpu-misses", "fiddler"]),
       engine=st.sampled_from(["llamacpp", "ktransformers"]), sockets=st.sampled_from([1, 2]),
       eta_cpu=st.sampled_from([0.05, 0.125, 1.0]), link=st.sampled_from([0.5, 1.2288, 10.0]),
       slow_gpu=st.booleans())
def test_forward_matches_a_brute_force_reference(trace, data, placement, engine, sockets, eta_cpu, link, slow_gpu):
    """Random routes and GPU-held experts: the stage's forward (lazy n_e or not) equals the formula expert by expert."""
    from dataclasses import replace as dc_replace

    from cpu_toy import GPU_

    n = data.draw(st.integers(1, 6))
    routes = [data.draw(st.lists(st.lists(st.integers(0, NE - 1), min_size=2, max_size=2, unique=True),
                                 min_size=L, max_size=L)) for _ in range(n)]
    counts = np.zeros((L, NE), dtype=np.int64)
    for r in routes:
        for layer in range(L):
            counts[layer, r[layer]] += 1
    held = np.array(data.draw(st.lists(st.booleans(), min_size=L * NE, max_size=L * NE))).reshape(L, NE)
    st_ = stage(trace, placement, engine=engine, sockets=sockets, eta_cpu=eta_cpu, link_gbps=link,
                gpu=dc_replace(GPU_, bf16_tflops=1e-3) if slow_gpu else None)
    demand = counts > 0
    gpu = demand & held
    want = brute_force(st_.fwd, counts, gpu, n, placement == "fiddler")
    for lazy in (False, True):
        got = st_._forward((lambda: counts) if lazy else counts, demand, gpu, n, 0.0, 0.0, 1)[0]
        assert got == pytest.approx(want, rel=1e-12)

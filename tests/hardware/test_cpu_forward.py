"""The CPU-expert cost model against forwards computed by hand on a 2-layer toy geometry, and its limits."""

from __future__ import annotations

import math

import numpy as np
import pytest
from cpu_toy import (
    ATTN,
    BW_GPU,
    COUNTS,
    E_BYTES,
    GPU_,
    NE,
    P_E,
    PEAK_GPU,
    ROUTER,
    H,
    c_e,
    gpu_layer,
    head,
    toy_cpu,
    toy_forward,
)

from simmoe.hardware.catalogue import Link, load_format, load_model
from simmoe.hardware.cpu_forward import CpuForward, CpuTerms, Placement, parse_placement
from simmoe.hardware.physical import PhysicalModel


def parts(f: CpuForward, counts, cpu_layers):
    on_cpu = (counts > 0) & np.asarray(cpu_layers)[:, None]
    gpu = (counts > 0) & ~on_cpu
    return f.forward_parts(3, gpu.sum(1), np.where(gpu, counts, 0).sum(1),
                           f.socket_sums(f.cpu_expert_ms(np.where(on_cpu, counts, 0))), on_cpu.any(1))


def test_cpu_layers_1_in_turn_by_hand():
    f = toy_forward("cpu-layers:1")
    assert list(f.cpu_layer) == [True, False]
    side = 10.0 + 3 * 2 * H * 4 / 10e9 * 1e6 + c_e(3) + c_e(1) + c_e(2)     # sync + F32 round trip + experts
    want = gpu_layer(3, 0, 0) + side + gpu_layer(3, 3, 6) + head(3)
    total, gpu_ms, cpu_ms = parts(f, COUNTS, f.cpu_layer)
    assert total * 1e3 == pytest.approx(want, rel=1e-12)
    assert cpu_ms * 1e3 == pytest.approx(side, rel=1e-12)
    assert gpu_ms * 1e3 == pytest.approx(want - side, rel=1e-12)


def test_ktransformers_overlaps_the_gpu_ffn_with_the_cpu():
    f = toy_forward("cpu-layers:1", engine="ktransformers")
    attn = max(ATTN * 2 / BW_GPU, 3 * 2 * ATTN / PEAK_GPU) * 1e6
    ffn0 = max(ROUTER * 2 / BW_GPU, 3 * 2 * ROUTER / PEAK_GPU) * 1e6
    ffn1 = max((ROUTER * 2 + 3 * E_BYTES) / BW_GPU, (3 * 2 * ROUTER + 6 * 2 * P_E) / PEAK_GPU) * 1e6
    side = 10.0 + 3 * 2 * H * 2 / 10e9 * 1e6 + c_e(3) + c_e(1) + c_e(2)     # BF16 round trip
    want = attn + max(ffn0, side) + attn + ffn1 + head(3)
    assert parts(f, COUNTS, f.cpu_layer)[0] * 1e3 == pytest.approx(want, rel=1e-12)
    # in turn it is slower by exactly the overlapped FFN part of layer 0 (and the wider activations)
    seq = toy_forward("cpu-layers:1")
    assert parts(seq, COUNTS, seq.cpu_layer)[0] > parts(f, COUNTS, f.cpu_layer)[0]


def test_two_sockets_each_compute_their_half():
    f = toy_forward("cpu-all", sockets=2)
    # per socket the same channel and cores: socket 0 holds experts 0, 1; socket 1 experts 2, 3
    c0 = max(c_e(3) + c_e(1), c_e(2))
    c1 = max(c_e(2) + c_e(2), c_e(2))
    side = [10.0 + 3 * 2 * H * 4 / 10e9 * 1e6 + c for c in (c0, c1)]
    want = gpu_layer(3, 0, 0) * 2 + sum(side) + head(3)
    assert parts(f, COUNTS, f.cpu_layer)[0] * 1e3 == pytest.approx(want, rel=1e-12)


def test_compute_bound_expert_by_hand():
    f = toy_forward("cpu-all", eta_cpu=0.125)
    t = f.cpu_expert_ms(COUNTS)
    for layer in range(2):
        for e in range(NE):
            n = COUNTS[layer, e]
            assert t[layer, e] * 1e3 == pytest.approx(c_e(n, 0.125) if n else 0.0, rel=1e-12)
    assert t[0, 0] * 1e3 == pytest.approx(2 * 3 * P_E / (0.125 * 16e9) * 1e6)    # compute-bound at 3 tokens


def test_cpu_layers_0_is_the_resident_forward():
    """No expert on the CPU: the forward is the all-GPU physical model's (memory- and compute-bound)."""
    f = toy_forward("cpu-layers:0")
    for n, u, ctx in ((1, 2.0, 0.0), (3, 4.0, 50.0), (200, 4.0, 10.0), (7, 3.0, 1000.0)):
        want = f.gpu.forward_ms(n, u, ctx, n * ctx)
        assert f.forward_ms(n, u, ctx, n * ctx) == pytest.approx(want, rel=1e-12)


def test_cpu_all_with_a_free_cpu_costs_only_the_gpu_part():
    free = toy_cpu(mts=1e30, rate=1e30)
    f = toy_forward("cpu-all", link_gbps=1e30, sync_ms=0.0, cpu=free)
    want = 2 * max((ATTN + ROUTER) * 2 / BW_GPU, 5 * 2 * (ATTN + ROUTER) / PEAK_GPU) * 1e6 + head(5)
    assert f.forward_ms(5, 4.0) * 1e3 == pytest.approx(want, rel=1e-9)


def test_expert_bytes_follow_the_format():
    model = load_model("qwen3-30b-a3b")
    gpu = PhysicalModel(model, GPU_)
    for fmt, bits in (("bf16", 16.0), ("q8_0", 8.5)):
        f = CpuForward(gpu, toy_cpu(), load_format(fmt), Placement("all"), Link("l", "L", 10.0, ""), CpuTerms())
        assert np.allclose(f.E, model.expert_params * bits / 8)


@pytest.mark.parametrize("text", ["cpu-layers", "cpu-layers:", "cpu-layers:x", "cpu-layers:-1"])
def test_bad_placement_is_one_line(text):
    from simmoe.errors import ProfileError

    with pytest.raises(ProfileError, match="cpu-layers:N") as exc:
        parse_placement(text)
    assert "\n" not in str(exc.value)


def test_union_view_matches_the_routes_when_tokens_spread_evenly():
    """forward_ms (the selectors' view: n·k/u tokens per expert) equals forward_parts on such routes."""
    f = toy_forward("cpu-layers:1")
    even = np.array([[2, 2, 2, 0], [3, 3, 0, 0]])       # 3 tokens, k = 2: n·k/u = 2 and 3
    u = (even > 0).sum(1).astype(float)
    assert f.forward_ms(3, u) == pytest.approx(parts(f, even, f.cpu_layer)[0], rel=1e-12)
    assert math.isfinite(f.expert_ms()) and f.expert_ms() > 0


def test_cpu_layers_0_is_the_resident_forward_with_a_dense_first_layer():
    """DeepSeek-V2-Lite's first layer is dense (no experts): the per-layer terms land on the MoE layers only."""
    model = load_model("deepseek-v2-lite")
    assert model.first_dense_layers == 1
    gpu = PhysicalModel(model, GPU_)
    f = CpuForward(gpu, toy_cpu(), load_format("bf16"), Placement("layers", 0), Link("l", "L", 10.0, ""), CpuTerms())
    for n, u, ctx in ((1, 6.0, 0.0), (9, 20.0, 300.0)):
        assert f.forward_ms(n, u, ctx, n * ctx) == pytest.approx(gpu.forward_ms(n, u, ctx, n * ctx), rel=1e-12)
    # all on the CPU: the dense layer pays no sync, every MoE layer does
    g = CpuForward(gpu, toy_cpu(), load_format("bf16"), Placement("all"), Link("l", "L", 10.0, ""),
                   CpuTerms(sync_ms=1.0))
    zero = CpuForward(gpu, toy_cpu(), load_format("bf16"), Placement("all"), Link("l", "L", 10.0, ""),
                      CpuTerms(sync_ms=0.0))
    assert g.forward_ms(1, 0.0) - zero.forward_ms(1, 0.0) == pytest.approx(g.L_moe * 1.0)

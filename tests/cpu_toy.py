"""A 2-layer toy geometry with a toy GPU and CPU, and the CPU-expert cost model's terms by hand (µs)."""

from __future__ import annotations

import numpy as np

from simmoe.hardware.catalogue import CPU, GPU, CoreRates, Link, ModelSpec, load_format
from simmoe.hardware.cpu_forward import CpuForward, CpuTerms, parse_placement
from simmoe.hardware.physical import Overheads, PhysicalModel

H, W, NE, K = 64, 32, 4, 2          # hidden, expert width, experts, top-k
E_BYTES = 3 * H * W * 2             # gate, up, down in BF16
P_E = 3 * H * W
ATTN = H * 2 * 32 + 2 * H * 1 * 32 + 2 * 32 * H      # q, k, v, o with 2 heads, 1 KV head, head_dim 32
ROUTER = H * NE
HEAD = 100 * H


def toy_model() -> ModelSpec:
    return ModelSpec(key="toy", name="Toy", hf_id="", source="", architecture="qwen3_moe", decoder_layers=2,
                     first_dense_layers=0, num_experts=NE, top_k=K, shared_intermediate=0, hidden_size=H,
                     moe_intermediate_size=W, intermediate_size=128, attention="gqa", num_attention_heads=2,
                     num_key_value_heads=1, head_dim=32, vocab_size=100, tie_word_embeddings=False, dtype="bf16",
                     expert_dtype="bf16")


def toy_cpu(sockets=1, mts=1000.0, rate=8.0) -> CPU:
    core = CoreRates("k", "K", {"avx2": rate, "avx512": 0.0, "avx512_bf16": 0.0, "avx512_vnni": 0.0,
                                "amx_bf16": 0.0, "amx_int8": 0.0})
    # per socket: 1 channel x mts x 8 B; 2 cores x 1 GHz x rate
    return CPU(key="c", name="C", core=core, sockets=sockets, numa_nodes=sockets, cores=2, base_ghz=1.0,
               boost_ghz=1.0, memory="DDR5", memory_channels=1, memory_mts=mts, memory_gb=64.0)


GPU_ = GPU("g", "G", hbm_gbps=100.0, memory_gb=8.0, bf16_tflops=1.0, fp8_tflops=0.0, interconnect="",
           interconnect_gbps=16.0, allreduce_latency_us=15.0, host_link="l")


def toy_forward(placement: str, *, engine="llamacpp", sockets=1, eta_cpu=0.5, link_gbps=10.0, sync_ms=0.01,
                cpu=None, gpu=None) -> CpuForward:
    gpu = PhysicalModel(toy_model(), gpu or GPU_, overheads=Overheads(efficiency=1.0, compute_efficiency=0.5))
    terms = CpuTerms(mem_efficiency=0.5, compute_efficiency=eta_cpu, sync_ms=sync_ms, gpu_efficiency=1.0)
    place = parse_placement(placement)
    assert place is not None
    return CpuForward(gpu, cpu or toy_cpu(sockets), load_format("bf16"), place, Link("l", "L", link_gbps, ""),
                      terms, engine)


# routes of 3 tokens (k = 2 each): n_e per layer
COUNTS = np.array([[3, 1, 2, 0],       # layer 0
                   [2, 2, 0, 2]])      # layer 1
BW_GPU, PEAK_GPU = 100e9, 0.5e12      # B/s, FLOP/s (η = 1, η_c = 0.5)
BW_CPU = 1000 * 8 * 1e6 * 0.5         # one channel at 1000 MT/s, η_mem = 0.5


def c_e(n, eta_cpu=0.5, peak=16e9):
    """One CPU expert by hand, µs: max(bytes / (η_mem · BW), 2 n P / (η_cpu · peak))."""
    return max(E_BYTES / BW_CPU, 2 * n * P_E / (eta_cpu * peak)) * 1e6


def gpu_layer(n, experts, pairs_routed):
    """A GPU layer's roofline by hand, µs: attention + router + routed experts."""
    mem = (ATTN + ROUTER) * 2 + experts * E_BYTES
    flops = n * 2 * (ATTN + ROUTER) + pairs_routed * 2 * P_E
    return max(mem / BW_GPU, flops / PEAK_GPU) * 1e6


def head(n):
    return max(HEAD * 2 / BW_GPU, n * 2 * HEAD / PEAK_GPU) * 1e6

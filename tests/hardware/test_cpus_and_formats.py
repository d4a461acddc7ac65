"""CPU descriptions and expert weight formats: bandwidths and peaks by hand, bytes per weight from the block
layouts written out, every value sourced, bad names and files refused in one line, `simmoe models`."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simmoe.hardware.catalogue import (
    DTYPE_BYTES,
    ISAS,
    CatalogueError,
    expert_bytes,
    expert_bytes_by_layer,
    gpu_names,
    load_cpu,
    load_cpus,
    load_format,
    load_formats,
    load_gpu,
    load_link,
    load_model,
    load_models,
    mean_expert_bytes,
)
from simmoe.hardware.formats import load_format_file, tensor_type

REQUIRED_CPUS = ("ryzen9-7950x", "i9-10900x", "ryzen-ai9-hx370", "xeon-gold-6454s-x2", "epyc-9654")
NEW_GPUS = ("rtx2080", "rtx3060-12gb", "rtx3090", "rtx4090d", "rtx-a5000", "rtx-pro-6000-blackwell")

# peak DRAM bandwidth, GB/s, by hand: channels x MT/s x 8 bytes x sockets
DRAM_GBPS = {
    "ryzen9-7950x": 2 * 5200 * 8 / 1e3,            # 83.2
    "i9-10900x": 4 * 2933 * 8 / 1e3,               # 93.856 (ark: 'Max Memory Bandwidth 94 GB/s')
    "ryzen-ai9-hx370": 2 * 5600 * 8 / 1e3,         # 89.6
    "xeon-gold-6454s-x2": 2 * 8 * 4800 * 8 / 1e3,  # 614.4 (307.2 per socket)
    "epyc-9654": 12 * 4800 * 8 / 1e3,              # 460.8 (amd.com: 'Per Socket Mem BW 460.80 GB/s')
}
# ISA peaks, GFLOP/s or GOP/s, by hand: sockets x cores x base GHz x operations per cycle per core
ISA_PEAKS = {
    ("ryzen9-7950x", "avx512"): 16 * 4.5 * 32,
    ("ryzen9-7950x", "avx512_vnni"): 16 * 4.5 * 128,
    ("i9-10900x", "avx2"): 10 * 3.7 * 32,
    ("i9-10900x", "avx512"): 10 * 3.7 * 64,
    ("i9-10900x", "avx512_bf16"): 0.0,
    ("i9-10900x", "avx512_vnni"): 10 * 3.7 * 256,
    ("ryzen-ai9-hx370", "avx512_bf16"): 12 * 2.0 * 64,
    ("xeon-gold-6454s-x2", "avx512"): 2 * 32 * 2.2 * 64,
    ("xeon-gold-6454s-x2", "amx_bf16"): 2 * 32 * 2.2 * 1024,
    ("xeon-gold-6454s-x2", "amx_int8"): 2 * 32 * 2.2 * 2048,
    ("epyc-9654", "avx2"): 96 * 2.4 * 32,
    ("epyc-9654", "amx_int8"): 0.0,
}
# bits per weight from each block struct of ggml-common.h, written out: sum of (count x bits) / weights
BITS_PER_WEIGHT = {
    "q8_0": (16 + 32 * 8) / 32,                          # d, qs[32]: 34 bytes per 32 -> 8.5
    "q4_K": (16 + 16 + 12 * 8 + 128 * 8) / 256,          # d, dmin, scales[12], qs[128]: 144 per 256 -> 4.5
    "q5_K": (16 + 16 + 12 * 8 + 32 * 8 + 128 * 8) / 256,  # + qh[32]: 176 per 256 -> 5.5
    "q6_K": (128 * 8 + 64 * 8 + 16 * 8 + 16) / 256,      # ql[128], qh[64], scales[16], d: 210 -> 6.5625
    "iq4_xs": (16 + 16 + 4 * 8 + 128 * 8) / 256,         # d, scales_h, scales_l[4], qs[128]: 136 -> 4.25
    "mxfp4": (8 + 16 * 8) / 32,                          # E8M0 scale, 32 E2M1 nibbles: 17 per 32 -> 4.25
    "q5_0": (16 + 4 * 8 + 16 * 8) / 32,                  # 22 per 32 -> 5.5
    "q5_1": (16 + 16 + 4 * 8 + 16 * 8) / 32,             # 24 per 32 -> 6.0
    "iq4_nl": (16 + 16 * 8) / 32,                        # 18 per 32 -> 4.5
    "bf16": 16.0, "f16": 16.0, "fp8": 8.0, "f32": 32.0,
}


def test_every_required_cpu_is_described():
    assert set(REQUIRED_CPUS) <= set(load_cpus())


@pytest.mark.parametrize("key", sorted(DRAM_GBPS))
def test_dram_bandwidth_is_channels_times_rate_times_8_bytes_times_sockets(key):
    cpu = load_cpu(key)
    assert cpu.dram_gbps == pytest.approx(DRAM_GBPS[key], rel=1e-12)
    assert cpu.dram_gbps_per_socket * cpu.sockets == pytest.approx(cpu.dram_gbps, rel=1e-12)


def test_computed_bandwidths_match_the_vendors_own_figures():
    assert round(load_cpu("i9-10900x").dram_gbps) == 94                    # ark: 'Max Memory Bandwidth 94 GB/s'
    assert load_cpu("epyc-9654").dram_gbps_per_socket == pytest.approx(460.8)  # amd.com 'Per Socket Mem BW'


@pytest.mark.parametrize("key, isa", sorted(ISA_PEAKS))
def test_isa_peaks_are_cores_times_clock_times_rate(key, isa):
    assert load_cpu(key).isa_peak(isa) == pytest.approx(ISA_PEAKS[(key, isa)], rel=1e-12)


def test_only_sapphire_rapids_has_amx_and_cascade_lake_no_avx512_bf16():
    cpus = load_cpus()
    assert [k for k, c in cpus.items() if c.isa_peak("amx_bf16") > 0] == ["xeon-gold-6454s-x2"]
    assert cpus["i9-10900x"].isa_peak("avx512_bf16") == 0
    with pytest.raises(CatalogueError, match="unknown ISA 'sve'"):
        cpus["epyc-9654"].isa_peak("sve")


def test_every_cpu_value_and_core_rate_has_a_source():
    for cpu in load_cpus().values():
        fields = ("name", "memory", "sockets", "numa_nodes", "cores", "base_ghz", "boost_ghz", "memory_channels",
                  "memory_mts", "memory_gb")
        assert set(cpu.sources) == set(fields)
        assert all(len(s) > 10 for s in cpu.sources.values())
        assert set(cpu.core.sources) == set(ISAS) and all(cpu.core.sources.values())
        # an installed-memory size is a system choice: cited only for a published system, else assumed
        assert cpu.sources["memory_gb"].startswith("assumed") or "published" in cpu.sources["memory_gb"]


@pytest.mark.parametrize("block, bits", sorted(BITS_PER_WEIGHT.items()))
def test_bits_per_weight_follow_the_block_layouts(block, bits):
    blocks, _ = load_format_file()
    assert blocks[block].bits_per_weight == bits
    assert blocks[block].bytes_per_weight == bits / 8


def test_the_formats_the_task_names_exist_with_sources_and_the_catalogues_widths_agree():
    formats = load_formats()
    assert set(formats) == {"bf16", "fp8", "mxfp4", "q8_0", "q6_k", "q5_k_m", "q4_k_m", "iq4_xs"}
    assert all(f.source and f.gate_up.source and f.down.source for f in formats.values())
    blocks, _ = load_format_file()
    for dtype, block in (("bf16", "bf16"), ("fp16", "f16"), ("fp8", "fp8"), ("mxfp4", "mxfp4")):
        assert DTYPE_BYTES[dtype] == blocks[block].bytes_per_weight
    # the _M mixes store the down projection wider in some layers; the others store every tensor alike
    assert formats["q4_k_m"].down_more_bits.key == formats["q5_k_m"].down_more_bits.key == "q6_K"
    assert formats["q6_k"].down_more_bits is None and formats["q8_0"].down.key == "q8_0"


def test_qwen3_30b_q4_k_m_expert_bytes_by_hand():
    m = load_model("qwen3-30b-a3b")             # hidden 2048, expert width 768, 48 layers
    gate_up = 2 * 768 * (2048 // 256) * 144      # two [768 x 2048] Q4_K tensors
    assert expert_bytes(m, "q4_k_m", 0) == gate_up + 2048 * (768 // 256) * 210    # layer 0 < 48/8: down Q6_K
    assert expert_bytes(m, "q4_k_m", 6) == gate_up + 2048 * (768 // 256) * 144    # (6 - 6) % 3 != 2: down Q4_K
    wider = [i for i in range(48) if expert_bytes(m, "q4_k_m", i) > expert_bytes(m, "q4_k_m", 6)]
    assert wider == [*range(6), *range(8, 42, 3), *range(42, 48)]                # use_more_bits(i, 48)
    assert mean_expert_bytes(m, "q4_k_m") == (24 * 3_059_712 + 24 * 2_654_208) / 48
    assert expert_bytes(m, "bf16", 0) == m.expert_bytes == 9_437_184
    assert expert_bytes(m, "q8_0", 3) == 3 * 2048 * 768 // 32 * 34


def test_a_row_no_k_block_divides_falls_back_as_llama_cpp_does():
    m = load_model("deepseek-v2-lite")          # hidden 2048, expert width 1408 = 5.5 x 256, 27 layers
    assert m.moe_intermediate_size % 256 and m.moe_intermediate_size % 32 == 0
    gate_up = 2 * 1408 * (2048 // 256) * 144                 # rows of 2048: Q4_K as asked
    assert expert_bytes(m, "q4_k_m", 1) == gate_up + 2048 * (1408 // 32) * 34   # Q6_K layer -> Q8_0
    assert expert_bytes(m, "q4_k_m", 4) == gate_up + 2048 * (1408 // 32) * 22   # Q4_K layer -> Q5_0
    f = load_format("iq4_xs")
    assert tensor_type(f, "down", 5, 27, 1408).key == "iq4_nl"
    assert tensor_type(f, "down", 5, 27, 1000).key == "f16"     # not a multiple of 32 either: F16
    assert tensor_type(load_format("fp8"), "down", 5, 27, 1000).key == "fp8"   # not a GGUF format: no fallback


def test_iq4_xs_without_an_importance_matrix_widens_the_first_eighth():
    m = load_model("qwen3-30b-a3b")
    with_imatrix = expert_bytes_by_layer(m, "iq4_xs")
    without = expert_bytes_by_layer(m, "iq4_xs", imatrix=False)
    assert len(set(with_imatrix)) == 1
    assert [i for i in range(48) if without[i] != with_imatrix[i]] == list(range(6))   # i < 48 / 8: Q5_K
    assert without[0] - with_imatrix[0] == 2048 * 3 * (176 - 136)


def test_bf16_format_gives_the_catalogues_expert_bytes_for_every_bf16_model():
    for m in load_models().values():
        if m.expert_dtype == "bf16" and not m.expert_bias:
            assert all(b == m.expert_bytes for b in expert_bytes_by_layer(m, "bf16")), m.key


def test_expert_biases_take_the_formats_bias_width():
    m = load_model("gpt-oss-20b")
    biases = 2 * m.moe_intermediate_size + m.hidden_size
    weights = 3 * m.hidden_size * m.moe_intermediate_size
    assert expert_bytes(m, "mxfp4", 0) == weights * 17 // 32 + 2 * biases
    assert expert_bytes(m, "q8_0", 0) == weights * 34 // 32 + 4 * biases


@settings(max_examples=40, deadline=None)
@given(hidden=st.integers(1, 12).map(lambda x: 256 * x), width=st.integers(1, 12).map(lambda x: 256 * x),
       layers=st.integers(2, 64), data=st.data())
def test_wider_formats_never_store_an_expert_in_fewer_bytes(hidden, width, layers, data):
    m = replace(load_model("qwen3-30b-a3b"), hidden_size=hidden, moe_intermediate_size=width,
                decoder_layers=layers)
    layer = data.draw(st.integers(0, layers - 1))
    order = ["iq4_xs", "q4_k_m", "q5_k_m", "q6_k", "q8_0", "bf16"]
    sizes = [expert_bytes(m, f, layer) for f in order]
    assert sizes == sorted(sizes)
    params = 3 * hidden * width
    for f, bits in (("q6_k", 6.5625), ("q8_0", 8.5), ("iq4_xs", 4.25), ("bf16", 16)):
        assert expert_bytes(m, f, layer) == params * bits / 8       # rows divide: exactly bits per weight


def test_unknown_names_and_layers_are_refused_naming_the_known_ones():
    with pytest.raises(CatalogueError, match="known: ryzen9-7950x, i9-10900x"):
        load_cpu("i9-99999")
    with pytest.raises(CatalogueError, match="known: bf16, fp8, mxfp4, q8_0"):
        load_format("q3_k_s")
    with pytest.raises(CatalogueError, match="holds a blank"):
        load_cpu("epyc 9654")
    with pytest.raises(CatalogueError, match="outside qwen3-30b-a3b's 48 decoder layers"):
        expert_bytes(load_model("qwen3-30b-a3b"), "q4_k_m", 48)


CPU_FILE = """
[cores.c]
name = "a core"
avx2 = 32
avx512 = 0
avx512_bf16 = 0
avx512_vnni = 0
amx_bf16 = 0
amx_int8 = 0
sources = {avx2 = "s", avx512 = "s", avx512_bf16 = "s", avx512_vnni = "s", amx_bf16 = "s", amx_int8 = "s"}

[cpus.x]
name = "X"
core = "c"
sockets = 1
numa_nodes = 1
cores = 4
base_ghz = 3.0
boost_ghz = 4.0
memory = "DDR4"
memory_channels = 2
memory_mts = 3200
memory_gb = 16
[cpus.x.sources]
name = "s"
memory = "s"
sockets = "s"
numa_nodes = "s"
cores = "s"
base_ghz = "s"
boost_ghz = "s"
memory_channels = "s"
memory_mts = "s"
memory_gb = "assumed: a test"
"""


@pytest.mark.parametrize("edit, message", [
    (('memory_gb = "assumed: a test"\n', ""), "field 'memory_gb' has no source"),
    (('core = "c"', 'core = "z"'), "unknown core 'z'"),
    (("boost_ghz = 4.0", "boost_ghz = 2.0"), "boost_ghz 2 is below base_ghz 3"),
    (("memory_channels = 2", "memory_channels = 0"), "'memory_channels' must be an integer >= 1"),
    (("base_ghz = 3.0", 'base_ghz = "fast"'), "'base_ghz' must be a number"),
    (("avx2 = 32", "avx2 = -1"), "'avx2' must be a number >= 0"),
    (("[cpus.x]", "[cpu.x]"), "unknown table [cpu]"),
])
def test_bad_cpu_files_are_one_line_errors(tmp_path, edit, message):
    good = tmp_path / "good.toml"
    good.write_text(CPU_FILE)
    assert load_cpus(good)["x"].dram_gbps == pytest.approx(2 * 3200 * 8 / 1e3)
    bad = tmp_path / "bad.toml"
    bad.write_text(CPU_FILE.replace(*edit))
    with pytest.raises(CatalogueError, match=message.replace("[", r"\[").replace("]", r"\]")) as exc:
        load_cpus(bad)
    assert "\n" not in str(exc.value)


def test_the_new_gpus_and_pcie3_link_load_with_sources():
    assert set(NEW_GPUS) <= set(gpu_names())
    for name in NEW_GPUS:
        g = load_gpu(name)
        assert g.hbm_gbps > 0 and g.bf16_tflops > 0 and len(g.sources) >= 2
        assert load_link(g.host_link).gbps > 0
    assert load_gpu("rtx2080").host_link == "pcie3-x16" and load_gpu("rtx2080").memory_gb == 8
    assert load_link("pcie3-x16").gbps < 15.75 < load_link("pcie4-x16").gbps   # below Gen3's theoretical rate
    # the 4090 D is the 4090's tensor rate over 114 of its 128 SMs at the same clock
    assert load_gpu("rtx4090d").bf16_tflops == pytest.approx(load_gpu("rtx4090").bf16_tflops * 114 / 128, abs=0.05)


def test_cli_lists_cpus_with_gpus_and_formats(capsys):
    from simmoe.cli import main

    assert main(["models", "--gpus"]) == 0
    out = capsys.readouterr().out
    assert all(k in out for k in REQUIRED_CPUS) and "614.4" in out and "288.4" in out    # 2x 6454S DRAM, AMX INT8
    assert all(len(line) <= 100 for line in out.splitlines())
    assert main(["models", "--gpus", "--json"]) == 0
    cpus = json.loads(capsys.readouterr().out)["cpus"]
    assert cpus["epyc-9654"]["derived"]["dram_gbps"] == pytest.approx(460.8)
    assert main(["models", "--formats", "qwen3-30b-a3b", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)["formats"]
    assert data["q4_k_m"]["expert_bytes_mean"] == (24 * 3_059_712 + 24 * 2_654_208) / 48
    assert main(["models", "--formats"]) == 0
    assert "q5_K / q6_K" in capsys.readouterr().out


@pytest.mark.parametrize("argv, words", [
    (["models", "--formats", "nope"], ["unknown model 'nope'"]),
    (["models", "--gpus", "--formats"], ["give one of them"]),
    (["models", "--gpus", "qwen3-30b-a3b"], ["has no place there"]),
])
def test_cli_bad_requests_are_one_line_exit_2(capsys, argv, words):
    from simmoe.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and all(w in err for w in words), err

"""The model catalogue and GPU descriptions: sizes from the fields, sources, bad files, `simmoe models`."""

from __future__ import annotations

import json

import pytest

from simmoe.hardware.catalogue import (
    CatalogueError,
    gpu_names,
    load_gpu,
    load_link,
    load_model,
    load_models,
)

REQUIRED = ("qwen3-30b-a3b", "qwen3-235b-a22b", "ling-flash-2.0", "hunyuan-7b", "mixtral-8x7b",
            "deepseek-v2-lite", "deepseek-v3", "olmoe-1b-7b", "gpt-oss-20b", "gpt-oss-120b", "qwen1.5-moe-a2.7b")
# total parameters the model cards (or EVICT App. C.2) state, in billions: the catalogue's fields must give them
STATED_TOTAL_B = {"qwen3-30b-a3b": 30.5, "qwen3-235b-a22b": 235.0, "ling-flash-2.0": 103.0, "mixtral-8x7b": 46.7,
                  "deepseek-v2-lite": 15.7, "deepseek-v3": 671.0, "olmoe-1b-7b": 6.9, "gpt-oss-20b": 21.0,
                  "gpt-oss-120b": 117.0, "qwen1.5-moe-a2.7b": 14.3, "hunyuan-7b": 7.5}


def test_every_required_model_is_catalogued_with_a_source():
    models = load_models()
    assert set(REQUIRED) <= set(models)
    for m in models.values():
        assert m.source.startswith(("http", "config.json", "defaults")) or "config.json" in m.source
        assert all(f in m.to_dict() for f in m.unverified)


@pytest.mark.parametrize("key", sorted(STATED_TOTAL_B))
def test_fields_give_the_stated_parameter_count(key):
    assert load_model(key).total_params / 1e9 == pytest.approx(STATED_TOTAL_B[key], rel=0.03)


def test_qwen3_30b_expert_bytes_are_specfits():
    m = load_model("qwen3-30b-a3b")
    assert m.expert_bytes == 3 * 2048 * 768 * 2 == 9_437_184
    assert m.kv_bytes_per_token == 48 * 2 * 4 * 128 * 2


def test_geometries_are_valid_traces_geometries():
    for m in load_models().values():
        g = m.geometry()
        assert g.layer_problem() is None
        assert g.num_layers == len(m.moe_layers)
        if m.first_dense_layers:
            assert g.moe_layers[0] == m.first_dense_layers and g.decoder_layers == m.decoder_layers
    dense = load_model("hunyuan-7b").geometry()
    assert (dense.num_experts, dense.top_k, dense.num_layers) == (1, 1, 32)


def test_lookup_by_name_and_hf_id():
    assert load_model("Qwen/Qwen3-30B-A3B-Instruct-2507").key == "qwen3-30b-a3b"
    assert load_model("gpt-oss-20b").key == "gpt-oss-20b"


def test_unknown_names_list_the_known_ones():
    with pytest.raises(CatalogueError, match="known: qwen3-30b-a3b"):
        load_model("qwen9")
    with pytest.raises(CatalogueError, match="known: a100-sxm4-80gb"):
        load_gpu("b200")
    with pytest.raises(CatalogueError, match="known: pcie4-x16"):
        load_link("ethernet")


def test_gpus_have_positive_peaks_and_sources():
    assert {"a100-sxm4-80gb", "a100-pcie-40gb", "h100-sxm", "h200", "rtx4090"} <= set(gpu_names())
    for name in gpu_names():
        g = load_gpu(name)
        assert g.hbm_gbps > 0 and g.bf16_tflops > 0 and g.sources
        load_link(g.host_link)


GOOD = """
[tiny]
name = "Tiny"
hf_id = "x/tiny"
source = "hand-written"
architecture = "test"
decoder_layers = 4
first_dense_layers = 1
num_experts = 8
top_k = 2
shared_intermediate = 0
hidden_size = 64
moe_intermediate_size = 32
intermediate_size = 128
attention = "gqa"
num_attention_heads = 4
num_key_value_heads = 2
head_dim = 16
vocab_size = 100
tie_word_embeddings = false
dtype = "bf16"
expert_dtype = "bf16"
"""


def test_a_geometry_file_loads_and_its_sizes_follow_the_fields(tmp_path):
    path = tmp_path / "g.toml"
    path.write_text(GOOD)
    m = load_model(str(path))
    assert m.expert_bytes == 3 * 64 * 32 * 2
    assert m.moe_layers == (1, 2, 3)
    assert m.dense_bytes == 2 * (4 * (64 * 64 + 2 * 64 * 32 + 64 * 64) + 3 * 64 * 128 + 3 * 64 * 8 + 2 * 100 * 64)


@pytest.mark.parametrize("edit, message", [
    (("hidden_size = 64\n", ""), "missing field 'hidden_size'"),
    (("top_k = 2", "top_k = -2"), "'top_k' must be >= 0"),
    (("top_k = 2", "top_k = 9"), "exceeds num_experts"),
    (("vocab_size = 100", "vocab_size = 0"), "'vocab_size' must be > 0"),
    (("head_dim = 16", "head_dim = 1.5"), "must be an integer"),
    (('dtype = "bf16"\nexpert', 'dtype = "fp3"\nexpert'), "must be one of"),
    (("architecture", "colour = 1\narchitecture"), "unknown field 'colour'"),
])
def test_bad_geometry_files_are_one_line_errors(tmp_path, edit, message):
    path = tmp_path / "bad.toml"
    path.write_text(GOOD.replace(*edit, 1))
    with pytest.raises(CatalogueError, match=message) as exc:
        load_model(str(path))
    assert "\n" not in str(exc.value)


def test_cli_lists_models_and_gpus(capsys):
    from simmoe.cli import main

    assert main(["models", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(REQUIRED) <= set(data) and data["qwen3-30b-a3b"]["derived"]["expert_bytes"] == 9_437_184
    assert main(["models", "--gpus"]) == 0
    assert "h200" in capsys.readouterr().out
    assert main(["models", "hunyuan-7b"]) == 0
    assert "(unverified)" in capsys.readouterr().out


def test_cli_bad_model_or_file_exits_2_with_one_line(tmp_path, capsys):
    from simmoe.cli import main

    assert main(["models", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "known:" in err[0]
    bad = tmp_path / "bad.toml"
    bad.write_text(GOOD.replace("top_k = 2", "top_k = -1"))
    assert main(["models", str(bad)]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_synth_model_writes_that_geometry_and_says_so(tmp_path):
    from simmoe.cli import main
    from simmoe.trace.io import read_trace

    out = tmp_path / "t.parquet"
    assert main(["synth", "--preset", "gsm8k", "--requests", "1", "--model", "deepseek-v2-lite", "--out", str(out),
                 "--no-progress"]) == 0
    t = read_trace(out)
    g = t.geometry
    assert (g.num_layers, g.num_experts, g.top_k, g.decoder_layers) == (26, 64, 6, 27)
    assert t.is_synthetic
    assert any("DeepSeek-V2-Lite" in f and "carried over" in f for f in t.meta["provenance"]["fitted_to"])
    assert main(["synth", "--preset", "gsm8k", "--model", "nope", "--out", str(out), "--no-progress"]) == 2


def test_ling_flash_geometry_gives_the_checkpoints_exact_parameter_count():
    # the Hub lists 102,889,697,280 BF16 parameters for inclusionAI/Ling-flash-2.0 (revision 649f8b9):
    # the catalogue's weights plus the RMSNorm vectors (two per layer, QK-norm, final norm)
    m = load_model("ling-flash-2.0")
    norms = m.decoder_layers * (2 * m.hidden_size + 2 * m.head_dim) + m.hidden_size
    assert m.total_params + norms == 102_889_697_280
    assert len(m.moe_layers) * m.num_experts == 7_936      # its F32 tensors: one router bias per expert


def test_deepseek_v3_keeps_embedding_head_and_router_in_bf16():
    """FP8 (1 B) linear layers, BF16 (2 B) embedding, LM head and router: written out weight by weight."""
    m = load_model("deepseek-v3")
    h, heads, vocab = 7168, 128, 129280
    mla = (h * 1536 + 1536 * heads * (128 + 64)                 # q_a, q_b
           + h * (512 + 64) + 512 * heads * (128 + 128)         # kv_a (latent + RoPE key), kv_b
           + heads * 128 * h)                                   # o
    fp8 = 61 * mla + 3 * 3 * h * 18432 + 58 * 3 * h * 2048      # attention, 3 dense MLPs, 58 shared experts
    bf16 = 58 * h * 256 + 2 * vocab * h                         # routers, embedding and LM head
    assert m.dense_bytes == fp8 * 1 + bf16 * 2
    assert m.dense_bytes / 1e9 == pytest.approx(19.08, abs=0.005)          # was 17.12 with everything at FP8
    assert m.expert_bytes == 3 * h * 2048                                  # routed experts stay FP8


def test_the_physical_model_reads_deepseek_v3s_bf16_head_and_routers():
    from simmoe.hardware.physical import PhysicalModel

    m = load_model("deepseek-v3")
    phys = PhysicalModel(m, load_gpu("h200"))
    assert phys.head_bytes == 129280 * 7168 * 2
    assert phys.w_bytes.sum() + 2 * phys.head_bytes == pytest.approx(m.dense_bytes)
    assert phys.w_bytes[3] - phys.w_bytes[4] == 0     # MoE layers alike; the router is in every one of them
    assert phys.w_bytes[3] - (phys.w_bytes[0] - 3 * 7168 * 18432) == 7168 * 2048 * 3 + 7168 * 256 * 2


# activated parameters as the model cards state them, and what each card counts
CARD_ACTIVE = {"qwen3-30b-a3b": (3.3, "all"), "qwen3-235b-a22b": (22.0, "all"), "ling-flash-2.0": (6.1, "all"),
               "mixtral-8x7b": (12.9, "all"), "olmoe-1b-7b": (1.3, "all"), "qwen1.5-moe-a2.7b": (2.7, "all"),
               "deepseek-v2-lite": (2.4, "no-input-embedding"), "deepseek-v3": (36.7, "no-input-embedding"),
               "gpt-oss-20b": (3.61, "no-input-embedding"), "gpt-oss-120b": (5.13, "no-input-embedding")}


def _unit(x: float) -> float:
    """One unit of the last digit a card's figure is written with (3.61 -> 0.01, 22.0 -> 1)."""
    text = f"{x:g}"
    return 10.0 ** -len(text.split(".")[1]) if "." in text else 1.0


@pytest.mark.parametrize("key", sorted(CARD_ACTIVE))
def test_active_parameters_are_counted_as_each_card_counts(key):
    m = load_model(key)
    card, counts = CARD_ACTIVE[key]
    assert (m.card_active_params_b, m.card_active_counts) == (card, counts)
    assert abs(m.active_params_as_card / 1e9 - card) < _unit(card)   # cards round or cut off the last digit
    if counts == "no-input-embedding":   # the other convention would miss the card: that is why it is stated
        assert abs(m.active_params / 1e9 - card) > _unit(card)
        assert m.active_params - m.active_params_as_card == m.vocab_size * m.hidden_size


@pytest.mark.parametrize("key, layers, experts", [("gpt-oss-20b", 24, 32), ("gpt-oss-120b", 36, 128)])
def test_gpt_oss_active_parameters_by_hand(key, layers, experts):
    """gpt-oss model card, Table 1: 3.61B and 5.13B active: 4 biased experts, attention, router and the LM head."""
    h, vocab = 2880, 201088
    expert = 3 * h * h + 2 * h + h                  # gate+up (with biases) and down (with bias)
    attention = h * 64 * 64 + 2 * h * 8 * 64 + 64 * 64 * h
    active = layers * (4 * expert + attention + h * experts) + vocab * h
    assert load_model(key).active_params_as_card == active
    assert load_model(key).derived()["active_params_b"] == {"gpt-oss-20b": 3.61, "gpt-oss-120b": 5.13}[key]


@pytest.mark.parametrize("key, full_layers, kv", [("gpt-oss-20b", 12, 24_576), ("gpt-oss-120b", 18, 36_864)])
def test_gpt_oss_kv_per_token_counts_only_the_full_attention_layers(key, full_layers, kv):
    m = load_model(key)
    per_layer = 2 * 8 * 64 * 2                       # K and V, 8 KV heads of 64, BF16
    assert m.kv_bytes_per_token == full_layers * per_layer == kv
    assert m.kv_window_bytes == full_layers * 128 * per_layer     # the other half holds 128 tokens at most
    assert load_model("qwen3-30b-a3b").kv_window_bytes == 0


def test_cli_table_marks_the_card_convention_and_the_window(capsys):
    from simmoe.cli import main

    assert main(["models"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.strip().startswith("gpt-oss-20b"))
    assert "3.61†" in row and " 24.6 " in row
    assert "input embedding not" in out and "at most 3.1 MB per sequence" in out


@pytest.mark.parametrize("edit, message", [
    ('unquantized_dtype = "fp3"\n', "'unquantized_dtype' must be one of"),
    ("card_active_params_b = -1\n", "'card_active_params_b' must be a number > 0"),
    ('card_active_counts = "some"\n', "'card_active_counts' must be one of"),
])
def test_bad_card_fields_are_one_line_errors(tmp_path, edit, message):
    path = tmp_path / "bad.toml"
    path.write_text(GOOD.replace("architecture", edit + "architecture", 1))
    with pytest.raises(CatalogueError, match=message):
        load_model(str(path))

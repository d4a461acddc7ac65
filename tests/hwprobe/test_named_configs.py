"""hwprobe's real-shape named configs against the published checkpoints' config.json.

Each config is built by transformers (the model on the meta device: shapes
without memory), so what is checked is what a GPU self-check would run: the
biases that change weight shapes, the RoPE variant each checkpoint uses, the
multipliers that change the arithmetic.  The layer geometry shared with the
simulator's model catalogue is compared with it field by field.
"""

from __future__ import annotations

import math

import pytest
import torch
from transformers import AutoModelForCausalLM

from hwprobe.architectures import ARCHITECTURES, resolve_named
from hwprobe.models import named_config
from simmoe.hardware.catalogue import load_model

pytestmark = pytest.mark.torch


def _meta_model(name: str):
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(named_config(name))


def test_phi35_moe_has_the_checkpoints_biases_longrope_and_jitter():
    cfg = named_config("phi-3.5-moe-1layers")
    assert cfg.attention_bias is True and cfg.lm_head_bias is True
    assert cfg.input_jitter_noise == 0.01 and cfg.router_jitter_noise == 0.01
    m = _meta_model("phi-3.5-moe-1layers")
    attn = m.model.layers[0].self_attn
    head_dim = 4096 // 32
    # the shapes the biases add: q 32 heads, k and v 8 KV heads, o the hidden size, the LM head the vocabulary
    assert attn.q_proj.bias.shape == (32 * head_dim,)
    assert attn.k_proj.bias.shape == attn.v_proj.bias.shape == (8 * head_dim,)
    assert attn.o_proj.bias.shape == (4096,)
    assert m.lm_head.bias.shape == (32064,)
    rope = cfg.rope_parameters
    assert rope["rope_type"] == "longrope" and rope["original_max_position_embeddings"] == 4096
    # one factor per rotary frequency: head_dim / 2 = 64 of each, the long ones rising to ~65x
    assert len(rope["short_factor"]) == len(rope["long_factor"]) == head_dim // 2
    assert rope["long_factor"][0] == pytest.approx(1.02) and rope["long_factor"][-1] == pytest.approx(64.96)
    assert rope["short_mscale"] == rope["long_mscale"] == pytest.approx(1.243163121016122)


@pytest.mark.parametrize("name, factor, theta, max_pos", [
    ("deepseek-v2-lite-2layers", 40.0, 10000.0, 163840),
    ("gpt-oss-20b-1layers", 32.0, 150000.0, 131072),
])
def test_deepseek_v2_lite_and_gpt_oss_use_the_checkpoints_yarn(name, factor, theta, max_pos):
    cfg = named_config(name)
    rope = cfg.rope_parameters
    assert rope["rope_type"] == "yarn" and rope["factor"] == factor
    assert rope["original_max_position_embeddings"] == 4096 and rope["rope_theta"] == theta
    assert cfg.max_position_embeddings == max_pos
    # YaRN scales attention by 0.1 ln(factor) + 1 (DeepSeek: the ratio of its two mscales, here 1)
    emb = _meta_model(name).model.rotary_emb
    want = 1.0 if name.startswith("deepseek") else 0.1 * math.log(factor) + 1.0
    assert emb.attention_scaling == pytest.approx(want)
    assert emb.rope_type == "yarn"


def test_qwen3_30b_a3b_is_instruct_2507():
    cfg = named_config("qwen3-30b-a3b-2layers")
    assert cfg.rope_parameters["rope_theta"] == 1e7 and cfg.max_position_embeddings == 262144


def test_granite_carries_its_mup_multipliers():
    cfg = named_config("granite-3.0-3b-a800m-1layers")
    assert (cfg.embedding_multiplier, cfg.residual_multiplier, cfg.logits_scaling) == (12.0, 0.22, 6.0)
    # the attention multiplier replaces 1/sqrt(head_dim) by 1/head_dim (muP): 1536 / 24 = 64-wide heads
    assert cfg.attention_multiplier == 1 / (1536 // 24)


def test_named_configs_do_not_share_mutable_rope_dicts():
    """Two resolutions of a name are independent: a config normalising its RoPE dict cannot touch the table."""
    _, a = resolve_named("phi-3.5-moe-1layers")
    _, b = resolve_named("phi-3.5-moe-1layers")
    a["rope_parameters"]["short_factor"].append(0.0)
    assert len(b["rope_parameters"]["short_factor"]) == 64
    assert len(ARCHITECTURES["phimoe"].real["phi-3.5-moe"]["rope_parameters"]["short_factor"]) == 64


@pytest.mark.parametrize("name, key, experts_field, top_field", [
    ("qwen3-30b-a3b", "qwen3-30b-a3b", "num_experts", "num_experts_per_tok"),
    ("qwen1.5-moe-a2.7b", "qwen1.5-moe-a2.7b", "num_experts", "num_experts_per_tok"),
    ("mixtral-8x7b", "mixtral-8x7b", "num_local_experts", "num_experts_per_tok"),
    ("olmoe-1b-7b", "olmoe-1b-7b", "num_experts", "num_experts_per_tok"),
    ("deepseek-v2-lite", "deepseek-v2-lite", "n_routed_experts", "num_experts_per_tok"),
    ("gpt-oss-20b", "gpt-oss-20b", "num_local_experts", "num_experts_per_tok"),
])
def test_named_config_geometry_matches_the_catalogue(name, key, experts_field, top_field):
    m = load_model(key)
    model_type = next(t for t, a in ARCHITECTURES.items() if name in a.real)
    kw = ARCHITECTURES[model_type].real[name]
    assert kw["num_hidden_layers"] == m.decoder_layers and kw["hidden_size"] == m.hidden_size
    assert kw[experts_field] == m.num_experts and kw[top_field] == m.top_k
    assert kw["vocab_size"] == m.vocab_size and kw["num_attention_heads"] == m.num_attention_heads
    assert kw.get("tie_word_embeddings", False) == m.tie_word_embeddings

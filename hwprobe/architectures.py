"""The MoE architectures hwprobe runs, their random-weight configs, and what was tested on each.

hwprobe needs nothing architecture-specific from a model but transformers'
experts interface (``use_experts_implementation``): every experts module of
such a model takes the token-to-expert assignment as input and holds fused
3-D weights with layout flags, so one offload backend serves all of them
(:mod:`hwprobe.offload`).  This table adds what the interface does not say:

* ``tiny``: a random-weight config small enough for CPU tests (hidden 64,
  3 layers, 8 experts, top-2; dense first layers, shared experts and sliding
  windows kept where the architecture has them, so the tests exercise them);
* ``real``: named configs with the layer shapes of published checkpoints
  (``<name>-<N>layers`` keeps N decoder layers), for GPU self-checks with
  real copy and compute times;
* ``tree``: ``None`` when a tree of branches can be verified in one forward
  (a 4-D mask, per layer type where windows differ), else why not;
* ``attn``: the attention implementation the architecture needs (GPT-OSS's
  attention sinks have no sdpa path in transformers);
* ``tested``: what the test suite checks for it (``hwprobe models`` prints it).

An architecture that is not listed here but uses the experts interface is
accepted (the backend is generic) and reported as untested; one without the
interface is refused with one line.

This module imports neither torch nor transformers.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field

# what each test tier checks (tests/hwprobe/test_architectures.py, test_arch_cli.py)
T_OFFLOAD = "offloaded = resident logits; routes = router's choice"
T_TREE = "tree forward = sequential paths"
T_REFUSED = "tree refused with the reason"
T_CLI = "record + live end to end"


@dataclass(frozen=True)
class Architecture:
    model_type: str
    label: str
    tiny: dict
    tree: str | None = None
    attn: str = "sdpa"
    real: dict = field(default_factory=dict)
    tested: tuple[str, ...] = (T_OFFLOAD, T_TREE)
    notes: str = ""


_SMALL = dict(
    vocab_size=320,
    hidden_size=64,
    intermediate_size=128,
    num_attention_heads=4,
    num_key_value_heads=2,
    num_hidden_layers=3,
    max_position_embeddings=512,
    tie_word_embeddings=False,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
)

_HYBRID = (
    "hybrid linear attention: its recurrent layers keep one running state per sequence, which the "
    "branches of a tree cannot share, so a tree cannot be verified in one forward"
)

# --------------------------------------------------------------------------
# Fields of the published checkpoints' config.json that change the computation (not only the shapes).
# Where each value was read is said beside it; transformers 5 spells rope_scaling as rope_parameters.
# --------------------------------------------------------------------------
# deepseek-ai/DeepSeek-V2-Lite config.json rope_scaling (copies in the code corpus: a transformers-5 dump of
# the checkpoint's config and sglang's DeepSeek RoPE test hold the same values)
DEEPSEEK_V2_LITE_YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0,
                         "original_max_position_embeddings": 4096, "beta_fast": 32.0, "beta_slow": 1.0,
                         "mscale": 0.707, "mscale_all_dim": 0.707}
# openai/gpt-oss-20b config.json rope_scaling (the same in gpt-oss-120b's, copied verbatim in the corpus)
GPT_OSS_YARN = {"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0,
                "original_max_position_embeddings": 4096, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False}
# microsoft/Phi-3.5-MoE-instruct config.json rope_scaling (longrope): 64 short and 64 long factors (one per
# rotary frequency of a 128-wide head), as reproduced in Ascend/MindSpeed-LLM
# examples/mcore/phi35/pretrain_phi35_moe_ptd.sh; mscales 1.243163121016122; original length 4096
PHI35_MOE_LONGROPE = {
    "rope_type": "longrope", "rope_theta": 10000.0, "original_max_position_embeddings": 4096,
    "short_mscale": 1.243163121016122, "long_mscale": 1.243163121016122,
    "short_factor": [
        1.0, 1.0399999618530273, 1.0399999618530273, 1.0399999618530273, 1.0499999523162842, 1.0499999523162842,
        1.0499999523162842, 1.0499999523162842, 1.0499999523162842, 1.0499999523162842, 1.0499999523162842,
        1.0499999523162842, 1.0499999523162842, 1.0499999523162842, 1.059999942779541, 1.059999942779541,
        1.0699999332427979, 1.0699999332427979, 1.0699999332427979, 1.0699999332427979, 1.1399999856948853,
        1.159999966621399, 1.159999966621399, 1.159999966621399, 1.159999966621399, 1.1799999475479126,
        1.1999999284744263, 1.3199999332427979, 1.3399999141693115, 1.3499999046325684, 1.3999998569488525,
        1.4799998998641968, 1.4999998807907104, 1.589999794960022, 1.6499998569488525, 1.71999990940094,
        1.8999998569488525, 1.9099998474121094, 1.9099998474121094, 1.9899998903274536, 1.9999998807907104,
        1.9999998807907104, 2.009999990463257, 2.009999990463257, 2.009999990463257, 2.009999990463257,
        2.009999990463257, 2.009999990463257, 2.009999990463257, 2.009999990463257, 2.009999990463257,
        2.009999990463257, 2.009999990463257, 2.009999990463257, 2.009999990463257, 2.009999990463257,
        2.009999990463257, 2.009999990463257, 2.009999990463257, 2.0999999046325684, 2.319999933242798,
        2.419999837875366, 2.5899999141693115, 2.7899999618530273],
    "long_factor": [
        1.0199999809265137, 1.0299999713897705, 1.0399999618530273, 1.0499999523162842, 1.0499999523162842,
        1.0499999523162842, 1.059999942779541, 1.059999942779541, 1.059999942779541, 1.059999942779541,
        1.059999942779541, 1.059999942779541, 1.0999999046325684, 1.1799999475479126, 1.1799999475479126,
        1.3700000047683716, 1.4899998903274536, 2.109999895095825, 2.8899998664855957, 3.9499998092651367,
        4.299999713897705, 6.429999828338623, 8.09000015258789, 10.690000534057617, 12.050000190734863,
        18.229999542236328, 18.84000015258789, 19.899999618530273, 21.420000076293945, 26.200000762939453,
        34.28000259399414, 34.590003967285156, 38.730003356933594, 40.22000503540039, 42.54000473022461,
        44.000003814697266, 47.590003967285156, 54.750003814697266, 56.19000244140625, 57.44000244140625,
        57.4900016784668, 61.20000076293945, 61.540000915527344, 61.75, 61.779998779296875, 62.06999969482422,
        63.11000061035156, 63.43000030517578, 63.560001373291016, 63.71000289916992, 63.92000198364258,
        63.94000244140625, 63.94000244140625, 63.96000289916992, 63.980003356933594, 64.0300064086914,
        64.0300064086914, 64.0300064086914, 64.04000854492188, 64.10000610351562, 64.19000244140625,
        64.20999908447266, 64.75, 64.95999908447266],
}
# ibm-granite/granite-3.0-3b-a800m config.json: muP multipliers.  The checkpoint's own file was not readable
# here; these are the Granite 3.0/3.1 MoE family's values as their configs' copies give them (e.g. the
# 1b-a400m's), and attention_multiplier = 1/head_dim = 1/64 holds for the 3b-a800m's 1536/24-wide heads too
GRANITE_MUP = dict(embedding_multiplier=12.0, residual_multiplier=0.22, attention_multiplier=0.015625,
                   logits_scaling=6.0)

ARCHITECTURES: dict[str, Architecture] = {
    a.model_type: a
    for a in [
        Architecture(
            "qwen3_moe",
            "Qwen3-MoE",
            dict(
                moe_intermediate_size=32,
                num_experts=8,
                num_experts_per_tok=2,
                head_dim=16,
                norm_topk_prob=True,
            ),
            real={
                "qwen3-30b-a3b": dict(
                    vocab_size=151936,
                    hidden_size=2048,
                    intermediate_size=6144,
                    moe_intermediate_size=768,
                    num_attention_heads=32,
                    num_key_value_heads=4,
                    head_dim=128,
                    num_experts=128,
                    num_experts_per_tok=8,
                    norm_topk_prob=True,
                    rms_norm_eps=1e-6,
                    # Instruct-2507 (the checkpoint SpecFit and EVICT run): RoPE theta 1e7 and a
                    # 262,144-token context (its config.json; the original Qwen3-30B-A3B has 1e6, 40,960)
                    max_position_embeddings=262144,
                    tie_word_embeddings=False,
                    num_hidden_layers=48,
                    rope_parameters={"rope_type": "default", "rope_theta": 1e7},
                )
            },
            tested=(T_OFFLOAD, T_TREE, T_CLI),
        ),
        Architecture(
            "qwen2_moe",
            "Qwen2-MoE (Qwen1.5-MoE)",
            dict(
                moe_intermediate_size=32,
                shared_expert_intermediate_size=48,
                num_experts=8,
                num_experts_per_tok=2,
                mlp_only_layers=[0],
            ),
            real={
                "qwen1.5-moe-a2.7b": dict(
                    vocab_size=151936,
                    hidden_size=2048,
                    intermediate_size=5632,
                    moe_intermediate_size=1408,
                    shared_expert_intermediate_size=5632,
                    num_hidden_layers=24,
                    num_attention_heads=16,
                    num_key_value_heads=16,
                    num_experts=60,
                    num_experts_per_tok=4,
                    norm_topk_prob=False,
                    max_position_embeddings=8192,
                    tie_word_embeddings=False,
                    rope_parameters={"rope_type": "default", "rope_theta": 1e6},
                )
            },
            tested=(T_OFFLOAD, T_TREE, T_CLI),
            notes="shared expert (with its gate) resident; mlp_only_layers are dense",
        ),
        Architecture(
            "mixtral",
            "Mixtral",
            dict(
                num_local_experts=8, num_experts_per_tok=2, intermediate_size=32, sliding_window=6
            ),
            real={
                "mixtral-8x7b": dict(
                    vocab_size=32000,
                    hidden_size=4096,
                    intermediate_size=14336,
                    num_hidden_layers=32,
                    num_attention_heads=32,
                    num_key_value_heads=8,
                    num_local_experts=8,
                    num_experts_per_tok=2,
                    max_position_embeddings=32768,
                    rms_norm_eps=1e-5,
                    tie_word_embeddings=False,
                    sliding_window=None,
                    rope_parameters={"rope_type": "default", "rope_theta": 1e6},
                )
            },
            tested=(T_OFFLOAD, T_TREE, T_CLI),
            notes="tiny config: a 6-token sliding window on all layers, applied by tree masks",
        ),
        Architecture(
            "olmoe",
            "OLMoE",
            dict(num_experts=8, num_experts_per_tok=2, intermediate_size=32),
            real={
                "olmoe-1b-7b": dict(
                    vocab_size=50304,
                    hidden_size=2048,
                    intermediate_size=1024,
                    num_hidden_layers=16,
                    num_attention_heads=16,
                    num_key_value_heads=16,
                    num_experts=64,
                    num_experts_per_tok=8,
                    norm_topk_prob=False,
                    max_position_embeddings=4096,
                    tie_word_embeddings=False,
                    rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                )
            },
            tested=(T_OFFLOAD, T_TREE, T_CLI),
        ),
        Architecture(
            "deepseek_v2",
            "DeepSeek-V2 (MLA)",
            dict(
                moe_intermediate_size=32,
                n_routed_experts=8,
                n_shared_experts=1,
                num_experts_per_tok=2,
                first_k_dense_replace=1,
                kv_lora_rank=16,
                q_lora_rank=None,
                qk_nope_head_dim=16,
                qk_rope_head_dim=8,
                v_head_dim=16,
                n_group=1,
                topk_group=1,
                num_key_value_heads=4,
            ),
            real={
                "deepseek-v2-lite": dict(
                    vocab_size=102400,
                    hidden_size=2048,
                    intermediate_size=10944,
                    moe_intermediate_size=1408,
                    num_hidden_layers=27,
                    num_attention_heads=16,
                    num_key_value_heads=16,
                    n_routed_experts=64,
                    n_shared_experts=2,
                    num_experts_per_tok=6,
                    first_k_dense_replace=1,
                    kv_lora_rank=512,
                    q_lora_rank=None,
                    qk_nope_head_dim=128,
                    qk_rope_head_dim=64,
                    v_head_dim=128,
                    n_group=1,
                    topk_group=1,
                    topk_method="greedy",
                    norm_topk_prob=False,
                    routed_scaling_factor=1.0,
                    max_position_embeddings=163840,
                    tie_word_embeddings=False,
                    rope_parameters=DEEPSEEK_V2_LITE_YARN,
                )
            },
            tested=(T_OFFLOAD, T_TREE, T_CLI),
            notes="first_k_dense_replace dense layers and the shared experts resident",
        ),
        Architecture(
            "deepseek_v3",
            "DeepSeek-V3 (MLA)",
            dict(
                moe_intermediate_size=32,
                n_routed_experts=8,
                n_shared_experts=1,
                num_experts_per_tok=2,
                first_k_dense_replace=1,
                kv_lora_rank=16,
                q_lora_rank=24,
                qk_nope_head_dim=16,
                qk_rope_head_dim=8,
                v_head_dim=16,
                n_group=2,
                topk_group=1,
                num_key_value_heads=4,
            ),
            notes="group-limited routing (n_group, topk_group)",
        ),
        Architecture(
            "gpt_oss",
            "GPT-OSS",
            dict(
                num_local_experts=8,
                num_experts_per_tok=2,
                intermediate_size=32,
                head_dim=16,
                sliding_window=4,
                layer_types=["sliding_attention", "full_attention", "sliding_attention"],
            ),
            attn="eager",
            real={
                "gpt-oss-20b": dict(
                    vocab_size=201088,
                    hidden_size=2880,
                    intermediate_size=2880,
                    num_hidden_layers=24,
                    num_attention_heads=64,
                    num_key_value_heads=8,
                    head_dim=64,
                    num_local_experts=32,
                    num_experts_per_tok=4,
                    sliding_window=128,
                    max_position_embeddings=131072,
                    tie_word_embeddings=False,
                    swiglu_limit=7.0,
                    rope_parameters=GPT_OSS_YARN,
                )
            },
            tested=(T_OFFLOAD, T_TREE, T_CLI),
            notes="interleaved gate/up, transposed weights with biases; attention sinks (eager); "
            "sliding and "
            "full layers get their own tree masks",
        ),
        Architecture(
            "phimoe",
            "PhiMoE",
            dict(
                num_local_experts=8,
                num_experts_per_tok=2,
                intermediate_size=32,
                sliding_window=None,
            ),
            real={
                "phi-3.5-moe": dict(
                    vocab_size=32064,
                    hidden_size=4096,
                    intermediate_size=6400,
                    num_hidden_layers=32,
                    num_attention_heads=32,
                    num_key_value_heads=8,
                    num_local_experts=16,
                    num_experts_per_tok=2,
                    max_position_embeddings=131072,
                    sliding_window=None,
                    tie_word_embeddings=False,
                    # microsoft/Phi-3.5-MoE-instruct config.json: biased q/k/v/o projections and LM head
                    # (their weights' shapes), router and input jitter 0.01 (training only), longrope
                    attention_bias=True,
                    lm_head_bias=True,
                    router_jitter_noise=0.01,
                    input_jitter_noise=0.01,
                    rope_parameters=PHI35_MOE_LONGROPE,
                )
            },
        ),
        Architecture(
            "granitemoe",
            "GraniteMoE",
            dict(num_local_experts=8, num_experts_per_tok=2, intermediate_size=32),
            real={
                "granite-3.0-3b-a800m": dict(
                    vocab_size=49155,
                    hidden_size=1536,
                    intermediate_size=512,
                    num_hidden_layers=32,
                    num_attention_heads=24,
                    num_key_value_heads=8,
                    num_local_experts=40,
                    num_experts_per_tok=8,
                    max_position_embeddings=4096,
                    tie_word_embeddings=True,
                    rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                    **GRANITE_MUP,
                )
            },
        ),
        Architecture(
            "glm4_moe",
            "GLM-4.5 (GLM-4-MoE)",
            dict(
                moe_intermediate_size=32,
                n_routed_experts=8,
                n_shared_experts=1,
                num_experts_per_tok=2,
                first_k_dense_replace=1,
                head_dim=16,
                n_group=1,
                topk_group=1,
            ),
            real={
                "glm-4.5-air": dict(
                    vocab_size=151552,
                    hidden_size=4096,
                    intermediate_size=10944,
                    moe_intermediate_size=1408,
                    num_hidden_layers=46,
                    num_attention_heads=96,
                    num_key_value_heads=8,
                    head_dim=128,
                    n_routed_experts=128,
                    n_shared_experts=1,
                    num_experts_per_tok=8,
                    first_k_dense_replace=1,
                    n_group=1,
                    topk_group=1,
                    norm_topk_prob=True,
                    routed_scaling_factor=1.0,
                    attention_bias=True,
                    max_position_embeddings=131072,
                    tie_word_embeddings=False,
                    partial_rotary_factor=0.5,
                    rope_parameters={"rope_type": "default", "rope_theta": 1e6},
                )
            },
        ),
        Architecture(
            "hunyuan_v1_moe",
            "Hunyuan-MoE",
            dict(num_experts=8, moe_topk=2, intermediate_size=32, head_dim=16),
        ),
        Architecture(
            "ernie4_5_moe",
            "ERNIE-4.5-MoE",
            dict(
                moe_num_experts=8,
                moe_k=2,
                moe_intermediate_size=32,
                moe_layer_start_index=1,
                head_dim=16,
            ),
        ),
        Architecture(
            "flex_olmo",
            "FlexOlmo",
            dict(num_experts=8, num_experts_per_tok=2, intermediate_size=32),
        ),
        Architecture(
            "qwen3_next",
            "Qwen3-Next",
            tree=_HYBRID,
            tiny=dict(
                moe_intermediate_size=32,
                shared_expert_intermediate_size=32,
                num_experts=8,
                num_experts_per_tok=2,
                head_dim=16,
                linear_num_value_heads=4,
                linear_num_key_heads=2,
                linear_key_head_dim=16,
                linear_value_head_dim=16,
                num_hidden_layers=4,
            ),
            tested=(T_OFFLOAD, T_REFUSED),
        ),
        Architecture(
            "minimax",
            "MiniMax",
            tree=_HYBRID,
            tiny=dict(
                num_local_experts=8,
                num_experts_per_tok=2,
                intermediate_size=32,
                head_dim=16,
                layer_types=["linear_attention", "full_attention", "linear_attention"],
            ),
            tested=(T_OFFLOAD, T_REFUSED),
        ),
        Architecture(
            "jamba",
            "Jamba",
            tree="hybrid Mamba: its state-space layers keep one running state per sequence, "
                 "which the branches of a tree cannot share, so a tree cannot be verified in one forward",
            tiny=dict(
                num_experts=8,
                num_experts_per_tok=2,
                intermediate_size=32,
                num_hidden_layers=4,
                expert_layer_period=2,
                expert_layer_offset=1,
                attn_layer_period=2,
                attn_layer_offset=1,
                mamba_d_state=4,
                mamba_expand=2,
            ),
            tested=(T_OFFLOAD, T_REFUSED),
            notes="MoE on every second layer",
        ),
    ]
}


def tiny_config_kwargs(model_type: str) -> dict:
    """Keyword arguments of the tiny random config of ``model_type`` (KeyError: not listed)."""
    a = ARCHITECTURES[model_type]
    return {**_SMALL, **a.tiny}


def named_config_names() -> list[str]:
    """Every named random-weight config: tiny-random, tiny-<model_type>, <real>-<N>layers."""
    names = ["tiny-random"] + [f"tiny-{t}" for t in ARCHITECTURES]
    for a in ARCHITECTURES.values():
        for r, kw in a.real.items():
            names.append(f"{r}-<N>layers (N <= {kw['num_hidden_layers']})")
    return names


def resolve_named(name: str) -> tuple[str, dict] | None:
    """``(model_type, config kwargs)`` of a named config, or None when the name is unknown."""
    if name.startswith("tiny-") and name[5:] in ARCHITECTURES:
        return name[5:], tiny_config_kwargs(name[5:])
    for a in ARCHITECTURES.values():
        for r, kw in a.real.items():
            m = re.fullmatch(re.escape(r) + r"-(\d+)layers?", name)
            if m and 1 <= int(m.group(1)) <= kw["num_hidden_layers"]:
                # a deep copy: a config may normalise its rope_parameters in place
                return a.model_type, {**copy.deepcopy(kw), "num_hidden_layers": int(m.group(1))}
    return None


def real_config_names() -> dict[str, str]:
    """Real-shape config prefix -> model type (``qwen3-30b-a3b`` -> ``qwen3_moe``)."""
    return {r: a.model_type for a in ARCHITECTURES.values() for r in a.real}

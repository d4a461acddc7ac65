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
                    max_position_embeddings=40960,
                    tie_word_embeddings=False,
                    num_hidden_layers=48,
                    rope_parameters={"rope_type": "default", "rope_theta": 1e6},
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
                    rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
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
                    rope_parameters={"rope_type": "default", "rope_theta": 150000.0},
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
                    rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
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
                return a.model_type, {**kw, "num_hidden_layers": int(m.group(1))}
    return None


def real_config_names() -> dict[str, str]:
    """Real-shape config prefix -> model type (``qwen3-30b-a3b`` -> ``qwen3_moe``)."""
    return {r: a.model_type for a in ARCHITECTURES.values() for r in a.real}

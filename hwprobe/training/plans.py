"""Model shapes and training plans for the embedded tiny target and drafter.

A plan fixes everything that decides the trained weights: shapes, tokenizer
size, sequence length, batch, step counts, learning rate, seed-independent
loss weights.  ``tiny`` is the shipped model; ``smoke`` trains in seconds and
exists for tests of the training code itself.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class TargetShape:
    """A Qwen3-MoE: every layer sparse, fine-grained experts (32 of width 64, top-4)."""

    hidden_size: int = 128
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    num_experts: int = 32
    num_experts_per_tok: int = 4
    moe_intermediate_size: int = 64
    # Switch-Transformer load-balancing loss weight (Qwen3 ships 0.001; a
    # model this small needs a firmer push or a few experts take everything).
    router_aux_loss_coef: float = 0.01


@dataclass(frozen=True)
class DrafterShape:
    """A dense Qwen3 that shares the target's tokenizer."""

    hidden_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    intermediate_size: int = 384


@dataclass(frozen=True)
class TrainPlan:
    target: TargetShape = field(default_factory=TargetShape)
    drafter: DrafterShape = field(default_factory=DrafterShape)
    vocab_size: int = 1024
    seq_len: int = 256
    batch_size: int = 8
    target_steps: int = 2000
    drafter_steps: int = 1200
    lr: float = 3e-3
    warmup_frac: float = 0.05
    decay_frac: float = 0.2
    final_lr_frac: float = 0.1
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    # Drafter loss: (1 - w) * cross-entropy on the text + w * KL(target || drafter).
    distill_weight: float = 0.7
    eval_every: int = 50
    eval_windows: int = 16          # held-out windows used for the curve
    check_windows: int = 4          # held-out windows whose loss the tests reproduce
    max_train_chars: int | None = None  # None: the whole training split
    max_heldout_chars: int | None = None

    def as_dict(self) -> dict:
        return asdict(self)


PLANS = {
    "tiny": TrainPlan(),
    "smoke": TrainPlan(
        target=TargetShape(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                           num_key_value_heads=1, num_experts=4, num_experts_per_tok=2,
                           moe_intermediate_size=16),
        drafter=DrafterShape(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                             num_key_value_heads=1, intermediate_size=64),
        vocab_size=300, seq_len=32, batch_size=4, target_steps=4, drafter_steps=3,
        eval_every=2, eval_windows=2, check_windows=2,
        max_train_chars=60_000, max_heldout_chars=20_000,
    ),
}


def target_config(plan: TrainPlan, eos_id: int):
    from transformers import Qwen3MoeConfig

    s = plan.target
    return Qwen3MoeConfig(
        vocab_size=plan.vocab_size,
        hidden_size=s.hidden_size,
        intermediate_size=4 * s.hidden_size,  # dense MLP width; unused: every layer is MoE
        num_hidden_layers=s.num_hidden_layers,
        num_attention_heads=s.num_attention_heads,
        num_key_value_heads=s.num_key_value_heads,
        head_dim=s.hidden_size // s.num_attention_heads,
        max_position_embeddings=4096,
        num_experts=s.num_experts,
        num_experts_per_tok=s.num_experts_per_tok,
        moe_intermediate_size=s.moe_intermediate_size,
        decoder_sparse_step=1,
        mlp_only_layers=[],
        norm_topk_prob=True,
        router_aux_loss_coef=s.router_aux_loss_coef,
        output_router_logits=False,
        tie_word_embeddings=True,
        bos_token_id=eos_id, eos_token_id=eos_id, pad_token_id=eos_id,
    )


def drafter_config(plan: TrainPlan, eos_id: int):
    from transformers import Qwen3Config

    s = plan.drafter
    return Qwen3Config(
        vocab_size=plan.vocab_size,
        hidden_size=s.hidden_size,
        intermediate_size=s.intermediate_size,
        num_hidden_layers=s.num_hidden_layers,
        num_attention_heads=s.num_attention_heads,
        num_key_value_heads=s.num_key_value_heads,
        head_dim=s.hidden_size // s.num_attention_heads,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=eos_id, eos_token_id=eos_id, pad_token_id=eos_id,
    )

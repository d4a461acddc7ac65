"""Tiny random Qwen3-MoE models for hwprobe tests (hidden 64, 2 layers, 8 experts, top-2)."""

from __future__ import annotations

import torch


def tiny_model(seed: int = 0, attn: str = "sdpa", **overrides):
    """A fresh tiny random Qwen3-MoE model (float32, CPU)."""
    from transformers import AutoModelForCausalLM

    from hwprobe.models import named_config

    cfg = named_config("tiny-random")
    for k, v in overrides.items():
        setattr(cfg, k, v)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32, attn_implementation=attn)
    return model.eval()

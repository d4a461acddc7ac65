"""Each drafter's drafting cost against a hand computation on a toy geometry; profiles that follow a drafter."""

from __future__ import annotations

import pytest

import simmoe.drafters as drafters
from simmoe.drafters.cost import DrafterPhysical, expected_union, profile_with_drafter
from simmoe.errors import SimmoeError
from simmoe.hardware.catalogue import ModelSpec, load_gpu, load_model
from simmoe.hardware.physical import Overheads, PhysicalModel

# a toy MoE: hidden 64, 2 layers of 8 experts (top-2, width 32), GQA 4 heads / 2 KV heads of 16, vocabulary 100
TOY = ModelSpec(key="toy", name="toy", hf_id="-", source="test", architecture="toy", decoder_layers=2,
                first_dense_layers=0, num_experts=8, top_k=2, shared_intermediate=0, hidden_size=64,
                moe_intermediate_size=32, intermediate_size=128, attention="gqa", num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, vocab_size=100, tie_word_embeddings=False, dtype="bf16",
                expert_dtype="bf16")
H, ATTN = 64, 64 * 4 * 16 + 2 * 64 * 2 * 16 + 4 * 16 * 64       # 12,288 attention weights
ROUTER, EXPERT, HEAD = 64 * 8, 3 * 64 * 32, 100 * 64
STEP = 0.3


@pytest.fixture(scope="module")
def phys():
    return PhysicalModel(TOY, load_gpu("a100-sxm4-80gb"),
                         overheads=Overheads(efficiency=0.5, forward_ms=0.05, draft_step_ms=STEP))


def roof(phys, weights, tokens):
    """By hand: bf16 weights read once, 2 flops per weight per token; ms."""
    return max(2.0 * weights / phys.bw, 2.0 * tokens * weights / phys.peak) * 1e3


def test_mtp_head_by_hand(phys):
    d = drafters.build("mtp", {"heads": 3})
    for requests in (1, 4):
        n = requests
        union = 8 * (1 - (1 - 2 / 8) ** n)
        layer = max((2.0 * (ATTN + ROUTER) + union * 2.0 * EXPERT) / phys.bw,
                    2.0 * n * (ATTN + ROUTER + 2 * EXPERT) / phys.peak) * 1e3
        level = layer + roof(phys, 2 * H * H, n) + roof(phys, HEAD, n) + STEP
        assert d.drafting_ms(phys, 3, requests) == pytest.approx(3 * level, rel=1e-12)
    assert d.drafting_ms(phys, 0) == 0.0
    tree = drafters.build("mtp", {"heads": 3, "topk": 2})   # a tree drafts topk tokens per request per level
    assert tree.drafting_ms(phys, 1, 1) == pytest.approx(d.drafting_ms(phys, 1, 2), rel=1e-12)


def test_dflash_forward_by_hand(phys):
    d = drafters.build("dflash", {"block": 8, "layers": 3, "taps": 2})
    n = 8 * 2
    layer = roof(phys, ATTN + 3 * H * 128, n)
    want = 3 * layer + roof(phys, 2 * H * H, n) + roof(phys, HEAD, n) + STEP
    # one forward whatever the levels kept
    assert d.drafting_ms(phys, 1, 2) == pytest.approx(want, rel=1e-12) == d.drafting_ms(phys, 7, 2)


def test_llama_chain_is_the_draft_models_forward():
    target = PhysicalModel(load_model("qwen3-30b-a3b"), load_gpu("a100-sxm4-80gb"),
                           overheads=Overheads(efficiency=0.8, forward_ms=0.4))
    d = drafters.build("llama-chain", {"draft_model": "qwen1.5-moe-a2.7b"})
    draft = load_model("qwen1.5-moe-a2.7b")
    own = PhysicalModel(draft, target.gpu, overheads=Overheads(efficiency=0.8, forward_ms=0.4))
    one = own.forward_ms(1, draft.top_k)   # one token reaches exactly top-k experts per layer
    assert d.drafting_ms(target, 5, 1) == pytest.approx(5 * one, rel=1e-12)
    assert d.drafting_ms(target, 1, 3) == pytest.approx(own.forward_ms(3, expected_union(draft.num_experts,
                                                                                         draft.top_k, 3)))
    with pytest.raises(SimmoeError, match="vocabulary"):
        drafters.build("llama-chain", {"draft_model": "olmoe-1b-7b"}).drafting_ms(target, 1)
    with pytest.raises(SimmoeError, match="draft_model=NAME"):
        drafters.build("llama-chain").drafting_ms(target, 1)


def test_expected_union():
    assert expected_union(8, 2, 1) == pytest.approx(2.0)
    assert expected_union(8, 2, 2) == pytest.approx(8 * (1 - 0.75 ** 2))
    assert expected_union(0, 1, 5) == 1.0


def test_eagle3_keeps_the_profile_and_others_follow_their_drafter():
    from simmoe.hardware.profile import load_profile

    prof = load_profile("qwen3-30b-a3b@a100-sxm4-80gb")
    eagle = drafters.build("eagle3")
    assert profile_with_drafter(prof, eagle) is prof
    assert eagle.drafting_ms(prof.physical, 4, 2) == prof.physical.draft_ms(4, 2, served=False)
    d = drafters.build("dflash")
    out = profile_with_drafter(prof, d)
    assert isinstance(out.physical, DrafterPhysical)
    fwd = d.drafting_ms(prof.physical, 1)
    # the event model's two numbers: the whole forward fixed per iteration, nothing per level
    assert out.draft_level_ms == pytest.approx(0.0, abs=1e-12)
    assert out.draft_fixed_ms == pytest.approx(prof.draft_fixed_ms + fwd)
    served = prof.physical.draft_ms(1) - prof.physical.draft_ms(1, served=False)
    assert out.physical.draft_ms(3) == pytest.approx(fwd + served)
    assert out.physical.forward_ms(2, 8.0) == prof.physical.forward_ms(2, 8.0)   # only drafting follows
    assert out.cost_b_cache[0] - prof.cost_b_cache[0] == pytest.approx(fwd - prof.physical.draft_ms(4, served=False))


def test_a_profile_without_the_physical_model_refuses_another_drafter():
    from simmoe.hardware.profile import load_profile

    prof = load_profile("a100-pcie-40gb")
    assert profile_with_drafter(prof, drafters.build("eagle3")) is prof
    with pytest.raises(SimmoeError, match="needs the physical model"):
        profile_with_drafter(prof, drafters.build("mtp"))

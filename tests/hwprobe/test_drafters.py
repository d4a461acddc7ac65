"""Pool growth (EAGLE shape), the n-gram, draft-LM and EAGLE-3 drafters."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hwprobe_models import tiny_model

from hwprobe.cli import HwprobeError
from hwprobe.drafters.draft_lm import DraftLMDrafter
from hwprobe.drafters.eagle3 import Eagle3Drafter, Eagle3Head, feature_layers, save_head
from hwprobe.drafters.ngram import NGramDrafter
from hwprobe.drafters.random_draft import RandomDrafter
from hwprobe.pool import PoolSpec, build_pool, grow_pool
from hwprobe.specdecode import greedy_generate, select_top_k, speculative_generate

pytestmark = pytest.mark.torch


def check_pool_invariants(pool):
    for j, (par, lv) in enumerate(zip(pool.parent, pool.level)):
        assert par < j
        assert lv == (1 if par < 0 else pool.level[par] + 1)
        expect = pool.q[j] * (pool.p[par] if par >= 0 else 1.0)
        assert pool.p[j] == pytest.approx(expect)


@pytest.mark.parametrize("spec,sizes", [(PoolSpec(), [2, 6, 10, 14, 18]),
                                        (PoolSpec(3, 2, 3, 100), [3, 9, 15]),
                                        (PoolSpec(2, 2, 5, 7), [2, 6, 7])])
def test_pool_grows_level_by_level_in_the_eagle_shape(spec, sizes):
    seen = [len(p) for p in grow_pool(RandomDrafter(500, seed=3), [5, 6, 7], spec)]
    assert seen == sizes
    pool = build_pool(RandomDrafter(500, seed=3), [5, 6, 7], spec)
    check_pool_invariants(pool)
    assert len(pool.level_ms) == len(sizes)
    # levels after the first expand the `expand_nodes` most probable nodes of the previous level
    for lv in range(2, max(pool.level) + 1):
        prev = [j for j in range(len(pool)) if pool.level[j] == lv - 1]
        parents = {pool.parent[j] for j in range(len(pool)) if pool.level[j] == lv}
        best = sorted(prev, key=lambda j: (-pool.p[j], j))[: spec.expand_nodes]
        assert parents <= set(best)
        if len(pool) < spec.max_nodes:     # uncapped: every chosen node is expanded
            assert parents == set(best)


def test_ngram_retrieves_continuations_from_context():
    d = NGramDrafter(max_n=3)
    ctx = [1, 2, 3, 9, 1, 2, 3, 8, 5, 1, 2, 3]      # "1 2 3" was followed by 9 and by 8
    pool = build_pool(d, ctx, PoolSpec(2, 2, 2, 18))
    assert sorted(pool.token[:2]) == [8, 9]
    assert sum(pool.q[:2]) == pytest.approx(1.0)
    child_of_8 = [pool.token[j] for j in range(len(pool)) if pool.parent[j] == pool.token[:2].index(8)]
    assert child_of_8 == [5]                        # "... 3 8" continues with 5
    assert len(build_pool(d, [1, 2, 3, 4], PoolSpec())) == 0   # nothing repeats: no pool


@pytest.fixture(scope="module")
def draft_dir(tmp_path_factory):
    """A tiny dense Qwen3 draft LM saved as a Hugging Face directory."""
    from transformers import AutoModelForCausalLM, Qwen3Config

    cfg = Qwen3Config(vocab_size=320, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=16)
    torch.manual_seed(0)
    m = AutoModelForCausalLM.from_config(cfg)
    path = tmp_path_factory.mktemp("drafter")
    m.save_pretrained(path)
    return path


def test_draft_lm_from_dir_is_lossless_and_syncs_its_cache(draft_dir):
    target = tiny_model(seed=8)
    d = DraftLMDrafter.from_dir(draft_dir)
    prompt = [50, 60, 70, 80, 90]
    res = speculative_generate(target, d, prompt, 10, select_top_k(5))
    assert res.tokens == greedy_generate(target, prompt, 10)
    # the drafter's own distributions match a plain forward of the draft model
    ctx = prompt + res.tokens[:3]
    pool = build_pool(d, ctx, PoolSpec(2, 2, 1, 2))
    logits = d.model(torch.tensor([ctx])).logits[0, -1]
    top = torch.topk(torch.softmax(logits, -1), 2)
    assert pool.token == top.indices.tolist()
    np.testing.assert_allclose(pool.q, top.values.tolist(), rtol=1e-4)


def test_draft_lm_dir_errors(tmp_path):
    with pytest.raises(HwprobeError, match="config.json"):
        DraftLMDrafter.from_dir(tmp_path)


def eagle_config(target):
    return {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
            "intermediate_size": 96, "vocab_size": target.config.vocab_size, "draft_vocab_size": 100,
            "rms_norm_eps": 1e-6, "rope_theta": 10000.0}


def test_eagle3_head_round_trip_pool_and_lossless(tmp_path):
    target = tiny_model(seed=9)
    cfg = eagle_config(target)
    torch.manual_seed(1)
    head = Eagle3Head(cfg)
    for p in head.parameters():
        torch.nn.init.normal_(p, std=0.2)
    head.d2t.copy_(torch.arange(100) * 2)          # draft id i -> target id 3i
    save_head(head, cfg, tmp_path)
    d = Eagle3Drafter.from_dir(tmp_path, target=target)
    assert feature_layers(2) == [2, 1, 0] and feature_layers(48) == [2, 24, 45]
    prompt = [10, 20, 30, 40, 50, 60]
    res = speculative_generate(target, d, prompt, 10, select_top_k(7))
    assert res.tokens == greedy_generate(target, prompt, 10)
    assert all(s == 7 for s in res.selected)          # full 18-node pools, K = 7
    # drafted tokens are target ids of the draft vocabulary (multiples of 3 here)
    d.start(prompt)
    from hwprobe.specdecode import prefill
    _, out, root = prefill(target, prompt, hidden_states=True)
    d.observe(prompt, out)
    pool = build_pool(d, prompt + [root])
    assert len(pool) == 18 and all(t % 3 == 0 for t in pool.token)


def test_eagle3_bad_layout(tmp_path):
    target = tiny_model(seed=9)
    cfg = eagle_config(target)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(HwprobeError, match="model.safetensors"):
        Eagle3Drafter.from_dir(tmp_path, target=target)
    from safetensors.torch import save_file
    save_file({"fc.weight": torch.zeros(64, 192)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(HwprobeError, match="EAGLE-3 layout"):
        Eagle3Drafter.from_dir(tmp_path, target=target)


def test_recording_with_eagle3_feeds_features_and_stays_greedy(tmp_path):
    import copy

    from hwprobe.offload import install_offload
    from hwprobe.recorder import record_request

    target = tiny_model(seed=12)
    ref = copy.deepcopy(target)
    backend = install_offload(target, slots=3, device=torch.device("cpu"))
    cfg = eagle_config(target)
    torch.manual_seed(2)
    head = Eagle3Head(cfg)
    save_head(head, cfg, tmp_path)
    d = Eagle3Drafter.from_dir(tmp_path, target=target)
    prompt = [7, 8, 9, 10, 11]
    rec = record_request(target, backend, d, prompt, request_id="q", dataset="t", max_new_tokens=4,
                         spec=PoolSpec(), num_experts=8)
    assert rec.root_token.tolist() == greedy_generate(ref, prompt, 4)
    assert rec.node_count.tolist() == [18] * 4 and len(d.features) == len(prompt) + 4
    assert (rec.copies >= 0).all() and rec.node_routes.shape == (72, 2, 2)

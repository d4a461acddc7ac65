"""The capture recipes of docs/importing-routes.md, run from the doc and imported.

vLLM and SGLang are not installed here: their recipes run on stand-ins shaped
like the documented outputs (vLLM's RequestOutput fields, SGLang's per_token
dump).  The transformers recipe runs on the repository's tiny Qwen3-MoE model.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from simmoe.trace.importer import RouteColumns, import_routes

DOC = Path(__file__).resolve().parents[2] / "docs" / "importing-routes.md"
PHASE = RouteColumns(prefill="phase")


def doc_function(name: str):
    """Run the doc's python block that defines ``name`` and return the function."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    found = [b for b in blocks if f"def {name}(" in b]
    assert len(found) == 1, f"{name} is defined in {len(found)} python blocks of {DOC.name}"
    namespace: dict = {}
    exec(compile(found[0], f"{DOC.name}:{name}", "exec"), namespace)
    return namespace[name]


def test_vllm_recipe(tmp_path):
    save = doc_function("save_vllm_routes")
    rng = np.random.default_rng(0)
    L, k, N = 3, 2, 16

    def routes(n):
        return np.argsort(rng.random((n, L, N)), axis=2)[:, :, :k].astype(np.int16)

    cached = routes(4)
    cached[:2] = -1  # prefix-cached prompt positions
    outs = [
        SimpleNamespace(
            request_id="a",
            prompt_routed_experts=cached,
            outputs=[SimpleNamespace(routed_experts=routes(5))],
        ),
        SimpleNamespace(
            request_id=7,
            prompt_routed_experts=routes(2),
            outputs=[
                SimpleNamespace(routed_experts=routes(3)),
                SimpleNamespace(routed_experts=routes(1)),
            ],
        ),
        SimpleNamespace(
            request_id="preempted",
            prompt_routed_experts=routes(2),
            outputs=[SimpleNamespace(routed_experts=None)],
        ),
    ]
    assert save(outs, tmp_path / "routes.npz") == 1
    trace, report = import_routes(tmp_path / "routes.npz", columns=PHASE, num_experts=N)
    assert list(trace.requests.request_id) == ["a", "7-0", "7-1"]
    assert trace.requests.prompt_len.tolist() == [4, 2, 2]
    expected = [
        outs[0].outputs[0].routed_experts,
        outs[1].outputs[0].routed_experts,
        outs[1].outputs[1].routed_experts,
    ]
    assert np.array_equal(trace.root_routes, np.sort(np.concatenate(expected), axis=2))
    assert report.prefill_missing_cells == 2 * L
    union = np.zeros((L, N), bool)
    for t in (2, 3):
        for layer in range(L):
            union[layer, cached[t, layer]] = True
    assert np.array_equal(trace.requests.prefill_union[0], union)


@pytest.mark.torch
def test_sglang_recipe(tmp_path):
    import torch

    convert = doc_function("sglang_dump_to_npz")
    rng = np.random.default_rng(1)
    L, k, logical, physical = 2, 3, 6, 8
    p2l = np.tile(np.array([0, 1, 2, 3, 4, 5, 2, 4]), (L, 1))  # two redundant copies
    # (mode, positions, token ids): request A, an idle pass, request B with chunked prefill
    passes = [
        (1, [0, 1, 2], [11, 12, 13]),
        (2, [3], [14]),
        (2, [4], [15]),
        (4, [], []),
        (1, [0, 1], [21, 22]),
        (1, [2, 3], [23, 24]),
        (2, [4], [25]),
    ]
    records, truth = [], []
    for pid, (mode, pos, ids) in enumerate(passes):
        n = len(pos)
        topk = np.full((L, n, 8), -1, np.int32)
        for t in range(n):
            for layer in range(L):
                chosen = rng.choice(logical, k, replace=False)
                phys = np.array(
                    [6 if e == 2 and rng.random() < 0.5 else 7 if e == 4 else e for e in chosen]
                )
                topk[layer, t, :k] = phys
                truth.append((pid, t, layer, np.sort(chosen)))
        records.append(
            dict(
                forward_pass_id=pid,
                rank=0,
                gatherer_key="primary",
                input_ids=ids,
                positions=pos,
                extend_seq_lens=[n] if mode == 1 else None,
                forward_mode=mode,
                topk_ids_of_layer=torch.from_numpy(topk),
                misc_objects=[],
                global_physical_count=torch.zeros(L, physical),
            )
        )
    dump = dict(records=records[::-1], last_physical_to_logical_map=torch.from_numpy(p2l))
    torch.save(dump, tmp_path / "expert_distribution_recorder_1.0_0.pt")
    convert(tmp_path / "expert_distribution_recorder_1.0_0.pt", tmp_path / "routes.npz", top_k=k)
    trace, _ = import_routes(
        tmp_path / "routes.npz", columns=RouteColumns(prefill="phase", token_id="token_id")
    )
    assert list(trace.requests.request_id) == ["0", "1"]
    assert trace.requests.prompt_len.tolist() == [3, 4]
    assert trace.root_token.tolist() == [14, 15, 25]
    by_pass = {(pid, t, layer): e for pid, t, layer, e in truth}
    expected = [[by_pass[(pid, 0, layer)] for layer in range(L)] for pid in (1, 2, 6)]
    assert trace.root_routes.tolist() == np.array(expected).tolist()
    union = np.zeros((L, logical), bool)
    for pid in (4, 5):
        for t in range(2):
            for layer in range(L):
                union[layer, by_pass[(pid, t, layer)]] = True
    assert np.array_equal(trace.requests.prefill_union[1, :, :logical], union)


@pytest.mark.torch
@pytest.mark.slow
def test_transformers_recipe_on_the_tiny_model(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hwprobe.tiny import target_dir
    from hwprobe.tree import _cache_kwarg

    capture = doc_function("capture_hf_routes")
    model = AutoModelForCausalLM.from_pretrained(target_dir())
    tokenizer = AutoTokenizer.from_pretrained(target_dir())
    prompts = ["def main():\n    return", "import os\nfor x in"]
    capture(model, tokenizer, prompts, max_new_tokens=6, path=tmp_path / "routes.npz")
    trace, _ = import_routes(
        tmp_path / "routes.npz", columns=RouteColumns(prefill="phase", token_id="token_id")
    )
    cfg = model.config
    g = trace.geometry
    assert (g.num_layers, g.top_k) == (cfg.num_hidden_layers, cfg.num_experts_per_tok)
    assert g.num_experts <= cfg.num_experts and trace.requests.output_len.tolist() == [6, 6]

    # The doc's claim: these routes are those of step-by-step decoding with the KV cache.
    k = cfg.num_experts_per_tok
    cache_kwarg = _cache_kwarg(model)   # `cache` in transformers 5.x, `past_key_values` before
    for r, prompt in enumerate(prompts):
        ids = tokenizer(prompt, return_tensors="pt").input_ids
        assert trace.requests.prompt_len[r] == ids.shape[1]
        a, b = trace.request_positions(r)
        tokens = torch.tensor([trace.root_token[a:b].tolist()])
        with torch.no_grad():
            out = model(ids, use_cache=True)
            cache, steps = out.past_key_values, []
            for t in range(b - a):
                o = model(
                    tokens[:, t : t + 1],
                    **{cache_kwarg: cache},
                    use_cache=True,
                    output_router_logits=True,
                )
                cache = o.past_key_values
                steps.append(
                    torch.stack(
                        [torch.topk(x.float(), k, dim=-1).indices[0] for x in o.router_logits]
                    )
                )
        assert np.array_equal(trace.root_routes[a:b], np.sort(torch.stack(steps).numpy(), axis=2))

"""Every listed architecture on tiny random configs built from its own config class (no downloads).

Per architecture: the offloaded forward equals transformers' own forward of
the unmodified model, and bit for bit the same arithmetic run from
device-resident weights; the routes captured from the experts interface are
the router's choice; a tree forward with a 4-D mask equals sequential
decoding of every root-to-node path, or the architecture is refused with
its name and the reason.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from hwprobe.architectures import ARCHITECTURES
from hwprobe.cli import HwprobeError
from hwprobe.models import experts_modules, load_target, moe_geometry, resident_parts
from hwprobe.offload import install_offload
from hwprobe.pool import Pool
from hwprobe.routes import RouteRecorder
from hwprobe.specdecode import greedy_generate
from hwprobe.tree import check_tree, lm_forward, new_cache, tree_forward, tree_problem

pytestmark = pytest.mark.torch
CPU = torch.device("cpu")
ALL = list(ARCHITECTURES)
TREE = [t for t, a in ARCHITECTURES.items() if a.tree is None]
REFUSED = [t for t, a in ARCHITECTURES.items() if a.tree is not None]
IDS = torch.tensor([[5, 17, 99, 3, 250, 7, 7, 7, 31, 64, 12]])


def tiny(model_type: str, seed: int = 1):
    return load_target(config=f"tiny-{model_type}", seed=seed, quiet=True).model


@pytest.fixture(scope="module")
def models():
    """Per architecture: (unmodified, offloaded (2 slots), resident reference, backend), lazily."""
    built = {}

    def get(model_type):
        if model_type not in built:
            ref = tiny(model_type)
            off, res = copy.deepcopy(ref), copy.deepcopy(ref)
            backend = install_offload(off, slots=2, device=CPU)
            install_offload(res, slots=0, device=CPU, resident=True)
            built[model_type] = (ref, off, res, backend)
        return built[model_type]

    return get


@pytest.mark.parametrize("model_type", ALL)
def test_offloaded_forward_equals_the_unmodified_model(models, model_type):
    """Tolerance 1e-5 relative: transformers' grouped_mm and per-expert kernels round apart."""
    ref, off, res, backend = models(model_type)
    a = lm_forward(ref, IDS, new_cache(ref)).logits
    for slots in (0, 3):
        backend.set_slots(slots)
        for _ in range(2):  # cold, then warm cache
            b = lm_forward(off, IDS, new_cache(off)).logits
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
            assert torch.equal(
                b, lm_forward(res, IDS, new_cache(res)).logits
            )  # same arithmetic: bit-equal
    assert backend.collect().total_copies > 0
    assert greedy_generate(off, [5, 6, 7], 5) == greedy_generate(ref, [5, 6, 7], 5)
    assert not any(
        p.numel() and "experts." in n and n.endswith("proj") for n, p in off.named_parameters()
    )


@pytest.mark.parametrize("model_type", ALL)
def test_captured_routes_are_the_routers_choice(models, model_type):
    _, off, _, _ = models(model_type)
    chosen = []
    hooks = []
    for _, name, _m in experts_modules(off):
        block = off.get_submodule(name.rsplit(".", 1)[0])
        router = getattr(block, "gate", None) or block.router
        hooks.append(router.register_forward_hook(lambda m, i, o: chosen.append(o[2])))
    try:
        with RouteRecorder(off) as rec:
            lm_forward(off, IDS, new_cache(off))
            routes = rec.pop()
    finally:
        for h in hooks:
            h.remove()
    expected = np.sort(torch.stack(chosen, 1).numpy(), -1)
    assert routes.shape == expected.shape == (IDS.shape[1], len(experts_modules(off)), 2)
    assert np.array_equal(routes, expected)


def _random_pool(rng, m, vocab=300):
    pool = Pool()
    for _ in range(m):
        par = int(rng.integers(-1, len(pool))) if len(pool) else -1
        pool.add(par, int(rng.integers(3, vocab)), float(rng.uniform(0.1, 1)))
    return pool


def _tree_vs_paths(model, seed=0, prefix_len=9, m=8) -> float:
    rng = np.random.default_rng(seed)
    prefix = rng.integers(3, 300, prefix_len).tolist()
    pool = _random_pool(rng, m)
    cache = new_cache(model)
    lm_forward(model, torch.tensor([prefix]), cache)
    tree = tree_forward(model, cache, 42, pool).logits[0]
    worst = 0.0
    for v in [-1, *range(m)]:
        path = [42] + (pool.path_tokens(v) if v >= 0 else [])
        seq = lm_forward(model, torch.tensor([prefix + path]), new_cache(model)).logits[0, -1]
        worst = max(worst, float((tree[v + 1] - seq).abs().max()))
    return worst


@pytest.mark.parametrize("model_type", TREE)
def test_tree_forward_equals_sequential_paths(models, model_type):
    """9-token prefix: longer than the tiny sliding windows (Mixtral 6, GPT-OSS 4): they matter."""
    _, off, _, _ = models(model_type)
    assert tree_problem(off) is None
    assert _tree_vs_paths(off) < 1e-5


def test_windows_are_what_make_sliding_trees_equal(monkeypatch):
    """Negative control: a tree mask that ignores the windows differs from sequential decoding."""
    import hwprobe.tree as tree

    for model_type in ("mixtral", "gpt_oss"):
        model = tiny(model_type)
        assert _tree_vs_paths(model) < 1e-5
        real = tree.layer_windows
        monkeypatch.setattr(tree, "layer_windows", lambda m, real=real: [None] * len(real(m)))
        assert _tree_vs_paths(model) > 1e-3
        monkeypatch.undo()


@pytest.mark.parametrize("model_type", REFUSED)
def test_tree_refused_with_the_architecture_and_why(models, model_type):
    _, off, _, _ = models(model_type)
    with pytest.raises(HwprobeError) as exc:
        check_tree(off)
    msg = str(exc.value)
    assert ARCHITECTURES[model_type].label in msg and model_type in msg
    assert "cannot verify a draft tree" in msg and ("hybrid" in msg)


def test_geometry_names_dense_layers_and_shared_experts(models):
    cases = {
        "deepseek_v2": ((1, 2), 3, ["shared_experts"]),
        "qwen2_moe": ((1, 2), 3, ["shared_expert", "shared_expert_gate"]),
        "jamba": ((1, 3), 4, []),
        "mixtral": ((0, 1, 2), 3, []),
    }
    for model_type, (moe, decoder, shared) in cases.items():
        _, off, _, backend = models(model_type)
        g = moe_geometry(off, expert_bytes=backend.expert_bytes, name=model_type)
        assert (g.moe_layers, g.decoder_layers, g.num_layers, g.num_experts, g.top_k) == (
            moe,
            decoder,
            len(moe),
            8,
            2,
        )
        assert g.layer_problem() is None
        parts = resident_parts(off, g)
        assert parts["dense_layers"] == [i for i in range(decoder) if i not in moe]
        assert parts["shared_experts"] == shared
        for name, p in off.named_parameters():  # shared experts and dense MLPs stay model weights
            if "shared_expert" in name:
                assert p.device == CPU and p.numel() > 0


def test_weight_layout_comes_from_the_flags_not_the_model():
    """The same experts stored interleaved and transposed (GPT-OSS's layout): same outputs."""
    ref = tiny("qwen3_moe")
    other = copy.deepcopy(ref)
    for _, _, m in experts_modules(other):
        gu = m.gate_up_proj.data  # [E, 2I, H], gate rows then up rows
        E, two_i, H = gu.shape
        inter = torch.stack([gu[:, : two_i // 2], gu[:, two_i // 2 :]], dim=2).reshape(E, two_i, H)
        m.gate_up_proj = torch.nn.Parameter(
            inter.transpose(1, 2).contiguous()
        )  # [E, H, 2I] interleaved
        m.down_proj = torch.nn.Parameter(m.down_proj.data.transpose(1, 2).contiguous())
        m.is_concatenated, m.is_transposed = False, True
    install_offload(other, slots=2, device=CPU)
    torch.testing.assert_close(
        lm_forward(other, IDS, new_cache(other)).logits,
        lm_forward(ref, IDS, new_cache(ref)).logits,
        rtol=1e-5,
        atol=1e-6,
    )


def test_gpt_oss_layout_flags_and_biases(models):
    _, off, _, backend = models("gpt_oss")
    layout = backend.layers[0].layout
    assert layout.transposed and layout.has_bias and not layout.concatenated and layout.own_gate
    assert layout.names == ["gate_up_proj", "down_proj", "gate_up_proj_bias", "down_proj_bias"]
    assert backend.expert_bytes == (64 * 64 + 32 * 64 + 64 + 64) * 4


def test_expert_ids_beyond_the_model_are_one_clear_error(monkeypatch):
    model = tiny("mixtral")
    install_offload(model, slots=2, device=CPU)
    router = model.model.layers[1].mlp.gate
    real = router.forward

    def beyond(x):
        logits, w, idx = real(x)
        return logits, w, torch.full_like(idx, 8)  # the model has experts 0..7

    monkeypatch.setattr(router, "forward", beyond)
    with pytest.raises(
        HwprobeError, match=r"layer 1: the router chose expert 8, but the experts module holds 8"
    ):
        lm_forward(model, IDS, new_cache(model))


def test_trace_geometry_with_dense_layers_round_trips_and_is_checked():
    from simmoe.trace import ModelGeometry

    g = ModelGeometry(2, 8, 2, 100, "x", moe_layers=(1, 2), decoder_layers=3)
    assert (
        ModelGeometry.from_dict(g.to_dict()) == g
        and g.dense_layers == (0,)
        and g.layer_problem() is None
    )
    assert "moe_layers" not in ModelGeometry(2, 8, 2).to_dict()  # older traces are unchanged
    assert (
        "lists 1 layers"
        in ModelGeometry(2, 8, 2, moe_layers=(1,), decoder_layers=3).layer_problem()
    )
    assert (
        "do not fit" in ModelGeometry(2, 8, 2, moe_layers=(1, 3), decoder_layers=3).layer_problem()
    )
    assert (
        "ascending" in ModelGeometry(2, 8, 2, moe_layers=(2, 1), decoder_layers=3).layer_problem()
    )

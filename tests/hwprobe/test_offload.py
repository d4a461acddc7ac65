"""The offload backend: same outputs as the unmodified model; copies equal an independent LRU."""

from __future__ import annotations

import copy
from collections import OrderedDict

import numpy as np
import pytest
import torch
from hwprobe_models import tiny_model
from hypothesis import given, settings
from hypothesis import strategies as st

from hwprobe.cli import HwprobeError
from hwprobe.offload import OffloadedExperts, install_offload
from hwprobe.routes import RouteRecorder
from hwprobe.specdecode import greedy_generate
from hwprobe.tree import lm_forward, new_cache

pytestmark = pytest.mark.torch
CPU = torch.device("cpu")


def reference_lru(forwards, slots):
    """Copies of a per-layer LRU: each forward's union, hits touched ascending, misses inserted ascending."""
    caches, copies = {}, 0
    for layers in forwards:
        for layer, union in enumerate(layers):
            c = caches.setdefault(layer, OrderedDict())
            present = [e for e in sorted(union) if e in c]
            absent = [e for e in sorted(union) if e not in c]
            for e in present:
                c.move_to_end(e)
            for e in absent:
                c[e] = None
                copies += 1
                if len(c) > slots:
                    c.popitem(last=False)
    return copies


@pytest.fixture(scope="module")
def pair():
    ref = tiny_model(seed=3)
    off = copy.deepcopy(ref)
    backend = install_offload(off, slots=2, device=CPU)
    return ref, off, backend


def test_offloads_every_experts_module_through_the_interface(pair):
    from hwprobe.offload import IMPL

    ref, off, backend = pair
    assert len(backend.layers) == 2
    for layer in off.model.layers:
        experts = layer.mlp.experts
        assert type(experts) is type(ref.model.layers[0].mlp.experts)          # nothing replaced
        assert isinstance(experts.__dict__["_hwprobe_offload"], OffloadedExperts)
        assert "gate_up_proj" not in dict(experts.named_parameters())          # the weights live on the host
        assert experts.config._experts_implementation == IMPL
    assert backend.expert_bytes == 3 * 64 * 32 * 4
    assert backend.host_bytes == 2 * 8 * backend.expert_bytes


@pytest.mark.parametrize("slots", [0, 1, 3, 8])
def test_logits_equal_unmodified_model(pair, slots):
    ref, off, backend = pair
    backend.set_slots(slots)
    ids = torch.tensor([[5, 17, 99, 3, 250, 7, 7, 7, 31]])
    for _ in range(2):   # second pass runs with a warm cache
        a = lm_forward(ref, ids, new_cache(ref)).logits
        b = lm_forward(off, ids, new_cache(off)).logits
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_greedy_decode_equal_and_top8_routing():
    """Also with top-8 of 16 experts (summation order differs, so allclose not equality)."""
    ref = tiny_model(seed=4, num_experts=16, num_experts_per_tok=8)
    off = copy.deepcopy(ref)
    install_offload(off, slots=5, device=CPU, max_inflight=3)
    prompt = [11, 12, 13, 14, 15, 11, 12]
    assert greedy_generate(ref, prompt, 12) == greedy_generate(off, prompt, 12)
    ids = torch.tensor([prompt])
    torch.testing.assert_close(lm_forward(ref, ids, new_cache(ref)).logits,
                               lm_forward(off, ids, new_cache(off)).logits, rtol=1e-4, atol=1e-5)


@settings(max_examples=12, deadline=None)
@given(slots=st.integers(0, 9), inflight=st.integers(1, 3),
       steps=st.lists(st.lists(st.integers(3, 300), min_size=1, max_size=6), min_size=1, max_size=5))
def test_copies_equal_independent_lru(pair, slots, inflight, steps):
    _, off, backend = pair
    for layer in backend.layers:
        layer.max_inflight = inflight
    backend.set_slots(slots)
    backend.collect()
    forwards = []
    cache = new_cache(off)
    with RouteRecorder(off) as rec:
        for toks in steps:
            lm_forward(off, torch.tensor([toks]), cache)
            routes = rec.pop()
            forwards.append([set(routes[:, ell].ravel().tolist()) for ell in range(routes.shape[1])])
    snap = backend.collect()
    assert snap.total_copies == reference_lru(forwards, slots)
    # every expert of a forward is either a hit or copied exactly once
    assert snap.total_copies + snap.total_hits == sum(len(u) for f in forwards for u in f)
    assert len(snap.copy_ms) == snap.total_copies and all(t >= 0 for t in snap.copy_ms)
    for layer in backend.layers:
        assert len(layer.resident()) <= slots + layer.max_inflight
        layer.max_inflight = 2


def test_zero_slots_copies_whole_union_every_forward(pair):
    _, off, backend = pair
    backend.set_slots(0)
    backend.collect()
    with RouteRecorder(off) as rec:
        ids = torch.tensor([[9, 8, 7, 6, 5, 4, 3, 200, 100]])
        lm_forward(off, ids, new_cache(off))
        lm_forward(off, ids, new_cache(off))
        routes = rec.pop()
    per_forward = [sum(len(np.unique(r[:, layer])) for layer in range(2)) for r in (routes[:9], routes[9:])]
    snap = backend.collect()
    assert snap.total_copies == sum(per_forward) and snap.total_hits == 0


def test_route_recorder_matches_router(pair):
    ref, _, _ = pair
    ids = torch.tensor([[1, 2, 3, 4]])
    with RouteRecorder(ref) as rec:
        lm_forward(ref, ids, new_cache(ref))
        routes = rec.pop()
    assert routes.shape == (4, 2, 2)
    # the router's own indices, recomputed from the gate weights on the captured inputs, agree
    captured = []
    h = ref.model.layers[0].mlp.gate.register_forward_hook(lambda m, i, o: captured.append((i[0], o[2])))
    lm_forward(ref, ids, new_cache(ref))
    h.remove()
    x, idx = captured[0]
    probs = torch.softmax(x @ ref.model.layers[0].mlp.gate.weight.T, -1)
    assert np.array_equal(np.sort(torch.topk(probs, 2).indices.numpy(), -1), routes[:, 0])


def test_bad_inputs():
    m = tiny_model()
    with pytest.raises(HwprobeError, match="slots"):
        install_offload(m, slots=-1, device=CPU)

    class Hollow(torch.nn.Module):
        """The interface's flags without its fused weights."""
        has_gate, is_transposed, _is_expert_parallel = True, False, False
        num_experts = 8

        def _apply_gate(self, x):
            return x

    m2 = tiny_model()
    m2.model.layers[0].mlp.experts = Hollow()
    with pytest.raises(HwprobeError, match="no gate_up_proj, down_proj"):
        install_offload(m2, slots=2, device=CPU)


def test_device_out_of_memory_suggests_fewer_slots(monkeypatch):
    import hwprobe.offload as offload

    real = torch.empty

    def oom(*a, **kw):
        if kw.get("device") is not None:      # the slot buffers
            raise torch.cuda.OutOfMemoryError("CUDA out of memory")
        return real(*a, **kw)

    monkeypatch.setattr(offload.torch, "empty", oom)
    with pytest.raises(HwprobeError, match="out of device memory .* use fewer slots"):
        install_offload(tiny_model(), slots=4, device=CPU)

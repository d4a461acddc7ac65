"""The offload backend's CUDA path on a simulated device (fake_cuda.py), and hot-path fixes.

Copies take 1 time unit on the copy stream (a queued ``_sleep``), each
expert's computation 5 on the compute stream.  Checked: every event and
wait is on a stream of ``cuda:1`` (not the current device), a computation
never reads a buffer before its copy has landed, a copy never overwrites a
buffer before its last reader has finished, and no copy starts more than
``max_inflight`` ahead of the computation consuming it, with negative
controls showing each check can fail.  Host memory is registered at its
exact size.
"""

from __future__ import annotations

import copy

import fake_cuda
import pytest
import torch
from hwprobe_models import tiny_model

from hwprobe.offload import CudaStreams, ExpertLayout, OffloadedExperts, _install
from hwprobe.tree import lm_forward, new_cache

pytestmark = pytest.mark.torch
DEV = torch.device("cuda", 1)
IDS = torch.tensor([[5, 17, 99, 3, 250, 7, 7, 7, 31, 64, 12, 200, 201, 202]])
COMPUTE_T = 5.0


@pytest.fixture
def sim(monkeypatch):
    """An offloaded tiny model (16 experts, top-8) on the simulated cuda:1, hazards checked."""
    fake = fake_cuda.install(monkeypatch, DEV)
    monkeypatch.setattr(
        CudaStreams, "alloc", lambda self, shape, dtype: torch.empty(shape, dtype=dtype)
    )
    ready, last_read, hazards = {}, {}, []
    real_copy, real_expert = CudaStreams.copy, ExpertLayout.expert

    def copy_(self, dst, src, after, timer):
        done, iv = real_copy(self, dst, src, after, timer)
        if iv.start.t < last_read.get(dst.data_ptr(), 0.0):
            hazards.append(("overwrite before read", iv.start.t))
        ready[dst.data_ptr()] = done.t
        return done, iv

    def expert(self, module, x, w):
        s, ptr = fake.compute, w[0].data_ptr()  # the row's first view starts at the row
        if ptr in ready and s.t < ready[ptr]:
            hazards.append(("read before copy", s.t))
        s.t += COMPUTE_T
        last_read[ptr] = s.t
        return real_expert(self, module, x, w)

    monkeypatch.setattr(CudaStreams, "copy", copy_)
    monkeypatch.setattr(ExpertLayout, "expert", expert)
    ref = tiny_model(seed=4, num_experts=16, num_experts_per_tok=8)
    off = copy.deepcopy(ref)
    streams = CudaStreams(DEV)
    streams.delay_cycles = 1  # each copy takes 1 unit
    backend = _install(
        off, slots=0, device=DEV, max_inflight=2, resident=False, streams=streams, move=False
    )
    for layer in backend.layers:
        layer.audit = []
    return fake, ref, off, backend, hazards


def _violations(backend) -> int:
    """Copies started before the computation of the miss max_inflight earlier had finished."""
    return sum(iv.start.t < ev.t for layer in backend.layers for iv, ev in layer.audit)


@pytest.mark.parametrize(
    "slots,inflight,copy_t", [(0, 1, 1), (0, 2, 20), (8, 1, 20), (8, 2, 1), (16, 2, 20)]
)
def test_simulated_cuda1_outputs_events_and_inflight(sim, slots, inflight, copy_t):
    """Copies faster (1) and slower (20) than a computation (5)."""
    fake, ref, off, backend, hazards = sim
    backend.streams.delay_cycles = copy_t
    backend.set_inflight(inflight)
    backend.set_slots(slots)
    a = lm_forward(ref, IDS, new_cache(ref)).logits
    for _ in range(2):
        b = lm_forward(off, IDS, new_cache(off)).logits
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    assert hazards == []
    assert _violations(backend) == 0 and sum(len(layer.audit) for layer in backend.layers) > 0
    assert fake.default_other.waits == [] and fake.compute.waits  # all waits on cuda:1's streams
    snap = backend.collect()
    # copy times come from events around the copy itself (the queued delay before it is not counted)
    assert snap.total_copies == len(snap.copy_ms) > 0 and all(t == 0.0 for t in snap.copy_ms)
    assert all(t >= COMPUTE_T for t in snap.layer_ms)


def test_negative_controls_show_the_checks_can_fail(sim, monkeypatch):
    fake, ref, off, backend, hazards = sim
    backend.set_slots(16)  # free buffers for every expert: nothing else holds copies back
    real = OffloadedExperts._copy_waits
    monkeypatch.setattr(
        OffloadedExperts, "_copy_waits", lambda self, buf, computed, j: [self.buf_done[buf]]
    )
    lm_forward(off, IDS, new_cache(off))
    assert _violations(backend) > 0 and hazards == []  # the copy stream ran ahead of the limit
    monkeypatch.setattr(OffloadedExperts, "_copy_waits", real)
    backend.streams.skip_waits = True  # compute does not wait for its copies ...
    backend.streams.delay_cycles = 20  # ... which now take longer than a computation
    for layer in backend.layers:
        layer.audit = []
    hazards.clear()
    backend.clear()
    lm_forward(off, IDS, new_cache(off))
    assert any(kind == "read before copy" for kind, _ in hazards)


def test_current_device_events_are_caught(monkeypatch):
    """The simulated device refuses an event on the current device's stream (the old bug)."""
    fake = fake_cuda.install(monkeypatch, DEV)
    ev = torch.cuda.Event()
    with pytest.raises(AssertionError, match="current stream"):
        ev.record()
    ev.record(fake.compute)
    with pytest.raises(AssertionError, match="waits for an event of cuda:1"):
        fake.default_other.wait_event(ev)


def test_timer_uses_the_device_stream(monkeypatch):
    from hwprobe.device import Timer

    fake = fake_cuda.install(monkeypatch, DEV)
    fake.compute.t = 3.0
    iv = Timer(DEV).start()
    fake.compute.t = 7.5
    Timer(DEV).stop(iv)
    assert iv.start.device == DEV and iv.ms() == 4.5


def test_pinned_host_memory_is_registered_at_its_exact_size(monkeypatch):
    fake = fake_cuda.install(monkeypatch, DEV)
    monkeypatch.setattr(
        CudaStreams, "alloc", lambda self, shape, dtype: torch.empty(shape, dtype=dtype)
    )
    monkeypatch.setattr(
        torch.Tensor, "pin_memory", lambda *a, **kw: pytest.fail("caching host allocator used")
    )
    model = tiny_model(seed=2)
    streams = CudaStreams(DEV)
    backend = _install(
        model, slots=2, device=DEV, max_inflight=2, resident=False, streams=streams, move=False
    )
    tensor_bytes = 2 * 8 * 3 * 64 * 32 * 4  # layers x experts x (gate, up, down) x H x I x fp32
    assert backend.host_bytes == tensor_bytes == streams.pinned_bytes
    assert sorted(size for _, size in fake.registered) == [tensor_bytes // 2] * 2


def test_set_slots_out_of_memory_keeps_the_old_cache(monkeypatch):
    import hwprobe.offload as offload
    from hwprobe.cli import HwprobeError
    from hwprobe.offload import install_offload

    model = tiny_model(seed=2)
    backend = install_offload(model, slots=2, device=torch.device("cpu"))
    real = torch.empty

    def oom_when_large(shape, *a, **kw):
        if isinstance(shape, tuple) and shape and shape[0] > 6:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory")
        return real(shape, *a, **kw)

    monkeypatch.setattr(offload.torch, "empty", oom_when_large)
    with pytest.raises(HwprobeError, match="it keeps 2 slots; use fewer slots"):
        backend.set_slots(8)
    monkeypatch.undo()
    assert all(layer.dev is not None and layer.slots == 2 for layer in backend.layers)
    lm_forward(model, IDS, new_cache(model))  # still usable


def test_compaction_builds_its_index_once(monkeypatch):
    from hwprobe.tree import cache_length, compact_cache

    model = tiny_model(seed=2)
    cache = new_cache(model)
    lm_forward(model, IDS, cache)
    seen = []
    real = torch.Tensor.index_select
    monkeypatch.setattr(
        torch.Tensor,
        "index_select",
        lambda self, dim, idx: seen.append(idx) or real(self, dim, idx),
    )
    compact_cache(cache, 10, [0, 1, 2])  # a contiguous path is a crop: no index at all
    assert seen == [] and cache_length(cache) == 13
    compact_cache(cache, 10, [0, 2])
    assert len(seen) == 2 * 2 and all(
        i is seen[0] for i in seen
    )  # keys and values of 2 layers, one index
    assert cache_length(cache) == 12

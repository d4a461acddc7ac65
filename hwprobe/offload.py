"""The offload backend: expert weights in host memory, a per-layer slot cache on the device.

:func:`install_offload` replaces the ``experts`` module of every sparse MoE
block of a transformers Qwen3-MoE model (``Qwen3MoeExperts``: fused
``gate_up_proj [E, 2I, H]`` and ``down_proj [E, H, I]``) by
:class:`OffloadedExperts`.  The router is untouched and every routed expert of
every token is executed (SpecFit §3.3 "Target execution", App. B "Backend").

Per layer and per forward (``U`` = the experts the forward routes to):

* hits ``U ∩ cache`` are touched in ascending expert id, then the misses are
  copied in ascending id, each **once per forward** however many tokens use it;
* copies run on a separate CUDA stream, at most ``max_inflight`` (default 2)
  ahead of the expert computation that consumes them;
* the cache keeps the ``slots`` most recently used experts (LRU); it is
  truncated to ``slots`` at the start of every forward, so ``slots = 0`` means
  "cleared before every forward" while a forward still loads each of its
  experts once.  The device holds ``slots + max_inflight`` expert buffers.

Counters per layer: copies, hits, per-copy time and the expert section's time
(CUDA events on the GPU, wall clock on the CPU).  Outputs do not depend on the
cache state: every (token, k) slot is computed by its expert and the k results
are summed in a fixed order.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import torch
from torch import nn

from hwprobe.cli import HwprobeError
from hwprobe.device import Timer, synchronize


@dataclass
class LayerCounters:
    """Counters of one MoE layer; intervals are converted to ms by :meth:`OffloadBackend.collect`."""

    copies: int = 0
    hits: int = 0
    forwards: int = 0
    copy_intervals: list = field(default_factory=list)
    section_intervals: list = field(default_factory=list)


@dataclass
class OffloadSnapshot:
    """Counters and times since the last :meth:`OffloadBackend.collect` (times in ms)."""

    copies: list[int]              # per layer
    hits: list[int]                # per layer
    copy_ms: list[float]           # every copy, all layers
    layer_ms: list[float]          # per layer: expert section time summed over forwards
    timer: str                     # "cuda-events" or "wall-clock"

    @property
    def total_copies(self) -> int:
        return sum(self.copies)

    @property
    def total_hits(self) -> int:
        return sum(self.hits)


class OffloadedExperts(nn.Module):
    """Drop-in replacement of ``Qwen3MoeExperts`` with host-resident weights and an LRU slot cache."""

    def __init__(self, experts: nn.Module, *, slots: int, device: torch.device, timer: Timer,
                 max_inflight: int = 2, copy_stream=None):
        super().__init__()
        if slots < 0:
            raise HwprobeError(f"slots must be >= 0, got {slots}")
        if max_inflight < 1:
            raise HwprobeError(f"copies in flight must be >= 1, got {max_inflight}")
        self.num_experts = int(experts.num_experts)
        self.act_fn = experts.act_fn
        self.device, self.timer = device, timer
        self.slots, self.max_inflight = int(slots), int(max_inflight)
        self.copy_stream = copy_stream
        gu = experts.gate_up_proj.detach()
        dn = experts.down_proj.detach()
        pin = device.type == "cuda"
        # plain attributes, not buffers: model.to(device) must leave them on the host
        self.host_gate_up = gu.to("cpu").contiguous()
        self.host_down = dn.to("cpu").contiguous()
        if pin:
            self.host_gate_up = self.host_gate_up.pin_memory()
            self.host_down = self.host_down.pin_memory()
        self.expert_bytes = (self.host_gate_up[0].numel() + self.host_down[0].numel()) * gu.element_size()
        self.counters = LayerCounters()
        self._allocate(self.slots)

    # -- slot buffers --------------------------------------------------------------
    def _allocate(self, slots: int) -> None:
        cap = min(slots, self.num_experts) + self.max_inflight   # more slots than experts never help
        try:
            self.dev_gate_up = torch.empty((cap, *self.host_gate_up.shape[1:]),
                                           dtype=self.host_gate_up.dtype, device=self.device)
            self.dev_down = torch.empty((cap, *self.host_down.shape[1:]),
                                        dtype=self.host_down.dtype, device=self.device)
        except torch.cuda.OutOfMemoryError:
            raise HwprobeError(
                f"out of device memory allocating {cap} expert buffers per layer "
                f"({cap * self.expert_bytes / 2**20:.0f} MiB each layer); use fewer slots") from None
        self.slots = slots
        self.lru: OrderedDict[int, int] = OrderedDict()   # expert id -> buffer index, LRU first
        self.free = list(range(cap - 1, -1, -1))
        self.buf_done: list = [None] * cap                 # CUDA event: last compute reading the buffer

    def set_slots(self, slots: int) -> None:
        """Resize the cache (drops its contents)."""
        synchronize(self.device)            # no copy or expert may still use the old buffers
        self.dev_gate_up = self.dev_down = None
        self._allocate(int(slots))

    def clear(self) -> None:
        """Empty the cache (the buffers stay allocated)."""
        self.free.extend(self.lru.values())
        self.lru.clear()

    def resident(self) -> list[int]:
        """Cached expert ids, least recently used first."""
        return list(self.lru)

    def _truncate(self) -> None:
        while len(self.lru) > self.slots:
            _, buf = self.lru.popitem(last=False)
            self.free.append(buf)

    def _take_buffer(self) -> int:
        if self.free:
            return self.free.pop()
        _, buf = self.lru.popitem(last=False)   # LRU entry; its last reader is already enqueued
        return buf

    def _copy_in(self, expert: int) -> tuple[int, object]:
        buf = self._take_buffer()
        cuda = self.device.type == "cuda"
        if cuda:
            with torch.cuda.stream(self.copy_stream):
                if self.buf_done[buf] is not None:
                    self.copy_stream.wait_event(self.buf_done[buf])
                iv = self.timer.start(self.copy_stream)
                self.dev_gate_up[buf].copy_(self.host_gate_up[expert], non_blocking=True)
                self.dev_down[buf].copy_(self.host_down[expert], non_blocking=True)
                self.timer.stop(iv, self.copy_stream)
                done = torch.cuda.Event()
                done.record(self.copy_stream)
        else:
            iv = self.timer.start()
            self.dev_gate_up[buf].copy_(self.host_gate_up[expert])
            self.dev_down[buf].copy_(self.host_down[expert])
            self.timer.stop(iv)
            done = None
        self.counters.copy_intervals.append(iv)
        self.lru[expert] = buf
        return buf, done

    # -- forward -------------------------------------------------------------------
    def forward(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                top_k_weights: torch.Tensor) -> torch.Tensor:
        self._truncate()
        T, k = top_k_index.shape
        cuda = self.device.type == "cuda"
        section = self.timer.start()
        idx_cpu = top_k_index.to("cpu")                       # the union decides the copies
        flat = idx_cpu.reshape(-1)
        order = torch.argsort(flat, stable=True)
        counts = torch.bincount(flat, minlength=self.num_experts).tolist()
        starts = [0] * (self.num_experts + 1)
        for e in range(self.num_experts):
            starts[e + 1] = starts[e] + counts[e]
        order_dev = order.to(self.device, non_blocking=False)
        union = [e for e in range(self.num_experts) if counts[e]]
        hits = [e for e in union if e in self.lru]
        misses = [e for e in union if e not in self.lru]
        for e in hits:
            self.lru.move_to_end(e)
        out_tk = hidden_states.new_zeros((T * k, hidden_states.shape[-1]))

        def compute(e: int, buf: int) -> None:
            sel = order_dev[starts[e]:starts[e + 1]]          # flat (token, k) slots routed to e
            x = hidden_states[sel // k]
            gate, up = nn.functional.linear(x, self.dev_gate_up[buf]).chunk(2, dim=-1)
            y = nn.functional.linear(self.act_fn(gate) * up, self.dev_down[buf])
            out_tk.index_copy_(0, sel, y.to(out_tk.dtype))
            if cuda:
                ev = torch.cuda.Event()
                ev.record()
                self.buf_done[buf] = ev

        pending = [self._copy_in(e) for e in misses[: self.max_inflight]]  # free buffers exist
        for e in hits:
            compute(e, self.lru[e])
        for i, e in enumerate(misses):
            buf, done = pending[i]
            if done is not None:
                torch.cuda.current_stream().wait_event(done)
            compute(e, buf)
            nxt = i + self.max_inflight
            if nxt < len(misses):
                pending.append(self._copy_in(misses[nxt]))
        result = (out_tk.view(T, k, -1) * top_k_weights.to(out_tk.dtype)[..., None]).sum(dim=1)
        self.timer.stop(section)
        self.counters.section_intervals.append(section)
        self.counters.copies += len(misses)
        self.counters.hits += len(hits)
        self.counters.forwards += 1
        return result


class OffloadBackend:
    """The installed offload layers of one model, with cache control and counters."""

    def __init__(self, model, layers: list[OffloadedExperts], device: torch.device, timer: Timer):
        self.model, self.layers, self.device, self.timer = model, layers, device, timer

    @property
    def slots(self) -> int:
        return self.layers[0].slots

    @property
    def expert_bytes(self) -> int:
        return self.layers[0].expert_bytes

    def set_slots(self, slots: int) -> None:
        for layer in self.layers:
            layer.set_slots(slots)

    def clear(self) -> float:
        """Empty every layer's cache; returns the time it took (ms), which App. B counts."""
        import time

        t0 = time.perf_counter()
        for layer in self.layers:
            layer.clear()
        return (time.perf_counter() - t0) * 1e3

    def collect(self) -> OffloadSnapshot:
        """Synchronise, read and reset the counters."""
        synchronize(self.device)
        snap = OffloadSnapshot(
            copies=[l.counters.copies for l in self.layers],
            hits=[l.counters.hits for l in self.layers],
            copy_ms=[iv.ms() for l in self.layers for iv in l.counters.copy_intervals],
            layer_ms=[sum(iv.ms() for iv in l.counters.section_intervals) for l in self.layers],
            timer=self.timer.kind,
        )
        for l in self.layers:
            l.counters = LayerCounters()
        return snap


def install_offload(model, *, slots: int, device: torch.device, max_inflight: int = 2) -> OffloadBackend:
    """Replace every ``experts`` module by :class:`OffloadedExperts`, then move the rest to ``device``.

    Memory: host holds all experts (pinned on CUDA); the device holds
    ``(slots + max_inflight)`` expert buffers per layer plus the dense weights.
    """
    from hwprobe.models import moe_blocks

    timer = Timer(device)
    copy_stream = torch.cuda.Stream(device) if device.type == "cuda" else None
    layers = []
    for _, block in moe_blocks(model):
        experts = block.experts
        if isinstance(experts, OffloadedExperts):
            raise HwprobeError("the model is already offloaded")
        for name in ("gate_up_proj", "down_proj", "num_experts", "act_fn"):
            if not hasattr(experts, name):
                raise HwprobeError(f"unsupported experts module {type(experts).__name__}: no {name!r} "
                                   "(expected fused gate_up_proj [E, 2I, H] and down_proj [E, H, I])")
        off = OffloadedExperts(experts, slots=slots, device=device, timer=timer,
                               max_inflight=max_inflight, copy_stream=copy_stream)
        block.experts = off
        del experts
        layers.append(off)
    try:
        model.to(device)
    except torch.cuda.OutOfMemoryError:
        raise HwprobeError("out of device memory moving the dense weights; use fewer slots "
                           "or a smaller model") from None
    return OffloadBackend(model, layers, device, timer)

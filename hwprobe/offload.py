"""The offload backend: expert weights in host memory, a per-layer slot cache on the device.

Built on transformers' experts interface (``transformers.integrations.moe``):
the experts module of every current MoE architecture is decorated with
``use_experts_implementation``, receives the router's choice (``top_k_index``,
``top_k_weights``) as input and dispatches to the implementation its config
names.  :func:`install_offload` registers one more implementation,
``hwprobe_offload``, points the configs of the model's experts modules at
it, and moves each module's fused expert weights (``gate_up_proj`` or
``up_proj``, ``down_proj`` and their biases) to host memory, one packed row
per expert.  Nothing is replaced and no model name is consulted: the
weight layout comes from the interface's flags (``is_transposed``,
``has_bias``, ``has_gate``, ``is_concatenated``, ``has_post_expert_norm``),
and a model-specific gate (GPT-OSS's clamped SwiGLU) is the module's own
``_apply_gate``.  Attention, dense MLP layers and shared experts are
ordinary modules and stay resident on the device.  Every routed expert of
every token is executed (SpecFit §3.3 "Target execution", App. B "Backend").

Per layer and per forward (``U`` = the experts the forward routes to):

* hits ``U ∩ cache`` are touched in ascending expert id, then the misses are
  copied in ascending id, each **once per forward** however many tokens use it
  (one copy per expert: its tensors are packed in one row);
* copies run on a separate CUDA stream of the model's device; copy j waits for
  the computation of miss j − c, so at most ``max_inflight`` (c, default 2)
  copies are ever ahead of the computation that consumes them, whatever the
  number of free buffers;
* the cache keeps the ``slots`` most recently used experts (LRU); it is
  truncated to ``slots`` at the start of every forward, so ``slots = 0`` means
  "cleared before every forward".  The device holds ``min(slots, E) + c``
  expert buffers per layer, and a buffer is overwritten only after an event
  says its last reader has finished;
* one device-to-host transfer per layer (the per-expert token counts, which
  decide the copies); the token order is sorted on the device.

Host memory is pinned on CUDA by registering exactly the bytes of the
weights (``cudaHostRegister``); torch's caching host allocator would round
every allocation up to a power of two.

Counters per layer: copies, hits, per-copy time and the expert section's time
(CUDA events on the GPU, wall clock on the CPU).  Outputs do not depend on the
cache state: every (token, k) slot is computed by its expert, then the k
results are weighted and summed in a fixed order, as transformers' own
implementations do.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from itertools import accumulate

import torch
from torch import nn

from hwprobe.cli import HwprobeError
from hwprobe.device import Timer, synchronize
from hwprobe.models import experts_modules

IMPL = "hwprobe_offload"


@dataclass
class LayerCounters:
    """Counters of one MoE layer; intervals are converted to ms by :meth:`OffloadBackend.collect`."""

    copies: int = 0
    hits: int = 0
    forwards: int = 0
    copy_intervals: list = field(default_factory=list)
    section_intervals: list = field(default_factory=list)
    prefetches: int = 0            # prefetch copies (OffloadedExperts.prefetch)
    useful: int = 0                # prefetched experts a forward used before they left the cache
    wasted: int = 0                # prefetched experts evicted or dropped unused
    prefetch_intervals: list = field(default_factory=list)


@dataclass
class OffloadSnapshot:
    """Counters and times since the last :meth:`OffloadBackend.collect` (times in ms)."""

    copies: list[int]              # per layer
    hits: list[int]                # per layer
    copy_ms: list[float]           # every copy, all layers
    layer_ms: list[float]          # per layer: expert section time summed over forwards
    timer: str                     # "cuda-events" or "wall-clock"
    prefetches: list[int] = field(default_factory=list)   # per layer (docs/prefetch.md)
    useful: list[int] = field(default_factory=list)
    wasted: list[int] = field(default_factory=list)
    prefetch_ms: list[float] = field(default_factory=list)  # every prefetch copy, all layers

    @property
    def total_copies(self) -> int:
        return sum(self.copies)

    @property
    def total_hits(self) -> int:
        return sum(self.hits)


# --------------------------------------------------------------------------
# the interface: one registered implementation dispatching to per-module state
# --------------------------------------------------------------------------
def _dispatch(module, hidden_states, top_k_index, top_k_weights):
    state = module.__dict__.get("_hwprobe_offload")
    if state is None:
        raise RuntimeError(f"{type(module).__name__} is set to {IMPL!r} but was not offloaded by hwprobe")
    return state(hidden_states, top_k_index, top_k_weights)


def register_interface() -> None:
    """Register ``hwprobe_offload`` in transformers' ``ExpertsInterface`` (idempotent)."""
    from transformers.integrations.moe import ExpertsInterface

    ExpertsInterface.register(IMPL, _dispatch)


class ExpertLayout:
    """How one experts module stores and applies its weights, from the interface's layout flags.

    Each expert's tensors are packed into one row of ``numel`` elements (the
    up projection, the down projection, then the biases), so that one copy
    moves an expert.
    """

    def __init__(self, module):
        from transformers.integrations.moe import _default_apply_gate

        self.has_gate = bool(module.has_gate)
        self.transposed = bool(module.is_transposed)
        self.has_bias = bool(getattr(module, "has_bias", False))
        self.concatenated = bool(getattr(module, "is_concatenated", True))
        self.post_norm = bool(getattr(module, "has_post_expert_norm", False))
        up = "gate_up_proj" if self.has_gate else "up_proj"
        self.names = [up, "down_proj"] + ([f"{up}_bias", "down_proj_bias"] if self.has_bias else [])
        missing = [n for n in self.names if not isinstance(getattr(module, n, None), torch.Tensor)]
        if missing:
            raise HwprobeError(f"unsupported experts module {type(module).__name__}: no {', '.join(missing)} "
                               "(expected the fused 3-D weights of transformers' experts interface)")
        tensors = [getattr(module, n) for n in self.names]
        self.num_experts = int(tensors[0].shape[0])
        if any(int(t.shape[0]) != self.num_experts for t in tensors):
            raise HwprobeError(f"{type(module).__name__}: expert weights disagree on the number of experts "
                               f"({', '.join(f'{n} {tuple(t.shape)}' for n, t in zip(self.names, tensors))})")
        self.shapes = [tuple(t.shape[1:]) for t in tensors]
        sizes = [int(t[0].numel()) for t in tensors]
        self.offsets = [0, *accumulate(sizes)]
        self.numel = self.offsets[-1]
        self.dtype = tensors[0].dtype
        self.own_gate = getattr(type(module), "_apply_gate", None) is not _default_apply_gate

    def pack(self, module) -> torch.Tensor:
        """``[E, numel]`` on the CPU: every expert's tensors in one row."""
        E = self.num_experts
        parts = [getattr(module, n).detach().to("cpu", self.dtype).reshape(E, -1) for n in self.names]
        return torch.cat(parts, dim=1).contiguous()

    def views(self, row: torch.Tensor) -> list[torch.Tensor]:
        """The expert's tensors as views of its packed row."""
        return [row[a:b].view(s) for a, b, s in zip(self.offsets, self.offsets[1:], self.shapes)]

    def expert(self, module, x: torch.Tensor, w: list[torch.Tensor]) -> torch.Tensor:
        """One expert on its tokens ``x``, from the views ``w`` of its row (the same arithmetic wherever it lives)."""
        up, down = w[0], w[1]
        h = x @ up if self.transposed else nn.functional.linear(x, up)
        if self.has_bias:
            h = h + w[2]
        if not self.has_gate:
            h = module.act_fn(h)
        elif self.own_gate:
            h = module._apply_gate(h)
        elif self.concatenated:
            gate, u = h.chunk(2, dim=-1)
            h = module.act_fn(gate) * u
        else:                                   # interleaved [g0, u0, g1, u1, ...]
            h = module.act_fn(h[..., ::2]) * h[..., 1::2]
        y = h @ down if self.transposed else nn.functional.linear(h, down)
        if self.has_bias:
            y = y + w[3]
        if self.post_norm:
            y = module.post_expert_norm(y)
        return y


# --------------------------------------------------------------------------
# streams: the CUDA copy stream and events of one device, or the host stand-in
# --------------------------------------------------------------------------
class HostStreams:
    """No device: copies are synchronous memcpys and there are no events."""

    kind = "host"

    def __init__(self, device: torch.device):
        self.device = device
        self.pinned_bytes = 0

    def host_store(self, packed: torch.Tensor) -> torch.Tensor:
        return packed

    def alloc(self, shape, dtype) -> torch.Tensor:
        return torch.empty(shape, dtype=dtype, device=self.device)

    def copy(self, dst, src, after, timer: Timer):
        iv = timer.start()
        dst.copy_(src)
        timer.stop(iv)
        return None, iv

    def compute_done(self):
        return None

    def wait(self, event) -> None:
        pass


def _unregister(ptr: int) -> None:
    try:
        torch.cuda.cudart().cudaHostUnregister(ptr)
    except Exception:  # noqa: BLE001 - interpreter shutdown: the process frees the pages anyway
        pass


class CudaStreams:
    """The copy stream of ``device`` and events recorded on explicit streams of that device.

    Nothing here uses the *current* device: on ``cuda:N`` with N ≠ 0 every
    event is recorded on, and every wait issued to, a stream of ``cuda:N``.
    ``delay_cycles`` queues a busy-wait kernel before every copy (self-check:
    a compute that does not wait for its copy then reads stale weights), and
    ``skip_waits`` drops the compute stream's waits (the self-check's
    negative control).
    """

    kind = "cuda"

    def __init__(self, device: torch.device):
        self.device = device
        self.copy_stream = torch.cuda.Stream(device=device)
        self.pinned_bytes = 0
        self.delay_cycles = 0
        self.skip_waits = False
        self.timing_events = False          # self-check: compute events that can be compared with copy starts

    def compute_stream(self):
        return torch.cuda.current_stream(self.device)

    def host_store(self, packed: torch.Tensor) -> torch.Tensor:
        """Pin exactly ``packed``'s bytes (no power-of-two rounding); unregistered when it is freed."""
        nbytes = packed.numel() * packed.element_size()
        rc = torch.cuda.cudart().cudaHostRegister(packed.data_ptr(), nbytes, 0)
        if int(getattr(rc, "value", rc)) != 0:
            raise HwprobeError(f"cannot pin {nbytes / 2**20:.0f} MiB of host memory for the experts "
                               f"(cudaHostRegister error {int(getattr(rc, 'value', rc))}); "
                               "raise the locked-memory limit (ulimit -l) or use a smaller model")
        weakref.finalize(packed, _unregister, packed.data_ptr())
        self.pinned_bytes += nbytes
        return packed

    def alloc(self, shape, dtype) -> torch.Tensor:
        return torch.empty(shape, dtype=dtype, device=self.device)

    def copy(self, dst, src, after, timer: Timer):
        s = self.copy_stream
        with torch.cuda.stream(s):
            for ev in after:
                if ev is not None:
                    s.wait_event(ev)
            if self.delay_cycles:
                torch.cuda._sleep(int(self.delay_cycles))
            iv = timer.start(s)
            dst.copy_(src, non_blocking=True)
            timer.stop(iv, s)
            done = torch.cuda.Event()
            done.record(s)
        return done, iv

    def compute_done(self):
        ev = torch.cuda.Event(enable_timing=self.timing_events)
        ev.record(self.compute_stream())
        return ev

    def wait(self, event) -> None:
        if event is not None and not self.skip_waits:
            self.compute_stream().wait_event(event)


# --------------------------------------------------------------------------
# one offloaded layer
# --------------------------------------------------------------------------
class OffloadedExperts:
    """The offload state of one experts module: host store, slot buffers, LRU, counters.

    Attached to the module (``module._hwprobe_offload``); the interface calls
    it with the router's choice.  Modes: ``offload`` (the cache), ``host``
    (:meth:`bypass`: each used expert moved from host memory per call, no
    cache, no counters) and ``resident`` (the store lives on the device: the
    reference that runs the same arithmetic without copies).
    """

    def __init__(self, module, *, layer: int, slots: int, device: torch.device, timer: Timer,
                 streams, max_inflight: int = 2, resident: bool = False):
        if slots < 0:
            raise HwprobeError(f"slots must be >= 0, got {slots}")
        if max_inflight < 1:
            raise HwprobeError(f"copies in flight must be >= 1, got {max_inflight}")
        self.layout = ExpertLayout(module)
        self.module = module            # the module holds this state; the cycle is collected with the model
        self.layer = int(layer)
        self.num_experts = self.layout.num_experts
        self.device, self.timer, self.streams = device, timer, streams
        self.slots, self.max_inflight = int(slots), int(max_inflight)
        packed = self.layout.pack(module)
        self.resident_mode = bool(resident)
        if resident:
            self.store = packed.to(device)
        else:
            self.store = streams.host_store(packed)
        self.expert_bytes = self.layout.numel * packed.element_size()
        self.counters = LayerCounters()
        self.bypass = False
        self.staging = 0                      # prefetch staging buffers when there is no cache (enable_prefetch)
        self.pf_unused: set[int] = set()      # prefetched experts no forward has used yet
        self.staged: set[int] = set()         # without a cache: prefetched experts held until the next forward
        self.audit: list | None = None        # self-check: (copy j's start, compute of miss j - c done)
        self.dev: torch.Tensor | None = None
        if not resident:
            self._allocate(self.slots)

    # -- slot buffers --------------------------------------------------------------
    def _allocate(self, slots: int) -> None:
        cap = min(slots, self.num_experts) + self.max_inflight   # more slots than experts never help
        if slots == 0:
            cap += self.staging                                  # prefetches wait here for their forward
        self.dev = self.streams.alloc((cap, self.layout.numel), self.layout.dtype)
        self.dev_views = [self.layout.views(self.dev[b]) for b in range(cap)]   # built once, not per expert call
        self.slots = slots
        self.lru: OrderedDict[int, int] = OrderedDict()   # expert id -> buffer index, LRU first
        self.free = list(range(cap - 1, -1, -1))
        self.buf_done: list = [None] * cap                 # event: last compute reading the buffer
        self.pf_unused, self.staged = set(), set()

    def set_slots(self, slots: int) -> None:
        """Resize the cache (drops its contents).  On out-of-memory the old size is kept and the error says so."""
        if self.resident_mode:
            return
        synchronize(self.device)            # no copy or expert may still use the old buffers
        old = self.slots
        self.dev = self.dev_views = None
        try:
            self._allocate(int(slots))
        except torch.cuda.OutOfMemoryError:
            self._allocate(old)             # the memory it held a moment ago
            raise HwprobeError(
                f"out of device memory resizing layer {self.layer}'s cache to {slots} slots "
                f"({(min(slots, self.num_experts) + self.max_inflight) * self.expert_bytes / 2**20:.0f} MiB); "
                f"it keeps {old} slots; use fewer slots") from None

    def clear(self) -> None:
        """Empty the cache (the buffers stay allocated)."""
        if self.resident_mode:
            return
        self.free.extend(self.lru.values())
        self.lru.clear()
        self.counters.wasted += len(self.pf_unused)
        self.pf_unused.clear()
        self.staged.clear()

    def resident(self) -> list[int]:
        """Cached expert ids, least recently used first."""
        return [] if self.resident_mode else list(self.lru)

    def _truncate(self) -> None:
        while len(self.lru) > self.slots + len(self.staged):   # staged prefetches are the most recent
            e, buf = self.lru.popitem(last=False)
            self.free.append(buf)
            self._evicted(e)

    def _take_buffer(self) -> int:
        if self.free:
            return self.free.pop()
        e, buf = self.lru.popitem(last=False)   # LRU entry; its last reader is already enqueued
        self._evicted(e)
        return buf

    def _evicted(self, e: int) -> None:
        if e in self.pf_unused:
            self.pf_unused.discard(e)
            self.counters.wasted += 1

    # -- prefetch (docs/prefetch.md) -----------------------------------------------
    def enable_prefetch(self, staging: int) -> None:
        """Without a cache (0 slots), keep ``staging`` extra buffers for prefetched experts (reallocates)."""
        if self.resident_mode or staging == self.staging:
            return
        self.staging = int(staging)
        self.set_slots(self.slots)

    def prefetch(self, e: int) -> bool:
        """Copy expert ``e`` into the cache ahead of the forward that will use it; False: not copied.

        The rules of :mod:`simmoe.replay.prefetch`: it becomes the most
        recently used expert, evicting the least recently used one when the
        cache is full (never an unused prefetch); without a cache it waits in a
        staging buffer until the next forward has passed.  Refused when it is
        already on the device or when every slot (staging buffer) holds an
        unused prefetch.
        """
        if self.resident_mode:
            return False
        self._truncate()
        if e in self.lru:
            return False
        if (len(self.pf_unused) >= self.slots) if self.slots > 0 else (len(self.staged) >= self.staging):
            return False
        if self.slots > 0 and len(self.lru) >= self.slots:     # full: the least recently used non-prefetch leaves
            victim = next(x for x in self.lru if x not in self.pf_unused)
            self.free.append(self.lru.pop(victim))
        buf = self._take_buffer()
        _, iv = self.streams.copy(self.dev[buf], self.store[e], [self.buf_done[buf]], self.timer)
        self.counters.prefetch_intervals.append(iv)
        self.counters.prefetches += 1
        self.lru[e] = buf
        self.pf_unused.add(e)
        if self.slots == 0:
            self.staged.add(e)
        return True

    def _forward_done(self) -> None:
        """Without a cache, the staged prefetches leave with the forward (unused ones are wasted)."""
        for e in self.staged:
            buf = self.lru.pop(e, None)
            if buf is not None:
                self.free.append(buf)
            self._evicted(e)
        self.staged.clear()

    # -- forward -------------------------------------------------------------------
    def _groups(self, top_k_index: torch.Tensor):
        """Token slots sorted by expert (on the device) and per-expert counts (the one host transfer)."""
        flat = top_k_index.reshape(-1)
        order = torch.argsort(flat, stable=True)
        counts = torch.bincount(flat, minlength=self.num_experts).tolist()
        if len(counts) > self.num_experts:
            bad = max(i for i, n in enumerate(counts) if n)
            raise HwprobeError(f"layer {self.layer}: the router chose expert {bad}, but the experts module holds "
                               f"{self.num_experts} (ids 0..{self.num_experts - 1}); the model's config and "
                               "weights disagree")
        starts = [0, *accumulate(counts)]
        return order, counts, starts

    def _combine(self, out_tk, hidden_states, top_k_weights, T: int, k: int) -> torch.Tensor:
        weighted = out_tk * top_k_weights.reshape(-1, 1)
        return weighted.view(T, k, -1).sum(dim=1).to(hidden_states.dtype)

    def __call__(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                 top_k_weights: torch.Tensor) -> torch.Tensor:
        if self.resident_mode or self.bypass:
            return self._direct(hidden_states, top_k_index, top_k_weights)
        self._truncate()
        T, k = top_k_index.shape
        module, layout, streams = self.module, self.layout, self.streams
        section = self.timer.start()
        order, counts, starts = self._groups(top_k_index)
        union = [e for e in range(self.num_experts) if counts[e]]
        hits = [e for e in union if e in self.lru]
        misses = [e for e in union if e not in self.lru]
        for e in hits:
            self.lru.move_to_end(e)
        if self.pf_unused:                        # prefetched experts this forward uses
            for e in hits:
                if e in self.pf_unused:
                    self.pf_unused.discard(e)
                    self.counters.useful += 1
        out_tk = hidden_states.new_empty((T * k, hidden_states.shape[-1]))
        c = self.max_inflight
        computed: list = []                       # event after the computation of miss i

        def compute(e: int, buf: int):
            sel = order[starts[e]:starts[e + 1]]          # flat (token, k) slots routed to e
            y = layout.expert(module, hidden_states[sel // k], self.dev_views[buf])
            out_tk.index_copy_(0, sel, y.to(out_tk.dtype))
            ev = streams.compute_done()
            self.buf_done[buf] = ev
            return ev

        def issue(j: int):
            buf = self._take_buffer()
            after = self._copy_waits(buf, computed, j)
            done, iv = streams.copy(self.dev[buf], self.store[misses[j]], after, self.timer)
            self.counters.copy_intervals.append(iv)
            if self.audit is not None and j >= c:
                self.audit.append((iv, computed[j - c]))
            self.lru[misses[j]] = buf
            return buf, done

        pending = [issue(j) for j in range(min(c, len(misses)))]   # free buffers exist for these
        for e in hits:
            compute(e, self.lru[e])
        for i, e in enumerate(misses):
            buf, done = pending[i]
            streams.wait(done)
            computed.append(compute(e, buf))
            if i + c < len(misses):
                pending.append(issue(i + c))
        result = self._combine(out_tk, hidden_states, top_k_weights, T, k)
        if self.staged:
            self._forward_done()
        self.timer.stop(section)
        self.counters.section_intervals.append(section)
        self.counters.copies += len(misses)
        self.counters.hits += len(hits)
        self.counters.forwards += 1
        return result

    def _copy_waits(self, buf: int, computed: list, j: int) -> list:
        """What copy j waits for: the last reader of its buffer, and the computation of miss j − c.

        The second makes "at most c copies in flight" hold whatever the number
        of free buffers: without it the copy stream runs ahead as far as free
        buffers allow.
        """
        c = self.max_inflight
        return [self.buf_done[buf], computed[j - c] if j >= c else None]

    def _direct(self, hidden_states, top_k_index, top_k_weights) -> torch.Tensor:
        """Resident store, or host memory moved per call (bypass): same grouping and arithmetic."""
        T, k = top_k_index.shape
        order, counts, starts = self._groups(top_k_index)
        out_tk = hidden_states.new_empty((T * k, hidden_states.shape[-1]))
        for e in range(self.num_experts):
            if not counts[e]:
                continue
            sel = order[starts[e]:starts[e + 1]]
            row = self.store[e]
            if row.device != hidden_states.device:
                row = row.to(hidden_states.device)
            y = self.layout.expert(self.module, hidden_states[sel // k], self.layout.views(row))
            out_tk.index_copy_(0, sel, y.to(out_tk.dtype))
        return self._combine(out_tk, hidden_states, top_k_weights, T, k)


class OffloadBackend:
    """The offloaded layers of one model, with cache control and counters."""

    def __init__(self, model, layers: list[OffloadedExperts], device: torch.device, timer: Timer, streams):
        self.model, self.layers, self.device, self.timer, self.streams = model, layers, device, timer, streams

    @property
    def slots(self) -> int:
        return self.layers[0].slots

    @property
    def expert_bytes(self) -> int:
        return self.layers[0].expert_bytes

    @property
    def host_bytes(self) -> int:
        """Bytes of expert weights held in host memory (all layers)."""
        return sum(layer.store.numel() * layer.store.element_size() for layer in self.layers if not layer.resident_mode)

    def set_slots(self, slots: int) -> None:
        for layer in self.layers:
            layer.set_slots(slots)

    def set_inflight(self, max_inflight: int) -> None:
        """Change the copies in flight (reallocates the buffers: the cache is emptied)."""
        if max_inflight < 1:
            raise HwprobeError(f"copies in flight must be >= 1, got {max_inflight}")
        for layer in self.layers:
            layer.max_inflight = int(max_inflight)
            layer.set_slots(layer.slots)

    def enable_prefetch(self, staging: int) -> None:
        """Prefetching on: without a cache, ``staging`` extra buffers per layer hold prefetched experts."""
        for layer in self.layers:
            layer.enable_prefetch(staging)

    def prefetch(self, pairs) -> int:
        """Copy each (MoE layer index, expert) in order (:meth:`OffloadedExperts.prefetch`); how many were copied."""
        return sum(1 for layer, e in pairs if self.layers[layer].prefetch(int(e)))

    def available(self):
        """bool [L, N] (numpy): the experts the next forward finds on the device, per MoE layer (cached or staged).

        The cache is cut back to its slots first, as the next forward would.
        """
        import numpy as np

        out = np.zeros((len(self.layers), self.layers[0].num_experts), dtype=bool)
        for i, layer in enumerate(self.layers):
            layer._truncate()
            if layer.lru:
                out[i, list(layer.lru)] = True
        return out

    def unused_prefetches(self) -> list[int]:
        """Per MoE layer, prefetched experts no forward has used yet."""
        return [len(layer.pf_unused) for layer in self.layers]

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
            copies=[layer.counters.copies for layer in self.layers],
            hits=[layer.counters.hits for layer in self.layers],
            copy_ms=[iv.ms() for layer in self.layers for iv in layer.counters.copy_intervals],
            layer_ms=[sum(iv.ms() for iv in layer.counters.section_intervals) for layer in self.layers],
            timer=self.timer.kind,
            prefetches=[layer.counters.prefetches for layer in self.layers],
            useful=[layer.counters.useful for layer in self.layers],
            wasted=[layer.counters.wasted for layer in self.layers],
            prefetch_ms=[iv.ms() for layer in self.layers for iv in layer.counters.prefetch_intervals],
        )
        for layer in self.layers:
            layer.counters = LayerCounters()
        return snap


def _offloaded_configs(model, modules) -> None:
    """Point every experts module's config at ``hwprobe_offload`` (the interface dispatches on it)."""
    for m in modules:
        m.config._experts_implementation_internal = IMPL


def install_offload(model, *, slots: int, device: torch.device, max_inflight: int = 2,
                    resident: bool = False) -> OffloadBackend:
    """Offload every experts module of ``model`` (experts interface), then move the rest to ``device``.

    Memory: the host holds all experts (pinned on CUDA, exact size); the device
    holds ``min(slots, E) + max_inflight`` expert buffers per MoE layer plus
    everything that is not a routed expert (attention, dense layers, shared
    experts, routers).  ``resident=True`` keeps the packed experts on the
    device instead: the same arithmetic without copies (the self-check's
    reference).
    """
    streams = CudaStreams(device) if device.type == "cuda" else HostStreams(device)
    return _install(model, slots=slots, device=device, max_inflight=max_inflight, resident=resident,
                    streams=streams, move=True)


def _install(model, *, slots, device, max_inflight, resident, streams, move: bool) -> OffloadBackend:
    """:func:`install_offload` with given streams (tests drive the CUDA path with simulated streams)."""
    register_interface()
    timer = Timer(device)
    found = experts_modules(model)
    if any("_hwprobe_offload" in m.__dict__ for _, _, m in found):
        raise HwprobeError("the model is already offloaded")
    layers = []
    try:
        for layer, _, module in found:
            off = OffloadedExperts(module, layer=layer, slots=slots, device=device, timer=timer, streams=streams,
                                   max_inflight=max_inflight, resident=resident)
            for name in off.layout.names:        # the weights now live in off.store only
                delattr(module, name)
            module.__dict__["_hwprobe_offload"] = off
            layers.append(off)
        _offloaded_configs(model, [m for _, _, m in found])
        if move:
            model.to(device)
    except torch.cuda.OutOfMemoryError:
        raise HwprobeError(f"out of device memory placing the model with {slots} expert slots per layer; "
                           "use fewer slots or a smaller model") from None
    return OffloadBackend(model, layers, device, timer, streams)

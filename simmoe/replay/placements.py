"""Placements of the experts (:class:`simmoe.api.Placement`): simmoe's own, and a plugin's checked.

simmoe's own, named in the profile (docs/cpu-experts.md):

* :class:`CpuLayers` ``cpu-layers:N`` — llama.cpp ``--n-cpu-moe N``: the GPU
  holds the experts of the decoder layers from N on;
* :class:`CpuAll` ``cpu-all`` — llama.cpp ``-cmoe``: the GPU holds none;
* :class:`CpuMisses` ``cpu-misses`` — the GPU cache's hits run on the GPU,
  its misses on the CPU;
* :class:`Fiddler` ``fiddler`` — as ``cpu-misses``, but a miss is copied when
  its copy lands before the CPU would have computed it.

A plugin (``~placement=NAME[,KEY=VALUE...]``) is loaded through
:mod:`simmoe.replay.plugins` (group ``simmoe.placements``), built new per
replay, and every choice it returns is checked (:class:`PluginChoices`).
"""

from __future__ import annotations

import numpy as np

from simmoe.api import PlacementChoice, PlacementShape
from simmoe.errors import SimmoeError


class CpuLayers:
    """llama.cpp ``--n-cpu-moe N``: the experts of the first N decoder layers on the CPU."""

    name = "cpu-layers"
    summary = "the experts of the first N decoder layers on the CPU (llama.cpp --n-cpu-moe N)"
    uses_cache = False

    def __init__(self, layers: int = 0):
        self.layers = int(layers)

    def reset(self, shape: PlacementShape) -> None:
        held = np.asarray(shape.decoder_layers) >= self.layers          # blk.N .. on the GPU
        self.choice = PlacementChoice(np.broadcast_to(held[:, None], (shape.num_layers, shape.num_experts)))

    def place(self, forward) -> PlacementChoice:
        return self.choice


class CpuAll(CpuLayers):
    """llama.cpp ``-cmoe``: every routed expert on the CPU."""

    name = "cpu-all"
    summary = "every routed expert on the CPU (llama.cpp -cmoe)"

    def reset(self, shape: PlacementShape) -> None:
        self.choice = PlacementChoice(np.zeros((shape.num_layers, shape.num_experts), dtype=bool))


class CpuMisses:
    """A GPU expert cache: its hits run on the GPU, its misses on the CPU (not copied)."""

    name = "cpu-misses"
    summary = "a GPU expert cache whose misses are computed on the CPU"
    uses_cache = True

    def reset(self, shape: PlacementShape) -> None:
        self.shape = shape

    def place(self, forward) -> PlacementChoice:
        return PlacementChoice(forward.cached)


class Fiddler(CpuMisses):
    """Fiddler's rule: a miss is copied when its copy lands before the CPU would have computed it,
    i.e. copy_ms[ℓ] < max(cpu_read_ms[ℓ], n_e · cpu_token_ms)."""

    name = "fiddler"
    summary = "per expert not on the GPU: copied or computed on the CPU, whichever finishes first (Fiddler)"

    def reset(self, shape: PlacementShape) -> None:
        self.shape = shape
        self.read, self.copy = np.asarray(shape.cpu_read_ms), np.asarray(shape.copy_ms)
        # up to this many tokens every CPU expert is bound by its read: a step needs no n_e to decide
        self.membound = float(np.min(self.read / shape.cpu_token_ms)) if shape.num_layers else 0.0
        # a copy slower than every layer's read never wins while the CPU is read-bound: nothing to compare then
        self.copy_loses = bool(np.all(self.copy >= self.read))

    def place(self, forward) -> PlacementChoice:
        cached = forward.cached
        read_bound = forward.kind == "step" and forward.n_tokens <= self.membound
        if read_bound and self.copy_loses:
            return PlacementChoice(cached)
        flat = np.flatnonzero(np.greater(forward.demand, cached))
        layers = flat // self.shape.num_experts
        if read_bound:
            t = self.read[layers]
        else:
            n_e = forward.tokens().reshape(-1)[flat]
            t = np.maximum(self.read[layers], n_e * self.shape.cpu_token_ms)
        copy = np.zeros(cached.size, dtype=bool)
        copy[flat[self.copy[layers] < t]] = True
        return PlacementChoice(cached, copy.reshape(cached.shape))


def builtin(placement) -> object:
    """simmoe's own implementation of a profile's :class:`~simmoe.hardware.cpu_forward.Placement`."""
    kind = placement.kind
    if kind == "layers":
        return CpuLayers(placement.layers)
    return {"all": CpuAll, "misses": CpuMisses, "fiddler": Fiddler}[kind]()


class PluginChoices:
    """Checks every :class:`~simmoe.api.PlacementChoice` a plugin returns; refuses in one line naming it."""

    def __init__(self, spec: str, uses_cache: bool, shape: PlacementShape):
        self.spec, self.uses_cache, self.shape = spec, uses_cache, shape
        self.held: np.ndarray | None = None
        self.index = 0

    def refuse(self, what: str) -> SimmoeError:
        return SimmoeError(f"placement {self.spec!r} at forward {self.index}: {what}")

    def mask(self, value, field: str) -> np.ndarray:
        s = self.shape
        want = (s.num_layers, s.num_experts)
        try:
            a = np.asarray(value)
        except Exception as exc:   # an object numpy cannot read: said, not raised
            raise self.refuse(f"PlacementChoice.{field} is not an array ({type(exc).__name__})") from None
        if a.dtype != np.bool_ or a.shape != want:
            raise self.refuse(f"PlacementChoice.{field} must be a bool array of shape {list(want)}, got "
                              f"{a.dtype} {list(a.shape)}")
        return a

    def check(self, choice, forward) -> tuple[np.ndarray, np.ndarray | None]:
        """(gpu, copy) of a plugin's choice for ``forward``, each checked."""
        self.index += 1
        if not isinstance(choice, PlacementChoice):
            raise self.refuse(f"place() returned a {type(choice).__name__}, not a simmoe.api.PlacementChoice")
        gpu = self.mask(choice.gpu, "gpu")
        copy = None if choice.copy is None else self.mask(choice.copy, "copy")
        if self.uses_cache:
            self.first_bad(gpu & ~forward.cached, "runs on the GPU an expert the GPU cache does not hold")
        else:
            self.check_held(gpu)
        if copy is not None:
            self.first_bad(copy & ~(forward.demand & ~gpu),
                           "copies an expert the forward does not demand or the GPU already runs")
        return gpu, copy

    def first_bad(self, bad: np.ndarray, what: str) -> None:
        if bad.any():
            layer, expert = (int(x) for x in np.argwhere(bad)[0])
            raise self.refuse(f"{what} (layer {layer}, expert {expert}; {int(bad.sum())} in all)")

    def check_held(self, gpu: np.ndarray) -> None:
        """A placement without a cache holds one set of experts, within the GPU's and the host's memory."""
        if self.held is not None:
            if not np.array_equal(gpu, self.held):
                raise self.refuse("changed the experts the GPU holds; a placement without a cache holds one "
                                  "set for the replay (declare uses_cache = True, or copy through "
                                  "PlacementChoice.copy)")
            return
        s, gib = self.shape, 2.0 ** 30
        on_gpu = float(gpu.sum(axis=1) @ np.asarray(s.expert_bytes))
        on_host = float((s.num_experts - gpu.sum(axis=1)) @ np.asarray(s.expert_bytes))
        if on_gpu > s.gpu_free_bytes:
            raise self.refuse(f"holds {on_gpu / gib:.2f} GiB of experts on the GPU, but "
                              f"{max(s.gpu_free_bytes, 0.0) / gib:.2f} GiB are left beside its other weights")
        if on_host > s.host_bytes:
            raise self.refuse(f"leaves {on_host / gib:.1f} GiB of experts in host RAM, which holds "
                              f"{s.host_bytes / gib:.0f} GiB")
        self.held = gpu.copy()

"""Placements of the experts for the CPU-expert regime (docs/cpu-experts.md).

``HotExperts``: the GPU holds the M experts of each layer that the trace's
committed tokens route to most often, the CPU computes the rest — a static
placement llama.cpp users build by hand with ``-ot`` (override-tensor) after
counting their routes.  ``FirstLayersOnCpu``: llama.cpp ``--n-cpu-moe N``
written as a plugin (simmoe's own ``~cpu-layers:N`` does the same).

Named in the profile::

    qwen3-30b-a3b/q4_k_m@rtx2080+i9-10900x~placement=simmoe_example_plugins.placement:HotExperts,m=4
"""

from __future__ import annotations

import numpy as np

from simmoe.api import PlacementChoice, PlacementForward, PlacementShape


class HotExperts:
    """The GPU holds each layer's M most-routed experts (option ``m``; default: as many as fit)."""

    name = "hot-experts"
    summary = "each layer's M most-routed experts on the GPU, the rest on the CPU (llama.cpp -ot)"

    def reset(self, shape: PlacementShape) -> None:
        L, N = shape.num_layers, shape.num_experts
        if "m" in shape.options:
            m = int(shape.options["m"])
        else:   # the same count in every layer, as many as the GPU's free memory holds
            m = int(shape.gpu_free_bytes // float(np.sum(shape.expert_bytes))) if L else 0
        m = max(0, min(m, N))
        # how often the committed tokens (each position's root) route to each expert
        routes = np.asarray(shape.trace.root_routes).reshape(-1, L, shape.top_k)
        count = np.zeros((L, N), dtype=np.int64)
        for layer in range(L):
            count[layer] = np.bincount(routes[:, layer].ravel(), minlength=N)[:N]
        # the M largest counts per layer, ties to the smaller id
        order = np.lexsort((np.broadcast_to(np.arange(N), (L, N)), -count), axis=-1)[:, :m]
        held = np.zeros((L, N), dtype=bool)
        np.put_along_axis(held, order, True, axis=1)
        self.choice = PlacementChoice(held)

    def place(self, forward: PlacementForward) -> PlacementChoice:
        return self.choice       # the same set every forward: a placement without a cache


class FirstLayersOnCpu:
    """The experts of the first N decoder layers (option ``n``) on the CPU, the rest on the GPU."""

    name = "first-layers-on-cpu"
    summary = "the experts of the first N decoder layers on the CPU (as ~cpu-layers:N)"

    def reset(self, shape: PlacementShape) -> None:
        n = int(shape.options.get("n", "0"))
        held = np.asarray(shape.decoder_layers) >= n
        self.choice = PlacementChoice(np.repeat(held[:, None], shape.num_experts, axis=1))

    def place(self, forward: PlacementForward) -> PlacementChoice:
        return self.choice

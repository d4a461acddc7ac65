"""Route capture: forward hooks on every MoE router that keep each token's top-k expert ids.

Works with and without the offload backend (the router is never replaced).
``Qwen3MoeTopKRouter.forward`` returns ``(logits, weights, indices)``;
indices are ``[tokens, k]`` for the flattened ``[batch * seq]`` tokens.
"""

from __future__ import annotations

import numpy as np
import torch

from hwprobe.models import moe_blocks


class RouteRecorder:
    """Context manager; after each forward, :meth:`pop` returns routes ``[tokens, L, k]`` (sorted per layer)."""

    def __init__(self, model):
        self.blocks = moe_blocks(model)
        self._handles = []
        self._captured: list[list[torch.Tensor]] = [[] for _ in self.blocks]

    def __enter__(self) -> "RouteRecorder":
        for j, (_, block) in enumerate(self.blocks):
            self._handles.append(block.gate.register_forward_hook(self._hook(j)))
        return self

    def __exit__(self, *exc) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def _hook(self, j: int):
        def hook(_module, _inputs, output):
            indices = output[2] if isinstance(output, tuple) else output
            self._captured[j].append(indices.detach())
        return hook

    def pop(self) -> np.ndarray:
        """Routes of everything run since the last pop: ``[tokens, L, k]`` int64, ascending per layer."""
        if any(not c for c in self._captured):
            raise RuntimeError("no routes captured: run a forward inside the recorder first")
        per_layer = [torch.cat(c, 0).to("cpu") for c in self._captured]
        self._captured = [[] for _ in self.blocks]
        routes = torch.stack(per_layer, dim=1)            # [tokens, L, k]
        return np.sort(routes.numpy().astype(np.int64), axis=-1)

"""Route capture from transformers' experts interface: each token's top-k expert ids per MoE layer.

A forward pre-hook on every experts module (``use_experts_implementation``)
reads the ``top_k_index`` the MoE block passes to its experts: exactly the
assignment the experts execute, whatever the router's own return format
(Qwen3-MoE's ``(logits, weights, indices)``, DeepSeek's group-limited
top-k, GPT-OSS's scores).  Works with and without the offload backend, and
with any experts implementation.  Indices are ``[tokens, k]`` for the
flattened ``[batch * seq]`` tokens.
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

    def __enter__(self) -> RouteRecorder:
        for j, (_, experts) in enumerate(self.blocks):
            self._handles.append(experts.register_forward_pre_hook(self._hook(j), with_kwargs=True))
        return self

    def __exit__(self, *exc) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def _hook(self, j: int):
        def hook(_module, args, kwargs):
            if len(args) > 1:
                indices = args[1]
            else:
                indices = next(kwargs[k] for k in ("top_k_index", "router_indices", "selected_experts")
                               if k in kwargs)
            self._captured[j].append(indices.detach())
        return hook

    def pop(self) -> np.ndarray:
        """Routes of everything run since the last pop: ``[tokens, L, k]`` int64, ascending per layer."""
        if any(not c for c in self._captured):
            raise RuntimeError("no routes captured: run a forward inside the recorder first")
        per_layer = [torch.cat(c, 0) for c in self._captured]
        self._captured = [[] for _ in self.blocks]
        routes = torch.stack(per_layer, dim=1).to("cpu")          # [tokens, L, k]: one transfer
        return np.sort(routes.numpy().astype(np.int64), axis=-1)

"""A small draft language model that shares the target's tokenizer (any HF causal LM directory).

The drafter keeps its own KV cache of the committed context (everything but
the root), synchronised by longest common prefix, and drafts each level with
one tree forward over root + the pool so far (:mod:`hwprobe.tree` mask and
positions), cropped off again afterwards.  Cost per level: one forward of
``1 + |pool|`` tokens (plus the newly committed tokens).
"""

from __future__ import annotations

from pathlib import Path

import torch

from hwprobe.drafters.base import Drafter
from hwprobe.tree import cache_length, crop_cache, lm_forward, new_cache, tree_forward


class DraftLMDrafter(Drafter):
    name = "draft-lm"

    def __init__(self, model, *, temperature: float = 1.0):
        self.model = model.eval()
        self.temperature = float(temperature)
        self.device = next(model.parameters()).device
        self.start([])

    @classmethod
    def from_dir(cls, path, *, device=None, dtype=None):
        """Load the draft LM in ``dtype`` (the target's; float32 when None), so its times are that dtype's."""
        from hwprobe.cli import HwprobeError
        from hwprobe.models import load_causal_lm, resolve_model_dir

        if path is None:
            raise HwprobeError("the draft-lm drafter needs --drafter-dir DIR (or 'tiny')")
        d = resolve_model_dir(str(path), "drafter") if str(path) == "tiny" else resolve_model_dir(str(Path(path)))
        model = load_causal_lm(d, dtype=dtype or torch.float32)
        if device is not None:
            model.to(device)
        return cls(model)

    def start(self, prompt):
        self.cache = new_cache(self.model)
        self.cached: list[int] = []

    def _sync_prefix(self, prefix: list[int]) -> None:
        common = 0
        for a, b in zip(self.cached, prefix):
            if a != b:
                break
            common += 1
        if common < len(self.cached):
            crop_cache(self.cache, common)
            self.cached = self.cached[:common]
        if len(prefix) > common:
            ids = torch.as_tensor([prefix[common:]], device=self.device)
            pos = torch.arange(common, len(prefix), device=self.device)[None]
            lm_forward(self.model, ids, self.cache, position_ids=pos)
            self.cached = list(prefix)

    def _dists(self, context, pool, frontier) -> torch.Tensor:
        """Next-token probabilities ``[len(frontier), V]`` of the frontier nodes."""
        self._sync_prefix(list(context[:-1]))
        base = cache_length(self.cache)
        out = tree_forward(self.model, self.cache, context[-1], pool)
        crop_cache(self.cache, base)
        rows = torch.as_tensor([f + 1 for f in frontier], device=out.logits.device)
        logits = out.logits[0].index_select(0, rows).float()
        return torch.softmax(logits / self.temperature, dim=-1)

    def children(self, context, pool, frontier, k):
        probs = self._dists(context, pool, frontier)
        top = torch.topk(probs, k, dim=-1)
        return [(top.indices[i].tolist(), top.values[i].tolist()) for i in range(len(frontier))]

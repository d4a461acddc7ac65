"""Checks shared by ``hwprobe selftest``: offloaded vs unmodified forward, LRU copy counts.

:func:`lru_copies` is a plain LRU over per-forward expert unions, written
independently of :mod:`hwprobe.offload` (an ``OrderedDict`` per layer; hits
touched in ascending id, then misses inserted in ascending id; capacity =
slots), so the backend's counters can be checked against it.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import torch


def lru_copies(unions_per_forward: list[list[set[int]]], slots: int) -> int:
    """Copies an LRU cache of ``slots`` per layer makes over the forwards' per-layer unions."""
    total = 0
    caches: list[OrderedDict] = []
    for layers in unions_per_forward:
        while len(caches) < len(layers):
            caches.append(OrderedDict())
        for cache, union in zip(caches, layers):
            hits = sorted(e for e in union if e in cache)
            misses = sorted(e for e in union if e not in cache)
            for e in hits:
                cache.move_to_end(e)
            for e in misses:
                cache[e] = True
                total += 1
                while len(cache) > slots:
                    cache.popitem(last=False)
            while len(cache) > slots:
                cache.popitem(last=False)
    return total


def unions(routes: np.ndarray) -> list[set[int]]:
    """Per-layer expert unions of a forward's routes ``[tokens, L, k]``."""
    return [set(np.unique(routes[:, l]).tolist()) for l in range(routes.shape[1])]


@dataclass
class OffloadCheck:
    max_abs_diff: float
    same_argmax: float          # fraction of positions with the same argmax
    tokens_equal: bool          # greedy decode identical
    copies: int
    reference_copies: int

    @property
    def ok(self) -> bool:
        return self.tokens_equal and self.copies == self.reference_copies and self.same_argmax == 1.0


def check_offload(model, device: torch.device, *, slots: int, prompt: list[int], new_tokens: int = 8,
                  atol: float = 1e-4) -> OffloadCheck:
    """Compare an offloaded copy of ``model`` (on ``device``) with the unmodified model (on ``device``).

    ``model`` (on the CPU) stays unmodified and ends on ``device``; cost: one extra
    copy of the model in host memory.
    """
    from hwprobe.offload import install_offload
    from hwprobe.routes import RouteRecorder
    from hwprobe.specdecode import greedy_generate
    from hwprobe.tree import lm_forward, new_cache

    off = copy.deepcopy(model)
    ref = model.to(device)
    backend = install_offload(off, slots=slots, device=device)
    ids = torch.as_tensor([prompt], device=device)
    with torch.no_grad():
        a = lm_forward(ref, ids, new_cache(ref)).logits[0].float()
        with RouteRecorder(off) as rec:
            # decode step by step so every forward's routes are known
            cache = new_cache(off)
            out = lm_forward(off, ids, cache)
            b = out.logits[0].float()
            fwd_unions = [unions(rec.pop())]
            t = int(out.logits[0, -1].argmax())
            tok_off = [t]
            while len(tok_off) < new_tokens:
                out = lm_forward(off, torch.as_tensor([[t]], device=device), cache)
                fwd_unions.append(unions(rec.pop()))
                t = int(out.logits[0, -1].argmax())
                tok_off.append(t)
    copies = backend.collect().total_copies
    tok_ref = greedy_generate(ref, prompt, new_tokens)
    diff = float((a - b).abs().max())
    same = float((a.argmax(-1) == b.argmax(-1)).float().mean())
    del off
    return OffloadCheck(diff, same, tok_ref == tok_off, copies, lru_copies(fwd_unions, slots))

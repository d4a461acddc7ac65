"""Tree verification: one target forward over root + pool nodes (SpecFit §2).

The forward gets a 4-D attention mask (every node sees the whole prefix and
its own ancestors; sdpa takes it boolean, eager as an additive float mask in
the model dtype) and explicit position ids (prefix length + depth).  Greedy
verification accepts the longest root-to-node path whose tokens all equal the
target's argmax at their parent; the KV cache is then compacted to the prefix,
the root and the accepted path by gathering rows along the sequence axis
(transformers has no helper for non-contiguous rows).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import numpy as np
import torch

from hwprobe.pool import Pool


def _cache_kwarg(model) -> str:
    """transformers 5.x names the KV cache ``cache`` (older: ``past_key_values``)."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def new_cache(model):
    from transformers import DynamicCache

    return DynamicCache(config=model.config)


def lm_forward(model, input_ids: torch.Tensor, cache, *, position_ids=None, attention_mask=None,
               hidden_states: bool = False):
    """One forward of a causal LM with a KV cache; returns the model output."""
    kwargs = {_cache_kwarg(model): cache, "use_cache": True}
    if position_ids is not None:
        kwargs["position_ids"] = position_ids
    if attention_mask is not None:
        kwargs["attention_mask"] = attention_mask
    if hidden_states:
        kwargs["output_hidden_states"] = True
    with torch.no_grad():
        return model(input_ids=input_ids, **kwargs)


def cache_length(cache) -> int:
    return int(cache.get_seq_length())


def crop_cache(cache, length: int) -> None:
    """Drop every row at or after ``length``."""
    for layer in cache.layers:
        if getattr(layer, "keys", None) is not None and layer.keys.numel():
            layer.keys = layer.keys[..., :length, :]
            layer.values = layer.values[..., :length, :]


def compact_cache(cache, prefix_len: int, keep_tree_rows) -> None:
    """Keep rows ``[0, prefix_len)`` and the tree rows ``prefix_len + keep_tree_rows`` (in that order)."""
    for layer in cache.layers:
        if getattr(layer, "keys", None) is None or not layer.keys.numel():
            continue
        idx = torch.as_tensor([*range(prefix_len), *(prefix_len + int(r) for r in keep_tree_rows)],
                              device=layer.keys.device)
        layer.keys = layer.keys.index_select(-2, idx)
        layer.values = layer.values.index_select(-2, idx)


def ancestor_matrix(parents) -> np.ndarray:
    """``A[i, j]``: tree row j is row i or an ancestor of it (row 0 = root, row 1 + v = node v)."""
    n = len(parents) + 1
    A = np.zeros((n, n), dtype=bool)
    A[0, 0] = True
    for v, par in enumerate(parents):
        i = v + 1
        A[i] = A[par + 1] if par >= 0 else A[0]
        A[i, i] = True
    return A


def tree_attention(parents, prefix_len: int, *, dtype: torch.dtype, device, eager: bool):
    """Mask ``[1, 1, 1 + m, prefix_len + 1 + m]`` and position ids ``[1, 1 + m]`` for a tree forward."""
    A = torch.as_tensor(ancestor_matrix(parents), device=device)
    n = A.shape[0]
    allowed = torch.cat([torch.ones((n, prefix_len), dtype=torch.bool, device=device), A], dim=1)
    if eager:
        mask = torch.zeros(allowed.shape, dtype=dtype, device=device)
        mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    else:
        mask = allowed
    lv = np.zeros(n, dtype=np.int64)
    for v, par in enumerate(parents):
        lv[v + 1] = lv[par + 1] + 1 if par >= 0 else 1
    depth = torch.as_tensor(lv, device=device)
    return mask[None, None], (prefix_len + depth)[None]


def tree_forward(model, cache, root_token: int, pool: Pool, *, hidden_states: bool = False):
    """Forward root + every pool node on top of ``cache`` (which then holds their rows too).

    Returns the model output; ``logits[0, 0]`` is the root's, ``logits[0, 1 + v]`` node v's.
    """
    prefix_len = cache_length(cache)
    device = next(model.parameters()).device
    eager = getattr(model.config, "_attn_implementation", "sdpa") == "eager"
    mask, pos = tree_attention(pool.parent, prefix_len, dtype=model.dtype, device=device, eager=eager)
    ids = torch.as_tensor([[int(root_token), *pool.token]], device=device)
    return lm_forward(model, ids, cache, position_ids=pos, attention_mask=mask, hidden_states=hidden_states)


@dataclass
class Verdict:
    agree: np.ndarray        # bool [m]: node's token == target argmax at its parent
    path: list[int]          # accepted node ids, root's child first
    next_root: int           # the target's prediction after the accepted path
    argmax: np.ndarray       # int [1 + m]: target argmax at every tree row


def greedy_verdict(pool: Pool, logits: torch.Tensor) -> Verdict:
    """Greedy verification of a forwarded tree; ``logits`` is ``[1 + m, V]``."""
    am = logits.argmax(dim=-1).to("cpu").numpy()
    m = len(pool)
    agree = np.array([am[pool.parent[v] + 1] == pool.token[v] for v in range(m)], dtype=bool)
    children: dict[int, list[int]] = {}
    for v, par in enumerate(pool.parent):
        children.setdefault(par, []).append(v)
    path, cur = [], -1
    while True:
        nxt = next((c for c in children.get(cur, []) if agree[c]), None)
        if nxt is None:
            break
        path.append(nxt)
        cur = nxt
    return Verdict(agree, path, int(am[cur + 1]), am)

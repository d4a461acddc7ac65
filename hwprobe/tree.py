"""Tree verification: one target forward over root + pool nodes (SpecFit §2).

The forward gets a 4-D attention mask (every node sees the whole prefix and
its own ancestors; sdpa takes it boolean, eager as an additive float mask in
the model dtype) and explicit position ids (prefix length + depth).  Greedy
verification accepts the longest root-to-node path whose tokens all equal the
target's argmax at their parent; the KV cache is then compacted to the prefix,
the root and the accepted path by gathering rows along the sequence axis
(transformers has no helper for non-contiguous rows).

Architectures: a layer with a sliding window sees, in sequential decoding,
only keys less than ``window`` positions back; the tree mask applies the
same rule to positions (prefix length + depth), and where windows differ by
layer type (GPT-OSS) each type gets its own mask (the models take a dict).
The KV cache keeps every row on every layer (no rolling window) so rows can
be gathered by index.  Recurrent layers (hybrid linear attention, Mamba)
keep one state per sequence that the branches of a tree cannot share:
:func:`check_tree` refuses them, naming the architecture and why.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass

import numpy as np
import torch

from hwprobe.pool import Pool


def _cache_kwarg(model) -> str:
    """transformers 5.x names the KV cache ``cache`` (older: ``past_key_values``)."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


@functools.cache
def _own_cache_class_of(cls):
    import sys

    from transformers.cache_utils import Cache

    mod = sys.modules.get(cls.__module__)
    for name, obj in vars(mod or object()).items():
        if (isinstance(obj, type) and issubclass(obj, Cache) and obj.__module__ == getattr(mod, "__name__", None)
                and name.endswith("Cache")):
            return obj
    return None


def _own_cache_class(model):
    """A cache class the model's module defines for itself (MiniMax), or None."""
    return _own_cache_class_of(type(model))


def new_cache(model):
    """An empty KV cache: full rows on every layer where trees are verified, else the model's own kind."""
    from transformers import DynamicCache

    own = _own_cache_class(model)
    if own is not None:
        return own()
    if tree_problem(model) is None:
        return DynamicCache()          # every layer keeps all rows: compaction gathers rows by index
    return DynamicCache(config=model.config)


_TREE_LAYER_TYPES = ("full_attention", "sliding_attention")


def layer_windows(model) -> list[int | None]:
    """The attention window of every decoder layer (None = full attention); ValueError for other layer kinds."""
    cfg = model.config.get_text_config()
    n = int(cfg.num_hidden_layers)
    types = getattr(cfg, "layer_types", None)
    window = getattr(cfg, "sliding_window", None) or None
    if types is None:
        if getattr(cfg, "attention_chunk_size", None):
            raise ValueError("chunked attention")
        return [window] * n
    other = sorted({t for t in types if t not in _TREE_LAYER_TYPES})
    if other:
        raise ValueError(", ".join(other))
    return [window if t == "sliding_attention" else None for t in types]


def _takes_mask_dict(model) -> bool:
    """Whether the decoder accepts ``{layer type: mask}`` (transformers 5 models with mixed layer types do)."""
    return _takes_mask_dict_of(type(getattr(model, "model", model)))


@functools.cache
def _takes_mask_dict_of(cls) -> bool:
    try:
        src = inspect.getsource(cls.forward)
    except (OSError, TypeError):
        return False
    return "attention_mask, dict)" in src


def tree_problem(model) -> str | None:
    """Why a tree cannot be verified in one forward on ``model``, or None when it can (kept on the model)."""
    key = "_hwprobe_tree_problem"
    if key not in model.__dict__:
        model.__dict__[key] = _tree_problem(model)
    return model.__dict__[key]


def _tree_problem(model) -> str | None:
    from hwprobe.architectures import ARCHITECTURES

    cfg = model.config.get_text_config()
    arch = ARCHITECTURES.get(cfg.model_type)
    if arch is not None and arch.tree is not None:
        return arch.tree
    if _own_cache_class(model) is not None:
        return "it keeps a cache of its own kind, whose rows cannot be gathered to the accepted path"
    try:
        windows = layer_windows(model)
    except ValueError as exc:
        return (f"its layer types include {exc}, whose state is one per sequence and cannot be shared "
                "by the branches of a tree")
    if len(set(windows)) > 1 and not _takes_mask_dict(model):
        return "its layers have different attention windows and its forward takes one mask for all of them"
    return None


def check_tree(model) -> None:
    """HwprobeError naming the architecture and the reason when tree verification is impossible."""
    from hwprobe.architectures import ARCHITECTURES
    from hwprobe.cli import HwprobeError

    problem = tree_problem(model)
    if problem is not None:
        mtype = model.config.get_text_config().model_type
        label = ARCHITECTURES[mtype].label if mtype in ARCHITECTURES else mtype
        raise HwprobeError(f"{label} ({mtype}) cannot verify a draft tree in one forward: {problem}; "
                           "record and live need tree verification")


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
    """Keep rows ``[0, prefix_len)`` and the tree rows ``prefix_len + keep_tree_rows`` (in that order).

    Rows ``0, 1, ..., r`` (a path along the first children, or the root alone)
    are a crop.  Otherwise the index is built once per call and moved to each
    device once, not per layer.
    """
    rows = [int(r) for r in keep_tree_rows]
    if rows == list(range(len(rows))):
        crop_cache(cache, prefix_len + len(rows))
        return
    idx_host = torch.arange(prefix_len + len(rows), dtype=torch.long)
    idx_host[prefix_len:] = torch.as_tensor(rows, dtype=torch.long) + prefix_len
    on_device: dict = {}
    for layer in cache.layers:
        if getattr(layer, "keys", None) is None or not layer.keys.numel():
            continue
        dev = layer.keys.device
        idx = on_device.get(dev)
        if idx is None:
            idx = on_device[dev] = idx_host.to(dev, non_blocking=True) if dev.type == "cuda" else idx_host
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


def tree_attention(parents, prefix_len: int, *, dtype: torch.dtype, device, eager: bool,
                   window: int | None = None):
    """Mask ``[1, 1, 1 + m, prefix_len + 1 + m]`` and position ids ``[1, 1 + m]`` for a tree forward.

    With ``window``, a row sees only keys less than ``window`` positions back
    (positions: prefix row j is j, tree row i is prefix_len + depth(i)), as a
    sliding-window layer does in sequential decoding.
    """
    A = ancestor_matrix(parents)
    n = A.shape[0]
    allowed = np.concatenate([np.ones((n, prefix_len), dtype=bool), A], axis=1)
    lv = np.zeros(n, dtype=np.int64)
    for v, par in enumerate(parents):
        lv[v + 1] = lv[par + 1] + 1 if par >= 0 else 1
    if window is not None:
        qpos = prefix_len + lv
        kpos = np.concatenate([np.arange(prefix_len), prefix_len + lv])
        allowed &= (qpos[:, None] - kpos[None, :]) < int(window)
    allowed_t = torch.as_tensor(allowed, device=device)
    if eager:
        mask = torch.zeros(allowed_t.shape, dtype=dtype, device=device)
        mask.masked_fill_(~allowed_t, torch.finfo(dtype).min)
    else:
        mask = allowed_t
    depth = torch.as_tensor(lv, device=device)
    return mask[None, None], (prefix_len + depth)[None]


def tree_masks(model, parents, prefix_len: int, device):
    """The attention mask argument of a tree forward: one mask, or ``{layer type: mask}`` where windows differ."""
    eager = getattr(model.config, "_attn_implementation", "sdpa") == "eager"
    windows = layer_windows(model)
    cfg = model.config.get_text_config()
    kinds = sorted(set(windows), key=lambda w: (w is not None, w or 0))
    masks = {}
    pos = None
    for w in kinds:
        masks[w], pos = tree_attention(parents, prefix_len, dtype=model.dtype, device=device, eager=eager,
                                       window=w)
    if len(kinds) == 1:
        return masks[kinds[0]], pos
    types = getattr(cfg, "layer_types", None) or []
    by_type = {t: masks[w] for t, w in zip(types, windows)}
    return by_type, pos


def tree_forward(model, cache, root_token: int, pool: Pool, *, hidden_states: bool = False):
    """Forward root + every pool node on top of ``cache`` (which then holds their rows too).

    Returns the model output; ``logits[0, 0]`` is the root's, ``logits[0, 1 + v]`` node v's.
    """
    prefix_len = cache_length(cache)
    device = next(model.parameters()).device
    mask, pos = tree_masks(model, pool.parent, prefix_len, device)
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

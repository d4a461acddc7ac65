"""Routing statistics of a Qwen3-MoE on text, computed from its router outputs.

What the offloaded-expert setting cares about, per layer:

- consecutive reuse: |S_t ∩ S_{t+1}| / k for the top-k sets S of adjacent
  tokens (independent uniform routing gives k/N);
- popularity skew: entropy of the expert-selection frequencies over log N
  (1 = uniform) and the share of selections taken by the most popular N/8
  experts (uniform: 1/8);
- union growth: E|S_1 ∪ … ∪ S_t| over t consecutive tokens, against the
  independent-uniform curve N[1 − (1 − k/N)^t] and against t tokens drawn at
  random positions (which keeps popularity skew but removes locality).  The
  union of a speculative tree's nodes is what one verification must load.

All from one forward over each window with ``output_router_logits=True``;
top-k of the logits is the router's choice (softmax is monotone).  Cost:
O(windows · T · L · (N + t_max · k)).
"""

from __future__ import annotations

import numpy as np

UNION_SPANS = (1, 2, 4, 8, 16, 32)


def router_topk(model, windows: np.ndarray, batch_size: int = 16) -> np.ndarray:
    """Top-k expert ids, shape (layers, windows, T, k)."""
    import torch

    k = model.config.num_experts_per_tok
    per_layer: list[list[np.ndarray]] = []
    model.eval()
    with torch.no_grad():
        for i in range(0, len(windows), batch_size):
            x = torch.from_numpy(np.ascontiguousarray(windows[i : i + batch_size]))
            out = model(input_ids=x, output_router_logits=True)
            for layer, logits in enumerate(out.router_logits):
                idx = torch.topk(logits.float(), k, dim=-1).indices.reshape(x.shape[0], x.shape[1], k)
                if layer == len(per_layer):
                    per_layer.append([])
                per_layer[layer].append(idx.numpy())
    return np.stack([np.concatenate(chunks) for chunks in per_layer])


def _masks(topk: np.ndarray, n_experts: int) -> np.ndarray:
    """Boolean membership (…, N) from ids (…, k)."""
    m = np.zeros(topk.shape[:-1] + (n_experts,), dtype=bool)
    np.put_along_axis(m, topk, True, axis=-1)
    return m


def independent_union(n_experts: int, k: int, t: int) -> float:
    """Expected union of t independent uniform k-subsets of N: N[1 − (1 − k/N)^t]."""
    return n_experts * (1.0 - (1.0 - k / n_experts) ** t)


def layer_stats(topk: np.ndarray, n_experts: int, rng: np.random.Generator,
                spans=UNION_SPANS) -> dict:
    """Statistics of one layer's routes ``topk`` (windows, T, k)."""
    w, T, k = topk.shape
    m = _masks(topk, n_experts)                                   # (w, T, N)
    reuse = float((m[:, 1:] & m[:, :-1]).sum(-1).mean() / k)
    freq = m.reshape(-1, n_experts).sum(0).astype(np.float64)
    p = freq / freq.sum()
    nz = p[p > 0]
    entropy = float(-(nz * np.log(nz)).sum() / np.log(n_experts))
    top_share = float(np.sort(p)[::-1][: max(1, n_experts // 8)].sum())
    flat = m.reshape(-1, n_experts)
    union_consecutive, union_shuffled = {}, {}
    # Prefix counts: the experts of tokens [s, s+t) are c[s+t] - c[s] > 0.
    c = np.cumsum(np.concatenate([np.zeros((w, 1, n_experts), np.int32), m.astype(np.int32)], 1), 1)
    for t in spans:
        if t > T:
            break
        counts = c[:, t:] - c[:, :-t]                             # (w, T-t+1, N): every span in a window
        union_consecutive[t] = float((counts > 0).sum(-1).mean())
        picks = rng.integers(0, len(flat), size=(2000, t))
        union_shuffled[t] = float(flat[picks].any(1).sum(-1).mean())
    return {
        "reuse": reuse,
        "entropy": entropy,
        "top_eighth_share": top_share,
        "max_over_mean_load": float(p.max() * n_experts),
        "union_consecutive": union_consecutive,
        "union_random_positions": union_shuffled,
        "union_independent": {t: independent_union(n_experts, k, t) for t in union_consecutive},
    }


def routing_stats(model, windows: np.ndarray, seed: int = 0) -> dict:
    """Per-layer statistics plus their means over layers (see the module docstring)."""
    n, k = model.config.num_experts, model.config.num_experts_per_tok
    topk = router_topk(model, windows)
    rng = np.random.default_rng(seed)
    layers = [layer_stats(topk[layer], n, rng) for layer in range(topk.shape[0])]
    mean = {key: float(np.mean([s[key] for s in layers]))
            for key in ("reuse", "entropy", "top_eighth_share", "max_over_mean_load")}
    for key in ("union_consecutive", "union_random_positions", "union_independent"):
        mean[key] = {t: float(np.mean([s[key][t] for s in layers])) for t in layers[0][key]}
    return {"num_experts": n, "top_k": k, "tokens": int(windows.size),
            "independent_reuse": k / n, "layers": layers, "mean": mean}
